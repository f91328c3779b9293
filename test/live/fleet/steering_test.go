package fleet

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/relay"
	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// The agent's bounds, as its Deployment runs it (its flags' defaults,
// docs/cluster-agent.md#bounds).
const (
	leaseDuration  = 15 * time.Second
	retryPeriod    = 2 * time.Second
	steeringWindow = time.Second
	// jitteredRetry is the longest between two tries of a replica that
	// does not lead: client-go adds up to 120% of the retry period.
	jitteredRetry = retryPeriod * 22 / 10
	// newLeaderBound is how long after a killed leader's last renewal
	// the pods it held are released: another replica counts the Lease's
	// duration from when it saw that renewal, at one of its tries, leads
	// at the first try after, and decides them in its first round.
	newLeaderBound = jitteredRetry + leaseDuration + jitteredRetry + steeringWindow
	// boundMargin is what the test allows past a stated bound: the API
	// server's and the test's own latency on a loaded machine.
	boundMargin = 5 * time.Second
)

// setSteerPools sets (or, for "", removes) an InferenceCluster's
// agent.modelplane.ai/steer-pools annotation.
func (f *fleet) setSteerPools(t *testing.T, cluster, pools string) {
	t.Helper()
	var v any
	if pools != "" {
		v = pools
	}
	patch := mustJSON(t, map[string]any{"metadata": map[string]any{"annotations": map[string]any{agentv1alpha1.AnnotationSteerPools: v}}})
	if err := f.cp.c.Patch(t.Context(), harness.Object(apiVersion, "InferenceCluster", "", cluster), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("cannot annotate InferenceCluster %s with %s=%q: %v", cluster, agentv1alpha1.AnnotationSteerPools, pools, err)
	}
}

// steering is what a pool's PoolObservation and InferenceCluster entry say
// of steering.
type steering struct {
	spec      string // the PoolObservation's spec.steering
	condition string // its Steering condition: "status reason", or "absent"
	binding   string // its status.binding
	relayed   string // the InferenceCluster's gpuPools entry's binding
}

func (f *fleet) steeringOf(t *testing.T, cluster, pool string) (steering, string) {
	t.Helper()
	po := harness.Get(t, f.clusters[cluster].api.c, agentAPIVersion, "PoolObservation", "", pool)
	var s steering
	if po == nil {
		return s, "no PoolObservation"
	}
	s.spec, _, _ = unstructured.NestedString(po.Object, "spec", "steering")
	s.binding, _, _ = unstructured.NestedString(po.Object, "status", agentv1alpha1.FieldBinding)
	s.condition = "absent"
	if c := harness.Condition(po, agentv1alpha1.ConditionSteering); c != nil {
		s.condition = fmt.Sprintf("%v %v", c["status"], c["reason"])
	}
	s.relayed, _ = f.poolReport(t, cluster, pool)[agentv1alpha1.FieldBinding].(string)
	return s, describe(po, agentv1alpha1.ConditionSteering)
}

// waitSteering waits until a pool's PoolObservation and then its
// InferenceCluster's entry say what want says, and returns how long the
// PoolObservation and the InferenceCluster took.
func (f *fleet) waitSteering(t *testing.T, cluster, pool string, want steering, timeout time.Duration) (time.Duration, time.Duration) {
	t.Helper()
	agent := eventually(t, timeout, fmt.Sprintf("PoolObservation %s of %s saying %+v", pool, cluster, want), func() error {
		got, c := f.steeringOf(t, cluster, pool)
		if got.spec != want.spec || got.condition != want.condition || got.binding != want.binding {
			return fmt.Errorf("%+v; %s", got, c)
		}
		return nil
	})
	relayed := eventually(t, timeout, fmt.Sprintf("InferenceCluster %s's pool %s with binding %q", cluster, pool, want.relayed), func() error {
		if got, c := f.steeringOf(t, cluster, pool); got.relayed != want.relayed {
			return fmt.Errorf("%+v; %s", got, c)
		}
		return nil
	})
	return agent, relayed
}

var (
	steered   = steering{spec: string(agentv1alpha1.SteeringEnabled), condition: "True " + agentv1alpha1.ReasonSteered, binding: agentv1alpha1.BindingSteered, relayed: agentv1alpha1.BindingSteered}
	unsteered = steering{spec: string(agentv1alpha1.SteeringDisabled), condition: "absent"}
)

// podRecord is what the test saw of one pod of a pool, through a watch.
type podRecord struct {
	name string
	// added is when the test saw it created, gated whether it was created
	// with the steering gate; released when it saw the gate go.
	added, released time.Time
	gated           bool
	// writes are the events that removed the gate or set or changed the
	// annotation agent.modelplane.ai/steered-to; steeredTo its values.
	writes    int
	steeredTo []string
	node      string
}

// podWatch follows the pods of a pool in a workload cluster's namespace
// default, through one watch, and records each pod's creation, release
// and binding as the test sees them.
type podWatch struct {
	mu   sync.Mutex
	pods map[types.UID]*podRecord
	err  error
}

// watchPods starts a podWatch of the pool's pods; it ends with the test.
func (w *workload) watchPods(t *testing.T, pool string) *podWatch {
	t.Helper()
	l, err := w.api.kube.CoreV1().Pods(v1alpha1.WorkloadNamespace).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wi, err := w.api.kube.CoreV1().Pods(v1alpha1.WorkloadNamespace).Watch(t.Context(), metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	pw := &podWatch{pods: map[types.UID]*podRecord{}}
	go func() {
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				if ev.Type == watch.Error {
					pw.mu.Lock()
					pw.err = fmt.Errorf("watch of pods: %w", kerrors.FromObject(ev.Object))
					pw.mu.Unlock()
				}
				continue
			}
			if p.Spec.NodeSelector[v1alpha1.LabelPool] == pool && ev.Type != watch.Deleted {
				pw.see(p)
			}
		}
	}()
	return pw
}

func (pw *podWatch) see(p *corev1.Pod) {
	now := time.Now()
	pw.mu.Lock()
	defer pw.mu.Unlock()
	r := pw.pods[p.UID]
	if r == nil {
		r = &podRecord{name: p.Name, added: now, gated: gated(p)}
		pw.pods[p.UID] = r
	}
	wrote := false
	if r.gated && r.released.IsZero() && !gated(p) {
		r.released, wrote = now, true
	}
	if v, ok := p.Annotations[agentv1alpha1.AnnotationSteeredTo]; ok && (len(r.steeredTo) == 0 || r.steeredTo[len(r.steeredTo)-1] != v) {
		r.steeredTo, wrote = append(r.steeredTo, v), true
	}
	if wrote {
		r.writes++
	}
	r.node = p.Spec.NodeName
}

// gated is whether the pod carries the steering gate.
func gated(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == agentv1alpha1.SchedulingGate })
}

// of returns the records of the named pods, waiting until the watch has
// seen each.
func (pw *podWatch) of(t *testing.T, names ...string) []podRecord {
	t.Helper()
	return pw.records(t, false, names)
}

// bound returns the records of the named pods, waiting until the watch has
// seen each bound: a test that saw them bound with a GET may be ahead of
// its watch.
func (pw *podWatch) bound(t *testing.T, names ...string) []podRecord {
	t.Helper()
	return pw.records(t, true, names)
}

func (pw *podWatch) records(t *testing.T, bound bool, names []string) []podRecord {
	t.Helper()
	var out []podRecord
	eventually(t, 30*time.Second, fmt.Sprintf("the watch seeing pods %v (bound: %t)", names, bound), func() error {
		pw.mu.Lock()
		defer pw.mu.Unlock()
		if pw.err != nil {
			return pw.err
		}
		byName := map[string]podRecord{}
		for _, r := range pw.pods {
			byName[r.name] = *r
		}
		out = out[:0]
		for _, n := range names {
			r, ok := byName[n]
			if !ok {
				return fmt.Errorf("pod %s not seen", n)
			}
			if bound && r.node == "" {
				return fmt.Errorf("pod %s not seen bound", n)
			}
			out = append(out, r)
		}
		return nil
	})
	return out
}

// podNames are the names of the replicas' pods.
func (w *workload) podNames(t *testing.T, replicas []*unstructured.Unstructured) []string {
	t.Helper()
	var out []string
	for _, r := range replicas {
		for _, p := range w.pods(t, r.GetName()) {
			out = append(out, p.Name)
		}
	}
	return out
}

// checkSteered checks that each pod was created held, released once
// pinned to the node it bound to (agent.modelplane.ai/steered-to set once,
// with the gate's removal), and returns how long each was held as the
// test saw it.
func checkSteered(t *testing.T, records []podRecord) []time.Duration {
	t.Helper()
	var held []time.Duration
	for _, r := range records {
		switch {
		case !r.gated:
			t.Errorf("pod %s was not held at its creation", r.name)
		case r.released.IsZero():
			t.Errorf("pod %s is still held", r.name)
		case r.writes != 1 || len(r.steeredTo) != 1:
			t.Errorf("pod %s was released in %d writes, steered to %q: want one write, one node", r.name, r.writes, r.steeredTo)
		case r.steeredTo[0] == "" || r.steeredTo[0] != r.node:
			t.Errorf("pod %s was steered to %q and bound to %q", r.name, r.steeredTo[0], r.node)
		default:
			held = append(held, r.released.Sub(r.added))
		}
	}
	return held
}

// roundAll rounds durations to the millisecond, for the log.
func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// deleteDeployments deletes ModelDeployments and waits until none of
// their pods is left in the workload cluster.
func (f *fleet) deleteDeployments(t *testing.T, cluster string, names ...string) {
	t.Helper()
	w := f.clusters[cluster]
	var replicas []*unstructured.Unstructured
	for _, n := range names {
		replicas = append(replicas, f.replicas(t, n)...)
		if err := f.cp.c.Delete(t.Context(), harness.Object(apiVersion, "ModelDeployment", namespace, n)); err != nil && !kerrors.IsNotFound(err) {
			t.Fatalf("cannot delete ModelDeployment %s: %v", n, err)
		}
	}
	eventually(t, settle, fmt.Sprintf("the pods of ModelDeployments %v gone from %s", names, cluster), func() error {
		for _, r := range replicas {
			if n := len(w.pods(t, r.GetName())); n > 0 {
				return fmt.Errorf("replica %s has %d pods", r.GetName(), n)
			}
		}
		return nil
	})
}

// ledgerSteered reads the function's debug log for the last "Pool ledger"
// line of a ModelDeployment's calls on a pool, and says whether it
// accounted the pool as steered.
func (f *fleet) ledgerSteered(t *testing.T, deployment, cluster, pool string) (bool, error) {
	t.Helper()
	b, err := os.ReadFile(f.functions[fnScheduler].proc.Log)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for l := range strings.Lines(string(b)) {
		if strings.Contains(l, "Pool ledger") && strings.Contains(l, fmt.Sprintf(`"xr": "%s/%s"`, namespace, deployment)) &&
			strings.Contains(l, fmt.Sprintf(`"cluster": "%s"`, cluster)) && strings.Contains(l, fmt.Sprintf(`"pool": "%s"`, pool)) {
			last = l
		}
	}
	switch {
	case last == "":
		return false, fmt.Errorf("no Pool ledger line of %s on %s/%s in %s", deployment, cluster, pool, f.functions[fnScheduler].proc.Log)
	case strings.Contains(last, `"steered": true`):
		return true, nil
	case strings.Contains(last, `"steered": false`):
		return false, nil
	}
	return false, fmt.Errorf("the Pool ledger line says nothing of steering: %s", last)
}

// checkLedger checks that the function accounted a deployment's pool as
// steered, or not.
func (f *fleet) checkLedger(t *testing.T, deployment, cluster, pool string, want bool) {
	t.Helper()
	got, err := f.ledgerSteered(t, deployment, cluster, pool)
	if err != nil {
		t.Error(err)
		return
	}
	if got != want {
		t.Errorf("the function's last call of %s accounted %s/%s steered %t, want %t", deployment, cluster, pool, got, want)
	}
}

// steeredScenario: with pair steered and kube-scheduler's default profile
// as in wrongGuess, the two 2-GPU replicas' pods are held, decided by best
// fit (ties by node name) and bind to pair-0, one node, as the ledger
// assumed; once pair's report counts them, the 4-GPU replica is placed on
// pair and its pod binds to pair-1, nothing re-placed. Both reports, the PoolObservation's and the
// InferenceCluster's, say binding Steered, and the function accounts pair
// as steered.
func steeredScenario(t *testing.T, f *fleet) { //nolint:thelper // A scenario run by t.Run: its failures are its own lines.
	w := f.clusters["alpha"]
	f.deleteDeployments(t, "alpha", "spread", "whole")
	w.waitPoolObservation(t, "pair", map[int64]int64{4: 2}, settle)
	f.setSteerPools(t, "alpha", "pair")
	agent, relayed := f.waitSteering(t, "alpha", "pair", steered, settle)
	t.Logf("pair steered again: the PoolObservation said Steered %s after the annotation, the InferenceCluster %s after that", agent.Round(100*time.Millisecond), relayed.Round(100*time.Millisecond))

	pw := w.watchPods(t, "pair")
	apply(t, f.cp.c, deployment("steer-two", "alpha", "NVIDIA A10G", 2, 2))
	two := f.waitPlaced(t, "steer-two", 2, "alpha", "pair", settle)
	checkNodes(t, f.waitBound(t, "alpha", two, settle), "pair-0", ": the ledger assumed both 2-GPU pods on one node, pair-0 (best fit, ties by node name)")
	f.checkLedger(t, "steer-two", "alpha", "pair", true)
	// Until pair's report counts steer-two, a report that already shows
	// pair-0 taken charges steer-two's replicas again (the counted rule's
	// safe side), pair-1 with them, and steer-four would go to spare.
	f.waitCounted(t, "alpha", "pair", two)
	apply(t, f.cp.c, deployment("steer-four", "alpha", "NVIDIA A10G", 1, 4))
	four := f.waitPlaced(t, "steer-four", 1, "alpha", "pair", settle)
	if n := f.waitBound(t, "alpha", four, settle)[four[0].GetName()]; n != "pair-1" {
		t.Errorf("the 4-GPU replica bound to %s, want pair-1", n)
	}
	f.checkLedger(t, "steer-four", "alpha", "pair", true)
	all := append(slices.Clone(two), four...)
	held := checkSteered(t, pw.bound(t, w.podNames(t, all)...))
	t.Logf("held, creation to release as the test's watch saw them: %v", roundAll(held))
	f.waitPodsScheduled(t, "True", all, settle)
	if s, c := f.steeringOf(t, "alpha", "pair"); s != steered {
		t.Errorf("pair after its pods bound: %+v; %s", s, c)
	}
	if got := f.replicas(t, "steer-four"); len(got) != 1 || got[0].GetName() != four[0].GetName() || where(got[0]).pool != "pair" {
		t.Errorf("steer-four's replica was re-placed: %v", got)
	}
	if m := w.agent.metric(t, "cluster_agent_steering_decisions_total", `pool="pair"`, `outcome="pinned"`); m < 3 {
		t.Errorf("the agent counts %v pods of pair released pinned, want 3 at least", m)
	}
}

// policyDeleted: the steering policy deleted, the agent no longer reports
// pair Steered (Steering False PolicyNotFound, no binding, in the
// PoolObservation and the InferenceCluster), the function accounts pair
// with its assumedBinding, and a new pod of pair is not held. The policy
// restored by helm upgrade, the agent lists pair again on its Pod.
func policyDeleted(t *testing.T, f *fleet) { //nolint:thelper // A scenario run by t.Run: its failures are its own lines.
	w := f.clusters["alpha"]
	f.deleteDeployments(t, "alpha", "steer-two", "steer-four")
	w.waitPoolObservation(t, "pair", map[int64]int64{4: 2}, settle)
	var policy *unstructured.Unstructured
	for _, u := range w.manifests {
		if u.GetKind() == "MutatingAdmissionPolicy" {
			policy = u
		}
	}
	if policy == nil {
		t.Fatal("the agent's release has no MutatingAdmissionPolicy")
	}
	pw := w.watchPods(t, "pair")
	deleted := time.Now()
	if err := w.api.c.Delete(t.Context(), policy.DeepCopy()); err != nil {
		t.Fatalf("cannot delete MutatingAdmissionPolicy %s: %v", policy.GetName(), err)
	}
	notFound := steering{spec: string(agentv1alpha1.SteeringEnabled), condition: "False " + agentv1alpha1.ReasonPolicyNotFound}
	agent, relayed := f.waitSteering(t, "alpha", "pair", notFound, settle)
	t.Logf("policy deleted: the PoolObservation said PolicyNotFound %s later, the InferenceCluster's binding went %s after that", agent.Round(100*time.Millisecond), relayed.Round(100*time.Millisecond))
	eventually(t, settle, "the agent's Pod listing no pool", func() error {
		if _, pools := w.agentPodReady(t, w.agent); pools != "" {
			return fmt.Errorf("it lists %q", pools)
		}
		return nil
	})

	apply(t, f.cp.c, deployment("unheld", "alpha", "NVIDIA A10G", 1, 2))
	unheld := f.waitPlaced(t, "unheld", 1, "alpha", "pair", settle)
	f.waitBound(t, "alpha", unheld, settle)
	f.checkLedger(t, "unheld", "alpha", "pair", false)
	for _, r := range pw.bound(t, w.podNames(t, unheld)...) {
		if r.gated || r.writes != 0 {
			t.Errorf("pod %s of unheld, created %s after the policy was deleted: held %t, steered to %q", r.name, r.added.Sub(deleted).Round(time.Second), r.gated, r.steeredTo)
		}
	}

	// Restored as the agent's message says for a release installed with
	// Helm v4: helm upgrade, so that the release owns the policy again
	// (Helm v4's uninstall leaves out an object applied by hand).
	f.helm(t, w, "upgrade", relay.AgentReleaseName, f.agentChart(), "--version", harness.ChartVersion, "-n", agentNamespace,
		"--plain-http", "--reuse-values", "--set", "steering.enabled=true", "--server-side=true", "--force-conflicts")
	eventually(t, settle, "the agent's Pod listing pair again", func() error {
		if _, pools := w.agentPodReady(t, w.agent); pools != "pair" {
			return fmt.Errorf("it lists %q", pools)
		}
		return nil
	})
	// unheld's pod bound without the agent's decision within the report
	// period: honest, the pool is not Steered yet.
	eventually(t, 30*time.Second, "pair reported BoundUnsteered, naming unheld's pod", func() error {
		s, c := f.steeringOf(t, "alpha", "pair")
		if s.binding != "" || s.condition != "False "+agentv1alpha1.ReasonBoundUnsteered || !strings.Contains(c, w.podNames(t, unheld)[0]) {
			return fmt.Errorf("%+v; %s", s, c)
		}
		return nil
	})
}

// agentKilled: the agent hangs (SIGSTOP) with pods of pair held: its Pod
// still Ready until its readiness probe has failed three times, it holds
// them, and cannot release them; its Lease runs out. A new agent process
// (and Pod) leads once the Lease has expired, and releases them pinned
// within the stated bound (the Lease's duration, one retry period, one
// window), counted from the hung leader's last renewal. Then two agent
// processes at once: the leader stopped while the pods of a new
// deployment are held and released, the other takes over; no pod is
// steered twice.
func agentKilled(t *testing.T, f *fleet) { //nolint:thelper // A scenario run by t.Run: its failures are its own lines.
	w := f.clusters["alpha"]
	hung := w.agent
	if ready, pools := w.agentPodReady(t, hung); !ready || pools != "pair" {
		t.Fatalf("the agent's Pod %s: Ready %t, pools %q; want Ready, pair", hung.pod, ready, pools)
	}
	pw := w.watchPods(t, "pair")
	// The pods are made only once the agent hangs: alpha's
	// kube-controller-manager is stopped until then.
	w.controllers.Stop(t)
	apply(t, f.cp.c, deployment("held", "alpha", "NVIDIA A10G", 2, 1))
	replicas := f.waitPlaced(t, "held", 2, "alpha", "pair", settle)
	f.waitDeployments(t, "alpha", replicas)

	if err := hung.proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hung.proc.Signal(syscall.SIGCONT) })
	stopped := time.Now()
	lease := w.lease(t)
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != hung.pod {
		t.Fatalf("the Lease is held by %v, not the hung agent %s", lease.Spec.HolderIdentity, hung.pod)
	}
	renewed := lease.Spec.RenewTime.Time
	next := w.startAgent(t, f)
	w.startControllers(t, f)
	f.waitPods(t, w, replicas)
	names := w.podNames(t, replicas)
	for _, r := range pw.of(t, names...) {
		if !r.gated {
			t.Fatalf("pod %s was created %s after the agent hung, not held: its Pod turned unready first (its readiness probe fails after 10 to 15s)", r.name, r.added.Sub(stopped).Round(100*time.Millisecond))
		}
	}
	eventually(t, time.Minute, "the hung agent's Pod unready", func() error {
		if ready, _ := w.agentPodReady(t, hung); ready {
			return errors.New("still Ready")
		}
		return nil
	})
	t.Logf("the hung agent's Pod turned unready %s after it hung", time.Since(stopped).Round(time.Second))
	w.stopAgent(t, hung, true)

	nodes := f.waitBound(t, "alpha", replicas, settle)
	records := pw.bound(t, names...)
	checkSteered(t, records)
	l := w.lease(t)
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != next.pod || l.Spec.AcquireTime == nil {
		t.Fatalf("the Lease is held by %v, not the new agent %s", l.Spec.HolderIdentity, next.pod)
	}
	led := l.Spec.AcquireTime.Time
	t.Logf("the new agent led %s after the hung leader's last renewal", led.Sub(renewed).Round(100*time.Millisecond))
	for _, r := range records {
		took := r.released.Sub(renewed)
		t.Logf("pod %s: created %s after the hang, held %s, released %s after the hung leader's last renewal (%s after the new agent led), bound to %s",
			r.name, r.added.Sub(stopped).Round(100*time.Millisecond), r.released.Sub(r.added).Round(100*time.Millisecond), took.Round(100*time.Millisecond),
			r.released.Sub(led).Round(100*time.Millisecond), r.node)
		if took > newLeaderBound+boundMargin {
			t.Errorf("pod %s was released %s after the hung leader's last renewal: the stated bound is %s (+%s margin)", r.name, took.Round(100*time.Millisecond), newLeaderBound, boundMargin)
		}
		if d := r.released.Sub(led); d > steeringWindow+boundMargin {
			t.Errorf("pod %s was released %s after the new agent led, not in its first round", r.name, d.Round(100*time.Millisecond))
		}
	}
	// Best fit: the node unheld's pod left 2 GPUs free on, whichever
	// kube-scheduler picked; both nodes free (the scenario run alone), the
	// first by name.
	want := "pair-0"
	if u := f.replicas(t, "unheld"); len(u) == 1 {
		if ps := w.pods(t, u[0].GetName()); len(ps) == 1 && ps[0].Spec.NodeName != "" {
			want = ps[0].Spec.NodeName
		}
	}
	checkNodes(t, nodes, want, " (best fit)")
}

// waitDeployments waits until each replica's engine Deployment exists in
// the workload cluster.
func (f *fleet) waitDeployments(t *testing.T, cluster string, replicas []*unstructured.Unstructured) {
	t.Helper()
	w := f.clusters[cluster]
	eventually(t, settle, fmt.Sprintf("the Deployments of %d replicas in %s", len(replicas), cluster), func() error {
		for _, r := range replicas {
			d := &appsv1.Deployment{}
			if err := w.api.c.Get(t.Context(), types.NamespacedName{Namespace: v1alpha1.WorkloadNamespace, Name: v1alpha1.WorkloadName(r.GetName(), "main")}, d); err != nil {
				return err
			}
		}
		return nil
	})
}

// lease reads the agent's leader election Lease.
func (w *workload) lease(t *testing.T) *coordinationv1.Lease {
	t.Helper()
	l, err := w.api.kube.CoordinationV1().Leases(w.agentPod.Namespace).Get(t.Context(), "cluster-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("cannot read the agent's Lease: %v", err)
	}
	return l
}

// handOver: two agent processes at once; the leader is stopped (SIGTERM,
// as a Pod's deletion does) as the pods of a new deployment are created
// and held, and the other leads. Each pod held is released once, by one
// of them, pinned to the node it binds to; a pod created while neither
// listed pair on its Pod is not held at all.
func handOver(t *testing.T, f *fleet) { //nolint:thelper // A scenario run by t.Run: its failures are its own lines.
	w := f.clusters["alpha"]
	leader := w.agent
	standby := w.startAgent(t, f)
	eventually(t, time.Minute, "the second agent's Pod Ready", func() error {
		if ready, _ := w.agentPodReady(t, standby); !ready {
			return errors.New("not Ready")
		}
		return nil
	})
	pw := w.watchPods(t, "pair")
	w.controllers.Stop(t)
	// Two 1-GPU replicas fit pair's free node (4 GPUs) even while the
	// function still charges held's replicas beside the report that
	// counts them already (until the report's observedAt passes their
	// PodsScheduled): no need to wait for that.
	apply(t, f.cp.c, deployment("handover", "alpha", "NVIDIA A10G", 2, 1))
	replicas := f.waitPlaced(t, "handover", 2, "alpha", "pair", settle)
	f.waitDeployments(t, "alpha", replicas)
	w.startControllers(t, f)
	eventually(t, settle, "the first pod of handover created", func() error {
		if len(w.podNames(t, replicas)) == 0 {
			return errors.New("none yet")
		}
		return nil
	})
	w.stopAgent(t, leader, false)
	f.waitBound(t, "alpha", replicas, settle)
	var held, byStandby int
	var longest time.Duration
	for _, r := range pw.bound(t, w.podNames(t, replicas)...) {
		if r.gated && !r.released.IsZero() {
			longest = max(longest, r.released.Sub(r.added))
		}
		switch {
		case !r.gated && r.writes != 0:
			t.Errorf("pod %s was not held, and was written as released %d times: %q", r.name, r.writes, r.steeredTo)
		case !r.gated:
		case r.writes != 1 || len(r.steeredTo) != 1:
			t.Errorf("pod %s was released in %d writes, steered to %q: want one write, one node", r.name, r.writes, r.steeredTo)
		case r.steeredTo[0] != "" && r.steeredTo[0] != r.node:
			t.Errorf("pod %s was steered to %q and bound to %q", r.name, r.steeredTo[0], r.node)
		default:
			held++
		}
	}
	for _, outcome := range []string{"pinned", "unpinned", "timeout"} {
		byStandby += int(standby.metric(t, "cluster_agent_steering_decisions_total", `pool="pair"`, `outcome="`+outcome+`"`))
	}
	if l := w.lease(t); l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != standby.pod {
		t.Errorf("the Lease is held by %v, not the agent that stood by, %s", l.Spec.HolderIdentity, standby.pod)
	}
	t.Logf("of handover's 2 pods, %d were held and each released once, %d of them by the agent that took over; the longest held %s", held, byStandby, longest.Round(100*time.Millisecond))
	if byStandby > held {
		t.Errorf("the agent that took over counts %d releases of pair's pods, more than the %d held", byStandby, held)
	}
}
