package cluster

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
)

// Inject puts objects into the caches, or replaces them there, as the
// informers would on their events: for tests of what reads the view,
// without an API server. Handlers are not called.
func (c *Cluster) Inject(objs ...any) error {
	return c.each(objs, "inject", cache.Store.Update)
}

// Remove removes objects from the caches, as a deletion would.
func (c *Cluster) Remove(objs ...any) error {
	return c.each(objs, "remove", cache.Store.Delete)
}

// each does op to each object in the store of its kind.
func (c *Cluster) each(objs []any, verb string, op func(cache.Store, any) error) error {
	for _, o := range objs {
		s, err := c.storeOf(o)
		if err != nil {
			return err
		}
		if err := op(s, o); err != nil {
			return fmt.Errorf("cannot %s %T: %w", verb, o, err)
		}
	}
	return nil
}

// MarkSteeringSynced has SteeringPolicy read the caches of the steering
// policy and its binding as listed, for tests that inject them.
func (c *Cluster) MarkSteeringSynced() { c.steeringSynced = true }

func (c *Cluster) storeOf(o any) (cache.Store, error) {
	switch v := o.(type) {
	case *admissionregistrationv1.MutatingAdmissionPolicy:
		if c.policies == nil {
			return nil, fmt.Errorf("cannot inject MutatingAdmissionPolicy %s: the cluster serves none", v.Name)
		}
		return c.policies.GetIndexer(), nil
	case *admissionregistrationv1.MutatingAdmissionPolicyBinding:
		if c.bindings == nil {
			return nil, fmt.Errorf("cannot inject MutatingAdmissionPolicyBinding %s: the cluster serves none", v.Name)
		}
		return c.bindings.GetIndexer(), nil
	case *corev1.Node:
		return c.nodes.GetIndexer(), nil
	case *resourcev1.ResourceSlice:
		return c.slices.GetIndexer(), nil
	case *resourcev1.DeviceClass:
		return c.classes.GetIndexer(), nil
	case *resourcev1.ResourceClaim:
		return c.claims.GetIndexer(), nil
	case *resourcev1.DeviceTaintRule:
		if c.taintRules == nil {
			return nil, fmt.Errorf("cannot inject DeviceTaintRule %s: the cluster has none", v.Name)
		}
		return c.taintRules.GetIndexer(), nil
	case *corev1.Pod:
		inf := c.pods[v.Namespace]
		if inf == nil {
			inf = c.pods[""]
		}
		if inf == nil {
			return nil, fmt.Errorf("cannot inject Pod %s/%s: its namespace is not read", v.Namespace, v.Name)
		}
		return inf.GetIndexer(), nil
	case *unstructured.Unstructured:
		switch v.GetKind() {
		case v1alpha1.KindPoolObservation:
			return c.pools.GetIndexer(), nil
		case v1alpha1.KindReplicaObservation:
			return c.replicas.GetIndexer(), nil
		}
	}
	return nil, fmt.Errorf("cannot inject %T: not a kind the agent reads", o)
}
