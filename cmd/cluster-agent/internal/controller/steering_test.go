package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/cluster"
)

// steeringSays is a Steering that says one reason of every pool.
type steeringSays struct {
	reason   string
	observed []bool
}

func (s *steeringSays) Status(_ string, observed bool) (string, string) {
	s.observed = append(s.observed, observed)
	return s.reason, "because " + s.reason
}

func steered(u *unstructured.Unstructured, steering v1alpha1.Steering) *unstructured.Unstructured {
	u.Object["spec"].(map[string]any)["steering"] = string(steering)
	return u
}

// TestPoolSteering checks the Steering condition and status.binding: both
// as Steering says while the spec asks for steering, neither otherwise,
// and a leftover condition removed when the spec stops asking.
func TestPoolSteering(t *testing.T) {
	type want struct {
		binding   string
		condition *metav1.Condition
		observed  []bool
	}
	cases := map[string]struct {
		reason string
		spec   v1alpha1.Steering
		says   string
		broken bool
		want   want
	}{
		"Steered": {
			reason: "Steering True and binding Steered while steering is in force.",
			spec:   v1alpha1.SteeringEnabled, says: v1alpha1.ReasonSteered,
			want: want{binding: v1alpha1.BindingSteered, condition: &metav1.Condition{Type: v1alpha1.ConditionSteering, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSteered, Message: "because Steered", ObservedGeneration: 1}, observed: []bool{true}},
		},
		"NotSteered": {
			reason: "Steering False with why, and no binding, otherwise.",
			spec:   v1alpha1.SteeringEnabled, says: v1alpha1.ReasonPolicyNotFound,
			want: want{condition: &metav1.Condition{Type: v1alpha1.ConditionSteering, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPolicyNotFound, Message: "because PolicyNotFound", ObservedGeneration: 1}, observed: []bool{true}},
		},
		"NotObserved": {
			reason: "A pool Synced False is asked about as not observed, and gets no binding.",
			spec:   v1alpha1.SteeringEnabled, says: v1alpha1.ReasonPoolNotObserved, broken: true,
			want: want{condition: &metav1.Condition{Type: v1alpha1.ConditionSteering, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPoolNotObserved, Message: "because PoolNotObserved", ObservedGeneration: 1}, observed: []bool{false}},
		},
		"Disabled": {
			reason: "A spec that does not ask for steering gets neither, and Steering is not asked.",
			spec:   v1alpha1.SteeringDisabled, says: v1alpha1.ReasonSteered,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			po := steered(poolObservation("l4"), tc.spec)
			if tc.broken {
				po = steered(poolObservation("l4", map[string]any{"name": "gpu", "driver": gpuDriver, "deviceClassName": "missing", "count": int64(8)}), tc.spec)
			}
			e.add(node("n1", "l4"), gpuSlice("n1", gpuDriver, 8), class(gpuClass, gpuDriver), po)
			s := &steeringSays{reason: tc.says}
			e.pools().WithSteering(s).Reconcile(t.Context())
			st := e.poolStatus("l4")
			got := want{binding: st.Binding, condition: meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSteering), observed: s.observed}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{}), cmpTime, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".LastTransitionTime" }, cmp.Ignore())); diff != "" {
				t.Errorf("\n%s\n-want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestPoolSteeringTurnedOff checks that a pool whose spec stops asking for
// steering loses its Steering condition and binding at once, and that
// StepDown says the agent stopped.
func TestPoolSteeringTurnedOff(t *testing.T) {
	e := newEnv(t)
	e.add(node("n1", "l4"), gpuSlice("n1", gpuDriver, 8), class(gpuClass, gpuDriver), steered(poolObservation("l4"), v1alpha1.SteeringEnabled))
	p := e.pools().WithSteering(&steeringSays{reason: v1alpha1.ReasonSteered})
	p.Reconcile(t.Context())

	p.StepDown(t.Context(), "stopped")
	st := e.poolStatus("l4")
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSteering); st.Binding != "" || c == nil || c.Reason != v1alpha1.ReasonAgentStopped {
		t.Errorf("after StepDown: binding %q, Steering %+v; want no binding, %s", st.Binding, c, v1alpha1.ReasonAgentStopped)
	}
	p.Reconcile(t.Context())
	if st := e.poolStatus("l4"); st.Binding != v1alpha1.BindingSteered {
		t.Fatalf("binding %q, want Steered again", st.Binding)
	}

	u := e.cluster.PoolObservations()[0].DeepCopy()
	e.add(steered(u, v1alpha1.SteeringDisabled))
	writes := e.writer.writes
	p.Reconcile(t.Context())
	st = e.poolStatus("l4")
	if st.Binding != "" || meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSteering) != nil {
		t.Errorf("steering turned off: binding %q, conditions %+v; want neither binding nor Steering", st.Binding, st.Conditions)
	}
	if e.writer.writes != writes+1 {
		t.Errorf("%d writes, want 1: turning steering off changes the status", e.writer.writes-writes)
	}
}

// TestSteerNodes checks the nodes the steerer decides on: the pool's
// schedulable nodes with their free devices as the report counts them,
// and keys that show which claims their counts hold.
func TestSteerNodes(t *testing.T) {
	e := newEnv(t)
	n3 := node("n3", "l4")
	n3.Spec.Unschedulable = true
	e.add(node("n1", "l4"), node("n2", "l4"), n3, class(gpuClass, gpuDriver), poolObservation("l4"),
		gpuSlice("n1", gpuDriver, 8), gpuSlice("n2", gpuDriver, 8), gpuSlice("n3", gpuDriver, 8), claim("a", "n1", "gpu-0", "gpu-1"))
	p := e.pools()
	got, _, err := p.SteerNodes(t.Context(), e.cluster.PoolObservations()[0])
	if err != nil {
		t.Fatal(err)
	}
	type free struct {
		Name  string
		Free  []int64
		HoldA bool
	}
	var have []free
	for _, n := range got {
		have = append(have, free{Name: n.Name, Free: n.Free, HoldA: cluster.KeyHolds(n.Key, "default", "a")})
	}
	want := []free{{Name: "n1", Free: []int64{6}, HoldA: true}, {Name: "n2", Free: []int64{8}}}
	if diff := cmp.Diff(want, have); diff != "" {
		t.Errorf("SteerNodes: -want, +got:\n%s", diff)
	}
}
