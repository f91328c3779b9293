// Command calibrate checks the fleet simulator's binder (sim/kube) against
// kube-scheduler v1.37.2's own framework, run in process, on random cluster
// states: for each state and profile it schedules the same pod with both
// and compares the feasible nodes, every feasible node's total score, the
// set of best nodes, where the framework bound the pod and which devices
// its DynamicResources plugin allocated.
//
//	cd sim/calibrate && go run . -states 2000 -out ../../docs/calibration.md
//
// It exits 1 when any state disagrees (with -strict) and prints the first
// disagreements.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/metrics"

	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

func main() {
	states := flag.Int("states", 1000, "random states to sample; each is scheduled under every profile")
	seed := flag.Uint64("seed", 1, "seed of the states")
	out := flag.String("out", "", "file to write the Markdown report to; empty prints it only")
	strict := flag.Bool("strict", false, "exit 1 if any state disagrees")
	flag.Parse()
	// The framework logs every unschedulable pod; the report says what
	// matters.
	klog.SetOutput(&bytes.Buffer{})
	klog.LogToStderr(false)
	// As scheduler.New does: the framework instruments its plugins.
	metrics.Register()
	if err := run(*states, *seed, *out, *strict); err != nil {
		fmt.Fprintln(os.Stderr, "calibrate:", err)
		os.Exit(1)
	}
}

// tally counts a profile's outcomes.
type tally struct {
	states, contested, unique, unschedulable   int
	feasible, scores, best, bound, devices, ok int
	decidedBy                                  map[string]int
	diffs                                      []string
}

func run(states int, seed uint64, out string, strict bool) error {
	began := time.Now()
	ctx := context.Background()
	profiles := []kube.Profile{kube.Default, kube.MostAllocated}
	tallies := map[kube.Profile]*tally{}
	for _, p := range profiles {
		tallies[p] = &tally{decidedBy: map[string]int{}}
	}
	for i := range states {
		rng := rand.New(rand.NewPCG(seed, uint64(i))) //nolint:gosec // Sampled states, not security.
		st, err := sample(rng)
		if err != nil {
			return fmt.Errorf("state %d: %w", i, err)
		}
		for _, p := range profiles {
			o, err := compare(ctx, st, p)
			if err != nil {
				return fmt.Errorf("state %d, %s: %w", i, p, err)
			}
			tallies[p].add(o, fmt.Sprintf("state %d (seed %d), %s", i, seed, p))
		}
	}
	elapsed := time.Since(began)
	report := render(states, seed, profiles, tallies, elapsed)
	if _, err := os.Stdout.WriteString(report); err != nil {
		return err
	}
	if out != "" {
		// The report is documentation, for everyone to read.
		if err := os.WriteFile(out, []byte(report), 0o644); err != nil { //nolint:gosec // See above.
			return fmt.Errorf("cannot write %s: %w", out, err)
		}
	}
	for _, p := range profiles {
		t := tallies[p]
		for _, d := range t.diffs[:min(len(t.diffs), 5)] {
			fmt.Fprintln(os.Stderr, d)
		}
		if strict && t.ok != t.states {
			return fmt.Errorf("%s: %d of %d states disagree", p, t.states-t.ok, t.states)
		}
	}
	return nil
}

func (t *tally) add(o outcome, name string) {
	t.states++
	count := func(b bool, n *int) {
		if b {
			*n++
		}
	}
	count(o.contested, &t.contested)
	count(o.unique, &t.unique)
	count(o.unschedulable, &t.unschedulable)
	count(o.feasible, &t.feasible)
	count(o.scores, &t.scores)
	count(o.best, &t.best)
	count(o.bound, &t.bound)
	count(o.devices, &t.devices)
	count(o.agrees(), &t.ok)
	for _, pl := range o.decidedBy {
		t.decidedBy[pl]++
	}
	if !o.agrees() {
		t.diffs = append(t.diffs, name+": "+o.diff)
	}
}

func pct(n, d int) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(d))
}

func render(states int, seed uint64, profiles []kube.Profile, tallies map[kube.Profile]*tally, elapsed time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<!-- Written by `cd sim/calibrate && go run . -states %d -seed %d -out ../../docs/calibration.md`; do not edit. -->\n\n", states, seed)
	b.WriteString(preamble)
	b.WriteString("| Profile | States | Two or more feasible nodes | Unique best node | Unschedulable | Same feasible nodes | Same total score on every feasible node | Same best nodes | Binding among the simulator's best | Same devices allocated | **Agreement** |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range profiles {
		t := tallies[p]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | **%d (%s)** |\n", p, t.states, t.contested, t.unique, t.unschedulable,
			t.feasible, t.scores, t.best, t.bound, t.devices, t.ok, pct(t.ok, t.states))
	}
	b.WriteString("\nOf the states with a unique best node, how often each plugin's weighted score favoured it over the runner-up:\n\n")
	b.WriteString("| Profile | " + strings.Join(pluginNames(), " | ") + " |\n")
	b.WriteString("|---|" + strings.Repeat("---:|", len(pluginNames())) + "\n")
	for _, p := range profiles {
		t := tallies[p]
		fmt.Fprintf(&b, "| %s |", p)
		for _, pl := range pluginNames() {
			fmt.Fprintf(&b, " %d (%s) |", t.decidedBy[pl], pct(t.decidedBy[pl], t.unique))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\nkube-scheduler v1.37.2's feature gates as run: DRAConsumableCapacity=%t, DRAPartitionableDevices=%t, DRADeviceTaints=%t, DRAPrioritizedList=%t, OpportunisticBatching=%t (pods with claims are not signable, so it never batches them). %d states in %s on %d CPUs (%s).\n",
		utilfeature.DefaultFeatureGate.Enabled(features.DRAConsumableCapacity), utilfeature.DefaultFeatureGate.Enabled(features.DRAPartitionableDevices),
		utilfeature.DefaultFeatureGate.Enabled(features.DRADeviceTaints), utilfeature.DefaultFeatureGate.Enabled(features.DRAPrioritizedList),
		utilfeature.DefaultFeatureGate.Enabled(features.OpportunisticBatching), states*len(profiles), elapsed.Round(time.Second), runtime.NumCPU(), runtime.Version())
	return b.String()
}

const preamble = `# The simulator's binder against kube-scheduler

The fleet simulator binds pods with its own code (sim/kube): the filters
of kube-scheduler v1.37's default profile, the structured DRA allocator,
and the score plugins that can tell two nodes of a pool apart, written
from kube-scheduler's source. This compares it with kube-scheduler's own
framework, from k8s.io/kubernetes v1.37.2, run in process by
sim/calibrate (a module of its own, so that k8s.io/kubernetes never
enters the function's go.mod).

Each state is a random cluster: 2 to 99 nodes in 0 to 3 zones and two
pools, cpu and memory allocatable of 8 to 192 cores and 32Gi to 2Ti,
ResourceSlices of 0 to 8 GPUs (one model per state, some nodes with less
memory per GPU) and some of NICs, DeviceClasses for both, images of 4Mi
to 10Gi on a third of the nodes each, cordons, NoSchedule and
PreferNoSchedule taints, ReplicaSets and StatefulSets, and up to twice as
many pods as nodes bound wherever they fit (through the simulator's filter and the
allocator, so every allocation is the allocator's), with cpu and memory
requests that are missing, zero or set, owners, gangs' required
anti-affinity and claims. Then a pod of the same kind is scheduled by both,
under each profile: kube-scheduler's framework (the in-tree registry, the
default profile from the scheme's defaults, a snapshot of the nodes and
pods as shared lister, the DRA manager over informers of a fake clientset
holding every object) runs PreFilter, Filter on every node, PreScore and
Score, picks the node as schedule_one.go does, then Reserve, PreBind and
Bind; the default binder's binding is recorded by a reactor on the fake
clientset, and the claim's allocation read back as PreBind wrote it.

A state agrees when both find the same feasible nodes, the same total
score on every one, the same set of best nodes, the framework binds to one
of the simulator's best, and the simulator allocates on that node the
devices the framework wrote into the claim. States where one node alone is
feasible, or several tie, prove little about the scores: the table counts
the states with two or more feasible nodes and, of those, a unique best.

Not compared here: which of several tied best nodes each picks (v1.37
breaks a tie by its heap over the parallel filter's output; the simulator
at random), and percentageOfNodesToScore, which only cuts in at 100 nodes
(its count is tested against the formula in sim/kube).

`

func pluginNames() []string {
	out := make([]string, 0, len(kube.Weights()))
	for pl := range kube.Weights() {
		out = append(out, pl)
	}
	slices.Sort(out)
	return out
}
