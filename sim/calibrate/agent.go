package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/modelplaneai/fleet-scheduler/agent"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// The agent against the framework. For each state, each pool (the nodes
// of one pool label) is counted by the cluster agent (agent.PoolReport),
// one node at a time (a view of that node alone, every slice and claim
// of the state: its count is the node's part of the pool's report), from
// the ResourceSlices as kube-scheduler's tracker patched them with the
// DeviceTaintRules. Then, for each node in the report, kube-scheduler's
// PreFilter and Filter (every default filter plugin, DynamicResources
// included) are asked about the probe pod of the node's shape: the pool's
// tolerations, its node selector, no cpu or memory requests (the agent
// counts devices, not cpu or memory), and one claim of exactly the free
// count of each pool device. A refusal is an over-report. And for each
// pool device, the probe of one more than the free count (where the node
// has more): an acceptance is an under-report, devices the framework
// would use that the report does not show.

// agentTally is what the agent check found.
type agentTally struct {
	states, pools, nodes, leftOut int
	// probed are the nodes with some device free, checked at their
	// shape; agreed of them the framework accepted; over by the plugin
	// that refused.
	probed, agreed int
	over           map[string]int
	// underNodes are the nodes where the framework took one more of some
	// device than reported; underDevices the (node, device) pairs where
	// it did, of the checked pairs probed for one more; timedOut those
	// where its allocator gave up (its filter timeout).
	underNodes, underDevices, checked, timedOut int
	// underBy counts the under-reported nodes by family.
	underBy                 map[string]int
	examples, underExamples []string
	overReported            int
}

// poolsOf are the state's pools: each pool label value, with its nodes'
// label key, the pool devices (GPUs and NICs, each counted up to the most
// a node has), and the tolerations its pods have.
func poolsOf(st *state) []agent.Pool {
	key := poolLabel
	var tolerations []corev1.Toleration
	if st.family == "modelplane" {
		key = v1alpha1.LabelPool
		tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	}
	most := map[string]int64{}
	perNode := map[[2]string]int64{}
	for _, s := range st.slices {
		k := [2]string{*s.Spec.NodeName, s.Spec.Driver}
		perNode[k] += int64(len(s.Spec.Devices))
		most[s.Spec.Driver] = max(most[s.Spec.Driver], perNode[k])
	}
	var devices []v1alpha1.Device
	for _, d := range []struct{ name, driver, class string }{{gpuClass, gpuDriver, gpuClass}, {"nic", nicDriver, "nic"}} {
		if most[d.driver] > 0 {
			devices = append(devices, v1alpha1.Device{Name: d.name, Driver: d.driver, DeviceClassName: d.class, Count: new(most[d.driver])})
		}
	}
	names := map[string]bool{}
	for _, n := range st.nodes {
		if v, ok := n.Labels[key]; ok {
			names[v] = true
		}
	}
	out := make([]agent.Pool, 0, len(names))
	for _, name := range slices.Sorted(maps.Keys(names)) {
		out = append(out, agent.Pool{Name: name, Nodes: labels.SelectorFromSet(labels.Set{key: name}), Devices: devices, Tolerations: tolerations})
	}
	return out
}

func (r *report) checkAgent(ctx context.Context, all []*sampled) error {
	t := &agentTally{over: map[string]int{}, underBy: map[string]int{}}
	r.agent = t
	for i, s := range all {
		if err := t.state(ctx, i, s.st); err != nil {
			return fmt.Errorf("agent check, state %d (%s): %w", i, s.st.family, err)
		}
	}
	return nil
}

func (t *agentTally) state(ctx context.Context, i int, st *state) error {
	r := &kubeRun{st: st, bound: make(chan string, 1), failed: make(chan string, 1)}
	if err := r.start(ctx, kube.Default, 1); err != nil {
		return err
	}
	defer r.stop()
	patched, err := r.sched.Profiles[corev1.DefaultSchedulerName].SharedDRAManager().ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return fmt.Errorf("cannot list the patched slices: %w", err)
	}
	t.states++
	c := &agentCheck{t: t, r: r, i: i, st: st, patched: patched}
	for _, pool := range poolsOf(st) {
		if len(pool.Devices) == 0 {
			continue
		}
		t.pools++
		for _, n := range st.nodes {
			if !pool.Nodes.Matches(labels.Set(n.Labels)) {
				continue
			}
			if err := c.node(ctx, pool, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// agentCheck is the agent check of one state, against one kube-scheduler.
type agentCheck struct {
	t       *agentTally
	r       *kubeRun
	i       int
	st      *state
	patched []*resourceapi.ResourceSlice
	// probes names the probe pods, one name each.
	probes int
}

func (c *agentCheck) probe(ctx context.Context, pool agent.Pool, node string, counts map[string]int64) (string, error) {
	c.probes++
	return c.r.probe(ctx, fmt.Sprintf("probe-%d", c.probes), pool, node, counts)
}

// node counts the pool's node as the agent does, and asks kube-scheduler
// about the shape it reports free and about one device more.
func (c *agentCheck) node(ctx context.Context, pool agent.Pool, n *corev1.Node) error {
	t, st := c.t, c.st
	view := agent.View{Nodes: []*corev1.Node{n}, ResourceSlices: c.patched, DeviceClasses: st.classes, ResourceClaims: st.claims, SyncedAt: time.Unix(1, 0)}
	rep, err := agent.PoolReport(ctx, pool, view)
	if err != nil {
		return fmt.Errorf("pool %s, node %s: %w", pool.Name, n.Name, err)
	}
	if len(rep.NodesByFreeDevices) == 0 {
		t.leftOut++
		return nil
	}
	t.nodes++
	free := map[string]int64{}
	for _, f := range rep.NodesByFreeDevices[0].Free {
		free[f.Name] = f.Count
	}
	if len(free) > 0 {
		if err := c.fits(ctx, pool, n, free); err != nil {
			return err
		}
	}
	return c.oneMore(ctx, pool, n, free)
}

// fits asks whether the shape the agent reports free fits the node.
func (c *agentCheck) fits(ctx context.Context, pool agent.Pool, n *corev1.Node, free map[string]int64) error {
	t := c.t
	t.probed++
	why, err := c.probe(ctx, pool, n.Name, free)
	if err != nil {
		return err
	}
	if why == "" {
		t.agreed++
		return nil
	}
	cause, _, _ := strings.Cut(why, ":")
	t.over[cause]++
	if cause == "DynamicResources" {
		t.overReported++
	}
	if len(t.examples) < 5 {
		t.examples = append(t.examples, fmt.Sprintf("state %d (%s), pool %s, node %s, free %v: %s", c.i, c.st.family, pool.Name, n.Name, free, why))
	}
	return nil
}

// oneMore asks, device by device, whether one more than the agent reports
// free fits the node.
func (c *agentCheck) oneMore(ctx context.Context, pool agent.Pool, n *corev1.Node, free map[string]int64) error {
	t := c.t
	under := false
	for _, d := range pool.Devices {
		if free[d.Name] >= *d.Count {
			continue
		}
		t.checked++
		more := free[d.Name] + 1
		why, err := c.probe(ctx, pool, n.Name, map[string]int64{d.Name: more})
		switch {
		case err != nil:
			return err
		case why == timedOut:
			t.timedOut++
		case why == "":
			t.underDevices++
			if !under && len(t.underExamples) < 5 {
				t.underExamples = append(t.underExamples, fmt.Sprintf("state %d (%s), pool %s, node %s: %d %s reported free, kube-scheduler fits %d", c.i, c.st.family, pool.Name, n.Name, free[d.Name], d.Name, more))
			}
			under = true
		}
	}
	if under {
		t.underNodes++
		t.underBy[c.st.family]++
	}
	return nil
}

// probe asks the framework whether a pod of the pool that claims the
// counts of its devices fits the node; "" when it does, else the plugin
// that refused and why.
func (r *kubeRun) probe(ctx context.Context, name string, pool agent.Pool, node string, counts map[string]int64) (string, error) {
	pod := &corev1.Pod{}
	pod.Namespace, pod.Name, pod.UID = namespace, name, types.UID("uid-"+name)
	pod.Spec.SchedulerName = corev1.DefaultSchedulerName
	sel, _ := pool.Nodes.RequiresExactMatch(poolLabel)
	key := poolLabel
	if v, ok := pool.Nodes.RequiresExactMatch(v1alpha1.LabelPool); ok {
		key, sel = v1alpha1.LabelPool, v
	}
	pod.Spec.NodeSelector = map[string]string{key: sel}
	pod.Spec.Tolerations = pool.Tolerations
	pod.Spec.Containers = []corev1.Container{{Name: "probe", Image: "busybox:1.36"}}
	var reqs []resourceapi.DeviceRequest
	for _, d := range pool.Devices {
		if c := counts[d.Name]; c > 0 {
			reqs = append(reqs, kube.Exactly(d.Name, d.DeviceClassName, c))
		}
	}
	claim := kube.NewClaim(namespace, name, reqs...)
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "devices", ResourceClaimName: &claim.Name}}
	out, err := r.filter(ctx, pod, []*resourceapi.ResourceClaim{claim}, node)
	if err != nil {
		return "", fmt.Errorf("probe %s on %s: %w", name, node, err)
	}
	return out[node], nil
}

func (t *agentTally) render(b *strings.Builder) {
	b.WriteString("\n## The agent against kube-scheduler\n\n")
	b.WriteString("For each state, each pool's nodes are counted by the cluster agent (agent.PoolReport on a view of one node and every slice, patched with the DeviceTaintRules by kube-scheduler's own tracker, and claim of the state), and kube-scheduler's PreFilter and Filter (every default filter, DynamicResources included) are asked, on each node the report shows, about the probe pod of the node's shape (the pool's node selector and tolerations, no cpu or memory requests, one claim of exactly the free count of each pool device): a refusal is an over-report. Then, device by device, about one more than the free count where the node has more devices: an acceptance is an under-report.\n\n")
	b.WriteString("| States | Pools | Nodes in the reports | Left out | Nodes with devices free | kube-scheduler fits the shape | Refused (over-reported), by plugin | Node and device pairs probed for one more | One more fits (under-reported) | Nodes under-reported | Allocator timed out |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|\n")
	over := make([]string, 0, len(t.over))
	for _, cause := range slices.Sorted(maps.Keys(t.over)) {
		over = append(over, fmt.Sprintf("%s %d", cause, t.over[cause]))
	}
	overText := "none"
	if len(over) > 0 {
		overText = strings.Join(over, ", ")
	}
	fmt.Fprintf(b, "| %d | %d | %d | %d | %d | %d (%s) | %s | %d | %d (%s) | %d (%s) | %d |\n", t.states, t.pools, t.nodes, t.leftOut, t.probed, t.agreed, pct(t.agreed, t.probed), overText,
		t.checked, t.underDevices, pct(t.underDevices, t.checked), t.underNodes, pct(t.underNodes, t.nodes), t.timedOut)
	b.WriteString("\nA refusal by DynamicResources is an over-report of devices, and fails -strict. A refusal by NodeResourcesFit's \"Too many pods\" is a node whose pods are at its allocatable pods: the agent's view (agent.View) holds no pods, so it cannot leave such a node out; a pod sent there stays Pending until one leaves.\n")
	if len(t.examples) > 0 {
		b.WriteString("\nThe first refusals:\n\n")
		for _, e := range t.examples {
			fmt.Fprintf(b, "- %s\n", e)
		}
	}
	if len(t.underBy) > 0 {
		by := make([]string, 0, len(t.underBy))
		for _, f := range slices.Sorted(maps.Keys(t.underBy)) {
			by = append(by, fmt.Sprintf("%s %d", f, t.underBy[f]))
		}
		fmt.Fprintf(b, "\nUnder-reported nodes by family: %s. A device any claim holds a share of is not whole-free to the agent, though kube-scheduler gives a probe without a capacity request a share of it (consumable capacity); and where one DeviceClass selects whole GPUs and their partitions, the agent counts the devices it allocates first, the whole GPUs, where kube-scheduler fits more devices by taking partitions: a pool device's class should select one kind. The first:\n\n", strings.Join(by, ", "))
		for _, e := range t.underExamples {
			fmt.Fprintf(b, "- %s\n", e)
		}
	}
}
