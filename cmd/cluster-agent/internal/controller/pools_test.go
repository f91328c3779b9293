package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modelplaneai/fleet-scheduler/agent"
	"github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	fsv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// report is the status the pool's report publishes, Synced True, as
// agent.PoolReport computes it from the objects, as of t0.
func wantReport(t *testing.T, pool string, v agent.View, msg string) v1alpha1.PoolObservationStatus {
	t.Helper()
	v.SyncedAt = t0
	r, err := agent.PoolReport(t.Context(), agent.Pool{Name: pool, Devices: []fsv1alpha1.Device{{Name: "gpu", Driver: gpuDriver, DeviceClassName: gpuClass, Count: new(int64(8))}}}, v)
	if err != nil {
		t.Fatal(err)
	}
	at := metav1.NewTime(r.ObservedAt)
	return v1alpha1.PoolObservationStatus{
		ObservedNodes: &r.ObservedNodes, ObservedAt: &at, NodesByFreeDevices: &r.NodesByFreeDevices, Devices: r.Devices,
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionSynced, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonObserved, Message: msg, ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(t0)}},
	}
}

// withDevices is the status with its summary set.
func withDevices(s v1alpha1.PoolObservationStatus, d ...v1alpha1.DeviceSummary) v1alpha1.PoolObservationStatus {
	s.Devices = d
	return s
}

// failedStatus is a Synced False status.
func failedStatus(reason, msg string) v1alpha1.PoolObservationStatus {
	return v1alpha1.PoolObservationStatus{Conditions: []metav1.Condition{{
		Type: v1alpha1.ConditionSynced, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(t0),
	}}}
}

// cmpTime compares times to the second, as the API server stores them.
var cmpTime = cmp.Comparer(func(a, b metav1.Time) bool { return a.Truncate(time.Second).Equal(b.Truncate(time.Second)) })

func TestPoolStatus(t *testing.T) {
	// Two pools: l4 (n1, n2, n3) and h100 (h1), each node 8 GPUs.
	type args struct {
		objs []any
	}
	n1, n2, n3, h1 := node("n1", "l4"), node("n1", "l4"), node("n3", "l4"), node("h1", "h100")
	n2.Name = "n2"
	n3.Spec.Unschedulable = true
	base := []any{
		n1, n2, n3, h1, class(gpuClass, gpuDriver),
		gpuSlice("n1", gpuDriver, 8), gpuSlice("n2", gpuDriver, 8), gpuSlice("n3", gpuDriver, 8), gpuSlice("h1", gpuDriver, 8),
		claim("a", "n1", "gpu-0", "gpu-1", "gpu-2"), claim("b", "h1", "gpu-7"),
	}
	l4View := agent.View{
		Nodes:          []*corev1.Node{n1, n2, n3},
		ResourceSlices: []*resourcev1.ResourceSlice{gpuSlice("n1", gpuDriver, 8), gpuSlice("n2", gpuDriver, 8), gpuSlice("n3", gpuDriver, 8)},
		DeviceClasses:  []*resourcev1.DeviceClass{class(gpuClass, gpuDriver)},
		ResourceClaims: []*resourcev1.ResourceClaim{claim("a", "n1", "gpu-0", "gpu-1", "gpu-2")},
	}
	h100View := agent.View{
		Nodes:          []*corev1.Node{h1},
		ResourceSlices: []*resourcev1.ResourceSlice{gpuSlice("h1", gpuDriver, 8)},
		DeviceClasses:  []*resourcev1.DeviceClass{class(gpuClass, gpuDriver)},
		ResourceClaims: []*resourcev1.ResourceClaim{claim("b", "h1", "gpu-7")},
	}
	l4Msg := "2 of 3 nodes can take a new pod; left out: n3: cordoned"
	h100Msg := "1 of 1 nodes can take a new pod"

	cases := map[string]struct {
		reason string
		args   args
		want   map[string]v1alpha1.PoolObservationStatus
	}{
		"Reports": {
			reason: "Each pool's status is agent.PoolReport of its objects, as of the proven time, Synced True, with its free and total GPUs (kubectl's FREE and TOTAL).",
			args:   args{objs: append(base, poolObservation("l4"), poolObservation("h100"))},
			want: map[string]v1alpha1.PoolObservationStatus{
				"l4":   withDevices(wantReport(t, "l4", l4View, l4Msg), v1alpha1.DeviceSummary{Name: "gpu", Free: 13, Total: 24}),
				"h100": withDevices(wantReport(t, "h100", h100View, h100Msg), v1alpha1.DeviceSummary{Name: "gpu", Free: 7, Total: 8}),
			},
		},
		"NoDeviceClass": {
			reason: "A pool device whose DeviceClass the cluster lacks is Synced False, naming the field; the other pool still reports.",
			args: args{objs: append(base, poolObservation("l4", map[string]any{"name": "gpu", "driver": gpuDriver, "deviceClassName": "missing.example.com", "count": int64(8)}),
				poolObservation("h100"))},
			want: map[string]v1alpha1.PoolObservationStatus{
				"l4":   failedStatus(v1alpha1.ReasonDeviceClassNotFound, `PoolObservation l4: spec.devices[0].deviceClassName: the cluster has no DeviceClass "missing.example.com"`),
				"h100": wantReport(t, "h100", h100View, h100Msg),
			},
		},
		"GarbageAllocation": {
			reason: "A claim holding a device its resource pool does not have is Synced False for the pool of its node, naming the claim and the field; the other pool still reports.",
			args:   args{objs: append(base, claim("garbage", "n2", "gpu-99"), poolObservation("l4"), poolObservation("h100"))},
			want: map[string]v1alpha1.PoolObservationStatus{
				"l4":   failedStatus(v1alpha1.ReasonInvalidObject, `PoolObservation l4: ResourceClaim default/garbage: status.allocation.devices.results[0].device: "gpu-99" is not a device of resource pool gpu.example.com/n2 (generation 1)`),
				"h100": wantReport(t, "h100", h100View, h100Msg),
			},
		},
		"UnknownDriver": {
			reason: "A slice of a driver no pool device names, on a pool's node, is not the pool's: its report is unchanged.",
			args:   args{objs: append(base, gpuSlice("n2", "other.example.com", 4), poolObservation("l4"))},
			want:   map[string]v1alpha1.PoolObservationStatus{"l4": wantReport(t, "l4", l4View, l4Msg)},
		},
		"BadCEL": {
			reason: "A DeviceClass whose selector does not compile is an invalid object, named with the field.",
			args: args{objs: append(base, &resourcev1.DeviceClass{
				ObjectMeta: metav1.ObjectMeta{Name: "bad.example.com"},
				Spec:       resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.driver =="}}}},
			}, poolObservation("l4", map[string]any{"name": "gpu", "driver": gpuDriver, "deviceClassName": "bad.example.com", "count": int64(8)}))},
			want: map[string]v1alpha1.PoolObservationStatus{"l4": failedStatus(v1alpha1.ReasonInvalidObject, "")},
		},
		"BadSelector": {
			reason: "A node selector that is not one is an invalid spec.",
			args: args{objs: append(base, func() any {
				u := poolObservation("l4")
				u.Object["spec"].(map[string]any)["nodeSelector"] = map[string]any{"bad key!": "x"}
				return u
			}())},
			want: map[string]v1alpha1.PoolObservationStatus{"l4": failedStatus(v1alpha1.ReasonInvalidSpec, "")},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.add(tc.args.objs...)
			e.pools().Reconcile(t.Context())
			for pool, want := range tc.want {
				got := e.poolStatus(pool)
				opts := []cmp.Option{cmpTime}
				if want.Conditions[0].Message == "" {
					// Only the reason is checked; the message is the
					// agent package's.
					opts = append(opts, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Message" }, cmp.Ignore()))
				}
				if diff := cmp.Diff(want, got, opts...); diff != "" {
					t.Errorf("\n%s\nstatus of %s: -want, +got:\n%s", tc.reason, pool, diff)
				}
			}
		})
	}
}

func TestPoolBadCELNamesTheClass(t *testing.T) {
	e := newEnv(t)
	e.add(node("n1", "l4"), gpuSlice("n1", gpuDriver, 8), &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "bad.example.com"},
		Spec:       resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.driver =="}}}},
	}, poolObservation("l4", map[string]any{"name": "gpu", "driver": gpuDriver, "deviceClassName": "bad.example.com", "count": int64(8)}))
	e.pools().Reconcile(t.Context())
	msg := e.poolStatus("l4").Conditions[0].Message
	if !strings.Contains(msg, "DeviceClass bad.example.com: spec.selectors[0].cel.expression") {
		t.Errorf("the message does not name the class and the field: %s", msg)
	}
}

// TestPoolWrites checks when the status is written: on change, with the
// newest proven time; again once a time after the change is proven; a
// heartbeat after the last observedAt; never before anything is proven,
// and never with an observedAt older than the published one.
func TestPoolWrites(t *testing.T) {
	e := newEnv(t)
	e.proven = time.Time{}
	c := claim("a", "n1", "gpu-0")
	e.add(node("n1", "l4"), gpuSlice("n1", gpuDriver, 8), class(gpuClass, gpuDriver), c, poolObservation("l4"))
	p := e.pools()
	step := func(d time.Duration, proven time.Time) {
		e.clock.Step(d)
		e.proven = proven
		p.Reconcile(t.Context())
	}
	writes := func(want int, why string) {
		t.Helper()
		if e.writer.writes != want {
			t.Fatalf("%d writes, want %d: %s", e.writer.writes, want, why)
		}
	}
	observedAt := func(want time.Time) {
		t.Helper()
		if got := e.poolStatus("l4").ObservedAt.Time; !got.Equal(want.Truncate(time.Second)) {
			t.Errorf("observedAt %s, want %s", got, want.Truncate(time.Second))
		}
	}

	step(0, time.Time{})
	writes(0, "nothing is proven yet")
	step(0, t0)
	writes(1, "the first report, once a time is proven")
	observedAt(t0)
	step(300*time.Millisecond, t0.Add(300*time.Millisecond))
	writes(1, "the proven time rounds down to the published one")
	step(10*time.Second, t0.Add(10*time.Second))
	writes(2, "a time after the report changed (from none) is proven: it is published again, with it")
	observedAt(t0.Add(10 * time.Second))
	step(10*time.Second, t0.Add(20*time.Second))
	writes(2, "nothing changed, and observedAt is 10s old, under the heartbeat")

	c2 := c.DeepCopy()
	c2.Status.Allocation.Devices.Results = append(c2.Status.Allocation.Devices.Results, resourcev1.DeviceRequestAllocationResult{Request: "gpu", Driver: gpuDriver, Pool: "n1", Device: "gpu-1"})
	e.add(c2)
	step(0, t0.Add(20*time.Second))
	writes(3, "a claim took another GPU: the report changed")
	if got := (*e.poolStatus("l4").NodesByFreeDevices)[0].Free[0].Count; got != 6 {
		t.Errorf("%d GPUs free after the claim took another; want 6", got)
	}
	observedAt(t0.Add(20 * time.Second))
	step(5*time.Second, t0.Add(25*time.Second))
	writes(4, "a time after the change is proven: published again with it")
	step(time.Second, t0.Add(26*time.Second))
	writes(4, "nothing changed since")

	step(60*time.Second, t0.Add(84*time.Second))
	writes(5, "observedAt is older than the heartbeat and a newer time is proven")
	observedAt(t0.Add(84 * time.Second))

	// Another replica published a newer observedAt: this one, proven
	// only as of an older time, writes nothing, even for a change.
	u := e.cluster.PoolObservations()[0].DeepCopy()
	newer := t0.Add(120 * time.Second).UTC().Format(time.RFC3339)
	u.Object["status"].(map[string]any)["observedAt"] = newer
	e.add(u)
	e.remove(c2)
	step(time.Second, t0.Add(90*time.Second))
	writes(5, "the published observedAt ("+newer+") is newer than this replica's proven time")
	step(time.Second, t0.Add(121*time.Second))
	writes(6, "this replica's proven time passed the published one")
}

// TestEmptyHistogram checks that a pool with no node to take a pod
// publishes an empty histogram, present, and writes it once.
func TestEmptyHistogram(t *testing.T) {
	e := newEnv(t)
	n := node("n1", "l4")
	n.Spec.Unschedulable = true
	e.add(n, gpuSlice("n1", gpuDriver, 8), class(gpuClass, gpuDriver), poolObservation("l4"))
	p := e.pools()
	p.Reconcile(t.Context())
	s := e.poolStatus("l4")
	if s.NodesByFreeDevices == nil || len(*s.NodesByFreeDevices) != 0 || *s.ObservedNodes != 1 {
		t.Fatalf("want an empty histogram of one observed node, got %+v", s)
	}
	raw := e.cluster.PoolObservations()[0].Object["status"].(map[string]any)["nodesByFreeDevices"]
	if l, ok := raw.([]any); !ok || len(l) != 0 {
		t.Errorf("nodesByFreeDevices is %#v in the object; want an empty list, present", raw)
	}
	p.Reconcile(t.Context())
	if e.writer.writes != 1 {
		t.Errorf("%d writes of an unchanged empty report; want 1", e.writer.writes)
	}
}

// TestRecountsOnlyChangedNodes checks that a change to one node's objects
// recounts that node alone.
func TestRecountsOnlyChangedNodes(t *testing.T) {
	e := newEnv(t)
	e.add(class(gpuClass, gpuDriver), poolObservation("l4"))
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		e.add(node(n, "l4"), gpuSlice(n, gpuDriver, 8))
	}
	p := e.pools()
	counted := func(how string) float64 { return testutil.ToFloat64(e.metrics.NodesCounted.WithLabelValues("l4", how)) }

	p.Reconcile(t.Context())
	if got := counted("recounted"); got != 4 {
		t.Fatalf("%v nodes counted at first; want 4", got)
	}
	p.Reconcile(t.Context())
	if got := counted("recounted"); got != 4 {
		t.Errorf("%v nodes counted after a round with no change; want still 4", got)
	}
	e.add(claim("a", "n3", "gpu-0"))
	p.Reconcile(t.Context())
	if got := counted("recounted"); got != 5 {
		t.Errorf("%v nodes counted after a claim on n3; want 5 (n3 again)", got)
	}
	e.add(class(gpuClass, gpuDriver))
	p.Reconcile(t.Context())
	if got := counted("recounted"); got != 9 {
		t.Errorf("%v nodes counted after the pool's DeviceClass changed; want 9 (all again)", got)
	}
	if got := counted("reused"); got != 7 {
		t.Errorf("%v nodes reused; want 7", got)
	}
}

// TestTaintRules checks that a DeviceTaintRule's NoSchedule taint takes
// the devices it selects out of the free count.
func TestTaintRules(t *testing.T) {
	e := newEnv(t)
	e.add(class(gpuClass, gpuDriver), poolObservation("l4"), node("n1", "l4"), gpuSlice("n1", gpuDriver, 8))
	p := e.pools()
	p.Reconcile(t.Context())
	rule := &resourcev1.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: "xid"},
		Spec: resourcev1.DeviceTaintRuleSpec{
			DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: new(gpuDriver), Pool: new("n1"), Device: new("gpu-3")},
			Taint:          resourcev1.DeviceTaint{Key: "xid", Effect: resourcev1.DeviceTaintEffectNoSchedule},
		},
	}
	e.add(rule)
	p.Reconcile(t.Context())
	if got := (*e.poolStatus("l4").NodesByFreeDevices)[0].Free[0].Count; got != 7 {
		t.Errorf("%d GPUs free with gpu-3 tainted NoSchedule; want 7", got)
	}
	e.remove(rule)
	p.Reconcile(t.Context())
	if got := (*e.poolStatus("l4").NodesByFreeDevices)[0].Free[0].Count; got != 8 {
		t.Errorf("%d GPUs free once the rule is gone; want 8", got)
	}
}
