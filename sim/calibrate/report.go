package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/kubernetes/pkg/features"

	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// report gathers what the run found.
type report struct {
	opts     options
	tallies  map[kube.Profile]*tally
	families map[string]int
	cover    []coverage
	muts     []mutationResult
	agent    *agentTally
	ties     *tieTally
	pinned   *pinnedTally
	mu       sync.Mutex

	framework, simulator, mutationTime, agentTime, tieTime, pinnedTime time.Duration
}

// tally counts a profile's outcomes.
type tally struct {
	states, pods, contested, unique, unschedulable        int
	feasible, evaluated, scores, best, bound, devices, ok int
	decidedBy                                             map[string]int
	diffs                                                 []string
}

func (t *tally) add(o outcome, name string) {
	t.states++
	t.pods += o.pods
	t.contested += o.contested
	t.unique += o.unique
	t.unschedulable += o.unschedulable
	count := func(b bool, n *int) {
		if b {
			*n++
		}
	}
	count(o.feasible, &t.feasible)
	count(o.evaluated, &t.evaluated)
	count(o.scores, &t.scores)
	count(o.best, &t.best)
	count(o.bound, &t.bound)
	count(o.devices, &t.devices)
	count(o.agrees(), &t.ok)
	for _, pl := range o.decidedBy {
		t.decidedBy[pl]++
	}
	if !o.agrees() {
		t.diffs = append(t.diffs, name+":\n"+o.diff)
	}
}

// coverage is how often a feature came up.
type coverage struct {
	name string
	// states had it; contested of them had a pod with two or more
	// scored nodes; disagreed of them disagreed under some profile.
	states, contested, disagreed int
}

func (r *report) coverage(all []*sampled, outcomes []map[kube.Profile]outcome) {
	for _, f := range featureList() {
		c := coverage{name: f.name}
		for i, s := range all {
			if !f.in(s.st) {
				continue
			}
			c.states++
			contested, disagreed := false, false
			for _, p := range profiles() {
				contested = contested || outcomes[i][p].contested > 0
				disagreed = disagreed || !outcomes[i][p].agrees()
			}
			if contested {
				c.contested++
			}
			if disagreed {
				c.disagreed++
			}
		}
		r.cover = append(r.cover, c)
	}
}

// mutationResult is how many states, under both profiles, one break of
// the binder changed.
type mutationResult struct {
	m kube.Mutation
	// runs are the runs compared (where the binder unmutated agreed);
	// changed those it changed, picks those where it changed a pod's
	// node.
	runs, changed, picks int
	first                string
}

// mutate runs the binder under every mutation on the states (or the first
// -mutation-states of them), against kube-scheduler's verdicts.
func (r *report) mutate(ctx context.Context, all []*sampled) error {
	n := len(all)
	if r.opts.mutationStates > 0 {
		n = min(n, r.opts.mutationStates)
	}
	muts := kube.Mutations()
	r.muts = make([]mutationResult, len(muts))
	return parallel(len(muts), r.opts.workers, func(k int) error {
		res := mutationResult{m: muts[k]}
		for i, s := range all[:n] {
			for _, p := range profiles() {
				// A mutation may make the allocator fail where
				// kube-scheduler does not (a feature it needs switched
				// off): a change like any other.
				if !s.agrees[p] {
					continue
				}
				res.runs++
				sim, err := simulate(ctx, s.st, s.base, p, muts[k])
				var o outcome
				if err == nil {
					o = compare(s.verdicts[p], sim)
				}
				if err != nil || !o.bound {
					res.picks++
				}
				if err != nil || !o.agrees() {
					res.changed++
					if res.first == "" {
						res.first = fmt.Sprintf("state %d (%s), %s", i, s.st.family, p)
					}
				}
			}
		}
		r.muts[k] = res
		return nil
	})
}

// failures is why -strict fails, or nil.
func (r *report) failures() error {
	var errs []error
	for _, p := range profiles() {
		t := r.tallies[p]
		for _, d := range t.diffs[:min(len(t.diffs), 5)] {
			fmt.Fprintln(os.Stderr, d)
		}
		if t.ok != t.states {
			errs = append(errs, fmt.Errorf("%s: %d of %d states disagree", p, t.states-t.ok, t.states))
		}
	}
	for _, m := range r.muts {
		if m.changed == 0 && unkillable()[m.m] == "" {
			errs = append(errs, fmt.Errorf("mutation %s changed no state, and no argument says why it cannot", m.m))
		}
	}
	if r.agent != nil && r.agent.overReported > 0 {
		errs = append(errs, fmt.Errorf("the agent reported %d nodes' devices free that kube-scheduler's DynamicResources refuses", r.agent.overReported))
	}
	if r.pinned != nil {
		for _, d := range r.pinned.diffs[:min(len(r.pinned.diffs), 5)] {
			fmt.Fprintln(os.Stderr, d)
		}
		if err := r.pinned.failures(); err != nil {
			errs = append(errs, err)
		}
	}
	if !r.opts.strict {
		for _, err := range errs {
			fmt.Fprintln(os.Stderr, "calibrate:", err)
		}
		return nil
	}
	return errors.Join(errs...)
}

func pct(n, d int) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(d))
}

func (r *report) render() string {
	var b strings.Builder
	o := r.opts
	cmd := fmt.Sprintf("cd sim/calibrate && go run . -states %d -seed %d", o.states, o.seed)
	if o.mutations {
		cmd += " -mutations"
		if o.mutationStates > 0 {
			cmd += fmt.Sprintf(" -mutation-states %d", o.mutationStates)
		}
	}
	if o.ties > 0 {
		cmd += fmt.Sprintf(" -ties %d", o.ties)
	}
	if o.agent > 0 {
		cmd += fmt.Sprintf(" -agent %d", o.agent)
	}
	if o.pinned > 0 {
		cmd += fmt.Sprintf(" -pinned %d", o.pinned)
	}
	fmt.Fprintf(&b, "<!-- Written by `%s -out ../../docs/calibration.md`; do not edit. -->\n\n", cmd)
	b.WriteString(preamble)

	b.WriteString("## Agreement\n\n")
	b.WriteString("| Profile | States | Pods | Pods with two or more scored nodes | Of those, a unique best | Pods that fit no node | Same nodes scored | Search as long | Same total on every scored node | Same best nodes | Same node picked | Same devices | **Agreement** |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range profiles() {
		t := r.tallies[p]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | **%d (%s)** |\n", p, t.states, t.pods, t.contested, t.unique, t.unschedulable,
			t.feasible, t.evaluated, t.scores, t.best, t.bound, t.devices, t.ok, pct(t.ok, t.states))
	}
	b.WriteString("\nThe columns from \"Same nodes scored\" count states where every pod agreed.\n\n")
	b.WriteString("Of the pods with a unique best node, how often each plugin's weighted score favoured it over the runner-up:\n\n")
	names := pluginNames()
	b.WriteString("| Profile | " + strings.Join(names, " | ") + " |\n")
	b.WriteString("|---|" + strings.Repeat("---:|", len(names)) + "\n")
	for _, p := range profiles() {
		t := r.tallies[p]
		fmt.Fprintf(&b, "| %s |", p)
		for _, pl := range names {
			fmt.Fprintf(&b, " %d (%s) |", t.decidedBy[pl], pct(t.decidedBy[pl], t.unique))
		}
		b.WriteString("\n")
	}

	b.WriteString("\n## The states\n\nEach state is of one family, in a fixed share of the sample (state i is of the i-th family in a round of 100 slots, the families interleaved):\n\n")
	b.WriteString("| Family | Share | States | What it adds to the base |\n|---|---:|---:|---|\n")
	for _, f := range families() {
		fmt.Fprintf(&b, "| %s | %d%% | %d | %s |\n", f.name, f.weight, r.families[f.name], f.doc)
	}
	b.WriteString("\n## Coverage\n\nWhich of kube-scheduler's features the states exercised, told from each state (whatever its family): how many states had it, how many of those had a pod with two or more scored nodes (where the scores and the pick are compared, not only the filter), and how many of those disagreed under some profile.\n\n")
	b.WriteString("| Feature | States | With two or more scored nodes | Disagreed |\n|---|---:|---:|---:|\n")
	for _, c := range r.cover {
		fmt.Fprintf(&b, "| %s | %d | %d | %d |\n", c.name, c.states, c.contested, c.disagreed)
	}
	if r.muts != nil {
		r.renderMutations(&b)
	}
	if r.ties != nil {
		r.ties.render(&b)
	}
	if r.agent != nil {
		r.agent.render(&b)
	}
	if r.pinned != nil {
		r.pinned.render(&b)
	}
	fmt.Fprintf(&b, "\n## The run\n\nkube-scheduler v1.37.2's feature gates as run: DRAConsumableCapacity=%t, DRAPartitionableDevices=%t, DRADeviceTaints=%t, DRADeviceTaintRules=%t, DRAPrioritizedList=%t, DRAExtendedResource=%t, DRADeviceBindingConditions=%t, DRAAdminAccess=%t, InterPodAffinityHostnameFastPath=%t, OpportunisticBatching=%t (no pod is signable under the default profile: PodTopologySpread's system default constraints make every pod unsignable, so it never batches).\n\n",
		enabled(features.DRAConsumableCapacity), enabled(features.DRAPartitionableDevices), enabled(features.DRADeviceTaints), enabled(features.DRADeviceTaintRules),
		enabled(features.DRAPrioritizedList), enabled(features.DRAExtendedResource), enabled(features.DRADeviceBindingConditions), enabled(features.DRAAdminAccess),
		enabled(features.InterPodAffinityHostnameFastPath), enabled(features.OpportunisticBatching))
	fmt.Fprintf(&b, "On %d CPUs (%s), %d at a time: kube-scheduler on %d states × %d profiles in %s, the simulator's binder on the same in %s",
		runtime.NumCPU(), runtime.Version(), o.workers, o.states, len(profiles()), r.framework.Round(time.Second), r.simulator.Round(time.Second))
	if r.muts != nil {
		fmt.Fprintf(&b, ", %d mutations in %s", len(r.muts), r.mutationTime.Round(time.Second))
	}
	if r.ties != nil {
		fmt.Fprintf(&b, ", kube-scheduler with parallelism 16 in %s", r.tieTime.Round(time.Second))
	}
	if r.agent != nil {
		fmt.Fprintf(&b, ", the agent check in %s", r.agentTime.Round(time.Second))
	}
	if r.pinned != nil {
		fmt.Fprintf(&b, ", the pinned pods in %s", r.pinnedTime.Round(time.Second))
	}
	b.WriteString(".\n")
	return b.String()
}

func enabled(f featuregate.Feature) bool { return utilfeature.DefaultFeatureGate.Enabled(f) }

func (r *report) renderMutations(b *strings.Builder) {
	n := r.opts.states
	if r.opts.mutationStates > 0 {
		n = min(n, r.opts.mutationStates)
	}
	runs := 0
	if len(r.muts) > 0 {
		runs = r.muts[0].runs
	}
	fmt.Fprintf(b, "\n## Mutations\n\nEach row is one deliberate break of the simulator's binder (kube.Mutations), run on the first %d states under both profiles, against kube-scheduler's verdicts above, on the %d runs where the binder unmutated agreed: how many runs it changed (any pod's scored nodes, search length, totals, best nodes, pick or devices), and how many of those it changed the node a pod went to. A break that changes none is a blind spot; each that cannot change any is argued.\n\n", n, runs)
	b.WriteString("| Mutation | Runs changed | Of which a pod's node | First changed | Why none can change |\n|---|---:|---:|---|---|\n")
	for _, m := range r.muts {
		why := ""
		if m.changed == 0 {
			why = unkillable()[m.m]
			if why == "" {
				why = "**blind spot: no argument**"
			}
		}
		fmt.Fprintf(b, "| `%s` | %d (%s) | %d | %s | %s |\n", m.m, m.changed, pct(m.changed, m.runs), m.picks, m.first, why)
	}
}

// unkillable are the arguments why a mutation cannot change any state
// this calibration can generate, for those that do not.
func unkillable() map[kube.Mutation]string {
	return map[kube.Mutation]string{}
}

func pluginNames() []string {
	out := make([]string, 0, len(kube.Weights()))
	for pl := range kube.Weights() {
		out = append(out, pl)
	}
	slices.Sort(out)
	return out
}

const preamble = `# The simulator's binder against kube-scheduler

The fleet simulator binds pods with its own code (sim/kube): the filters
of kube-scheduler v1.37's default profile, the structured DRA allocator,
its score plugins, its search and its pick, written from kube-scheduler's
source. This compares it with kube-scheduler itself, from
k8s.io/kubernetes v1.37.2, run in process by sim/calibrate (a module of
its own, so that k8s.io/kubernetes never enters the function's go.mod).
Then it breaks the binder on purpose, one rule at a time, to show the
comparison would have caught each break; it checks the cluster
agent's reports against kube-scheduler's Filter; and it schedules pods
pinned to a node by name, as the steering agent pins them, with both.

## How

Each state is a random cluster of one of the families below, with pods
bound wherever they fit (through the simulator's filter and the
allocator, so every allocation is the allocator's), and one to five pods
to schedule, one after another.

kube-scheduler runs as scheduler.New builds it (the in-tree registry, the
profile, its cache, queue, DRA manager with its claim assume cache and
ResourceSlice tracker, and binder) over informers of a fake clientset
that holds the state's objects. The nodes are created one at a time, in
the state's order: its node tree lists them in the order it learns of
them, zone by zone. Each pod goes through ScheduleOne: the queue's Pop,
the scheduling cycle (schedulePod: the search from nextStartNodeIndex,
percentageOfNodesToScore, the Filter and Score plugins, the pick from the
heap of scored nodes) and the binding cycle (Reserve, PreBind, Bind).
Reactors on the clientset answer as an API server would where the fake
does not: a binding sets the pod's node; a claim created with a generated
name gets one, and is in the informers before the call returns; a device
with binding conditions has them met when its claim is allocated (a
driver that attaches at once). The scores are read from what the cycle
logs at verbosity 10 (each plugin's weighted score of each node, and the
totals); how far the search went from its ScheduleResult; the devices
from the claims PreBind wrote. A pod that fits no node is deleted before
the next. Before the states, the run checks what the binder takes as
given: its allocator features are dynamicresources.AllocatorFeatures of
the default gates, and its score plugins and weights are those the
framework built (and VolumeBinding, which scores 0 for every pod without
persistent volumes under v1.37's StorageCapacityScoring).

Both run with parallelism 1. Then the feasible nodes are in search
order, and so is the heap's pick among nodes that tie: v1.37 breaks ties
at random only when an extender scores, otherwise its heap puts one of
them on top by their order. kube-scheduler's default parallelism of 16
orders them by which worker finished first, and may filter past the
point where the search stops; the simulator's Schedule then picks among
the best at random. Evaluation.Pick is the heap's pick in search order,
and the comparison is exact.

A state agrees when every pod agrees: the same nodes scored, the search
through as many nodes, the same total on every scored node, the same best
nodes, the same node picked and, there, the same devices allocated (with
what each share of a device consumes).

What neither compares, because the binder refuses the pods they would
matter for and no ModelReplica can make one (its member template has one
container with an image, command, args and env: no resources, ports or
volumes; the cluster adds the toleration, node selector, claims from
templates and /dev/shm; Modelplane's pods carry no affinity or spread
constraints): explicit topologySpreadConstraints, host ports (NodePorts),
persistent and CSI volumes (VolumeBinding, VolumeRestrictions,
VolumeZone, NodeVolumeLimits), ephemeral storage and hugepages, node
affinity by field, affinity terms with a namespace selector or label keys
(the API server merges matchLabelKeys into the selector).

`
