package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/resourceslice/tracker"

	"github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
)

func newCluster(t *testing.T, namespaces ...string) *Cluster {
	t.Helper()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1alpha1.PoolObservationResource:    "PoolObservationList",
		v1alpha1.ReplicaObservationResource: "ReplicaObservationList",
	})
	c, err := New(fake.NewClientset(), dyn, Options{Namespaces: namespaces, TaintRules: true})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func slice(name, driver, pool, node string, devices ...string) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
		Spec:       resourcev1.ResourceSliceSpec{Driver: driver, Pool: resourcev1.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 1}},
	}
	if node != "" {
		s.Spec.NodeName = &node
	} else {
		s.Spec.AllNodes = new(true)
	}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: d})
	}
	return s
}

func rule(name string, driver, pool, device *string, effect resourcev1.DeviceTaintEffect) *resourcev1.DeviceTaintRule {
	r := &resourcev1.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
		Spec: resourcev1.DeviceTaintRuleSpec{
			DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: driver, Pool: pool, Device: device},
			Taint:          resourcev1.DeviceTaint{Key: name, Value: "v", Effect: effect},
		},
	}
	return r
}

// TestPatchIsTheTrackers checks that Patch taints devices as
// k8s.io/dynamic-resource-allocation's tracker does for kube-scheduler,
// over slices and rules of every selector shape.
func TestPatchIsTheTrackers(t *testing.T) {
	inputSlices := []*resourcev1.ResourceSlice{
		slice("a", "gpu.example.com", "n1", "n1", "gpu-0", "gpu-1"),
		slice("b", "gpu.example.com", "n2", "n2", "gpu-0", "gpu-1"),
		slice("c", "nic.example.com", "n1", "n1", "nic-0"),
		slice("d", "gpu.example.com", "shared", "", "gpu-0"),
	}
	noSelector := rule("none", nil, nil, nil, resourcev1.DeviceTaintEffectNoExecute)
	noSelector.Spec.DeviceSelector = nil
	rules := []*resourcev1.DeviceTaintRule{
		rule("all", nil, nil, nil, resourcev1.DeviceTaintEffectNone),
		rule("driver", new("gpu.example.com"), nil, nil, resourcev1.DeviceTaintEffectNoSchedule),
		rule("pool", nil, new("n1"), nil, resourcev1.DeviceTaintEffectNoSchedule),
		rule("device", new("gpu.example.com"), new("n2"), new("gpu-1"), resourcev1.DeviceTaintEffectNoExecute),
		rule("nomatch", new("other.example.com"), nil, nil, resourcev1.DeviceTaintEffectNoSchedule),
		noSelector,
	}
	client := fake.NewClientset()
	for _, s := range inputSlices {
		if _, err := client.ResourceV1().ResourceSlices().Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rules {
		if _, err := client.ResourceV1().DeviceTaintRules().Create(t.Context(), r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f := informers.NewSharedInformerFactory(client, 0)
	tr, err := tracker.StartTracker(t.Context(), tracker.Options{
		EnableDeviceTaintRules: true,
		SliceInformer:          f.Resource().V1().ResourceSlices(),
		TaintInformer:          f.Resource().V1().DeviceTaintRules(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	f.Start(t.Context().Done())
	f.WaitForCacheSync(t.Context().Done())
	deadline := time.Now().Add(10 * time.Second)
	for !tr.HasSynced() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	want, err := tr.ListPatchedResourceSlices()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*resourcev1.ResourceSlice{}
	for _, s := range want {
		byName[s.Name] = s
	}
	// The tracker applies its informer's rules in its own order; a
	// device's taints are compared as a set.
	sortTaints := cmp.Transformer("sortTaints", func(in []resourcev1.DeviceTaint) []resourcev1.DeviceTaint {
		out := slices.Clone(in)
		slices.SortFunc(out, func(a, b resourcev1.DeviceTaint) int { return cmpStrings(a.Key, b.Key) })
		return out
	})
	for _, s := range inputSlices {
		got, _ := Patch(s, rules)
		if diff := cmp.Diff(byName[s.Name].Spec, got.Spec, sortTaints); diff != "" {
			t.Errorf("slice %s: -tracker, +Patch:\n%s", s.Name, diff)
		}
	}
	if got, applied := Patch(inputSlices[2], rules[4:]); got != inputSlices[2] || applied != nil {
		t.Errorf("rules that select nothing of the slice copied it (%v) or were applied (%v)", got != inputSlices[2], applied)
	}
}

func cmpStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestNodeViewKey checks that a node view's key changes with every object
// the node is counted from, and with nothing else.
func TestNodeViewKey(t *testing.T) {
	c := newCluster(t, "default")
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "1"}}
	own := slice("n1-gpu", "gpu.example.com", "n1", "n1", "gpu-0")
	second := slice("n1-gpu-2", "gpu.example.com", "n1", "", "gpu-1")
	second.Spec.AllNodes = nil
	second.Spec.Devices[0].NodeName = new("n1")
	other := slice("n2-gpu", "gpu.example.com", "n2", "n2", "gpu-0")
	mine := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "mine", ResourceVersion: "1"}}
	mine.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{Request: "r", Driver: "gpu.example.com", Pool: "n1", Device: "gpu-0"}}}}
	theirs := mine.DeepCopy()
	theirs.Name = "theirs"
	theirs.Status.Allocation.Devices.Results[0].Pool = "n2"
	if err := c.Inject(n, own, second, other, mine, theirs); err != nil {
		t.Fatal(err)
	}
	nv, key := c.NodeView(n)
	names := func(s []*resourcev1.ResourceSlice) []string {
		var out []string
		for _, x := range s {
			out = append(out, x.Name)
		}
		return out
	}
	if diff := cmp.Diff([]string{"n1-gpu", "n1-gpu-2"}, names(nv.ResourceSlices)); diff != "" {
		t.Errorf("the node's slices: -want, +got:\n%s", diff)
	}
	if len(nv.ResourceClaims) != 1 || nv.ResourceClaims[0].Name != "mine" {
		t.Errorf("the node's claims: %v; want mine alone", nv.ResourceClaims)
	}

	changes := map[string]func() any{
		"node":     func() any { x := n.DeepCopy(); x.ResourceVersion = "2"; return x },
		"slice":    func() any { x := own.DeepCopy(); x.ResourceVersion = "2"; return x },
		"claim":    func() any { x := mine.DeepCopy(); x.ResourceVersion = "2"; return x },
		"new rule": func() any { return rule("r", new("gpu.example.com"), nil, nil, resourcev1.DeviceTaintEffectNoSchedule) },
	}
	for _, what := range []string{"node", "slice", "claim", "new rule"} {
		o := changes[what]()
		if err := c.Inject(o); err != nil {
			t.Fatal(err)
		}
		_, k := c.NodeView(stored(t, c, "n1"))
		if k == key {
			t.Errorf("the key did not change with the %s", what)
		}
		key = k
	}
	for what, o := range map[string]any{
		"another node's slice":     func() any { x := other.DeepCopy(); x.ResourceVersion = "9"; return x }(),
		"another node's claim":     func() any { x := theirs.DeepCopy(); x.ResourceVersion = "9"; return x }(),
		"a rule of another driver": rule("z", new("nic.example.com"), nil, nil, resourcev1.DeviceTaintEffectNoSchedule),
	} {
		if err := c.Inject(o); err != nil {
			t.Fatal(err)
		}
		if _, k := c.NodeView(stored(t, c, "n1")); k != key {
			t.Errorf("the key changed with %s", what)
		}
	}
}

// stored is the Node of the name in the cache.
func stored(t *testing.T, c *Cluster, name string) *corev1.Node {
	t.Helper()
	o, ok, err := c.nodes.GetStore().GetByKey(name)
	if err != nil || !ok {
		t.Fatalf("no Node %s in the cache: %v", name, err)
	}
	return o.(*corev1.Node)
}

func TestBoundPods(t *testing.T) {
	c := newCluster(t, "default")
	pod := func(name, node string, l map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: l}, Spec: corev1.PodSpec{NodeName: node}}
	}
	a := map[string]string{"app": "a"}
	ab := map[string]string{"app": "a", "role": "leader"}
	failed := pod("failed", "n1", a)
	failed.Status.Phase = corev1.PodFailed
	if err := c.Inject(pod("p1", "n1", a), pod("p2", "n2", ab), pod("p3", "", a), failed, pod("q", "n1", map[string]string{"app": "b"})); err != nil {
		t.Fatal(err)
	}
	sel := func(s string) labels.Selector {
		x, err := labels.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	cases := map[string]struct {
		sels []labels.Selector
		want int64
	}{
		"ByLabel":       {sels: []labels.Selector{sel("app=a")}, want: 2},
		"Overlapping":   {sels: []labels.Selector{sel("app=a"), sel("role=leader")}, want: 2},
		"Exists":        {sels: []labels.Selector{sel("role")}, want: 1},
		"NotIn":         {sels: []labels.Selector{sel("app notin (a)")}, want: 1},
		"OtherNSNoPods": {sels: []labels.Selector{sel("app=zzz")}, want: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := c.BoundPods("default", tc.sels); got != tc.want {
				t.Errorf("BoundPods(%v) = %d, want %d", tc.sels, got, tc.want)
			}
		})
	}
}

func TestReplicasSelecting(t *testing.T) {
	c := newCluster(t, "")
	ro := func(ns, name string, matchLabels map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"pods": int64(1), "selectors": []any{map[string]any{"matchLabels": matchLabels}}}}}
		u.SetKind(v1alpha1.KindReplicaObservation)
		u.SetNamespace(ns)
		u.SetName(name)
		return u
	}
	if err := c.Inject(ro("default", "r1", map[string]any{"app": "a"}), ro("default", "r2", map[string]any{"app": "b"}), ro("ml", "r3", map[string]any{"app": "a"})); err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", Labels: map[string]string{"app": "a"}}}
	if diff := cmp.Diff([]string{"default/r1"}, c.replicasSelecting(p)); diff != "" {
		t.Errorf("replicas selecting the pod: -want, +got:\n%s", diff)
	}
	if !c.WatchesPods("anything") {
		t.Error(`with --pod-namespaces="", every namespace's pods are read`)
	}
}
