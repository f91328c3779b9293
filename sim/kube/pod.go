package kube

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Pod is a pod with its ResourceClaims, bound to a node or not.
type Pod struct {
	Obj    *corev1.Pod
	Claims []*resourceapi.ResourceClaim

	node *Node
	// requests are what NodeResourcesFit's filter and BalancedAllocation
	// read; nonZero what the node's non-zero total counts of it (the
	// scheduler's PodInfo); scored what NodeResourcesFit's score adds for
	// it (every container without a request at the defaults).
	requests, nonZero, scored res
	// antiAffinity are the pod's required anti-affinity terms.
	antiAffinity []antiTerm
	images       []string
}

// antiTerm is a required pod anti-affinity term, compiled.
type antiTerm struct {
	selector    labels.Selector
	namespaces  sets.Set[string]
	topologyKey string
}

// NewPod reads a pod and its claims, in the order the pod lists them. It
// refuses what the binder does not model: affinity other than required pod
// anti-affinity and required node affinity, explicit topology spread
// constraints, requests of anything but cpu and memory, and claims the pod
// does not reference by name.
func NewPod(p *corev1.Pod, claims ...*resourceapi.ResourceClaim) (*Pod, error) {
	if err := supported(p); err != nil {
		return nil, fmt.Errorf("cannot bind pod %s: %w", p.Name, err)
	}
	if len(claims) != len(p.Spec.ResourceClaims) {
		return nil, fmt.Errorf("cannot bind pod %s: it references %d claims, %d given", p.Name, len(p.Spec.ResourceClaims), len(claims))
	}
	for i, ref := range p.Spec.ResourceClaims {
		if ref.ResourceClaimName == nil || *ref.ResourceClaimName != claims[i].Name {
			return nil, fmt.Errorf("cannot bind pod %s: resourceClaims[%d] does not name claim %s", p.Name, i, claims[i].Name)
		}
	}
	pd := &Pod{Obj: p, Claims: claims}
	// As the scheduler's PodInfo sums them: in-place resize on, pod-level
	// resources on, no status resources for a pod not yet running.
	opts := resourcehelper.PodResourcesOptions{UseStatusResources: true}
	reqs := resourcehelper.PodRequests(p, opts)
	pd.requests = res{milliCPU: reqs.Cpu().MilliValue(), memory: reqs.Memory().Value()}
	nonZero := reqs
	if missing := nonMissing(reqs, p); len(missing) > 0 {
		opts.NonMissingContainerRequests = missing
		nonZero = resourcehelper.PodRequests(p, opts)
	}
	pd.nonZero = res{milliCPU: nonZero.Cpu().MilliValue(), memory: nonZero.Memory().Value()}
	opts.NonMissingContainerRequests = corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(defaultMilliCPURequest, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(defaultMemoryRequest, resource.DecimalSI),
	}
	scored := resourcehelper.PodRequests(p, opts)
	pd.scored = res{milliCPU: scored.Cpu().MilliValue(), memory: scored.Memory().Value()}
	if a := p.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		for i, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
			if err != nil {
				return nil, fmt.Errorf("cannot bind pod %s: podAntiAffinity term %d: %w", p.Name, i, err)
			}
			ns := sets.New(t.Namespaces...)
			if ns.Len() == 0 {
				ns.Insert(p.Namespace)
			}
			pd.antiAffinity = append(pd.antiAffinity, antiTerm{selector: sel, namespaces: ns, topologyKey: t.TopologyKey})
		}
	}
	for _, ctr := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		pd.images = append(pd.images, normalizedImageName(ctr.Image))
	}
	return pd, nil
}

// Images are the pod's images, by the names ImageLocality looks them up
// by.
func (p *Pod) Images() []string { return p.images }

// Node is the name of the node the pod is bound to, or "".
func (p *Pod) Node() string {
	if p.node == nil {
		return ""
	}
	return p.node.Obj.Name
}

// The scheduler's defaults for a container that requests no cpu or memory
// (pkg/scheduler/util).
const (
	defaultMilliCPURequest int64 = 100
	defaultMemoryRequest   int64 = 200 * 1024 * 1024
)

// nonMissing is what the scheduler fills in for containers that request
// no cpu or memory: the defaults, unless pod-level requests set them.
func nonMissing(reqs corev1.ResourceList, p *corev1.Pod) corev1.ResourceList {
	cpu := *resource.NewMilliQuantity(defaultMilliCPURequest, resource.DecimalSI)
	mem := *resource.NewQuantity(defaultMemoryRequest, resource.DecimalSI)
	if !resourcehelper.IsPodLevelRequestsSet(p) {
		return corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem}
	}
	out := corev1.ResourceList{}
	if _, ok := reqs[corev1.ResourceCPU]; !ok {
		out[corev1.ResourceCPU] = cpu
	}
	if _, ok := reqs[corev1.ResourceMemory]; !ok {
		out[corev1.ResourceMemory] = mem
	}
	return out
}

// supported says why the binder cannot bind a pod as kube-scheduler
// would, or nil.
func supported(p *corev1.Pod) error {
	if err := supportedAffinity(p.Spec.Affinity); err != nil {
		return err
	}
	if len(p.Spec.TopologySpreadConstraints) > 0 {
		return errors.New("explicit topologySpreadConstraints are not modelled")
	}
	if len(p.Spec.Volumes) > 0 {
		return errors.New("volumes are not modelled")
	}
	for _, ctr := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		if err := supportedContainer(ctr); err != nil {
			return err
		}
	}
	for i, ref := range p.Spec.ResourceClaims {
		if ref.ResourceClaimName == nil {
			return fmt.Errorf("resourceClaims[%d] names no claim; claim templates are not modelled", i)
		}
	}
	return nil
}

// supportedAffinity allows required node affinity and required pod
// anti-affinity by label selector: the terms no score plugin reads.
func supportedAffinity(a *corev1.Affinity) error {
	switch {
	case a == nil:
		return nil
	case a.PodAffinity != nil:
		return errors.New("pod affinity is not modelled")
	case a.NodeAffinity != nil && len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0:
		return errors.New("preferred node affinity is not modelled")
	case a.PodAntiAffinity == nil:
		return nil
	case len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0:
		return errors.New("preferred pod anti-affinity is not modelled")
	}
	for i, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if t.NamespaceSelector != nil || len(t.MatchLabelKeys) > 0 || len(t.MismatchLabelKeys) > 0 {
			return fmt.Errorf("podAntiAffinity term %d: namespaceSelector and match label keys are not modelled", i)
		}
	}
	return nil
}

// supportedContainer allows cpu and memory only, and no host port.
func supportedContainer(ctr corev1.Container) error {
	for _, list := range []corev1.ResourceList{ctr.Resources.Requests, ctr.Resources.Limits} {
		for name := range list {
			if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
				return fmt.Errorf("container %s asks for %s; only cpu and memory are modelled", ctr.Name, name)
			}
		}
	}
	for _, port := range ctr.Ports {
		if port.HostPort != 0 {
			return fmt.Errorf("container %s asks for host port %d; host ports are not modelled", ctr.Name, port.HostPort)
		}
	}
	return nil
}

// normalizedImageName is the name ImageLocality looks an image up by: with
// ":latest" when it has no tag.
func normalizedImageName(name string) string {
	if strings.LastIndex(name, ":") <= strings.LastIndex(name, "/") {
		name += ":latest"
	}
	return name
}

// owner is the selector of the pod's controller, if the cluster knows it.
func (c *Cluster) owner(p *corev1.Pod) labels.Selector {
	ref := metav1.GetControllerOfNoCopy(p)
	if ref == nil {
		return labels.Everything()
	}
	var kind string
	switch {
	case ref.APIVersion == "apps/v1" && ref.Kind == "ReplicaSet":
		kind = "ReplicaSet"
	case ref.APIVersion == "apps/v1" && ref.Kind == "StatefulSet":
		kind = "StatefulSet"
	case ref.APIVersion == "v1" && ref.Kind == "ReplicationController":
		kind = "ReplicationController"
	default:
		return labels.Everything()
	}
	if sel, ok := c.owners[ownerKey{kind, p.Namespace, ref.Name}]; ok {
		return sel
	}
	return labels.Everything()
}
