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
	"k8s.io/apimachinery/pkg/util/validation"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
)

// Pod is a pod with its ResourceClaims, bound to a node or not.
type Pod struct {
	Obj *corev1.Pod
	// Claims are the pod's claims in the order its spec lists them (those
	// it names and those made from its templates, as its status names
	// them), then, for a bound pod, the claim kube-scheduler made for its
	// extended resources backed by DRA.
	Claims []*resourceapi.ResourceClaim

	node *Node
	// requests are what NodeResourcesFit's filter and BalancedAllocation
	// read; nonZero what the node's non-zero total counts of it (the
	// scheduler's PodInfo); scored what NodeResourcesFit's score adds for
	// it (every container without a request at the defaults).
	requests, nonZero, scored res
	// scalar are the pod's requests of extended resources.
	scalar map[corev1.ResourceName]int64
	// affinity are the pod's inter-pod affinity terms.
	affinity podAffinity
	// preferredNodes are its preferred node affinity terms, or nil.
	preferredNodes *nodeaffinity.PreferredSchedulingTerms
	images         []string
}

// affinityTerm is a pod (anti-)affinity term, compiled as the scheduler's
// PodInfo compiles it: the namespaces it selects default to the pod's own.
type affinityTerm struct {
	selector    labels.Selector
	namespaces  sets.Set[string]
	topologyKey string
	// weight is a preferred term's weight; a required term's is
	// hardPodAffinityWeight.
	weight int64
}

// podAffinity are a pod's required and preferred affinity and
// anti-affinity terms.
type podAffinity struct {
	required, antiRequired, preferred, antiPreferred []affinityTerm
}

func (a podAffinity) any() bool {
	return len(a.required)+len(a.antiRequired)+len(a.preferred)+len(a.antiPreferred) > 0
}

// NewPod reads a pod and its claims: first those of its spec's
// resourceClaims that have a claim (named, or made from a template and
// named in its status), in that order, then, for a pod already bound, the
// claim its status names for its extended resources backed by DRA. It
// refuses what the binder does not model: explicit topology spread
// constraints, node affinity by a field other than metadata.name, affinity terms with a namespace
// selector or label keys, volumes other than emptyDir, configMap, secret,
// downwardAPI, projected and hostPath, requests of anything but cpu,
// memory and extended resources, host ports, and claims not made for the
// pod.
func NewPod(p *corev1.Pod, claims ...*resourceapi.ResourceClaim) (*Pod, error) {
	if err := supported(p); err != nil {
		return nil, fmt.Errorf("cannot bind pod %s: %w", p.Name, err)
	}
	pd := &Pod{Obj: p, Claims: claims}
	if err := pd.readClaims(claims); err != nil {
		return nil, fmt.Errorf("cannot bind pod %s: %w", p.Name, err)
	}
	// As the scheduler's PodInfo sums them: in-place resize on, pod-level
	// resources on, no status resources for a pod not yet running.
	opts := resourcehelper.PodResourcesOptions{UseStatusResources: true}
	reqs := resourcehelper.PodRequests(p, opts)
	pd.requests = res{milliCPU: reqs.Cpu().MilliValue(), memory: reqs.Memory().Value()}
	for name, q := range reqs {
		if name != corev1.ResourceCPU && name != corev1.ResourceMemory && !q.IsZero() {
			if pd.scalar == nil {
				pd.scalar = map[corev1.ResourceName]int64{}
			}
			pd.scalar[name] = q.Value()
		}
	}
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
	var err error
	if pd.affinity, err = readAffinity(p); err != nil {
		return nil, fmt.Errorf("cannot bind pod %s: %w", p.Name, err)
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0 {
		if pd.preferredNodes, err = nodeaffinity.NewPreferredSchedulingTerms(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution); err != nil {
			return nil, fmt.Errorf("cannot bind pod %s: preferred node affinity: %w", p.Name, err)
		}
	}
	for _, ctr := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		pd.images = append(pd.images, normalizedImageName(ctr.Image))
	}
	return pd, nil
}

// readClaims checks the claims against the pod's references, as the
// DynamicResources plugin resolves them: a claim made from a template must
// be owned by the pod.
func (p *Pod) readClaims(claims []*resourceapi.ResourceClaim) error {
	i := 0
	for j := range p.Obj.Spec.ResourceClaims {
		ref := &p.Obj.Spec.ResourceClaims[j]
		name, mustCheckOwner, err := resourceclaim.Name(p.Obj, ref)
		if err != nil {
			return fmt.Errorf("resourceClaims[%d]: %w", j, err)
		}
		if name == nil {
			// No claim was made from the template: nothing to allocate.
			continue
		}
		if i >= len(claims) || claims[i].Name != *name {
			return fmt.Errorf("resourceClaims[%d] names claim %s, which was not given in its place", j, *name)
		}
		if mustCheckOwner {
			if err := resourceclaim.IsForPod(p.Obj, claims[i], false); err != nil {
				return fmt.Errorf("resourceClaims[%d]: %w", j, err)
			}
		}
		i++
	}
	if st := p.Obj.Status.ExtendedResourceClaimStatus; st != nil && st.ResourceClaimName != "" {
		if i >= len(claims) || claims[i].Name != st.ResourceClaimName {
			return fmt.Errorf("its extended resources' claim %s was not given last", st.ResourceClaimName)
		}
		i++
	}
	if i != len(claims) {
		return fmt.Errorf("it has %d claims, %d given", i, len(claims))
	}
	return nil
}

// readAffinity compiles the pod's inter-pod affinity terms.
func readAffinity(p *corev1.Pod) (podAffinity, error) {
	var out podAffinity
	a := p.Spec.Affinity
	if a == nil {
		return out, nil
	}
	compile := func(what string, terms []corev1.PodAffinityTerm, weights []int32) ([]affinityTerm, error) {
		var ts []affinityTerm
		for i, t := range terms {
			sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
			if err != nil {
				return nil, fmt.Errorf("%s term %d: %w", what, i, err)
			}
			ns := sets.New(t.Namespaces...)
			if ns.Len() == 0 {
				ns.Insert(p.Namespace)
			}
			// A required term weighs in InterPodAffinity's score as a
			// bound pod's term, at hardPodAffinityWeight.
			at := affinityTerm{selector: sel, namespaces: ns, topologyKey: t.TopologyKey, weight: hardPodAffinityWeight}
			if weights != nil {
				at.weight = int64(weights[i])
			}
			ts = append(ts, at)
		}
		return ts, nil
	}
	weighted := func(w []corev1.WeightedPodAffinityTerm) ([]corev1.PodAffinityTerm, []int32) {
		terms := make([]corev1.PodAffinityTerm, len(w))
		weights := make([]int32, len(w))
		for i, t := range w {
			terms[i], weights[i] = t.PodAffinityTerm, t.Weight
		}
		return terms, weights
	}
	// kind compiles the required and the preferred terms of one kind of
	// affinity.
	kind := func(what string, required []corev1.PodAffinityTerm, preferred []corev1.WeightedPodAffinityTerm) ([]affinityTerm, []affinityTerm, error) {
		req, err := compile(what, required, nil)
		if err != nil {
			return nil, nil, err
		}
		terms, weights := weighted(preferred)
		pref, err := compile("preferred "+what, terms, weights)
		return req, pref, err
	}
	var err error
	if pa := a.PodAffinity; pa != nil {
		if out.required, out.preferred, err = kind("podAffinity", pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution); err != nil {
			return out, err
		}
	}
	if pa := a.PodAntiAffinity; pa != nil {
		if out.antiRequired, out.antiPreferred, err = kind("podAntiAffinity", pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution); err != nil {
			return out, err
		}
	}
	return out, nil
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
	for _, v := range p.Spec.Volumes {
		// The volumes no scheduler plugin reads: VolumeBinding,
		// VolumeRestrictions, VolumeZone and NodeVolumeLimits look at
		// claims, persistent and CSI volumes only.
		s := v.VolumeSource
		if s.EmptyDir == nil && s.ConfigMap == nil && s.Secret == nil && s.DownwardAPI == nil && s.Projected == nil && s.HostPath == nil {
			return fmt.Errorf("volume %s: only emptyDir, configMap, secret, downwardAPI, projected and hostPath volumes are modelled", v.Name)
		}
	}
	for _, ctr := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		if err := supportedContainer(ctr); err != nil {
			return err
		}
	}
	if p.Spec.Resources != nil {
		if err := supportedResources("the pod", p.Spec.Resources.Requests, p.Spec.Resources.Limits); err != nil {
			return err
		}
	}
	return nil
}

// supportedAffinity allows node affinity by labels and inter-pod affinity
// terms that select pods by label in listed namespaces (or the pod's own).
func supportedAffinity(a *corev1.Affinity) error {
	if a == nil {
		return nil
	}
	if na := a.NodeAffinity; na != nil && na.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for i, t := range na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, r := range t.MatchFields {
				// The one field a node selector reads; NodeAffinity's
				// PreFilter narrows the search by its In (nodeNames).
				if r.Key != metav1.ObjectNameField || (r.Operator != corev1.NodeSelectorOpIn && r.Operator != corev1.NodeSelectorOpNotIn) || len(r.Values) != 1 {
					return fmt.Errorf("required node affinity term %d: only matchFields of metadata.name, In or NotIn one name, are modelled", i)
				}
			}
		}
	}
	var terms []corev1.PodAffinityTerm
	if pa := a.PodAffinity; pa != nil {
		terms = append(terms, pa.RequiredDuringSchedulingIgnoredDuringExecution...)
		for _, w := range pa.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
	}
	if pa := a.PodAntiAffinity; pa != nil {
		terms = append(terms, pa.RequiredDuringSchedulingIgnoredDuringExecution...)
		for _, w := range pa.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
	}
	for i, t := range terms {
		if t.NamespaceSelector != nil || len(t.MatchLabelKeys) > 0 || len(t.MismatchLabelKeys) > 0 {
			return fmt.Errorf("pod (anti-)affinity term %d: namespaceSelector and match label keys are not modelled", i)
		}
	}
	return nil
}

// supportedContainer allows cpu, memory and extended resources, and no
// host port.
func supportedContainer(ctr corev1.Container) error {
	if err := supportedResources("container "+ctr.Name, ctr.Resources.Requests, ctr.Resources.Limits); err != nil {
		return err
	}
	for _, port := range ctr.Ports {
		if port.HostPort != 0 {
			return fmt.Errorf("container %s asks for host port %d; host ports are not modelled", ctr.Name, port.HostPort)
		}
	}
	return nil
}

func supportedResources(what string, lists ...corev1.ResourceList) error {
	for _, list := range lists {
		for name := range list {
			if name != corev1.ResourceCPU && name != corev1.ResourceMemory && !IsExtendedResourceName(name) {
				return fmt.Errorf("%s asks for %s; only cpu, memory and extended resources are modelled", what, name)
			}
		}
	}
	return nil
}

// IsExtendedResourceName reports whether a resource is an extended
// resource, as Kubernetes' API helpers define one: a name with a domain
// other than kubernetes.io's, valid as a quota's requests.<name>.
func IsExtendedResourceName(name corev1.ResourceName) bool {
	s := string(name)
	if !strings.Contains(s, "/") || strings.Contains(s, corev1.ResourceDefaultNamespacePrefix) || strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix+s)) == 0
}

// isDRAExtendedResourceName is the scheduler's IsDRAExtendedResourceName:
// an extended resource, or the implicit name of a DeviceClass.
func isDRAExtendedResourceName(name corev1.ResourceName) bool {
	return IsExtendedResourceName(name) || strings.HasPrefix(string(name), resourceapi.ResourceDeviceClassPrefix)
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
