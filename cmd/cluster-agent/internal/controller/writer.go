package controller

import (
	"context"
	"fmt"

	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/metrics"
)

// FieldManager is the field manager of the agent's status writes.
const FieldManager = "cluster-agent"

// Writer writes an object's status.
type Writer interface {
	// WriteStatus replaces the status of the object as the agent's cache
	// holds it with status, on the condition that the object has not
	// changed since (its resourceVersion): two replicas of the agent
	// never interleave a stale report.
	WriteStatus(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, status any) error
}

// StatusWriter writes statuses through the status subresource, as the
// agent's field manager.
type StatusWriter struct {
	Client  dynamic.Interface
	Metrics *metrics.Metrics
	// Writable, if set, is asked before each write: false refuses it (the
	// replica is no longer the leader).
	Writable func() bool
}

// WriteStatus updates the object's status subresource with the object's
// resourceVersion: a conflict means another writer (another replica, an
// edit) came first, and the next round reads the object again.
func (w *StatusWriter) WriteStatus(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, status any) error {
	if w.Writable != nil && !w.Writable() {
		return fmt.Errorf("cannot write the status of %s %s: this replica is not the leader", gvr.Resource, name(obj))
	}
	s, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return fmt.Errorf("cannot encode the status of %s %s: %w", gvr.Resource, name(obj), err)
	}
	u := obj.DeepCopy()
	u.Object["status"] = s
	_, err = w.Client.Resource(gvr).Namespace(obj.GetNamespace()).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: FieldManager})
	kind := gvr.Resource
	switch {
	case err == nil:
		w.Metrics.Writes.WithLabelValues(kind, "ok").Inc()
		return nil
	case kerrors.IsConflict(err):
		w.Metrics.Writes.WithLabelValues(kind, "conflict").Inc()
	default:
		w.Metrics.Writes.WithLabelValues(kind, "error").Inc()
	}
	return fmt.Errorf("cannot write the status of %s %s: %w", gvr.Resource, name(obj), err)
}

func name(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}
