package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
)

func TestReplicaStatus(t *testing.T) {
	workload := map[string]string{"modelplane.ai/workload": "qwen-1a2b3"}
	lws := map[string]string{"leaderworkerset.sigs.k8s.io/name": "qwen-decode"}
	sel := func(l map[string]string) map[string]any {
		m := map[string]any{}
		for k, v := range l {
			m[k] = v
		}
		return map[string]any{"matchLabels": m}
	}
	both := map[string]string{"modelplane.ai/workload": "qwen-1a2b3", "leaderworkerset.sigs.k8s.io/name": "qwen-decode"}
	deleting := pod("default", "deleting", "n1", workload)
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	done := pod("default", "done", "n1", workload)
	done.Status.Phase = corev1.PodSucceeded

	cond := func(status metav1.ConditionStatus, reason, msg string) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.ConditionPodsScheduled, Status: status, Reason: reason, Message: msg, ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(t0)}}
	}
	cases := map[string]struct {
		reason string
		objs   []any
		want   v1alpha1.ReplicaObservationStatus
	}{
		"Bound": {
			reason: "Three pods bound, matching either selector, one matching both counted once: True.",
			objs: []any{
				replicaObservation("default", "qwen-0", 3, sel(workload), sel(lws)),
				pod("default", "a", "n1", workload), pod("default", "b", "n2", lws), pod("default", "c", "n3", both),
			},
			want: v1alpha1.ReplicaObservationStatus{ScheduledPods: new(int64(3)), Conditions: cond(metav1.ConditionTrue, v1alpha1.ReasonPodsBound, "3 of 3 pods are bound to a node")},
		},
		"NotBound": {
			reason: "Pods not bound, being deleted, terminal, of another namespace or unselected are not counted: False with the number missing.",
			objs: []any{
				replicaObservation("default", "qwen-0", 3, sel(workload)),
				pod("default", "a", "n1", workload), pod("default", "pending", "", workload), deleting, done,
				pod("default", "other", "n1", map[string]string{"app": "x"}), pod("ml", "elsewhere", "n1", workload),
			},
			want: v1alpha1.ReplicaObservationStatus{ScheduledPods: new(int64(1)), Conditions: cond(metav1.ConditionFalse, v1alpha1.ReasonPodsNotBound, "1 of 3 pods are bound to a node; 2 are not")},
		},
		"Expressions": {
			reason: "A selector of match expressions selects too.",
			objs: []any{
				replicaObservation("default", "qwen-0", 1, map[string]any{"matchExpressions": []any{map[string]any{"key": "modelplane.ai/workload", "operator": "In", "values": []any{"qwen-1a2b3"}}}}),
				pod("default", "a", "n1", workload),
			},
			want: v1alpha1.ReplicaObservationStatus{ScheduledPods: new(int64(1)), Conditions: cond(metav1.ConditionTrue, v1alpha1.ReasonPodsBound, "1 of 1 pods are bound to a node")},
		},
		"EmptySelector": {
			reason: "An empty selector would select the whole namespace: Unknown, naming the field.",
			objs:   []any{replicaObservation("default", "qwen-0", 1, map[string]any{})},
			want: v1alpha1.ReplicaObservationStatus{Conditions: cond(metav1.ConditionUnknown, v1alpha1.ReasonSelectorInvalid,
				"ReplicaObservation default/qwen-0: spec.selectors[0]: empty; it would select every pod of the namespace")},
		},
		"BadSelector": {
			reason: "A selector that is not one: Unknown, naming the field.",
			objs:   []any{replicaObservation("default", "qwen-0", 1, map[string]any{"matchExpressions": []any{map[string]any{"key": "a", "operator": "In"}}})},
			want: v1alpha1.ReplicaObservationStatus{Conditions: cond(metav1.ConditionUnknown, v1alpha1.ReasonSelectorInvalid,
				"ReplicaObservation default/qwen-0: spec.selectors[0]: values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty")},
		},
		"NotWatched": {
			reason: "A ReplicaObservation in a namespace whose pods the agent does not read: Unknown.",
			objs:   []any{replicaObservation("ml", "qwen-0", 1, sel(workload))},
			want: v1alpha1.ReplicaObservationStatus{Conditions: cond(metav1.ConditionUnknown, v1alpha1.ReasonNamespaceNotWatched,
				"ReplicaObservation ml/qwen-0: the agent does not read the pods of namespace ml (its --pod-namespaces)")},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, "default")
			// Pods of namespace ml are read only where the test needs them.
			var objs []any
			for _, o := range tc.objs {
				if p, ok := o.(*corev1.Pod); ok && p.Namespace != "default" {
					continue
				}
				objs = append(objs, o)
			}
			e.add(objs...)
			keys := e.cluster.ReplicaObservationKeys()
			if retry := e.replicas().Reconcile(t.Context(), keys); retry != nil {
				t.Fatalf("retry %v", retry)
			}
			if diff := cmp.Diff(tc.want, e.replicaStatus(keys[0]), cmpTime); diff != "" {
				t.Errorf("\n%s\nstatus: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestReplicaWrites checks that the status is written only when it
// changes, and that PodsScheduled turns True at the time the agent counts
// the pods bound.
func TestReplicaWrites(t *testing.T) {
	e := newEnv(t)
	l := map[string]string{"modelplane.ai/workload": "w"}
	e.add(replicaObservation("default", "r", 2, map[string]any{"matchLabels": map[string]any{"modelplane.ai/workload": "w"}}), pod("default", "a", "n1", l), pod("default", "b", "", l))
	r := e.replicas()
	r.Reconcile(t.Context(), []string{"default/r"})
	r.Reconcile(t.Context(), []string{"default/r"})
	if e.writer.writes != 1 {
		t.Fatalf("%d writes of an unchanged count; want 1", e.writer.writes)
	}
	if c := e.replicaStatus("default/r").Conditions[0]; c.Status != metav1.ConditionFalse {
		t.Fatalf("PodsScheduled %s with 1 of 2 bound; want False", c.Status)
	}

	e.clock.Step(7 * time.Second)
	e.add(pod("default", "b", "n2", l))
	r.Reconcile(t.Context(), []string{"default/r"})
	c := e.replicaStatus("default/r").Conditions[0]
	if c.Status != metav1.ConditionTrue || !c.LastTransitionTime.Time.Equal(e.clock.Now().Truncate(time.Second)) {
		t.Errorf("PodsScheduled %s since %s; want True since the count, %s", c.Status, c.LastTransitionTime, e.clock.Now().Truncate(time.Second))
	}
	e.clock.Step(7 * time.Second)
	e.add(pod("default", "c", "n3", l))
	r.Reconcile(t.Context(), []string{"default/r"})
	if c2 := e.replicaStatus("default/r").Conditions[0]; !c2.LastTransitionTime.Equal(&c.LastTransitionTime) {
		t.Errorf("a third pod moved PodsScheduled's transition time from %s to %s; want it kept", c.LastTransitionTime, c2.LastTransitionTime)
	}
	if e.writer.writes != 3 {
		t.Errorf("%d writes; want 3 (False, True, then 3 bound)", e.writer.writes)
	}
}
