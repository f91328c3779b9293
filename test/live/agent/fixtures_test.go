package agent

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/modelplaneai/fleet-scheduler/agent"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

const (
	driver    = "gpu.example.com"
	className = "gpu.example.com"
	agentNS   = "modelplane-cluster-agent"
	agentSA   = "cluster-agent"
)

// testPool is a GPU pool of the fixtures: its nodes, <name>-<i>, each with
// gpus GPUs in one slice of its own resource pool (named after the node).
type testPool struct {
	name  string
	nodes int
	gpus  int64
}

var testPools = []testPool{{name: "l4", nodes: 3, gpus: 4}, {name: "h100", nodes: 2, gpus: 8}}

// fixtures creates the DeviceClass, every pool's Ready Nodes and their
// slices, and a PoolObservation of each pool.
func (cp *controlPlane) fixtures(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	class := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: className},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)},
		}}},
	}
	if _, err := cp.kube.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range testPools {
		for i := range p.nodes {
			name := fmt.Sprintf("%s-%d", p.name, i)
			cp.createNode(t, name, p.name)
			cp.createSlice(t, name+"-gpus", driver, name, p.gpus)
		}
		cp.createPoolObservation(t, p.name, className, p.gpus)
	}
}

func (cp *controlPlane) createNode(t *testing.T, name, pool string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelPool: pool}}}
	n, err := cp.kube.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	n, err = cp.kube.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The API server taints a new Node not-ready (TaintNodesByCondition);
	// kube-controller-manager's node lifecycle controller lifts the taint
	// once it is Ready. There is none here: the test does.
	n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
	if _, err := cp.kube.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (cp *controlPlane) createSlice(t *testing.T, name, drv, node string, gpus int64) {
	t.Helper()
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceSliceSpec{
			Driver: drv, NodeName: &node,
			Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
		},
	}
	for i := range gpus {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-%d", i)})
	}
	if _, err := cp.kube.ResourceV1().ResourceSlices().Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (cp *controlPlane) createPoolObservation(t *testing.T, name, class string, count int64) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agent.modelplane.ai/v1alpha1", "kind": "PoolObservation",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"devices": []any{map[string]any{
			"name": "gpu", "claim": "DRA", "driver": driver, "deviceClassName": class, "count": count,
		}}},
	}}
	if _, err := cp.dyn.Resource(poolObservations).Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// allocate creates a claim in default allocated the devices of the node's
// resource pool, as kube-scheduler writes it.
func (cp *controlPlane) allocate(t *testing.T, name, node string, devices ...string) {
	t.Helper()
	c := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: className, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: int64(len(devices))},
		}}}},
	}
	c, err := cp.kube.ResourceV1().ResourceClaims("default").Create(t.Context(), c, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Status.Allocation = &resourcev1.AllocationResult{}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourcev1.DeviceRequestAllocationResult{Request: "gpus", Driver: driver, Pool: node, Device: d})
	}
	if _, err := cp.kube.ResourceV1().ResourceClaims("default").UpdateStatus(t.Context(), c, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("cannot allocate claim %s: %v", name, err)
	}
}

func (cp *controlPlane) deleteClaim(t *testing.T, name string) {
	t.Helper()
	if err := cp.kube.ResourceV1().ResourceClaims("default").Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (cp *controlPlane) cordon(t *testing.T, node string, cordoned bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, cordoned)
	if _, err := cp.kube.CoreV1().Nodes().Patch(t.Context(), node, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// pod creates a pod in the namespace, bound to the node unless it is
// empty.
func (cp *controlPlane) pod(t *testing.T, namespace, name, node string, labels map[string]string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "engine", Image: "registry.example.com/engine:v1"}}},
	}
	if _, err := cp.kube.CoreV1().Pods(namespace).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// bind binds a pod to a node, as kube-scheduler does.
func (cp *controlPlane) bind(t *testing.T, namespace, name, node string) {
	t.Helper()
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := cp.kube.CoreV1().Pods(namespace).Bind(t.Context(), b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// expected lists the cluster's objects as an admin and returns each
// PoolObservation's report as agent.PoolReport computes it (observedNodes
// and nodesByFreeDevices, as the status holds them), with DeviceTaintRules
// applied where the cluster serves them; "error: " and why for a pool
// PoolReport cannot report.
func (cp *controlPlane) expected(t *testing.T) map[string]string {
	t.Helper()
	ctx := t.Context()
	nodes, err := cp.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sl, err := cp.kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	classes, err := cp.kube.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := cp.kube.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rules, err := cp.kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	if kerrors.IsNotFound(err) {
		rules, err = &resourcev1.DeviceTaintRuleList{}, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	pos, err := cp.dyn.Resource(poolObservations).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v := agent.View{SyncedAt: time.Now()}
	for i := range nodes.Items {
		v.Nodes = append(v.Nodes, &nodes.Items[i])
	}
	for i := range sl.Items {
		v.ResourceSlices = append(v.ResourceSlices, tainted(&sl.Items[i], rules.Items))
	}
	for i := range classes.Items {
		v.DeviceClasses = append(v.DeviceClasses, &classes.Items[i])
	}
	for i := range claims.Items {
		v.ResourceClaims = append(v.ResourceClaims, &claims.Items[i])
	}
	out := map[string]string{}
	for _, u := range pos.Items {
		var spec struct {
			Devices []v1alpha1.Device `json:"devices"`
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object["spec"].(map[string]any), &spec); err != nil {
			t.Fatal(err)
		}
		r, err := agent.PoolReport(ctx, agent.Pool{Name: u.GetName(), Devices: spec.Devices}, v)
		if err != nil {
			// A pool the agent reports Synced False: the test names
			// it unchecked, or fails.
			out[u.GetName()] = "error: " + err.Error()
			continue
		}
		out[u.GetName()] = reportJSON(t, r)
	}
	return out
}

// tainted is the slice with the taints of the rules that select its
// devices (by driver, pool and device), as kube-scheduler sees it.
func tainted(s *resourcev1.ResourceSlice, rules []resourcev1.DeviceTaintRule) *resourcev1.ResourceSlice {
	s = s.DeepCopy()
	for _, r := range rules {
		sel := r.Spec.DeviceSelector
		if sel == nil || sel.Driver != nil && *sel.Driver != s.Spec.Driver || sel.Pool != nil && *sel.Pool != s.Spec.Pool.Name {
			continue
		}
		for i := range s.Spec.Devices {
			if sel.Device == nil || *sel.Device == s.Spec.Devices[i].Name {
				s.Spec.Devices[i].Taints = append(s.Spec.Devices[i].Taints, r.Spec.Taint)
			}
		}
	}
	return s
}

// reportJSON is a report's observedNodes and nodesByFreeDevices as
// readStatus renders a status's: JSON of decoded JSON, keys sorted.
func reportJSON(t *testing.T, r agent.Report) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"observedNodes": r.ObservedNodes, "nodesByFreeDevices": r.NodesByFreeDevices})
	if err != nil {
		t.Fatal(err)
	}
	var m any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	b, err = json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// change is one change the test made to the cluster, once its write
// returned, and every pool's report after it.
type change struct {
	what string
	done time.Time
	want map[string]string
}

// changes is the test's changes, in order.
type changes struct {
	list []change
	// never are pools never checked: the agent cannot observe them.
	never []string
}

// make makes a change and records it with the reports after it. unchecked
// pools (a bad object of theirs) are not checked.
func (c *changes) make(t *testing.T, cp *controlPlane, what string, do func(), unchecked ...string) change {
	t.Helper()
	do()
	ch := change{what: what, done: time.Now(), want: cp.expected(t)}
	for _, p := range append(unchecked, c.never...) {
		ch.want[p] = ""
	}
	for p, w := range ch.want {
		if strings.HasPrefix(w, "error: ") {
			t.Fatalf("after %s, agent.PoolReport cannot report pool %s, which the test does not expect: %s", what, p, w)
		}
	}
	c.list = append(c.list, ch)
	return ch
}

func (c *changes) last() change { return c.list[len(c.list)-1] }

// check checks every status the recorder saw: its observedAt never claims
// a sync that did not happen (a status of observedAt O holds the report of
// the state after the last change done before O, or of a later state),
// and a pool's observedAt never goes back.
func (c *changes) check(t *testing.T, statuses []status) {
	t.Helper()
	last := map[string]time.Time{}
	checked := 0
	for _, s := range statuses {
		if s.synced != "True" || s.observedAt.IsZero() {
			continue
		}
		if prev, ok := last[s.pool]; ok && s.observedAt.Before(prev) {
			t.Errorf("PoolObservation %s: observedAt went back from %s to %s (seen %s)", s.pool, prev.Format(time.RFC3339), s.observedAt.Format(time.RFC3339), s.seen.Format(time.RFC3339Nano))
		}
		last[s.pool] = s.observedAt
		// Before the first change done before observedAt, the fixtures'
		// state, or any later one, may show.
		k := 0
		for i, ch := range c.list {
			if ch.done.Before(s.observedAt) {
				k = i
			}
		}
		ok := slices.ContainsFunc(c.list[k:], func(ch change) bool { w, known := ch.want[s.pool]; return known && (w == "" || w == s.report) })
		if !ok {
			var wants []string
			for _, ch := range c.list[k:] {
				wants = append(wants, fmt.Sprintf("%s: %s", ch.what, ch.want[s.pool]))
			}
			t.Errorf("PoolObservation %s claims its report is complete as of %s, after %q (done %s), but reports %s, none of the states since:\n%s",
				s.pool, s.observedAt.Format(time.RFC3339), c.list[k].what, c.list[k].done.Format(time.RFC3339Nano), s.report, strings.Join(wants, "\n"))
		}
		checked++
	}
	t.Logf("checked %d statuses against %d changes", checked, len(c.list))
}
