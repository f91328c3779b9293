package kube

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Extended resources backed by DRA (DRAExtendedResource, GA in v1.37): a
// pod that requests an extended resource which a DeviceClass names (its
// extendedResourceName, or deviceclass.resource.kubernetes.io/<class>)
// gets, on a node that does not advertise the resource, a claim for that
// many devices of the class, which the DynamicResources plugin makes and
// allocates; on a node whose device plugin advertises it,
// NodeResourcesFit counts it as any extended resource.

// extendedClaimName is the name of the claim kube-scheduler makes for a
// pod's extended resources backed by DRA before it writes it (its
// specialClaimInMemName), and the prefix of the name the simulator gives
// it when the pod binds.
const extendedClaimName = "<extended-resources>"

// draExtended returns the pod's requests of extended resources when one of
// them is backed by a DeviceClass (the DynamicResources plugin's
// preFilterExtendedResources), nil otherwise, or when the pod already has
// its claim.
func (c *Cluster) draExtended(p *Pod) map[corev1.ResourceName]int64 {
	if c.mutation == IgnoreDRAExtended || p.Obj.Status.ExtendedResourceClaimStatus != nil {
		return nil
	}
	reqs := resourcehelper.PodRequests(p.Obj, resourcehelper.PodResourcesOptions{})
	backed := false
	for name, q := range reqs {
		if !q.IsZero() && isDRAExtendedResourceName(name) && c.extended.GetDeviceClass(name) != nil {
			backed = true
		}
	}
	if !backed {
		return nil
	}
	out := map[corev1.ResourceName]int64{}
	for name, q := range reqs {
		if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
			out[name] = q.Value()
		}
	}
	return out
}

// delegatedToDRA reports whether NodeResourcesFit leaves an extended
// resource to DynamicResources on the node: the node does not advertise it
// and a DeviceClass backs it.
func (c *Cluster) delegatedToDRA(name corev1.ResourceName, n *Node) bool {
	if c.mutation == IgnoreDRAExtended || n.scalarAllocatable[name] > 0 {
		return false
	}
	return c.extended.GetDeviceClass(name) != nil
}

// extendedClaim is the claim of the pod's extended resources that the
// node must allocate through DRA (filterExtendedResources): nil when the
// pod has none or the node's device plugins advertise them all. The reason
// is set when the node has neither a device plugin nor a DeviceClass for
// one of them.
func (c *Cluster) extendedClaim(cy *cycle, n *Node) (*resourceapi.ResourceClaim, string) {
	if cy.extended == nil {
		return nil, ""
	}
	need := map[corev1.ResourceName]int64{}
	for name, q := range cy.extended {
		if !isDRAExtendedResourceName(name) || q == 0 {
			continue
		}
		allocatable, advertised := n.scalarAllocatable[name]
		switch {
		case c.extended.GetDeviceClass(name) != nil && allocatable == 0:
			need[name] = q
		case !advertised:
			return nil, reasonExtendedResourceNoFit
		}
	}
	if len(need) == 0 {
		return nil, ""
	}
	rc := emptyExtendedClaim(cy.pod.Obj)
	rc.Spec.Devices.Requests = c.extendedRequests(cy.pod.Obj, need)
	return rc, ""
}

// emptyExtendedClaim is the claim the DynamicResources plugin makes in
// memory for a pod's extended resources, before it knows the node: owned
// by the pod, without requests.
func emptyExtendedClaim(p *corev1.Pod) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: p.Namespace, Name: extendedClaimName, GenerateName: p.Name + "-extended-resources-",
			UID:             types.UID("extended-resources-" + string(p.UID)),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID, Controller: new(true)}},
			Annotations:     map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"},
		},
	}
}

// extendedRequests are the device requests of the extended resources a
// node must allocate through DRA, as createRequestsAndMappings builds
// them: per resource, in name order, one request per long-lived container
// (a regular container or a sidecar) that asks for it, for what it asks,
// and one for the largest of what the other init containers ask beyond
// what the long-lived containers after them already have, named
// container-<index>-request-<index of the resource among the container's
// requests>; sorted by name.
func (c *Cluster) extendedRequests(p *corev1.Pod, need map[corev1.ResourceName]int64) []resourceapi.DeviceRequest {
	containers := append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...)
	inits := len(p.Spec.InitContainers)
	var out []resourceapi.DeviceRequest
	for _, name := range slices.Sorted(maps.Keys(need)) {
		class := c.extended.GetDeviceClass(name)
		if class == nil {
			continue
		}
		longLived := make([]*resourceapi.DeviceRequest, len(containers))
		for i := range containers {
			if i < inits && !isSidecar(containers[i]) {
				continue
			}
			longLived[i] = containerRequest(i, &containers[i], name, class.Name, nil)
		}
		var largest *resourceapi.DeviceRequest
		for i := range inits {
			if isSidecar(containers[i]) {
				continue
			}
			if r := containerRequest(i, &containers[i], name, class.Name, longLived[i:]); r != nil && (largest == nil || largest.Exactly.Count < r.Exactly.Count) {
				largest = r
			}
		}
		if largest != nil {
			out = append(out, *largest)
		}
		for _, r := range longLived {
			if r != nil {
				out = append(out, *r)
			}
		}
	}
	slices.SortFunc(out, func(a, b resourceapi.DeviceRequest) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func isSidecar(ctr corev1.Container) bool {
	return ctr.RestartPolicy != nil && *ctr.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// containerRequest is the request a container needs of an extended
// resource beyond what reusable requests (those of the long-lived
// containers that start after an init container) already give it, or nil.
func containerRequest(index int, ctr *corev1.Container, name corev1.ResourceName, class string, reusable []*resourceapi.DeviceRequest) *resourceapi.DeviceRequest {
	q, ok := ctr.Resources.Requests[name]
	if !ok {
		return nil
	}
	want, ok := q.AsInt64()
	if !ok || want == 0 {
		return nil
	}
	var have int64
	for _, r := range reusable {
		if r != nil {
			have += r.Exactly.Count
			if have >= want {
				return nil
			}
		}
	}
	keys := make([]string, 0, len(ctr.Resources.Requests))
	for k := range ctr.Resources.Requests {
		keys = append(keys, string(k))
	}
	slices.Sort(keys)
	return &resourceapi.DeviceRequest{
		Name: fmt.Sprintf("container-%d-request-%d", index, slices.Index(keys, string(name))),
		Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: class,
			AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
			Count:           want - have,
		},
	}
}
