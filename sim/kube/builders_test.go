package kube

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	testNS     = "ml"
	gpuDriver  = "gpu.example.com"
	nicDriver  = "nic.example.com"
	gpuClass   = "gpu"
	nicClass   = "nic"
	poolLabel  = "pool"
	atLeast80G = `device.capacity["gpu.example.com"].memory.compareTo(quantity("80Gi")) >= 0`
)

// nodeWrapper builds a node and its slices.
type nodeWrapper struct {
	node   *corev1.Node
	slices []*resourceapi.ResourceSlice
}

// makeNode is a node of 32 cpus and 256Gi in pool "a", without devices.
func makeNode(name string) *nodeWrapper {
	return &nodeWrapper{node: NewNode(name, resource.MustParse("32"), resource.MustParse("256Gi"), map[string]string{poolLabel: "a"})}
}

func (w *nodeWrapper) cpu(q string) *nodeWrapper {
	w.node.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse(q)
	return w
}

func (w *nodeWrapper) label(k, v string) *nodeWrapper { w.node.Labels[k] = v; return w }

func (w *nodeWrapper) gpus(n int, memory string) *nodeWrapper {
	w.slices = append(w.slices, NewSlice(w.node.Name, gpuDriver, NewDevices("gpu", n,
		map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: new("H100")}},
		map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)})...))
	return w
}

func (w *nodeWrapper) nics(n int) *nodeWrapper {
	w.slices = append(w.slices, NewSlice(w.node.Name, nicDriver, NewDevices("nic", n, nil, nil)...))
	return w
}

func (w *nodeWrapper) taint(key string, effect corev1.TaintEffect) *nodeWrapper {
	w.node.Spec.Taints = append(w.node.Spec.Taints, corev1.Taint{Key: key, Effect: effect})
	return w
}

func (w *nodeWrapper) image(name string, size int64) *nodeWrapper {
	w.node.Status.Images = append(w.node.Status.Images, corev1.ContainerImage{Names: []string{name}, SizeBytes: size})
	return w
}

// podWrapper builds a pod and its claims.
type podWrapper struct {
	pod    *corev1.Pod
	claims []*resourceapi.ResourceClaim
}

// makePod is a pod pinned to pool "a", one container of image "serve:v1"
// requesting 1 cpu and 8Gi.
func makePod(name string) *podWrapper {
	return &podWrapper{pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID("pod-" + name), Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{poolLabel: "a"},
			Containers: []corev1.Container{{Name: "c", Image: "serve:v1", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("8Gi"),
			}}}},
		},
	}}
}

func (w *podWrapper) requests(cpu, memory string) *podWrapper {
	w.pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}
	return w
}

func (w *podWrapper) noRequests() *podWrapper {
	w.pod.Spec.Containers[0].Resources.Requests = nil
	return w
}

// claim adds a claim of the requests.
func (w *podWrapper) claim(reqs ...resourceapi.DeviceRequest) *podWrapper {
	name := fmt.Sprintf("%s-%d", w.pod.Name, len(w.claims))
	w.claims = append(w.claims, NewClaim(testNS, name, reqs...))
	w.pod.Spec.ResourceClaims = append(w.pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimName: &name})
	return w
}

func (w *podWrapper) labels(kv ...string) *podWrapper {
	for i := 0; i+1 < len(kv); i += 2 {
		w.pod.Labels[kv[i]] = kv[i+1]
	}
	return w
}

// owner makes a ReplicaSet of that name the pod's controller.
func (w *podWrapper) owner(rs string) *podWrapper {
	w.pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: types.UID(rs), Controller: new(true)}}
	return w
}

// antiAffinity keeps the pod off nodes with a pod labelled k=v.
func (w *podWrapper) antiAffinity(k, v string) *podWrapper {
	w.pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}, TopologyKey: corev1.LabelHostname,
	}}}}
	return w
}

func (w *podWrapper) tolerate(key string) *podWrapper {
	w.pod.Spec.Tolerations = append(w.pod.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists})
	return w
}

func (w *podWrapper) obj() *Pod {
	p, err := NewPod(w.pod, w.claims...)
	if err != nil {
		panic(err) // Test pods are built to be supported.
	}
	return p
}

func replicaSet(name string, matchLabels map[string]string) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
		Spec:       appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: matchLabels}},
	}
}

// cluster is a cluster of the nodes with the gpu and nic classes.
func cluster(nodes ...*nodeWrapper) *Cluster {
	c := NewCluster(NewClass(gpuClass, gpuDriver), NewClass(nicClass, nicDriver))
	for _, n := range nodes {
		if err := c.AddNode(n.node, n.slices...); err != nil {
			panic(err)
		}
	}
	return c
}

// boundTo binds the pod to a node with its first claim allocated the
// devices of that node's slices, named <driver>/<device>.
func (w *podWrapper) boundTo(node string, devices ...[2]string) *podWrapper {
	w.pod.Spec.NodeName = node
	if len(w.claims) == 0 {
		return w
	}
	var results []resourceapi.DeviceRequestAllocationResult
	for _, d := range devices {
		results = append(results, resourceapi.DeviceRequestAllocationResult{Request: w.claims[0].Spec.Devices.Requests[0].Name, Driver: d[0], Pool: node, Device: d[1]})
	}
	w.claims[0].Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	return w
}

func gpu(name string) [2]string { return [2]string{gpuDriver, name} }

// podTerm is a pod (anti-)affinity term over pods labelled k=v in
// the topology domain of key.
func podTerm(key, k, v string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}, TopologyKey: key}
}

func (w *podWrapper) affinity() *corev1.Affinity {
	if w.pod.Spec.Affinity == nil {
		w.pod.Spec.Affinity = &corev1.Affinity{}
	}
	return w.pod.Spec.Affinity
}

// requireAffinity puts the pod only in the domains of key that hold a pod
// labelled k=v.
func (w *podWrapper) requireAffinity(key, k, v string) *podWrapper {
	a := w.affinity()
	if a.PodAffinity == nil {
		a.PodAffinity = &corev1.PodAffinity{}
	}
	a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, podTerm(key, k, v))
	return w
}

// preferAffinity (weight > 0) or preferAntiAffinity (weight < 0) for the
// domains of key holding a pod labelled k=v.
func (w *podWrapper) prefer(weight int32, key, k, v string) *podWrapper {
	a := w.affinity()
	if weight > 0 {
		if a.PodAffinity == nil {
			a.PodAffinity = &corev1.PodAffinity{}
		}
		a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
			corev1.WeightedPodAffinityTerm{Weight: weight, PodAffinityTerm: podTerm(key, k, v)})
		return w
	}
	if a.PodAntiAffinity == nil {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
		corev1.WeightedPodAffinityTerm{Weight: -weight, PodAffinityTerm: podTerm(key, k, v)})
	return w
}

// preferNodes prefers, at the weight, nodes labelled k=v.
func (w *podWrapper) preferNodes(weight int32, k, v string) *podWrapper {
	a := w.affinity()
	if a.NodeAffinity == nil {
		a.NodeAffinity = &corev1.NodeAffinity{}
	}
	a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
		corev1.PreferredSchedulingTerm{Weight: weight, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{v}}}}})
	return w
}

// extended requests n of an extended resource.
func (w *podWrapper) extended(name corev1.ResourceName, n int64) *podWrapper {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	w.pod.Spec.Containers[0].Resources.Requests[name] = q
	w.pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{name: q}
	return w
}

// fromTemplate adds a claim of the requests made from a template, as the
// resourceclaim controller makes it: owned by the pod, named in its
// status.
func (w *podWrapper) fromTemplate(reqs ...resourceapi.DeviceRequest) *podWrapper {
	ref := fmt.Sprintf("t%d", len(w.claims))
	rc := NewClaim(testNS, w.pod.Name+"-"+ref+"-x7k2p", reqs...)
	rc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: w.pod.Name, UID: w.pod.UID, Controller: new(true)}}
	w.claims = append(w.claims, rc)
	w.pod.Spec.ResourceClaims = append(w.pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: ref, ResourceClaimTemplateName: new("tmpl")})
	w.pod.Status.ResourceClaimStatuses = append(w.pod.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: ref, ResourceClaimName: &rc.Name})
	return w
}

// advertise sets an extended resource's allocatable, as a device plugin
// does.
func (w *nodeWrapper) advertise(name corev1.ResourceName, n int64) *nodeWrapper {
	w.node.Status.Allocatable[name] = *resource.NewQuantity(n, resource.DecimalSI)
	return w
}
