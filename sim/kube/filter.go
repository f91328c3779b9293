package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
)

// Reasons a node does not fit a pod, as kube-scheduler words them.
const (
	reasonUnschedulable         = "node(s) were unschedulable"
	reasonTaint                 = "node(s) had untolerated taint"
	reasonSelector              = "node(s) didn't match Pod's node affinity/selector"
	reasonPods                  = "Too many pods"
	reasonCPU                   = "Insufficient cpu"
	reasonMemory                = "Insufficient memory"
	reasonAffinity              = "node(s) didn't match pod affinity rules"
	reasonAntiAffinity          = "node(s) didn't match pod anti-affinity rules"
	reasonExistingAntiAffinity  = "node(s) didn't satisfy existing pods anti-affinity rules"
	reasonClaims                = "cannot allocate all claims"
	reasonClaimNotAvailable     = "resourceclaim not available on the node"
	reasonExtendedResourceNoFit = "cannot fit resource"
)

// cycle is what one scheduling cycle of a pod computes once, before it
// tries nodes: as the plugins' PreFilter does.
type cycle struct {
	pod      *Pod
	affinity nodeaffinity.RequiredNodeAffinity
	pods     podAffinityCounts
	// toAllocate are the pod's claims not yet allocated; allocator
	// allocates them, and the claim for its extended resources backed by
	// DRA, if it has any, last.
	toAllocate []*resourceapi.ResourceClaim
	allocator  structured.Allocator
	// extended are the pod's requests of extended resources when one of
	// them is backed by DRA, nil otherwise.
	extended map[corev1.ResourceName]int64
}

func (c *Cluster) newCycle(ctx context.Context, p *Pod) (*cycle, error) {
	cy := &cycle{pod: p, affinity: nodeaffinity.GetRequiredNodeAffinity(p.Obj), pods: c.podAffinityCounts(p)}
	for _, rc := range p.Claims {
		if rc.Status.Allocation == nil {
			cy.toAllocate = append(cy.toAllocate, rc)
		}
	}
	cy.extended = c.draExtended(p)
	if len(cy.toAllocate) == 0 && cy.extended == nil {
		return cy, nil
	}
	var slices []*resourceapi.ResourceSlice
	for _, n := range c.nodes {
		for _, s := range n.Slices {
			slices = append(slices, c.patched(s))
		}
	}
	allocated := c.allocated
	if c.mutation == IgnoreDevicesInUse {
		allocated = emptyAllocatedState()
	}
	// A new allocator per cycle, as the DynamicResources plugin's PreFilter
	// makes one: the devices allocated change with every binding.
	a, err := structured.NewAllocator(ctx, c.features(), allocated, c.classes, slices, c.cel)
	if err != nil {
		return nil, fmt.Errorf("cannot allocate claims of pod %s: %w", p.Obj.Name, err)
	}
	cy.allocator = a
	return cy, nil
}

// filter says why a node does not fit the cycle's pod ("" when it fits)
// and, when it fits, the allocation of each claim to allocate and the
// claim made for its extended resources on the node, if any. An error is
// a broken claim or class, not a misfit.
func (c *Cluster) filter(ctx context.Context, cy *cycle, n *Node) (string, *nodeAllocation, error) {
	p, node := cy.pod, n.Obj
	logger := klog.FromContext(ctx)
	if node.Spec.Unschedulable && c.mutation != IgnoreCordon && !corev1helpers.TolerationsTolerateTaint(logger, p.Obj.Spec.Tolerations,
		&corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}, false) {
		return reasonUnschedulable, nil, nil
	}
	if _, bad := corev1helpers.FindMatchingUntoleratedTaint(logger, node.Spec.Taints, p.Obj.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule && c.mutation != IgnoreNoSchedule || t.Effect == corev1.TaintEffectNoExecute && c.mutation != IgnoreNoExecute
	}, false); bad {
		return reasonTaint, nil, nil
	}
	if ok, _ := cy.affinity.Match(node); !ok && c.mutation != IgnoreNodeAffinity {
		return reasonSelector, nil, nil
	}
	if reason := c.resourcesFit(n, p); reason != "" {
		return reason, nil, nil
	}
	if reason := c.podAffinityRejects(cy, n); reason != "" {
		return reason, nil, nil
	}
	return c.filterClaims(ctx, cy, n)
}

// filterClaims is DynamicResources' filter: the claims already allocated
// must be usable on the node, and the allocator must allocate the others
// there.
func (c *Cluster) filterClaims(ctx context.Context, cy *cycle, n *Node) (string, *nodeAllocation, error) {
	p, node := cy.pod, n.Obj
	extendedClaim, reason := c.extendedClaim(cy, n)
	if reason != "" {
		return reason, nil, nil
	}
	if extendedClaim == nil && len(p.Claims) == 0 {
		return "", nil, nil
	}
	for _, rc := range p.Claims {
		if a := rc.Status.Allocation; a != nil && a.NodeSelector != nil && c.mutation != IgnoreAllocatedNodeSelector {
			ok, err := corev1helpers.MatchNodeSelectorTerms(node, a.NodeSelector)
			if err != nil {
				return "", nil, fmt.Errorf("cannot read the node selector of claim %s's allocation: %w", rc.Name, err)
			}
			if !ok {
				return reasonClaimNotAvailable, nil, nil
			}
		}
	}
	if cy.allocator == nil {
		return "", nil, nil
	}
	claims := cy.toAllocate
	if cy.extended != nil {
		if extendedClaim == nil {
			// Every extended resource is a device plugin's on this node:
			// the plugin allocates its claim with no requests.
			extendedClaim = emptyExtendedClaim(p.Obj)
		}
		claims = append(slices.Clip(claims), extendedClaim)
	}
	results, err := cy.allocator.Allocate(ctx, node, claims)
	switch {
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		return err.Error(), nil, nil
	case err != nil:
		return "", nil, fmt.Errorf("cannot allocate claims of pod %s on node %s: %w", p.Obj.Name, node.Name, err)
	case len(results) != len(claims):
		return reasonClaims, nil, nil
	}
	na := &nodeAllocation{results: results}
	if cy.extended != nil {
		na.extended = extendedClaim
	}
	return "", na, nil
}

// nodeAllocation is what the allocator allocated a pod's claims on a node
// (nil where it had nothing to allocate): one result per claim to
// allocate, then the extended resources' claim's.
type nodeAllocation struct {
	results  []resourceapi.AllocationResult
	extended *resourceapi.ResourceClaim
}

// resourcesFit is NodeResourcesFit's filter: room for one more pod, and
// for its cpu, memory and extended resource requests, but for extended
// resources the node does not advertise and a DeviceClass backs, which
// DynamicResources allocates.
func (c *Cluster) resourcesFit(n *Node, p *Pod) string {
	if int64(len(n.Pods))+1 > n.pods && c.mutation != IgnorePodCount {
		return reasonPods
	}
	if p.requests.milliCPU > 0 && p.requests.milliCPU > n.allocatable.milliCPU-n.requested.milliCPU && c.mutation != IgnoreCPU {
		return reasonCPU
	}
	if p.requests.memory > 0 && p.requests.memory > n.allocatable.memory-n.requested.memory && c.mutation != IgnoreMemory {
		return reasonMemory
	}
	if c.mutation == IgnoreExtended {
		return ""
	}
	for name, q := range p.scalar {
		if c.delegatedToDRA(name, n) {
			continue
		}
		if q > n.scalarAllocatable[name]-n.scalarRequested[name] {
			return "Insufficient " + string(name)
		}
	}
	return ""
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

// emptyAllocatedState is an allocated state with nothing allocated.
func emptyAllocatedState() structured.AllocatedState {
	return structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
}
