package kube

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
)

// Reasons a node does not fit a pod, as kube-scheduler words them.
const (
	reasonUnschedulable = "node(s) were unschedulable"
	reasonTaint         = "node(s) had untolerated taint"
	reasonSelector      = "node(s) didn't match Pod's node affinity/selector"
	reasonPods          = "Too many pods"
	reasonCPU           = "Insufficient cpu"
	reasonMemory        = "Insufficient memory"
	reasonAntiAffinity  = "node(s) didn't match pod anti-affinity rules"
	reasonClaims        = "cannot allocate all claims"
)

// cycle is what one scheduling cycle of a pod computes once, before it
// tries nodes: as the plugins' PreFilter does.
type cycle struct {
	pod      *Pod
	affinity nodeaffinity.RequiredNodeAffinity
	// toAllocate are the pod's claims not yet allocated; allocator
	// allocates them.
	toAllocate []*resourceapi.ResourceClaim
	allocator  structured.Allocator
}

func (c *Cluster) newCycle(ctx context.Context, p *Pod) (*cycle, error) {
	cy := &cycle{pod: p, affinity: nodeaffinity.GetRequiredNodeAffinity(p.Obj)}
	for _, rc := range p.Claims {
		if rc.Status.Allocation == nil {
			cy.toAllocate = append(cy.toAllocate, rc)
		}
	}
	if len(cy.toAllocate) == 0 {
		return cy, nil
	}
	var slices []*resourceapi.ResourceSlice
	for _, n := range c.nodes {
		slices = append(slices, n.Slices...)
	}
	// A new allocator per cycle, as the DynamicResources plugin's PreFilter
	// makes one: the devices allocated change with every binding.
	a, err := structured.NewAllocator(ctx, Features(), c.allocated, c.classes, slices, c.cel)
	if err != nil {
		return nil, fmt.Errorf("cannot allocate claims of pod %s: %w", p.Obj.Name, err)
	}
	cy.allocator = a
	return cy, nil
}

// filter says why a node does not fit the cycle's pod ("" when it fits)
// and, when it fits, the allocation of each claim to allocate. An error is
// a broken claim or class, not a misfit.
func (c *Cluster) filter(ctx context.Context, cy *cycle, n *Node) (string, []resourceapi.AllocationResult, error) {
	p, node := cy.pod, n.Obj
	logger := klog.FromContext(ctx)
	if node.Spec.Unschedulable && !corev1helpers.TolerationsTolerateTaint(logger, p.Obj.Spec.Tolerations,
		&corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}, false) {
		return reasonUnschedulable, nil, nil
	}
	if _, bad := corev1helpers.FindMatchingUntoleratedTaint(logger, node.Spec.Taints, p.Obj.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false); bad {
		return reasonTaint, nil, nil
	}
	if ok, _ := cy.affinity.Match(node); !ok {
		return reasonSelector, nil, nil
	}
	if reason := n.ResourcesFit(p); reason != "" {
		return reason, nil, nil
	}
	if c.antiAffinityRejects(p, n) {
		return reasonAntiAffinity, nil, nil
	}
	for _, rc := range p.Claims {
		if a := rc.Status.Allocation; a != nil && a.NodeSelector != nil {
			ok, err := corev1helpers.MatchNodeSelectorTerms(node, a.NodeSelector)
			if err != nil {
				return "", nil, fmt.Errorf("cannot read the node selector of claim %s's allocation: %w", rc.Name, err)
			}
			if !ok {
				return "resourceclaim not available on the node", nil, nil
			}
		}
	}
	if cy.allocator == nil {
		return "", nil, nil
	}
	results, err := cy.allocator.Allocate(ctx, node, cy.toAllocate)
	switch {
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		return err.Error(), nil, nil
	case err != nil:
		return "", nil, fmt.Errorf("cannot allocate claims of pod %s on node %s: %w", p.Obj.Name, node.Name, err)
	case len(results) != len(cy.toAllocate):
		return reasonClaims, nil, nil
	}
	return "", results, nil
}

// ResourcesFit is NodeResourcesFit's filter: room for one more pod, and
// for its cpu and memory requests. It returns the reason it rejects the pod
// ("Insufficient cpu", say), or "" when the node has room for it.
func (n *Node) ResourcesFit(p *Pod) string {
	if int64(len(n.Pods))+1 > n.pods {
		return reasonPods
	}
	if p.requests.milliCPU > 0 && p.requests.milliCPU > n.allocatable.milliCPU-n.requested.milliCPU {
		return reasonCPU
	}
	if p.requests.memory > 0 && p.requests.memory > n.allocatable.memory-n.requested.memory {
		return reasonMemory
	}
	return ""
}

// antiAffinityRejects is InterPodAffinity's filter for required
// anti-affinity, both ways: no pod the incoming pod's terms match, and no
// pod whose terms match the incoming pod, in the node's topology domain.
func (c *Cluster) antiAffinityRejects(p *Pod, n *Node) bool {
	for _, t := range p.antiAffinity {
		for _, m := range c.nodes {
			if !sameDomain(n.Obj, m.Obj, t.topologyKey) {
				continue
			}
			for _, q := range m.Pods {
				if t.matches(q.Obj) {
					return true
				}
			}
		}
	}
	for q := range c.antiPods {
		for _, t := range q.antiAffinity {
			if sameDomain(n.Obj, q.node.Obj, t.topologyKey) && t.matches(p.Obj) {
				return true
			}
		}
	}
	return false
}

func (t antiTerm) matches(p *corev1.Pod) bool {
	return t.namespaces.Has(p.Namespace) && t.selector.Matches(labels.Set(p.Labels))
}

// sameDomain reports whether two nodes share a topology domain: both carry
// the key with the same value.
func sameDomain(a, b *corev1.Node, key string) bool {
	va, ok := a.Labels[key]
	if !ok {
		return false
	}
	vb, ok := b.Labels[key]
	return ok && va == vb
}
