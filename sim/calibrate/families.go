package main

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
)

// knob is a feature a family of states switches on in the generator.
type knob string

// The knobs.
const (
	modelplane        knob = "modelplane"
	large             knob = "large"
	noExecute         knob = "noexecute"
	partitionable     knob = "partitionable"
	consumable        knob = "consumable"
	adminAccess       knob = "admin-access"
	deviceTaints      knob = "device-taints"
	taintRules        knob = "taint-rules"
	bindingConditions knob = "binding-conditions"
	firstAvailable    knob = "first-available"
	allMode           knob = "all-mode"
	matchAttribute    knob = "match-attribute"
	multiSlice        knob = "multi-slice"
	multiClaim        knob = "multi-claim"
	sharedClaims      knob = "shared-claims"
	extendedResources knob = "extended-resources"
	devicePlugin      knob = "device-plugin"
	asymmetric        knob = "asymmetric-anti-affinity"
	preferred         knob = "preferred-affinity"
	podAffinity       knob = "pod-affinity"
)

// family is a kind of state: the base generator with some knobs on, and
// its weight in the sample (state i is of family i modulo the weights'
// sum, the families interleaved, so each family's share is its weight over
// the sum).
type family struct {
	name   string
	weight int
	knobs  []knob
	doc    string
}

func (f family) has(k knob) bool { return slices.Contains(f.knobs, k) }

// families are the kinds of state, their weights summing to 100.
func families() []family {
	return []family{
		{"base", 9, nil, "2 to 99 nodes, cordons, NoSchedule and PreferNoSchedule taints, images, owners, gangs' required anti-affinity, GPU and NIC claims by name"},
		{"modelplane", 10, []knob{modelplane}, "Modelplane v0.3's pods: no cpu or memory requests, the nvidia.com/gpu NoSchedule toleration (GPU nodes carry the taint), the modelplane.ai/pool node selector, GPUs claimed from a ResourceClaimTemplate, /dev/shm in memory, a ReplicaSet or LeaderWorkerSet's StatefulSet as owner"},
		{"large", 8, []knob{large}, "100 to 500 nodes, 2 to 5 pods scheduled one after another: percentageOfNodesToScore and nextStartNodeIndex"},
		{"noexecute", 4, []knob{noExecute}, "NoExecute node taints, tolerated by some pods"},
		{"partitionable", 4, []knob{partitionable}, "partitionable devices: a slice of shared counters (each GPU's memory) and one of whole GPUs and their halves drawing on them"},
		{"consumable", 5, []knob{consumable}, "consumable capacity: GPUs that allow multiple allocations, with a memory request policy, and claims requesting memory"},
		{"admin-access", 5, []knob{adminAccess}, "admin access: requests that take devices already in use"},
		{"device-taints", 4, []knob{deviceTaints}, "device taints (NoSchedule, NoExecute, None) on GPUs, tolerated by some requests"},
		{"taint-rules", 5, []knob{taintRules}, "DeviceTaintRules: a pool, a device, every GPU (None), the NICs of a node, one without a selector"},
		{"binding-conditions", 3, []knob{bindingConditions}, "devices with binding conditions that bind to the node (their driver meets the conditions at once)"},
		{"first-available", 5, []knob{firstAvailable}, "prioritized lists: firstAvailable sub-requests (more GPUs of the model, the count, one)"},
		{"all-mode", 4, []knob{allMode}, "requests of All the node's NICs"},
		{"match-attribute", 4, []knob{matchAttribute}, "claims of GPUs and NICs constrained to match a NUMA attribute"},
		{"multi-slice", 4, []knob{multiSlice}, "pools of two slices"},
		{"multi-claim", 4, []knob{multiClaim}, "pods of two and three claims, some from templates"},
		{"shared-claims", 3, []knob{sharedClaims}, "pods sharing a claim a bound pod already holds"},
		{"extended-resources", 4, []knob{extendedResources}, "extended resources backed by DRA: the gpu DeviceClass names example.com/gpu, pods request it, some nodes' device plugins advertise it instead"},
		{"device-plugin", 3, []knob{devicePlugin}, "an extended resource only a device plugin advertises (example.com/fpga)"},
		{"asymmetric-anti-affinity", 4, []knob{asymmetric}, "bound pods' required anti-affinity (hostname or zone) against pods that have none against them"},
		{"preferred-affinity", 4, []knob{preferred}, "preferred node affinity and preferred pod affinity and anti-affinity, on incoming and bound pods"},
		{"pod-affinity", 4, []knob{podAffinity}, "required pod affinity, to other pods or to the pod's own kind"},
	}
}

// familyOf is the family of state i.
func familyOf(i int) family {
	fams := families()
	var slots []family
	for round := 0; len(slots) < weightSum(); round++ {
		for _, f := range fams {
			if round < f.weight {
				slots = append(slots, f)
			}
		}
	}
	return slots[i%len(slots)]
}

func weightSum() int {
	n := 0
	for _, f := range families() {
		n += f.weight
	}
	return n
}

// feature is something of kube-scheduler's that a state can exercise,
// and how to tell.
type feature struct {
	name string
	in   func(*state) bool
}

// featureList are what the coverage table counts, each told from the state
// itself, whatever its family.
func featureList() []feature {
	anyNode := func(f func(*corev1.Node) bool) func(*state) bool {
		return func(st *state) bool { return slices.ContainsFunc(st.nodes, f) }
	}
	anyIncoming := func(f func(incoming) bool) func(*state) bool {
		return func(st *state) bool { return slices.ContainsFunc(st.incoming, f) }
	}
	anyRequest := func(f func(resourceapi.DeviceRequest) bool) func(*state) bool {
		return anyIncoming(func(in incoming) bool {
			for _, rc := range in.claims {
				if slices.ContainsFunc(rc.Spec.Devices.Requests, f) {
					return true
				}
			}
			return false
		})
	}
	anyDevice := func(f func(resourceapi.Device) bool) func(*state) bool {
		return func(st *state) bool {
			for _, s := range st.slices {
				if slices.ContainsFunc(s.Spec.Devices, f) {
					return true
				}
			}
			return false
		}
	}
	taint := func(e corev1.TaintEffect) func(*state) bool {
		return anyNode(func(n *corev1.Node) bool {
			return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Effect == e })
		})
	}
	return []feature{
		{"cordoned node", anyNode(func(n *corev1.Node) bool { return n.Spec.Unschedulable })},
		{"NoSchedule taint", taint(corev1.TaintEffectNoSchedule)},
		{"NoExecute taint", taint(corev1.TaintEffectNoExecute)},
		{"PreferNoSchedule taint", taint(corev1.TaintEffectPreferNoSchedule)},
		{"100 nodes or more", func(st *state) bool { return len(st.nodes) >= 100 }},
		{"two or more pods scheduled in turn", func(st *state) bool { return len(st.incoming) > 1 }},
		{"pod without cpu or memory requests", anyIncoming(func(in incoming) bool {
			return !slices.ContainsFunc(in.pod.Spec.Containers, func(c corev1.Container) bool { return len(c.Resources.Requests) > 0 })
		})},
		{"Modelplane v0.3 pod", anyIncoming(func(in incoming) bool { return in.pod.Labels["modelplane.ai/workload"] != "" })},
		{"claim from a template", anyIncoming(func(in incoming) bool {
			return slices.ContainsFunc(in.pod.Spec.ResourceClaims, func(r corev1.PodResourceClaim) bool { return r.ResourceClaimTemplateName != nil })
		})},
		{"two or more claims", anyIncoming(func(in incoming) bool { return len(in.pod.Spec.ResourceClaims) > 1 })},
		{"claim shared with a bound pod", anyIncoming(func(in incoming) bool { return len(in.pod.Spec.ResourceClaims) > len(in.claims) })},
		{"partitionable devices (shared counters)", func(st *state) bool {
			return slices.ContainsFunc(st.slices, func(s *resourceapi.ResourceSlice) bool { return len(s.Spec.SharedCounters) > 0 })
		}},
		{"pool of two or more slices", func(st *state) bool {
			return slices.ContainsFunc(st.slices, func(s *resourceapi.ResourceSlice) bool { return s.Spec.Pool.ResourceSliceCount > 1 })
		}},
		{"consumable capacity", anyDevice(func(d resourceapi.Device) bool {
			return d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
		})},
		{"device taint", anyDevice(func(d resourceapi.Device) bool { return len(d.Taints) > 0 })},
		{"DeviceTaintRule", func(st *state) bool { return len(st.rules) > 0 }},
		{"binding conditions", anyDevice(func(d resourceapi.Device) bool { return len(d.BindingConditions) > 0 })},
		{"admin access", anyRequest(func(r resourceapi.DeviceRequest) bool {
			return r.Exactly != nil && r.Exactly.AdminAccess != nil && *r.Exactly.AdminAccess
		})},
		{"device tolerations", anyRequest(func(r resourceapi.DeviceRequest) bool { return r.Exactly != nil && len(r.Exactly.Tolerations) > 0 })},
		{"capacity request", anyRequest(func(r resourceapi.DeviceRequest) bool { return r.Exactly != nil && r.Exactly.Capacity != nil })},
		{"prioritized list (firstAvailable)", anyRequest(func(r resourceapi.DeviceRequest) bool { return len(r.FirstAvailable) > 0 })},
		{"allocation mode All", anyRequest(func(r resourceapi.DeviceRequest) bool {
			return r.Exactly != nil && r.Exactly.AllocationMode == resourceapi.DeviceAllocationModeAll
		})},
		{"matchAttribute constraint", anyIncoming(func(in incoming) bool {
			return slices.ContainsFunc(in.claims, func(rc *resourceapi.ResourceClaim) bool { return len(rc.Spec.Devices.Constraints) > 0 })
		})},
		{"extended resource backed by DRA", anyIncoming(func(in incoming) bool { return requests(in.pod, gpuResource) })},
		{"extended resource of a device plugin", anyIncoming(func(in incoming) bool { return requests(in.pod, fpgaResource) })},
		{"owner known to PodTopologySpread", anyIncoming(func(in incoming) bool { return len(in.pod.OwnerReferences) > 0 })},
		{"image held by some nodes", func(st *state) bool {
			return slices.ContainsFunc(st.nodes, func(n *corev1.Node) bool { return len(n.Status.Images) > 0 })
		}},
		{"required anti-affinity of the pod", anyIncoming(func(in incoming) bool {
			a := in.pod.Spec.Affinity
			return a != nil && a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0
		})},
		{"bound pods' anti-affinity against a pod without", asymmetricIn},
		{"required pod affinity", anyIncoming(func(in incoming) bool {
			a := in.pod.Spec.Affinity
			return a != nil && a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0
		})},
		{"required pod affinity no bound pod meets, the pod its own", firstOfGroup},
		{"preferred node affinity", anyIncoming(func(in incoming) bool {
			a := in.pod.Spec.Affinity
			return a != nil && a.NodeAffinity != nil && len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0
		})},
		{"preferred pod (anti-)affinity", anyIncoming(func(in incoming) bool {
			a := in.pod.Spec.Affinity
			return a != nil && (a.PodAffinity != nil && len(a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0 ||
				a.PodAntiAffinity != nil && len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0)
		})},
		{"bound pods' preferred terms", func(st *state) bool {
			return slices.ContainsFunc(st.pods, func(p *corev1.Pod) bool {
				a := p.Spec.Affinity
				return a != nil && (a.PodAffinity != nil && len(a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0 ||
					a.PodAntiAffinity != nil && len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0)
			})
		}},
	}
}

func requests(p *corev1.Pod, name corev1.ResourceName) bool {
	return slices.ContainsFunc(p.Spec.Containers, func(c corev1.Container) bool { _, ok := c.Resources.Requests[name]; return ok })
}

// asymmetricIn reports whether a bound pod's required anti-affinity term
// selects a pod to schedule that has no required anti-affinity itself.
func asymmetricIn(st *state) bool {
	for _, in := range st.incoming {
		a := in.pod.Spec.Affinity
		if a != nil && a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			continue
		}
		for _, p := range st.pods {
			b := p.Spec.Affinity
			if b == nil || b.PodAntiAffinity == nil {
				continue
			}
			for _, t := range b.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				ns := sets.New(t.Namespaces...)
				if ns.Len() == 0 {
					ns.Insert(p.Namespace)
				}
				sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
				if err == nil && ns.Has(in.pod.Namespace) && sel.Matches(labels.Set(in.pod.Labels)) {
					return true
				}
			}
		}
	}
	return false
}

// firstOfGroup reports whether a pod to schedule has required pod affinity
// that it meets itself and no bound pod does: kube-scheduler lets the first
// of such a group land on any node with the terms' topology keys.
func firstOfGroup(st *state) bool {
	for _, in := range st.incoming {
		a := in.pod.Spec.Affinity
		if a == nil || a.PodAffinity == nil || len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
			continue
		}
		terms := a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		matches := func(p *corev1.Pod) bool {
			for _, t := range terms {
				sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
				if err != nil || p.Namespace != in.pod.Namespace || !sel.Matches(labels.Set(p.Labels)) {
					return false
				}
			}
			return true
		}
		if matches(in.pod) && !slices.ContainsFunc(st.pods, matches) {
			return true
		}
	}
	return false
}
