package fleet

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

const (
	// namespace holds the test's ModelDeployments.
	namespace = "fleet"
	// replaceAfter is the ModelDeployment Composition's
	// replaceUnscheduledAfter: 1m, the least the function accepts
	// (docs/spec.md#function-input), rather than 15m.
	replaceAfter = time.Minute
	// settle is how long Crossplane, provider-kubernetes, the
	// controllers, kube-scheduler and the agent get to act on a change
	// they watch.
	settle = 2 * time.Minute
	// callAgain is the longest a ModelDeployment waits for a call when
	// nothing it watches changed: function-sdk-go's one-minute TTL, 10%
	// of jitter, and time to reconcile.
	callAgain = time.Minute + 6*time.Second + 30*time.Second
)

// TestLiveFleet runs the scenarios of a live fleet, one fleet started
// once for all, each scenario starting from where the one before left it.
// The ModelDeployment Composition assumes LeastFree: it predicts beta's
// MostAllocated profile, and mispredicts alpha's default one, which
// spreads pods that request nothing by pod count.
func TestLiveFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: the live fleet takes minutes to start")
	}
	f := startFleet(t)
	scenarios := []struct {
		name string
		run  func(t *testing.T, f *fleet)
	}{
		{"reports flow: a pool's histogram reaches the InferenceCluster within seconds of a change in the workload cluster", reportsFlow},
		{"two deployments scale at once onto one pool: every pod binds, none Pending", scaleAtOnce},
		{"four 1-GPU replicas on one 4-GPU node: all placed, bound, counted by the next report, nothing charged twice", fourOnOne},
		{"verify the install: each step of docs/production.md's checklist prints what it says", verifyInstall},
		{"the agent stops: its reports age, whole-node accounting places nothing more; restarted, free devices again", agentStops},
		{"a wrong guess: a replica kube-scheduler cannot bind stays Pending, PodsScheduled False, then re-placing moves it", wrongGuess},
		{"steered: the same replicas on a steered pool bind where the ledger assumed, reported Steered, nothing re-placed", steeredScenario},
		{"the steering policy deleted: no pod held, the report no longer Steered, the function falls back to its assumedBinding", policyDeleted},
		{"the agent hangs with pods held: a new agent leads and releases them pinned within the stated bound", agentKilled},
		{"two agents hand over while pods are held: none steered twice", handOver},
		{"a pinned pod's node loses its devices before it binds: the agent deletes it after the pin timeout, its new pod is steered to the other node and binds", pinTimeout},
		{"a node of a placed replica dies: its pod evicted and replaced on the pool's other node, the report without it; out-of-service, then back", nodeDies},
		{"rolled back to v0.3.1's package: v0.3.1's Compositions, the relay's objects gone from the workload clusters, nothing deleted in the control plane", rollBack},
		{"uninstalled in the documented order: the Functions, then each cluster's agent and its CRDs; nothing in the control plane deleted or left waiting", uninstall},
	}
	for _, s := range scenarios {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, f) }) {
			return
		}
	}
}

// deployment is a ModelDeployment of one Standalone engine, main, whose
// member claims gpus GPUs of a product, on the cluster named.
func deployment(name, cluster, product string, replicas, gpus int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": "ModelDeployment",
		"metadata": map[string]any{"namespace": namespace, "name": name},
		"spec": map[string]any{
			"replicas": replicas,
			"template": map[string]any{"spec": map[string]any{
				"clusterSelector": map[string]any{"matchLabels": map[string]any{clusterLabel: cluster}},
				"engines": []any{map[string]any{"name": "main", "members": []any{map[string]any{
					"role": "Standalone",
					"nodeSelector": map[string]any{"devices": []any{map[string]any{
						"name": "gpu", "count": gpus,
						"selectors": []any{map[string]any{"cel": `device.attributes["gpu.nvidia.com"].productName == "` + product + `"`}},
					}}},
					"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
						"name": "engine", "image": "vllm/vllm-openai:v0.23.0", "args": []any{"--model=Qwen/Qwen3-8B"},
					}}}},
				}}}},
			}},
		},
	}}
}

// scale sets a ModelDeployment's replicas through its scale subresource.
func (f *fleet) scale(t *testing.T, name string, replicas int) {
	t.Helper()
	xr := harness.Object(apiVersion, "ModelDeployment", namespace, name)
	if err := f.cp.c.SubResource("scale").Patch(t.Context(), xr, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas))); err != nil {
		t.Fatalf("cannot scale ModelDeployment %s to %d: %v", name, replicas, err)
	}
}

// placed is where a ModelReplica is: its cluster and its member's pool.
type placed struct{ name, cluster, pool string }

// replicas are a deployment's ModelReplicas, not being deleted, by name.
func (f *fleet) replicas(t *testing.T, deployment string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, u := range harness.List(t, f.cp.c, apiVersion, "ModelReplica", client.InNamespace(namespace), client.MatchingLabels{"modelplane.ai/deployment": deployment}) {
		if u.GetDeletionTimestamp() == nil {
			out = append(out, u.DeepCopy())
		}
	}
	slices.SortFunc(out, func(a, b *unstructured.Unstructured) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out
}

func where(u *unstructured.Unstructured) placed {
	p := placed{name: u.GetName()}
	p.cluster, _, _ = unstructured.NestedString(u.Object, "spec", "clusterName")
	engines, _, _ := unstructured.NestedSlice(u.Object, "spec", "engines")
	if len(engines) > 0 {
		members, _, _ := unstructured.NestedSlice(engines[0].(map[string]any), "members")
		if len(members) > 0 {
			p.pool, _ = members[0].(map[string]any)["nodePoolName"].(string)
		}
	}
	return p
}

// waitPlaced waits until a deployment has n ModelReplicas, each on the
// cluster and pool, and returns them.
func (f *fleet) waitPlaced(t *testing.T, deployment string, n int, cluster, pool string, timeout time.Duration) []*unstructured.Unstructured {
	t.Helper()
	var rs []*unstructured.Unstructured
	eventually(t, timeout, fmt.Sprintf("%d ModelReplicas of %s on %s/%s", n, deployment, cluster, pool), func() error {
		rs = f.replicas(t, deployment)
		var got []placed
		for _, r := range rs {
			got = append(got, where(r))
		}
		if len(rs) != n {
			return fmt.Errorf("%d ModelReplicas: %v; %s", len(rs), got, describe(f.xr(t, deployment), "ReplicasScheduled"))
		}
		for _, p := range got {
			if p.cluster != cluster || p.pool != pool {
				return fmt.Errorf("ModelReplicas %v", got)
			}
		}
		return nil
	})
	return rs
}

func (f *fleet) xr(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	return harness.Get(t, f.cp.c, apiVersion, "ModelDeployment", namespace, name)
}

// pods are a replica's engine pods in its workload cluster: v0.3's, by
// the label its Deployment selects them by; those being deleted left out.
func (w *workload) pods(t *testing.T, replica string) []corev1.Pod {
	t.Helper()
	l := &corev1.PodList{}
	if err := w.api.c.List(t.Context(), l, client.InNamespace(v1alpha1.WorkloadNamespace),
		client.MatchingLabels{v1alpha1.LabelWorkload: v1alpha1.WorkloadName(replica, "main")}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// waitBound waits until each replica has one pod, bound to a node, and
// returns the nodes by replica.
func (f *fleet) waitBound(t *testing.T, cluster string, replicas []*unstructured.Unstructured, timeout time.Duration) map[string]string {
	t.Helper()
	w := f.clusters[cluster]
	nodes := map[string]string{}
	eventually(t, timeout, fmt.Sprintf("the pods of %d replicas bound in %s", len(replicas), cluster), func() error {
		for _, r := range replicas {
			pods := w.pods(t, r.GetName())
			if len(pods) != 1 {
				return fmt.Errorf("replica %s has %d pods", r.GetName(), len(pods))
			}
			if pods[0].Spec.NodeName == "" {
				return fmt.Errorf("pod %s of replica %s is not bound: %s", pods[0].Name, r.GetName(), podScheduled(pods[0]))
			}
			nodes[r.GetName()] = pods[0].Spec.NodeName
		}
		return nil
	})
	return nodes
}

func podScheduled(p corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return fmt.Sprintf("PodScheduled %s %s: %s", c.Status, c.Reason, c.Message)
		}
	}
	return "no PodScheduled condition"
}

// waitPodsScheduled waits until every replica's relayed PodsScheduled has
// a status, and checks that a True one is not stamped earlier than the
// agent's ReplicaObservation (docs/spec.md#podsscheduled) once the relay
// has had settle to read the agent's time: a relay cannot follow a newer
// time of the agent (pods unbound and bound again) before its watch
// delivers it, but must then hold the replica False or stamp it again.
func (f *fleet) waitPodsScheduled(t *testing.T, status string, replicas []*unstructured.Unstructured, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("PodsScheduled %s on %d replicas", status, len(replicas)), func() error {
		for _, r := range replicas {
			got := harness.Get(t, f.cp.c, apiVersion, "ModelReplica", namespace, r.GetName())
			if s := conditionString(got, "PodsScheduled", "status"); s != status {
				return fmt.Errorf("replica %s: %s", r.GetName(), describe(got, "PodsScheduled"))
			}
		}
		return nil
	})
	if status != "True" {
		return
	}
	for _, r := range replicas {
		got := harness.Get(t, f.cp.c, apiVersion, "ModelReplica", namespace, r.GetName())
		cluster := where(got).cluster
		ro := harness.Get(t, f.clusters[cluster].api.c, agentAPIVersion, "ReplicaObservation", v1alpha1.WorkloadNamespace, r.GetName())
		relayed, agent := conditionTime(got, "PodsScheduled"), conditionTime(ro, "PodsScheduled")
		if conditionString(got, "PodsScheduled", "status") != "True" || !relayed.Before(agent) {
			continue
		}
		took := eventually(t, settle, fmt.Sprintf("replica %s's PodsScheduled True no earlier than the agent's %s", r.GetName(), agent), func() error {
			got := harness.Get(t, f.cp.c, apiVersion, "ModelReplica", namespace, r.GetName())
			if conditionString(got, "PodsScheduled", "status") == "True" && conditionTime(got, "PodsScheduled").Before(agent) {
				return fmt.Errorf("%s", describe(got, "PodsScheduled"))
			}
			return nil
		})
		t.Logf("replica %s: PodsScheduled True since %s (%s), before the agent's %s (%s), was held or stamped again %s later",
			r.GetName(), relayed, describe(got, "PodsScheduled"), agent, describe(ro, "PodsScheduled"), took.Round(time.Second))
	}
}

// poolReport is a pool's entry of an InferenceCluster's status.gpuPools.
func (f *fleet) poolReport(t *testing.T, cluster, pool string) map[string]any {
	t.Helper()
	pools, _, _ := unstructured.NestedSlice(f.inferenceCluster(t, cluster).Object, "status", "gpuPools")
	for _, p := range pools {
		if m := p.(map[string]any); m["name"] == pool {
			return m
		}
	}
	return nil
}

// freeByNode reads a report's histogram as how many nodes have each free
// count of gpu: {4: 1} is one node with 4 free.
func freeByNode(report map[string]any) map[int64]int64 {
	out := map[int64]int64{}
	buckets, _ := report["nodesByFreeDevices"].([]any)
	for _, b := range buckets {
		m, _ := b.(map[string]any)
		var free int64
		devices, _ := m["free"].([]any)
		for _, d := range devices {
			if dm, _ := d.(map[string]any); dm["name"] == "gpu" {
				free = number(dm["count"])
			}
		}
		out[free] += number(m["nodes"])
	}
	return out
}

// waitReport waits until a pool's report on the InferenceCluster has the
// histogram want, and returns when it did.
func (f *fleet) waitReport(t *testing.T, cluster, pool string, want map[int64]int64, timeout time.Duration) time.Time {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("InferenceCluster %s pool %s reporting %v (free GPUs: nodes)", cluster, pool, want), func() error {
		r := f.poolReport(t, cluster, pool)
		if _, ok := r["observedAt"]; !ok {
			return fmt.Errorf("pool %s has no observedAt: %v", pool, r)
		}
		if got := freeByNode(r); !sameHistogram(got, want) {
			return fmt.Errorf("histogram %v of report %v", got, r)
		}
		return nil
	})
	return time.Now()
}

// number reads a JSON number as decoded, whole.
func number(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return -1
}

func sameHistogram(a, b map[int64]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// poolObservationFree waits until a PoolObservation's own status has the
// histogram want, and returns when it did.
func (w *workload) waitPoolObservation(t *testing.T, pool string, want map[int64]int64, timeout time.Duration) time.Time {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("PoolObservation %s of %s reporting %v", pool, w.spec.name, want), func() error {
		po := harness.Get(t, w.api.c, agentAPIVersion, "PoolObservation", "", pool)
		if po == nil {
			return errors.New("no PoolObservation")
		}
		st, _, _ := unstructured.NestedMap(po.Object, "status")
		if got := freeByNode(st); !sameHistogram(got, want) {
			return fmt.Errorf("histogram %v; %s", got, describe(po, "Synced"))
		}
		return nil
	})
	return time.Now()
}

// foreignPod creates, in a workload cluster, a pod of another team's:
// not Modelplane's, claiming gpus GPUs on a pool through a claim of its
// own.
func (w *workload) foreignPod(t *testing.T, name, pool string, gpus int64) {
	t.Helper()
	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: gpuDriver, Count: gpus, AllocationMode: resourcev1.DeviceAllocationModeExactCount},
		}}}},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:   map[string]string{poolLabel: pool},
			Tolerations:    []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers:     []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: new(name)}},
		},
	}
	for _, o := range []client.Object{claim, pod} {
		if err := w.api.c.Create(t.Context(), o); err != nil {
			t.Fatalf("cannot create %s in %s: %v", name, w.spec.name, err)
		}
	}
}

// deleteForeign deletes another team's pod and its claim, at once.
func (w *workload) deleteForeign(t *testing.T, name string) {
	t.Helper()
	for _, o := range []client.Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}},
		&resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}},
	} {
		if err := w.api.c.Delete(t.Context(), o, client.GracePeriodSeconds(0)); err != nil {
			t.Fatalf("cannot delete %s in %s: %v", name, w.spec.name, err)
		}
	}
}

// reportsFlow: a pod of another team's takes one of octo's 8 GPUs and
// gives it back; each time the InferenceCluster's report follows within
// seconds.
func reportsFlow(t *testing.T, f *fleet) { //nolint:thelper // A scenario run by t.Run: its failures are its own lines.
	w := f.clusters["beta"]
	w.waitPoolObservation(t, "octo", map[int64]int64{8: 1}, settle)
	f.waitReport(t, "beta", "octo", map[int64]int64{8: 1}, settle)
	// What kubectl get inferenceclusters prints: both pools reported.
	if got := f.cp.printed(t, apiVersion, "inferenceclusters", "beta"); got["POOLS"] != "2" || got["REPORTED"] != "2" || got["OLDEST-REPORT"] == "<nil>" || got["OLDEST-REPORT"] == "" {
		t.Errorf("kubectl get inferencecluster beta prints POOLS %s REPORTED %s OLDEST-REPORT %s, want 2, 2 and a time (the row: %v)", got["POOLS"], got["REPORTED"], got["OLDEST-REPORT"], got)
	}
	for _, step := range []struct {
		what string
		do   func()
		want map[int64]int64
	}{
		{"a pod claiming 1 GPU binds", func() { w.foreignPod(t, "other-team", "octo", 1) }, map[int64]int64{7: 1}},
		{"it is deleted", func() { w.deleteForeign(t, "other-team") }, map[int64]int64{8: 1}},
	} {
		start := time.Now()
		step.do()
		agent := w.waitPoolObservation(t, "octo", step.want, 30*time.Second)
		relayed := f.waitReport(t, "beta", "octo", step.want, 30*time.Second)
		// What kubectl get poolobservations prints: the pool's free and
		// total GPUs.
		var free int64
		for perNode, nodes := range step.want {
			free += perNode * nodes
		}
		if got := w.api.printed(t, agentAPIVersion, "poolobservations", "octo"); got["FREE"] != fmt.Sprint(free) || got["TOTAL"] != "8" {
			t.Errorf("%s: kubectl get poolobservation octo prints FREE %s TOTAL %s, want %d of 8 (the row: %v)", step.what, got["FREE"], got["TOTAL"], free, got)
		}
		t.Logf("%s: the agent's PoolObservation reported it %s after the change, the InferenceCluster %s after that (%s in all)",
			step.what, agent.Sub(start).Round(100*time.Millisecond), relayed.Sub(agent).Round(100*time.Millisecond), relayed.Sub(start).Round(100*time.Millisecond))
		if all := relayed.Sub(start); all > 20*time.Second {
			t.Errorf("%s: the InferenceCluster's report followed %s later, not within seconds", step.what, all)
		}
	}
}

// scaleAtOnce: two deployments of 1-GPU replicas scale from 1 to 4 at the
// same moment onto beta's one 8-GPU node: the assumed placements keep
// their calls from both taking the same GPUs, and every pod binds.
func scaleAtOnce(t *testing.T, f *fleet) { //nolint:thelper // A scenario run by t.Run: its failures are its own lines.
	for _, d := range []string{"scale-a", "scale-b"} {
		apply(t, f.cp.c, deployment(d, "beta", "NVIDIA L40S", 1, 1))
	}
	for _, d := range []string{"scale-a", "scale-b"} {
		f.waitBound(t, "beta", f.waitPlaced(t, d, 1, "beta", "octo", settle), settle)
	}
	f.scale(t, "scale-a", 4)
	f.scale(t, "scale-b", 4)
	var all []*unstructured.Unstructured
	for _, d := range []string{"scale-a", "scale-b"} {
		all = append(all, f.waitPlaced(t, d, 4, "beta", "octo", settle)...)
	}
	f.waitBound(t, "beta", all, settle)
	f.waitPodsScheduled(t, "True", all, settle)
	f.waitReport(t, "beta", "octo", map[int64]int64{0: 1}, settle)
	for _, d := range []string{"scale-a", "scale-b"} {
		if got := conditionString(f.xr(t, d), "ReplicasScheduled", "message"); !strings.HasPrefix(got, "Scheduled 4 of 4 replicas") {
			t.Errorf("ModelDeployment %s: %s", d, describe(f.xr(t, d), "ReplicasScheduled"))
		}
	}
}

// fourOnOne: four 1-GPU replicas on alpha's pool of one 4-GPU node, which
// whole-node accounting would give one.
func fourOnOne(t *testing.T, f *fleet) { //nolint:thelper // A scenario run by t.Run: its failures are its own lines.
	beyond := func() float64 {
		return metricAt(t, f.functions[fnScheduler].metrics, "fleet-scheduler", "fleet_scheduler_replicas_beyond_whole_node_total")
	}
	saved := beyond()
	apply(t, f.cp.c, deployment("four", "alpha", "NVIDIA L4", 4, 1))
	rs := f.waitPlaced(t, "four", 4, "alpha", "quad", settle)
	checkNodes(t, f.waitBound(t, "alpha", rs, settle), "quad-0", "")
	f.checkClaimsAllocated(t, "alpha", rs)
	f.waitPodsScheduled(t, "True", rs, settle)
	at := f.waitReport(t, "alpha", "quad", map[int64]int64{0: 1}, settle)
	f.waitCounted(t, "alpha", "quad", rs)
	t.Logf("the report counted the four %s after their pods were bound", time.Since(at).Round(time.Second))
	if x := f.xr(t, "four"); conditionString(x, "CapacityObserved", "status") != "True" {
		t.Errorf("%s", describe(x, "CapacityObserved"))
	}

	// Nothing charged twice: with two scaled away and the report showing
	// their GPUs free, two more fit again. Counting the histogram's four
	// and charging the replicas as well would fit none.
	f.scale(t, "four", 2)
	f.waitPlaced(t, "four", 2, "alpha", "quad", settle)
	f.waitReport(t, "alpha", "quad", map[int64]int64{2: 1}, settle)
	scaled := time.Now()
	f.scale(t, "four", 4)
	// Two calls at most: one run placed the third replica at once and the
	// fourth only at the next call, once a report counted the third.
	rs = f.waitPlaced(t, "four", 4, "alpha", "quad", 2*callAgain)
	t.Logf("scaled from 2 to 4: all four placed again %s later", time.Since(scaled).Round(time.Second))
	f.waitBound(t, "alpha", rs, settle)
	f.waitPodsScheduled(t, "True", rs, settle)
	f.waitReport(t, "alpha", "quad", map[int64]int64{0: 1}, settle)

	// What the function says it saved: whole nodes would have placed one
	// of the first four (three beyond), and none of the two placed again
	// beside the two kept (two beyond), each counted once however many
	// calls place it before Crossplane shows it composed. More if the
	// function dropped a replica and placed it again.
	saved = beyond() - saved
	t.Logf("fleet_scheduler_replicas_beyond_whole_node_total rose by %v", saved)
	if saved < 5 {
		t.Errorf("fleet_scheduler_replicas_beyond_whole_node_total rose by %v, want at least 5: 3 of the first four, 2 of the two placed again", saved)
	}
}

// waitCounted waits until a pool's report counts the replicas: each
// scheduled strictly before the pool's observedAt
// (docs/spec.md#the-counted-rule), so that the function no longer charges
// them beside the report.
func (f *fleet) waitCounted(t *testing.T, cluster, pool string, replicas []*unstructured.Unstructured) {
	t.Helper()
	eventually(t, 90*time.Second, pool+"'s observedAt past every replica's PodsScheduled", func() error {
		observedAt, err := time.Parse(time.RFC3339, fmt.Sprint(f.poolReport(t, cluster, pool)["observedAt"]))
		if err != nil {
			return err
		}
		for _, r := range replicas {
			got := harness.Get(t, f.cp.c, apiVersion, "ModelReplica", namespace, r.GetName())
			if conditionString(got, "PodsScheduled", "status") != "True" {
				return fmt.Errorf("replica %s: %s", r.GetName(), describe(got, "PodsScheduled"))
			}
			if lt := conditionTime(got, "PodsScheduled"); !lt.Before(observedAt) {
				return fmt.Errorf("replica %s scheduled at %s, observedAt %s", r.GetName(), lt, observedAt)
			}
		}
		return nil
	})
}

// checkNodes checks that each replica's pod bound to the node want; why
// says why there.
func checkNodes(t *testing.T, nodes map[string]string, want, why string) {
	t.Helper()
	for r, n := range nodes {
		if n != want {
			t.Errorf("replica %s bound to %s, not %s%s", r, n, want, why)
		}
	}
}

// checkClaimsAllocated checks that each replica's pod's claim, made from
// its template, is allocated one GPU of its node, and no GPU twice.
func (f *fleet) checkClaimsAllocated(t *testing.T, cluster string, replicas []*unstructured.Unstructured) {
	t.Helper()
	w := f.clusters[cluster]
	seen := map[string]string{}
	for _, r := range replicas {
		pods := w.pods(t, r.GetName())
		if len(pods) != 1 || len(pods[0].Status.ResourceClaimStatuses) != 1 || pods[0].Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			t.Errorf("replica %s: want one pod with a claim made from its template, got %+v", r.GetName(), pods)
			continue
		}
		claim := &resourcev1.ResourceClaim{}
		if err := w.api.c.Get(t.Context(), types.NamespacedName{Namespace: pods[0].Namespace, Name: *pods[0].Status.ResourceClaimStatuses[0].ResourceClaimName}, claim); err != nil {
			t.Errorf("replica %s: %v", r.GetName(), err)
			continue
		}
		if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
			t.Errorf("replica %s: claim %s not allocated one device: %+v", r.GetName(), claim.Name, claim.Status.Allocation)
			continue
		}
		d := claim.Status.Allocation.Devices.Results[0]
		if other, ok := seen[d.Pool+"/"+d.Device]; ok {
			t.Errorf("replicas %s and %s hold the same GPU %s/%s", other, r.GetName(), d.Pool, d.Device)
		}
		seen[d.Pool+"/"+d.Device] = r.GetName()
	}
}

// agentStops: alpha's agent stops; its reports, backdated as if it had
// stopped six minutes ago, go stale, and whole-node accounting places
// nothing more on quad, where two GPUs are free; started again, its fresh
// report places the waiting replica.
func agentStops(t *testing.T, f *fleet) { //nolint:thelper // A scenario run by t.Run: its failures are its own lines.
	w := f.clusters["alpha"]
	w.stopAgent(t, w.agent, false)
	stoppedAt := time.Now().Add(-6 * time.Minute).UTC().Truncate(time.Second).Format(time.RFC3339)
	for _, p := range w.spec.pools {
		patchStatus(t, w.api.c, harness.Object(agentAPIVersion, "PoolObservation", "", p.name), map[string]any{"observedAt": stoppedAt})
	}
	eventually(t, settle, "the backdated reports on InferenceCluster alpha", func() error {
		if got := fmt.Sprint(f.poolReport(t, "alpha", "quad")["observedAt"]); got != stoppedAt {
			return fmt.Errorf("quad observedAt %s", got)
		}
		return nil
	})
	f.scale(t, "four", 2)
	rs := f.waitPlaced(t, "four", 2, "alpha", "quad", settle)
	eventually(t, settle, "the scaled-away pods gone", func() error {
		var n int
		for _, r := range f.replicas(t, "four") {
			n += len(w.pods(t, r.GetName()))
		}
		l := &corev1.PodList{}
		if err := w.api.c.List(t.Context(), l, client.InNamespace(v1alpha1.WorkloadNamespace)); err != nil {
			return err
		}
		bound := 0
		for _, p := range l.Items {
			if p.Spec.NodeName == "quad-0" && p.DeletionTimestamp == nil {
				bound++
			}
		}
		if bound != 2 {
			return fmt.Errorf("%d pods on quad-0", bound)
		}
		return nil
	})
	// The agent is silent: the relay no longer vouches for the replicas'
	// pods, neither counted nor stuck.
	f.waitPodsScheduled(t, "Unknown", rs, callAgain)

	apply(t, f.cp.c, deployment("late", "alpha", "NVIDIA L4", 1, 1))
	eventually(t, settle, "ModelDeployment late accounted by whole nodes, nothing placed", func() error {
		x := f.xr(t, "late")
		if c := describe(x, "CapacityObserved"); !strings.Contains(c, "False WholeNodeFallback") || !strings.Contains(c, "alpha/quad (observation stale for ") {
			return fmt.Errorf("%s", c)
		}
		if c := describe(x, "ReplicasScheduled"); !strings.Contains(c, "False InsufficientCapacity: 0 of 1 replicas scheduled") {
			return fmt.Errorf("%s", c)
		}
		return nil
	})
	if n := len(f.replicas(t, "late")); n != 0 {
		t.Errorf("ModelDeployment late has %d replicas on a pool of stale reports", n)
	}

	started := time.Now()
	w.startAgent(t, f)
	late := f.waitPlaced(t, "late", 1, "alpha", "quad", callAgain+settle)
	t.Logf("the agent started again: ModelDeployment late placed %s later", time.Since(started).Round(time.Second))
	f.waitBound(t, "alpha", late, settle)
	f.waitPodsScheduled(t, "True", append(rs, late...), settle)
	if x := f.xr(t, "late"); conditionString(x, "CapacityObserved", "status") != "True" {
		t.Errorf("%s", describe(x, "CapacityObserved"))
	}
}

// wrongGuess: with alpha's kube-scheduler stopped, spread (two 2-GPU
// replicas) and then big (one 4-GPU replica, ModelDeployment whole) are
// placed on pair, two nodes of 4 GPUs: the ledger, assuming LeastFree,
// puts both of spread's pods on one node and big on the other. Started
// again, kube-scheduler's default profile spreads spread's pods over both
// nodes (they request nothing, so it scores by pod count, which pair's
// lean nodes make tell: gpuClasses), and big's pod cannot bind. After
// replaceUnscheduledAfter, re-placing moves big to spare. big's pod is
// created only once spread's are bound (alpha's
// kube-controller-manager is stopped meanwhile): scheduled first, it
// would take a node whole and make LeastFree's guess come true.
//
// pair is steered since the fleet started: its annotation is removed
// first, and the agent stops holding pair's pods.
func wrongGuess(t *testing.T, f *fleet) { //nolint:thelper // A scenario run by t.Run: its failures are its own lines.
	w := f.clusters["alpha"]
	began := time.Now()
	f.waitSteering(t, "alpha", "pair", steered, settle)
	// The pools no InferenceCluster names: nothing of steering.
	for _, p := range [][2]string{{"alpha", "quad"}, {"alpha", "spare"}, {"beta", "octo"}} {
		if s, c := f.steeringOf(t, p[0], p[1]); s != unsteered {
			t.Errorf("pool %s of %s, not named for steering: %+v; %s", p[1], p[0], s, c)
		}
	}
	f.setSteerPools(t, "alpha", "")
	f.waitSteering(t, "alpha", "pair", unsteered, settle)
	eventually(t, settle, "the agent's Pod listing no pool", func() error {
		if _, pools := w.agentPodReady(t, w.agent); pools != "" {
			return fmt.Errorf("it lists %q", pools)
		}
		return nil
	})
	t.Logf("pair steered, then not: %s", time.Since(began).Round(100*time.Millisecond))

	w.scheduler.Stop(t)
	apply(t, f.cp.c, deployment("spread", "alpha", "NVIDIA A10G", 2, 2))
	spread := f.waitPlaced(t, "spread", 2, "alpha", "pair", settle)
	f.waitPods(t, w, spread)
	// kube-scheduler waits for a pod's claim, which the resourceclaim
	// controller creates from its template.
	eventually(t, settle, "spread's pods' claims created", func() error {
		for _, r := range spread {
			for _, p := range w.pods(t, r.GetName()) {
				if len(p.Status.ResourceClaimStatuses) == 0 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
					return fmt.Errorf("pod %s has no claim yet", p.Name)
				}
			}
		}
		return nil
	})
	w.controllers.Stop(t)
	apply(t, f.cp.c, deployment("whole", "alpha", "NVIDIA A10G", 1, 4))
	big := f.waitPlaced(t, "whole", 1, "alpha", "pair", settle)
	started := time.Now()
	w.startScheduler(t, f)
	nodes := f.waitBound(t, "alpha", spread, settle)
	w.startControllers(t, f)
	f.waitPods(t, w, big)
	if n := nodes[spread[0].GetName()]; n == nodes[spread[1].GetName()] {
		// On pair's lean nodes an empty node outscores one with such a pod
		// by 5 points (gpuClasses): the default profile spreads them.
		t.Fatalf("kube-scheduler bound both of spread's pods to %s, as LeastFree guessed: the default profile should have spread them over pair's lean nodes", n)
	}
	eventually(t, settle, "big's pod unschedulable", func() error {
		pods := w.pods(t, big[0].GetName())
		if len(pods) != 1 || pods[0].Spec.NodeName != "" || !strings.Contains(podScheduled(pods[0]), "False Unschedulable") {
			return fmt.Errorf("%d pods: %v", len(pods), pods)
		}
		return nil
	})
	f.waitPodsScheduled(t, "False", big, settle)
	t.Logf("PodsScheduled False reached big %s after kube-scheduler started", time.Since(started).Round(time.Second))

	moved := f.waitPlaced(t, "whole", 1, "alpha", "spare", replaceAfter+callAgain+settle)
	if moved[0].GetName() != big[0].GetName() {
		t.Errorf("big was re-placed as %s, not as the same replica %s on another pool", moved[0].GetName(), big[0].GetName())
	}
	t.Logf("re-placing moved big to spare %s after its PodsScheduled turned False", time.Since(started).Round(time.Second))
	// The same replica on another pool is the same Deployment with a new
	// pod template: v0.3 sets no update strategy, so the rollout surges a
	// pod pinned to spare and deletes the old one, pinned to pair, once
	// the new one is Available. KWOK runs the new pod (Running, then
	// Ready), so the rollout completes and the old pod, Pending and
	// holding no device, goes.
	eventually(t, settle, "big's rollout complete: one pod, Running and Ready on spare-0, its old one on pair gone", func() error {
		pods := w.pods(t, big[0].GetName())
		if len(pods) != 1 {
			return fmt.Errorf("%d pods, on %v", len(pods), nodeNames(pods))
		}
		p := pods[0]
		if p.Spec.NodeName != "spare-0" || p.Status.Phase != corev1.PodRunning || !podReady(p) {
			return fmt.Errorf("its pod is on %q, %s, Ready %t", p.Spec.NodeName, p.Status.Phase, podReady(p))
		}
		return nil
	})
	f.waitPodsScheduled(t, "True", moved, settle)
	if got := f.replicas(t, "spread"); len(got) != 2 || where(got[0]).pool != "pair" || where(got[1]).pool != "pair" {
		t.Errorf("spread's replicas moved: %v", got)
	}
}

// podReady is whether the pod's Ready condition is True.
func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nodeNames are the nodes pods are bound to, "" for a Pending one.
func nodeNames(pods []corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Spec.NodeName)
	}
	return out
}

// waitPods waits until each replica's pod exists in its workload cluster.
func (f *fleet) waitPods(t *testing.T, w *workload, replicas []*unstructured.Unstructured) {
	t.Helper()
	eventually(t, settle, fmt.Sprintf("the pods of %d replicas created in %s", len(replicas), w.spec.name), func() error {
		for _, r := range replicas {
			if n := len(w.pods(t, r.GetName())); n != 1 {
				return fmt.Errorf("replica %s has %d pods", r.GetName(), n)
			}
		}
		return nil
	})
}
