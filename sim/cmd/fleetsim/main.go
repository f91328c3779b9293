// Command fleetsim runs fleet simulator scenarios in every mode with every
// binder, through the real observation and scheduling packages, and writes
// the results as a Markdown table (fleetsim.md) and an SVG chart
// (fleetsim.svg).
//
//	go run ./sim/cmd/fleetsim -out docs/
//	go run ./sim/cmd/fleetsim -nodes NODES.csv -pods PODS.csv -clusters 4 -out DIR
//
// With -nodes and -pods it replays a trace in the Alibaba
// cluster-trace-gpu-v2023 (openb) format instead of the scenarios.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/modelplaneai/fleet-scheduler/input/v1beta1"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
	"github.com/modelplaneai/fleet-scheduler/sim"
)

type options struct {
	out, only, binders, modes, imageSize string
	largeBinders                         string
	imagePull, replaceAfter              time.Duration
	large, withScenarios, replacing      bool
	concurrency, preferred               bool
	concurrent, servers, rounds          int
	concurrencyK, concurrencyServers     string
	trace                                sim.TraceOptions
	nodes, pods                          string
	sizing                               string
	waves                                string
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "", "directory to write fleetsim.md and fleetsim.svg to; empty prints the table only")
	flag.StringVar(&o.binders, "binders", strings.Join(binderNames(), ","), "comma-separated binders to run every scenario with; the first is charted")
	flag.StringVar(&o.modes, "modes", strings.Join(modeKeys(), ","), "comma-separated modes to run")
	flag.DurationVar(&o.imagePull, "image-pull", sim.DefaultImagePull, "how long after a pod binds its node holds the pod's image; 0 for at once")
	flag.StringVar(&o.imageSize, "image-size", "8Gi", "size of the serving image every node pulls when it runs a replica (ImageLocality reads it); 0 for none that scores")
	flag.StringVar(&o.only, "scenario", "", "run only the scenario of this name")
	flag.IntVar(&o.rounds, "rounds", 0, "run every named scenario this many rounds of 10s instead of its own (0: its own; a trace has -max-rounds)")
	flag.BoolVar(&o.large, "large", false, "also run "+sim.Large().Name+" ("+sim.Large().Summary+"); it takes an hour or more")
	flag.StringVar(&o.largeBinders, "large-binders", "kube-default,kube-most-allocated", "comma-separated binders to run "+sim.Large().Name+" with")
	flag.StringVar(&o.waves, "waves", "", "instead of the scenarios, run the live scale run's workload of this size, CLUSTERSxNODESxWAVES (docs/scale.md); with -image-size 0, as KWOK's nodes list no images")
	flag.BoolVar(&o.withScenarios, "with-scenarios", false, "with a trace, run the scenarios too, in one report")
	flag.StringVar(&o.nodes, "nodes", "", "a trace's node CSV (sn,cpu_milli,memory_mib,gpu,model); with -pods, replay it instead of the scenarios")
	flag.StringVar(&o.pods, "pods", "", "a trace's pod CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,...)")
	flag.IntVar(&o.trace.Clusters, "clusters", 4, "clusters to spread a trace's nodes over")
	flag.Float64Var(&o.trace.Speed, "speed", 1, "how many times faster than recorded a trace's time runs")
	flag.DurationVar(&o.trace.Tick, "tick", 10*time.Second, "simulated time per round of a trace (after -speed)")
	flag.BoolVar(&o.trace.RoundUpSharing, "round-up-sharing", false, "replay a trace's GPU-sharing pods (gpu_milli < 1000) as one whole GPU instead of skipping them")
	flag.BoolVar(&o.trace.NoDeletion, "no-deletion", false, "keep a trace's pods once they arrive, as the FGD simulator replays these traces (a workload that only grows)")
	flag.IntVar(&o.trace.MaxRounds, "max-rounds", 0, "stop a trace after this many rounds (0: when the last pod is deleted, or at 2,000 rounds)")
	flag.BoolVar(&o.replacing, "replacing", false, "instead of the scenarios, run "+sim.Misguessed().Name+" with re-placing off and on, side by side (replacing.md)")
	flag.DurationVar(&o.replaceAfter, "replace-after", 15*time.Minute, "with -replacing, the replaceUnscheduledAfter of the run with re-placing on")
	flag.BoolVar(&o.preferred, "preferred", false, "instead of the scenarios, run "+sim.ManyCopies().Name+" with kube-default, steered and steered-preferred, side by side (steering-preferred.md): how often kube-scheduler's other scores outvote a preferred node affinity")
	flag.IntVar(&o.concurrent, "concurrent-reconciles", 1, "reconcile this many deployments at once, each of them reading the same fleet; 1 reconciles one after another")
	flag.IntVar(&o.servers, "servers", 0, "spread the calls round robin over this many function servers, each with its own ledger of assumed placements; 0 assumes nothing")
	flag.BoolVar(&o.concurrency, "concurrency", false, "instead of the scenarios, run "+sim.ScaleAtOnce().Name+" for every -concurrency-k and -concurrency-servers, side by side (concurrency.md)")
	flag.StringVar(&o.concurrencyK, "concurrency-k", "1,4,16", "with -concurrency, comma-separated numbers of deployments reconciled at once")
	flag.StringVar(&o.concurrencyServers, "concurrency-servers", "0,1,2,3", "with -concurrency, comma-separated numbers of function servers with their own ledgers (0: no ledger)")
	flag.StringVar(&o.sizing, "sizing", "v0.3", "what the scenarios' pods request: v0.3 (no cpu or memory, as Modelplane v0.3 composes them) or per-gpu (2 cores and 8Gi plus 2 cores and 24Gi per GPU, Modelplane's open proposal); a trace's pods request their own, and a scenario about cpu its own")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	flag.Parse()
	// The output directory is made before the runs, which take an hour or
	// more for -large: one that cannot be made fails now, not after them.
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil { //nolint:gosec // Documentation, as write says.
			fmt.Fprintln(os.Stderr, "fleetsim: cannot make -out:", err)
			os.Exit(1)
		}
	}
	if *cpuprofile != "" {
		stop, err := profile(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleetsim:", err)
			os.Exit(1)
		}
		defer stop()
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "fleetsim:", err)
		os.Exit(1) //nolint:gocritic // The profile of a failed run is not wanted.
	}
}

// profile starts a CPU profile into a file; stop ends it.
func profile(name string) (func(), error) {
	f, err := os.Create(name) //nolint:gosec // The file the user named.
	if err != nil {
		return nil, fmt.Errorf("cannot profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, fmt.Errorf("cannot profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

func modeKeys() []string {
	out := make([]string, 0, len(sim.Modes()))
	for _, m := range sim.Modes() {
		out = append(out, m.Key())
	}
	return out
}

func binderNames() []string {
	out := make([]string, 0, len(sim.Binders()))
	for _, b := range sim.Binders() {
		out = append(out, string(b))
	}
	return out
}

func run(o options) error {
	if o.replacing {
		return runReplacing(o)
	}
	if o.concurrency {
		return runConcurrency(o)
	}
	if o.preferred {
		return runPreferred(o)
	}
	binders, modes, size, err := common(o)
	if err != nil {
		return err
	}
	largeBinders, err := parseBinders(o.largeBinders)
	if err != nil {
		return err
	}
	scenarios, notes, err := scenarios(o)
	if err != nil {
		return err
	}
	began := time.Now()
	var rows, chart []sim.Row
	for _, sc := range scenarios {
		sc = withImage(sc, size.Value(), o.imagePull, o.sizing)
		bs := binders
		if sc.Name == sim.Large().Name {
			bs = largeBinders
		}
		for i, b := range bs {
			runs, err := runModes(o, sc, b, modes)
			if err != nil {
				return err
			}
			rows = append(rows, runs...)
			if i == 0 {
				chart = append(chart, runs...)
			}
			fmt.Fprintf(os.Stderr, "fleetsim: %s with %s (%s)\n", sc.Name, b, time.Since(began).Round(time.Second))
		}
	}
	var table bytes.Buffer
	table.WriteString(sim.Legend + "\n")
	if err := sim.WriteTable(&table, rows); err != nil {
		return err
	}
	table.WriteString("\nWhere claiming pods landed, against where each assumedBinding predicts (a node with the most GPUs free among those whose free GPUs cover the claim, or the fewest), over every mode:\n\n")
	if err := sim.WritePredictions(&table, rows); err != nil {
		return err
	}
	table.WriteString("\n" + sim.AgreementLegend + "\n")
	if err := sim.WriteAgreement(&table, rows); err != nil {
		return err
	}
	if sim.Steers(rows) {
		table.WriteString("\n" + sim.SteeringLegend + "\n")
		if err := sim.WriteSteering(&table, rows); err != nil {
			return err
		}
	}
	table.WriteString("\nReplicas placed by shape, in the scenarios that mix shapes:\n\n")
	if err := sim.WriteShapeTable(&table, rows); err != nil {
		return err
	}
	if notes != "" {
		table.WriteString("\n" + notes + "\n")
	}
	if err := writeStuck(&table, rows, "Pods Pending at the end of a run, and what each needs. The function placed each replica on a pool whose nodes it assumed had the GPUs (assumedBinding); either the cluster's binder spread or packed differently and no node has them, or the nodes with them lack the cpu or memory the pod requests, which the function does not see (it charges devices only). A placed replica is retained whatever capacity says (docs/spec.md#retaining, docs/spec.md#invariants) until it has waited replaceUnscheduledAfter (15m by default) with PodsScheduled False; re-placing (docs/spec.md#re-placing) then re-places it on another pool where it fits, if one does (on a full fleet none does):"); err != nil {
		return err
	}
	if _, err := os.Stdout.Write(table.Bytes()); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "fleetsim: %d runs in %s\n", len(rows), time.Since(began).Round(time.Millisecond))
	if o.out == "" {
		return nil
	}
	return write(o.out, commandLine(), table.Bytes(), chart)
}

// withImage sets a scenario's serving image size and pull time as the
// flags give them (zero for none, or at once), and its pods' sizing.
func withImage(sc sim.Scenario, size int64, pull time.Duration, sizing string) sim.Scenario {
	if sizing == "per-gpu" && sc.Sizing == nil {
		sc.Sizing = sim.PerGPU()
	}
	sc.ImageSize = max(size, 0)
	if sc.ImageSize == 0 {
		sc.ImageSize = -1
	}
	sc.ImagePull = max(pull, 0)
	if sc.ImagePull == 0 {
		sc.ImagePull = -1
	}
	return sc
}

// runReplacing runs the scenario whose pods the ledger's misguesses leave
// Pending, with re-placing off and on, for each binder and mode, and
// writes the table side by side.
func runReplacing(o options) error {
	binders, modes, size, err := common(o)
	if err != nil {
		return err
	}
	if o.replaceAfter <= 0 {
		return fmt.Errorf("-replace-after %s: want a positive duration, the run with re-placing on", o.replaceAfter)
	}
	sc := withImage(sim.Misguessed(), size.Value(), o.imagePull, o.sizing)
	var rows []sim.Row
	for _, b := range binders {
		for _, m := range modes {
			for _, after := range []time.Duration{0, o.replaceAfter} {
				res, err := sim.Run(sc.Config(m, b, sim.Direct{Input: replacing(m.Binding, after), Cache: sim.NewCache()}))
				if err != nil {
					return fmt.Errorf("%s, %s, %s, re-placing after %s: %w", sc.Name, m.Name, b, after, err)
				}
				variant := "re-placing off"
				if after > 0 {
					variant = "re-placing after " + after.String()
				}
				rows = append(rows, sim.Row{Scenario: sc, Mode: m, Binder: b, Result: res, Variant: variant})
			}
		}
	}
	return sideBySide(o.out, "replacing.md", sim.ReplacingLegend, sc, rows, sim.WriteReplacing)
}

// sideBySide publishes runs of one scenario side by side as name: the
// legend, the scenario, the table write writes, and what held pods Pending
// at the end.
func sideBySide(out, name, legend string, sc sim.Scenario, rows []sim.Row, write func(io.Writer, []sim.Row) error) error {
	var doc bytes.Buffer
	doc.WriteString(legend + "\n")
	fmt.Fprintf(&doc, "%s: %s; %d rounds of %s.\n\n", sc.Name, sc.Summary, sc.Rounds, sim.DefaultTick)
	if err := write(&doc, rows); err != nil {
		return err
	}
	if err := writeStuck(&doc, rows, "Pods Pending at the end:"); err != nil {
		return err
	}
	return publish(out, name, doc.Bytes())
}

// runConcurrency runs the scenario of deployments scaling at once with K
// deployments reconciled at once, without a ledger and with P servers'
// ledgers, with the first binder and mode, and writes the table side by
// side.
func runConcurrency(o options) error {
	binders, modes, size, err := common(o)
	if err != nil {
		return err
	}
	ks, err := parseCounts("-concurrency-k", o.concurrencyK, 1)
	if err != nil {
		return err
	}
	ps, err := parseCounts("-concurrency-servers", o.concurrencyServers, 0)
	if err != nil {
		return err
	}
	sc := withImage(sim.ScaleAtOnce(), size.Value(), o.imagePull, o.sizing)
	b, m := binders[0], modes[0]
	var runs []sim.ConcurrencyRun
	for _, k := range ks {
		for _, p := range ps {
			res, err := sim.Run(concurrent(sc.Config(m, b, direct(m, p)), k))
			if err != nil {
				return fmt.Errorf("%s, %d at once, %d servers: %w", sc.Name, k, p, err)
			}
			runs = append(runs, sim.ConcurrencyRun{Concurrent: k, Servers: p, Result: res})
		}
	}
	var doc bytes.Buffer
	doc.WriteString(sim.ConcurrencyLegend + "\n")
	fmt.Fprintf(&doc, "%s: %s; %s, %s, %d rounds of %s.\n\n", sc.Name, sc.Summary, m.Name, b, sc.Rounds, sim.DefaultTick)
	if err := sim.WriteConcurrency(&doc, runs); err != nil {
		return err
	}
	return publish(o.out, "concurrency.md", doc.Bytes())
}

// runPreferred runs the scenario of many copies per replica with
// kube-default and the steering binders, pinning and preferring, in the
// agent modes that assume LeastFree, and writes them side by side.
func runPreferred(o options) error {
	_, _, size, err := common(o)
	if err != nil {
		return err
	}
	sc := withImage(sim.ManyCopies(), size.Value(), o.imagePull, o.sizing)
	modes := []sim.Mode{sim.Fresh().Assuming(scheduling.LeastFree), sim.Lagging().Assuming(scheduling.LeastFree)}
	var rows []sim.Row
	for _, b := range []sim.Binder{sim.KubeDefault, sim.Steered, sim.SteeredPreferred} {
		for _, m := range modes {
			res, err := sim.Run(sc.Config(m, b, direct(m, o.servers)))
			if err != nil {
				return fmt.Errorf("%s, %s, %s: %w", sc.Name, m.Name, b, err)
			}
			rows = append(rows, sim.Row{Scenario: sc, Mode: m, Binder: b, Result: res})
		}
	}
	return sideBySide(o.out, "steering-preferred.md", sim.PreferredLegend, sc, rows, sim.WritePreferred)
}

// replacing is the function input of a mode with replaceUnscheduledAfter
// set to after: 0 turns re-placing off.
func replacing(b scheduling.Binding, after time.Duration) v1beta1.Input {
	in := sim.Input(b)
	in.ReplaceUnscheduledAfter = new(after.String())
	return in
}

// direct is the reconciler of a mode, through servers function servers
// with their own ledgers (none for 0).
func direct(m sim.Mode, servers int) sim.Direct {
	d := sim.Direct{Input: sim.Input(m.Binding), Cache: sim.NewCache()}
	if servers > 0 {
		d.Servers = sim.NewServers(servers)
	}
	return d
}

// concurrent reconciles k deployments at once in a run.
func concurrent(cfg sim.Config, k int) sim.Config {
	cfg.Concurrent = k
	return cfg
}

// parseCounts reads a comma-separated list of counts of at least least.
func parseCounts(flagName, list string, least int) ([]int, error) {
	var out []int
	for e := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(e))
		if err != nil || n < least {
			return nil, fmt.Errorf("%s %q: want comma-separated integers of at least %d", flagName, list, least)
		}
		out = append(out, n)
	}
	return out, nil
}

// publish prints a report and, unless out is empty, writes it to out/name
// with the command that wrote it.
func publish(out, name string, body []byte) error {
	if _, err := os.Stdout.Write(body); err != nil {
		return err
	}
	if out == "" {
		return nil
	}
	var md bytes.Buffer
	fmt.Fprintf(&md, "<!-- Written by `%s`; do not edit. -->\n\n", commandLine())
	md.Write(body)
	// The report is documentation, for everyone to read.
	return os.WriteFile(filepath.Join(out, name), md.Bytes(), 0o644) //nolint:gosec // See above.
}

// scenarios are what to run: a trace when one is given (with the named
// scenarios too under -with-scenarios), else the named scenarios (and the
// large fleet with -large).
func scenarios(o options) ([]sim.Scenario, string, error) {
	if o.waves != "" {
		spec, err := sim.ParseWaves(o.waves)
		if err != nil {
			return nil, "", fmt.Errorf("-waves: %w", err)
		}
		sc, err := sim.Waves(spec)
		if err != nil {
			return nil, "", fmt.Errorf("-waves: %w", err)
		}
		return []sim.Scenario{sc}, "", nil
	}
	var trace []sim.Scenario
	var notes string
	if o.nodes != "" || o.pods != "" {
		if o.nodes == "" || o.pods == "" {
			return nil, "", fmt.Errorf("a trace needs both -nodes and -pods")
		}
		sc, err := sim.LoadTrace(o.nodes, o.pods, o.trace)
		if err != nil {
			return nil, "", err
		}
		if !o.withScenarios {
			return []sim.Scenario{sc}, sc.Skipped, nil
		}
		trace, notes = []sim.Scenario{sc}, sc.Skipped
	}
	all := sim.Scenarios()
	if o.large {
		all = append(all, sim.Large())
	}
	var out []sim.Scenario
	if o.rounds < 0 {
		return nil, "", fmt.Errorf("-rounds %d: want 0 or more", o.rounds)
	}
	for i := range all {
		if o.rounds > 0 {
			all[i].Rounds = o.rounds
		}
	}
	for _, sc := range append(all, trace...) {
		if o.only == "" || sc.Name == o.only {
			out = append(out, sc)
		}
	}
	if len(out) == 0 {
		return nil, "", fmt.Errorf("no scenario %q", o.only)
	}
	return out, notes, nil
}

// writeStuck appends, under heading, what holds every pod Pending at the
// end of the runs; nothing when none is.
func writeStuck(doc *bytes.Buffer, rows []sim.Row, heading string) error {
	var stuck bytes.Buffer
	if err := sim.WriteStuck(&stuck, rows); err != nil {
		return err
	}
	if stuck.Len() > 0 {
		doc.WriteString("\n" + heading + "\n\n")
		doc.Write(stuck.Bytes())
	}
	return nil
}

// common reads the options every kind of run takes: the binders, the modes
// and the serving image's size.
func common(o options) ([]sim.Binder, []sim.Mode, resource.Quantity, error) {
	binders, err := parseBinders(o.binders)
	if err != nil {
		return nil, nil, resource.Quantity{}, err
	}
	modes, err := parseModes(o.modes)
	if err != nil {
		return nil, nil, resource.Quantity{}, err
	}
	size, err := resource.ParseQuantity(o.imageSize)
	if err != nil {
		return nil, nil, resource.Quantity{}, fmt.Errorf("-image-size %q: %w", o.imageSize, err)
	}
	if o.sizing != "v0.3" && o.sizing != "per-gpu" {
		return nil, nil, resource.Quantity{}, fmt.Errorf("-sizing %q: want v0.3 or per-gpu", o.sizing)
	}
	return binders, modes, size, nil
}

// parseBinders reads a comma-separated list of binders.
func parseBinders(list string) ([]sim.Binder, error) {
	var out []sim.Binder
	for e := range strings.SplitSeq(list, ",") {
		b, err := sim.ParseBinder(strings.TrimSpace(e))
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// parseModes reads a comma-separated list of mode keys.
func parseModes(list string) ([]sim.Mode, error) {
	var out []sim.Mode
	for e := range strings.SplitSeq(list, ",") {
		i := slices.Index(modeKeys(), strings.TrimSpace(e))
		if i < 0 {
			return nil, fmt.Errorf("unknown mode %q: want one of %v", e, modeKeys())
		}
		out = append(out, sim.Modes()[i])
	}
	return out, nil
}

// runModes runs a scenario in the modes with one binder, as the options
// say to reconcile.
func runModes(o options, sc sim.Scenario, b sim.Binder, modes []sim.Mode) ([]sim.Row, error) {
	bounds := sim.Limit(sc)
	var rows []sim.Row
	for _, m := range modes {
		if !b.Runs(m) {
			continue
		}
		res, err := sim.Run(concurrent(sc.Config(m, b, direct(m, o.servers)), o.concurrent))
		if err != nil {
			return nil, fmt.Errorf("%s, %s, %s: %w", sc.Name, m.Name, b, err)
		}
		rows = append(rows, sim.Row{Scenario: sc, Mode: m, Binder: b, Result: res, Bounds: bounds})
	}
	return rows, nil
}

func commandLine() string {
	return strings.Join(append([]string{"go run ./sim/cmd/fleetsim"}, os.Args[1:]...), " ")
}

// write writes the table to out/fleetsim.md and the chart to
// out/fleetsim.svg.
func write(out, command string, table []byte, chart []sim.Row) error {
	var md bytes.Buffer
	fmt.Fprintf(&md, "<!-- Written by `%s`; do not edit. -->\n\n", command)
	md.Write(table)
	// The report is documentation, for everyone to read.
	if err := os.WriteFile(filepath.Join(out, "fleetsim.md"), md.Bytes(), 0o644); err != nil { //nolint:gosec // See above.
		return err
	}
	var svg bytes.Buffer
	if err := sim.WriteChart(&svg, chart); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "fleetsim.svg"), svg.Bytes(), 0o644) //nolint:gosec // Documentation, as above.
}
