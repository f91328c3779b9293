package sim

import (
	"fmt"
	"html"
	"io"
	"slices"
	"strings"
	"time"
)

// Row is one scenario run in one mode with one binder.
type Row struct {
	Scenario Scenario
	Mode     Mode
	Binder   Binder
	Result   *Result
	Bounds   Bounds
	// Variant says what else this run changed, for the reports that
	// compare runs of one scenario: re-placing off or on, concurrent
	// reconciles and ledgers.
	Variant string
}

// Stats are a run's GPU shares of the fleet against their bounds.
type Stats struct {
	// Mean is the mean over the rounds of the share of the fleet's GPUs
	// allocated, and MeanBound the mean of the bound at each round.
	Mean, MeanBound float64
	// Peak and PeakBound are the same at the demand's peak: the last
	// round at which the demand wanted the most GPUs.
	Peak, PeakBound float64
	PeakRound       int
}

// Stats computes a row's GPU shares.
func (r Row) Stats() Stats {
	res := r.Result
	var st Stats
	if len(res.Series) == 0 || res.FleetGPUs == 0 {
		return st
	}
	fleet := float64(res.FleetGPUs)
	var top int64 = -1
	for _, p := range res.Series {
		bound := r.Bounds.Instant(p.Wanted, p.DemandGPUs, res.FleetGPUs)
		st.Mean += float64(p.GPUs) / fleet
		st.MeanBound += float64(bound) / fleet
		if p.DemandGPUs >= top {
			top = p.DemandGPUs
			st.Peak, st.PeakBound, st.PeakRound = float64(p.GPUs)/fleet, float64(bound)/fleet, p.Round
		}
	}
	n := float64(len(res.Series))
	st.Mean /= n
	st.MeanBound /= n
	return st
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// WriteTable writes the results as one Markdown table.
func WriteTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| Scenario | Mode | Binder | Replicas placed (running) / wanted (bound) | GPUs allocated, mean over time (bound) | GPUs allocated at the demand peak (bound) | Pending pods max / end | Pending pod-seconds | Reconciles to converge | Wall time |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		res, st := r.Result, r.Stats()
		fmt.Fprintf(&b, "| %s | %s | %s | %d (%d) / %d (%d) | %s (%s) | %s (%s) | %d / %d | %.0f | %d | %s |\n",
			r.Scenario.Name, r.Mode.Name, r.Binder, res.Placed, res.Running, res.Wanted, r.Bounds.Replicas,
			pct(st.Mean), pct(st.MeanBound), pct(st.Peak), pct(st.PeakBound),
			res.PendingMax, res.PendingEnd, res.PendingSeconds, res.ReconcilesToConverge, res.Wall.Round(10*time.Millisecond))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteShapeTable writes, for scenarios of several shapes, the replicas
// placed and wanted by GPUs per replica: which shapes a run starved.
func WriteShapeTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| Scenario | Mode | Binder | 1-GPU placed / wanted | 2-GPU | 4-GPU | 8-GPU |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|\n")
	for _, r := range rows {
		placed, wanted := map[int64]int{}, map[int64]int{}
		shapes := map[int64]bool{}
		for name, n := range r.Scenario.FinalDemand() {
			g := r.Scenario.Shapes[name].PerReplica()
			shapes[g] = true
			wanted[g] += int(n)
			placed[g] += r.Result.PlacedBy[name]
		}
		if len(shapes) < 2 {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s |", r.Scenario.Name, r.Mode.Name, r.Binder)
		for _, g := range []int64{1, 2, 4, 8} {
			fmt.Fprintf(&b, " %d / %d |", placed[g], wanted[g])
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// modeColour is the chart colour of the i-th mode, in Modes order.
func modeColour(i int) string {
	colours := [...]string{"#7f7f7f", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"}
	return colours[i%len(colours)]
}

// modeDash dashes every other mode's line, so lines that coincide both
// show.
func modeDash(i int) string {
	if i%2 == 0 && i > 0 {
		return ` stroke-dasharray="7 4"`
	}
	return ""
}

// Chart layout: panels of pw x ph pixels, cols to a row.
const (
	cols, pw, ph      = 3, 300, 190
	left, top, legend = 44, 30, 40
)

// WriteChart writes a hand-made SVG: one panel per scenario, GPUs allocated
// (share of the fleet) over simulated time, one line per mode, and the
// bound at each moment dashed.
func WriteChart(w io.Writer, rows []Row) error {
	var scenarios, modes []string
	byKey := map[[2]string]Row{}
	for _, r := range rows {
		if !slices.Contains(scenarios, r.Scenario.Name) {
			scenarios = append(scenarios, r.Scenario.Name)
		}
		if !slices.Contains(modes, r.Mode.Name) {
			modes = append(modes, r.Mode.Name)
		}
		byKey[[2]string{r.Scenario.Name, r.Mode.Name}] = r
	}
	prows := (len(scenarios) + cols - 1) / cols
	width := cols * (pw + left + 16)
	height := legend + 20 + prows*(ph+top+36)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	for i, m := range modes {
		x := 10 + (i%4)*240
		y := 16 + (i/4)*18
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"%s/><text x="%d" y="%d">%s</text>`+"\n", x, y, x+24, y, modeColour(i), modeDash(i), x+30, y+4, html.EscapeString(m))
	}
	x, y := 10+(len(modes)%4)*240, 16+(len(modes)/4)*18
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black" stroke-dasharray="4 3"/><text x="%d" y="%d">bound</text>`+"\n", x, y, x+24, y, x+30, y+4)
	for si, name := range scenarios {
		runs := make([]*Row, len(modes))
		for mi, m := range modes {
			if r, ok := byKey[[2]string{name, m}]; ok {
				runs[mi] = &r
			}
		}
		ox := (si%cols)*(pw+left+16) + left
		oy := legend + 20 + (si/cols)*(ph+top+36) + top
		writePanel(&b, ox, oy, name, runs)
	}
	fmt.Fprintf(&b, `<text x="10" y="%d" fill="#555">GPUs held by bound pods, as a share of the fleet's GPUs, over simulated time.</text>`+"\n", height-6)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writePanel draws one scenario's panel at (ox, oy): a line per mode's run
// (nil where a mode did not run) and the bound.
func writePanel(b *strings.Builder, ox, oy int, name string, runs []*Row) {
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", ox, oy-8, html.EscapeString(name))
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#ccc"/>`+"\n", ox, oy, pw, ph)
	var first *Row
	for _, r := range runs {
		if r != nil && first == nil {
			first = r
		}
	}
	if first == nil || len(first.Result.Series) < 2 || first.Result.FleetGPUs == 0 {
		return
	}
	rounds, fleet := len(first.Result.Series), first.Result.FleetGPUs
	tick := first.Scenario.Tick
	if tick == 0 {
		tick = 10 * time.Second
	}
	px := func(round int) float64 { return float64(ox) + float64(pw)*float64(round)/float64(rounds-1) }
	py := func(g int64) float64 { return float64(oy+ph) - float64(ph)*float64(g)/float64(fleet) }
	for _, f := range []int64{0, 25, 50, 75, 100} {
		y := py(fleet * f / 100)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%d%%</text>`+"\n", ox, y, ox+pw, y, ox-4, y+4, f)
	}
	span := time.Duration(rounds-1) * tick
	step := 5 * time.Minute
	for span/step > 6 {
		step *= 2
	}
	for m := time.Duration(0); m <= span; m += step {
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", px(int(m/tick)), oy+ph+14, axisLabel(m))
	}
	bound := make([]string, 0, rounds)
	for _, p := range first.Result.Series {
		bound = append(bound, fmt.Sprintf("%.1f,%.1f", px(p.Round), py(first.Bounds.Instant(p.Wanted, p.DemandGPUs, fleet))))
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="black" stroke-dasharray="4 3" points="%s"/>`+"\n", strings.Join(bound, " "))
	for mi, r := range runs {
		if r == nil {
			continue
		}
		pts := make([]string, 0, len(r.Result.Series))
		for _, p := range r.Result.Series {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p.Round), py(p.GPUs)))
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", modeColour(mi), modeDash(mi), strings.Join(pts, " "))
	}
}

func axisLabel(d time.Duration) string {
	if d >= time.Hour && d%time.Hour == 0 {
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dm", int(d.Minutes()))
}

// Legend says what the table's columns and rows are.
const Legend = `Each row is one run: a scenario, a mode (whole-node accounting without
an agent; or free-device accounting from an agent that reports every 10s,
visible the next round ("fresh"), or every 30s, visible 60s later
("lagging"), with the ledger assuming MostFree or LeastFree binding), and a
binder: how the simulated clusters bind pods. kube-default scores as
kube-scheduler v1.37's default profile (cpu/memory LeastAllocated,
BalancedAllocation, ImageLocality, spreading, PreferNoSchedule taints; no
GPU scoring), kube-most-allocated the same with NodeResourcesFit
MostAllocated; gpu-most-free and gpu-least-free rank nodes by free GPUs, as
no kube-scheduler profile does, and random picks any node that fits.
steered is kube-default behind a steering cluster agent
(docs/spec.md#steering): each round, per pool, the agent's own decision
core (agent.Steer) decides the claiming pods not yet bound together, by
best fit in the ledger's charge order, and pins each to its node (a
required node affinity by name) for sim/kube to bind there. A pod it fits
nowhere is released unpinned, for kube-default. The agent decides on the
cluster as it is (its informers do not lag), so a lagging agent's reports
lag and its decisions do not; a silent agent holds nothing. Steering
needs an agent, and the function accounts a steered pool by best fit
whatever assumedBinding says: the steered binders run in the agent modes
assuming LeastFree only. steered-preferred prefers the decided node
(weight 100) instead of pinning it, and kube-default's scores decide.
Every binder filters with the structured DRA allocator (sim/kube), and
docs/calibration.md checks kube-default and kube-most-allocated against
kube-scheduler's own framework, pinned pods included. A node that ran a replica holds its
serving image (8 GiB unless -image-size says otherwise) from 2 minutes
after the pod bound (-image-pull) and keeps it; ImageLocality scores it. The function runs with its defaults (observationMaxAge 5m,
replaceUnscheduledAfter 15m) but for assumedBinding, which the mode sets.

- Replicas placed (running) / wanted (bound): at the end of the run,
  running counting those with every pod bound; the bound is the most
  replicas of the final demand the fleet can hold, which running never
  exceeds and placed can, by replicas whose pods are Pending.
- GPUs allocated: the share of the fleet's GPUs that bound pods hold, the
  mean over the rounds and at the demand's peak (its last round), each
  beside its bound: min(demand, capacity) at that moment, or for a
  scenario of one shape the exact limit of that shape.
- Pending pods: the most at the end of any round, and at the end of the
  run; pod-seconds sums the pods Pending over simulated time.
- Reconciles to converge: the deployments reconciled from the round of the
  last demand change through the last round that changed the fleet. A
  deployment that placed all it wants and changed nothing is not
  reconciled again until its demand changes (its reconcile is a no-op).
- Wall time: the simulator's own, on a shared 2-core machine.
`

// WriteStuck lists, for the runs that ended with pods Pending, what those
// pods need and what their pools have.
func WriteStuck(w io.Writer, rows []Row) error {
	var b strings.Builder
	for _, r := range rows {
		if len(r.Result.StuckPods) == 0 {
			continue
		}
		fmt.Fprintf(&b, "- %s, %s, %s", r.Scenario.Name, r.Mode.Name, r.Binder)
		if r.Variant != "" {
			b.WriteString(", " + r.Variant)
		}
		fmt.Fprintf(&b, ": %d pods Pending at the end", len(r.Result.StuckPods))
		var on []string
		for _, why := range []string{StuckOnGPUs, StuckOnResources, StuckOnPool} {
			if n := r.Result.StuckOn[why]; n > 0 {
				on = append(on, fmt.Sprintf("%d where %s", n, why))
			}
		}
		if len(on) > 0 {
			b.WriteString(" (" + strings.Join(on, ", ") + ")")
		}
		pods := r.Result.StuckPods
		slices.Sort(pods)
		for i, p := range pods {
			if i == 3 {
				fmt.Fprintf(&b, "; and %d more", len(pods)-i)
				break
			}
			b.WriteString("; " + p)
		}
		b.WriteString(".\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WritePredictions writes, per scenario and binder over every mode, how
// many claiming pods bound to a node with as many GPUs free as each
// assumedBinding predicts: which assumption describes the binder.
func WritePredictions(w io.Writer, rows []Row) error {
	type key struct {
		scenario string
		binder   Binder
	}
	var keys []key
	sums := map[key]*Binds{}
	for _, r := range rows {
		k := key{r.Scenario.Name, r.Binder}
		if sums[k] == nil {
			keys = append(keys, k)
			sums[k] = &Binds{}
		}
		b := r.Result.Binds
		sums[k].claiming += b.claiming
		sums[k].mostFree += b.mostFree
		sums[k].leastFree += b.leastFree
	}
	var b strings.Builder
	b.WriteString("| Scenario | Binder | Claiming pods bound | on a node MostFree predicts | on a node LeastFree predicts |\n")
	b.WriteString("|---|---|---:|---:|---:|\n")
	for _, k := range keys {
		s := sums[k]
		share := func(n int) string {
			if s.claiming == 0 {
				return "-"
			}
			return fmt.Sprintf("%d (%s)", n, pct(float64(n)/float64(s.claiming)))
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s |\n", k.scenario, k.binder, s.claiming, share(s.mostFree), share(s.leastFree))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ReplacingLegend says what the re-placing report compares.
const ReplacingLegend = `Re-placing (docs/spec.md#re-placing) measured: one scenario, each mode and binder run
twice, with replaceUnscheduledAfter off (a negative duration, as the
function input's 0s) and on. The scenario is built so that the ledger's
guess of where pods bind is wrong: see its summary below and
sim.Misguessed. It goes wrong where the function plans on fresh reports
assuming MostFree and the binder does not rank nodes by free GPUs
(kube-default, random); in the other rows of the same scenario nothing
stays Pending and nothing moves.

- Pending pods: the most at the end of any round, and at the end of the
  run; pod-seconds sums the pods Pending over simulated time.
- Moves: the function's re-placements, counted from the annotation it
  writes (scheduler.fn.modelplane.ai/replacement) in the round it moves a
  replica; replicas moved and the most moves of one replica count a
  replica moved to another cluster (a new ModelReplica) as the one it
  replaces.
`

// WriteReplacing writes runs of one scenario with re-placing
// (docs/spec.md#re-placing) off and on, side by side: the pods left Pending, and the moves
// that cleared them.
func WriteReplacing(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| Scenario | Mode | Binder | Rule | Replicas placed / wanted | Pending pods max / end | Pending pod-seconds | Moves | Replicas moved | Most moves of one replica |\n")
	b.WriteString("|---|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		res := r.Result
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d / %d | %d / %d | %.0f | %d | %d | %d |\n",
			r.Scenario.Name, r.Mode.Name, r.Binder, r.Variant, res.Placed, res.Wanted,
			res.PendingMax, res.PendingEnd, res.PendingSeconds, res.Moves, res.MovedReplicas, res.MaxMoves)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ConcurrencyRun is one run of a scenario with Concurrent deployments
// reconciled at once, through Servers function servers each with its own
// ledger of assumed placements (0: no ledger).
type ConcurrencyRun struct {
	Concurrent, Servers int
	Result              *Result
}

// ConcurrencyLegend says what the concurrency report compares.
const ConcurrencyLegend = `Concurrent calls measured (docs/spec.md#assumed-placements). The
simulator otherwise reconciles deployments one after another, each seeing
the last one's replicas: the best case. Here each round's deployments to
reconcile go K at a time, in name order: the K calls read the same fleet,
as K calls in flight would, and the replicas they compose are created
once all K answered. Without a ledger each call sees only the fleet; with
P servers the calls go round robin over P function servers (as
Crossplane's client spreads calls over a function's pods), each keeping
its own ledger, through the server's own critical section
(assume.Ledger.Schedule): a call sees what earlier calls to its server
composed, not what the other servers' did.

- Pending pods: the most at the end of any round / at the end of the run;
  pod-seconds sums the pods Pending over simulated time.
- Overcommitted pods: pods of replicas created onto a pool whose pods
  (bound or Pending, theirs included) then claim more GPUs than the pool
  has, so that not all of them can bind whatever node each takes: the
  mark of two calls placing onto the same free GPUs. GPUs beyond: the
  most GPUs the pods pinned to pools claimed beyond those pools' GPUs, at
  the end of any round.
`

// ledgerLabel names a run's ledgers.
func ledgerLabel(servers int) string {
	switch servers {
	case 0:
		return "no ledger"
	case 1:
		return "ledger, P = 1"
	}
	return fmt.Sprintf("ledgers, P = %d", servers)
}

// WriteConcurrency writes the runs side by side, one row per K and one
// column per ledger setting, of Pending pods; then every run's figures.
func WriteConcurrency(w io.Writer, runs []ConcurrencyRun) error {
	var ks, ps []int
	cell := map[[2]int]*Result{}
	for _, r := range runs {
		if !slices.Contains(ks, r.Concurrent) {
			ks = append(ks, r.Concurrent)
		}
		if !slices.Contains(ps, r.Servers) {
			ps = append(ps, r.Servers)
		}
		cell[[2]int{r.Concurrent, r.Servers}] = r.Result
	}
	var b strings.Builder
	b.WriteString("Pending pods max / end, and pod-seconds:\n\n| calls at once |")
	for _, p := range ps {
		b.WriteString(" " + ledgerLabel(p) + " |")
	}
	b.WriteString("\n|---:|" + strings.Repeat("---:|", len(ps)) + "\n")
	for _, k := range ks {
		fmt.Fprintf(&b, "| K = %d |", k)
		for _, p := range ps {
			res := cell[[2]int{k, p}]
			if res == nil {
				b.WriteString(" |")
				continue
			}
			fmt.Fprintf(&b, " %d / %d, %.0f |", res.PendingMax, res.PendingEnd, res.PendingSeconds)
		}
		b.WriteString("\n")
	}
	b.WriteString("\nEvery run:\n\n| calls at once | ledger | Replicas placed / wanted | Pending pods max / end | Pending pod-seconds | Overcommitted pods | GPUs beyond the pools' (max) | Moves |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range runs {
		res := r.Result
		fmt.Fprintf(&b, "| %d | %s | %d / %d | %d / %d | %.0f | %d | %d | %d |\n",
			r.Concurrent, ledgerLabel(r.Servers), res.Placed, res.Wanted, res.PendingMax, res.PendingEnd, res.PendingSeconds, res.Overcommit, res.OvercommitGPUsMax, res.Moves)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
