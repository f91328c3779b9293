package sim

import (
	"fmt"
	"html"
	"io"
	"slices"
	"strings"
	"time"
)

// Row is one scenario run in one mode.
type Row struct {
	Scenario Scenario
	Mode     Mode
	Binder   Binder
	Result   *Result
	Limit    Limit
}

func pct(n, d int64) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(d))
}

// WriteTable writes the results as one Markdown table.
func WriteTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| Scenario | Mode | Binder | Replicas placed / wanted | Running | GPUs allocated (share of fleet) | Physical limit | Share of limit | Pending pods (max / end) | Rounds to converge |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		res, l := r.Result, r.Limit
		limit := fmt.Sprintf("%d replicas, %d GPUs (%s)", l.Replicas, l.GPUs, pct(l.GPUs, res.FleetGPUs))
		if !l.Exact {
			limit = fmt.Sprintf("≤ %d GPUs (%s)", l.GPUs, pct(l.GPUs, res.FleetGPUs))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d / %d | %d | %d / %d (%s) | %s | %s | %d / %d | %d |\n",
			r.Scenario.Name, r.Mode.Name, r.Binder, res.Placed, res.Wanted, res.Running,
			res.GPUs, res.FleetGPUs, pct(res.GPUs, res.FleetGPUs), limit, pct(res.GPUs, l.GPUs),
			res.PendingMax, res.PendingEnd, res.RoundsToConverge())
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
// physical limit dashed.
func WriteChart(w io.Writer, rows []Row, tick time.Duration) error {
	var scenarios []string
	var modes []string
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
	height := legend + prows*(ph+top+36)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	for i, m := range modes {
		x := 10 + i*230
		fmt.Fprintf(&b, `<line x1="%d" y1="16" x2="%d" y2="16" stroke="%s" stroke-width="2.5"%s/><text x="%d" y="20">%s</text>`+"\n", x, x+24, modeColour(i), modeDash(i), x+30, html.EscapeString(m))
	}
	x := 10 + len(modes)*230
	fmt.Fprintf(&b, `<line x1="%d" y1="16" x2="%d" y2="16" stroke="black" stroke-dasharray="4 3"/><text x="%d" y="20">physical limit</text>`+"\n", x, x+24, x+30)
	for si, name := range scenarios {
		runs := make([]*Row, len(modes))
		for mi, m := range modes {
			if r, ok := byKey[[2]string{name, m}]; ok {
				runs[mi] = &r
			}
		}
		ox := (si%cols)*(pw+left+16) + left
		oy := legend + (si/cols)*(ph+top+36) + top
		writePanel(&b, ox, oy, name, runs, tick)
	}
	fmt.Fprintf(&b, `<text x="10" y="%d" fill="#555">GPUs held by bound pods, as a share of the fleet's GPUs, over simulated time (10s rounds).</text>`+"\n", height-6)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writePanel draws one scenario's panel at (ox, oy): a line per mode's run
// (nil where a mode did not run) and the physical limit.
func writePanel(b *strings.Builder, ox, oy int, name string, runs []*Row, tick time.Duration) {
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", ox, oy-8, html.EscapeString(name))
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#ccc"/>`+"\n", ox, oy, pw, ph)
	var rounds int
	var fleet, limit int64
	for _, r := range runs {
		if r != nil {
			rounds = max(rounds, len(r.Result.Series))
			fleet, limit = r.Result.FleetGPUs, r.Limit.GPUs
		}
	}
	if rounds < 2 || fleet == 0 {
		return
	}
	px := func(round int) float64 { return float64(ox) + float64(pw)*float64(round)/float64(rounds-1) }
	py := func(g int64) float64 { return float64(oy+ph) - float64(ph)*float64(g)/float64(fleet) }
	for _, f := range []int64{0, 25, 50, 75, 100} {
		y := py(fleet * f / 100)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%d%%</text>`+"\n", ox, y, ox+pw, y, ox-4, y+4, f)
	}
	for m := time.Duration(0); m <= time.Duration(rounds-1)*tick; m += 5 * time.Minute {
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%dm</text>`+"\n", px(int(m/tick)), oy+ph+14, int(m.Minutes()))
	}
	ly := py(limit)
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black" stroke-dasharray="4 3"/>`+"\n", ox, ly, ox+pw, ly)
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
