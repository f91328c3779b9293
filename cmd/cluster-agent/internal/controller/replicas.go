package controller

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"

	"github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/cluster"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/metrics"
)

// Replicas writes each ReplicaObservation's status: how many of its pods
// are bound, and PodsScheduled.
type Replicas struct {
	cluster *cluster.Cluster
	writer  Writer
	clock   clock.PassiveClock
	log     logr.Logger
	metrics *metrics.Metrics
}

// NewReplicas returns the replicas' reconciler.
func NewReplicas(c *cluster.Cluster, w Writer, clk clock.PassiveClock, log logr.Logger, m *metrics.Metrics) *Replicas {
	return &Replicas{cluster: c, writer: w, clock: clk, log: log, metrics: m}
}

// Reconcile reconciles the ReplicaObservations of the keys and returns
// those it could not write, to retry.
func (r *Replicas) Reconcile(ctx context.Context, keys []string) []string {
	var retry []string
	for _, key := range keys {
		if ctx.Err() != nil {
			return append(retry, key)
		}
		u := r.cluster.ReplicaObservation(key)
		if u == nil {
			continue
		}
		if err := r.reconcile(ctx, u); err != nil {
			r.log.Info("Cannot write the status of a ReplicaObservation; retrying", "replicaObservation", key, "error", err.Error())
			retry = append(retry, key)
		}
	}
	return retry
}

// reconcile counts the replica's bound pods and writes its status if it
// changed. PodsScheduled turns True at the time the agent counts spec.pods
// bound: never before they were.
func (r *Replicas) reconcile(ctx context.Context, u *unstructured.Unstructured) error {
	want, reason, err := r.status(u)
	if err != nil {
		r.metrics.Errors.WithLabelValues(v1alpha1.KindReplicaObservation, reason).Inc()
		want = &v1alpha1.ReplicaObservationStatus{Conditions: []metav1.Condition{{
			Type: v1alpha1.ConditionPodsScheduled, Status: metav1.ConditionUnknown, Reason: reason, Message: err.Error(),
		}}}
	}
	have, derr := cluster.ReplicaObservationOf(u)
	if derr != nil {
		have = &v1alpha1.ReplicaObservation{}
	}
	if sameReplica(have.Status, *want, u.GetGeneration()) {
		return nil
	}
	// have was decoded anew from the cache: it is this call's to change.
	next := &have.Status
	next.ScheduledPods = want.ScheduledPods
	// The time this count was taken: the pods were bound by then.
	now := metav1.NewTime(r.clock.Now())
	for _, c := range want.Conditions {
		c.ObservedGeneration = u.GetGeneration()
		c.LastTransitionTime = now
		meta.SetStatusCondition(&next.Conditions, c)
	}
	return r.writer.WriteStatus(ctx, v1alpha1.ReplicaObservationResource, u, next)
}

// status counts the replica's bound pods: an error, with the condition's
// reason, when it cannot.
func (r *Replicas) status(u *unstructured.Unstructured) (*v1alpha1.ReplicaObservationStatus, string, error) {
	ro, err := cluster.ReplicaObservationOf(u)
	if err != nil {
		return nil, v1alpha1.ReasonSelectorInvalid, err
	}
	if !r.cluster.WatchesPods(ro.Namespace) {
		return nil, v1alpha1.ReasonNamespaceNotWatched, fmt.Errorf("ReplicaObservation %s/%s: the agent does not read the pods of namespace %s (its --pod-namespaces)", ro.Namespace, ro.Name, ro.Namespace)
	}
	sels, err := selectors(ro)
	if err != nil {
		return nil, v1alpha1.ReasonSelectorInvalid, err
	}
	bound := r.cluster.BoundPods(ro.Namespace, sels)
	s := &v1alpha1.ReplicaObservationStatus{ScheduledPods: &bound}
	c := metav1.Condition{Type: v1alpha1.ConditionPodsScheduled}
	if bound >= ro.Spec.Pods {
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonPodsBound
		c.Message = fmt.Sprintf("%d of %d pods are bound to a node", bound, ro.Spec.Pods)
	} else {
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonPodsNotBound
		c.Message = fmt.Sprintf("%d of %d pods are bound to a node; %d are not", bound, ro.Spec.Pods, ro.Spec.Pods-bound)
	}
	s.Conditions = []metav1.Condition{c}
	return s, "", nil
}

// selectors reads the replica's selectors; an error names the field.
func selectors(ro *v1alpha1.ReplicaObservation) ([]labels.Selector, error) {
	name := fmt.Sprintf("ReplicaObservation %s/%s", ro.Namespace, ro.Name)
	if ro.Spec.Pods < 1 {
		return nil, fmt.Errorf("%s: spec.pods: %d; a replica runs at least 1 pod", name, ro.Spec.Pods)
	}
	if len(ro.Spec.Selectors) == 0 {
		return nil, fmt.Errorf("%s: spec.selectors: none; a pod is the replica's when it matches one", name)
	}
	out := make([]labels.Selector, 0, len(ro.Spec.Selectors))
	for i := range ro.Spec.Selectors {
		s := &ro.Spec.Selectors[i]
		if len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0 {
			return nil, fmt.Errorf("%s: spec.selectors[%d]: empty; it would select every pod of the namespace", name, i)
		}
		sel, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			return nil, fmt.Errorf("%s: spec.selectors[%d]: %w", name, i, err)
		}
		out = append(out, sel)
	}
	return out, nil
}

// sameReplica is whether the status already says what want says.
func sameReplica(have, want v1alpha1.ReplicaObservationStatus, generation int64) bool {
	if (have.ScheduledPods == nil) != (want.ScheduledPods == nil) || have.ScheduledPods != nil && *have.ScheduledPods != *want.ScheduledPods {
		return false
	}
	for _, c := range want.Conditions {
		h := meta.FindStatusCondition(have.Conditions, c.Type)
		if h == nil || h.Status != c.Status || h.Reason != c.Reason || h.Message != c.Message || h.ObservedGeneration != generation {
			return false
		}
	}
	return true
}
