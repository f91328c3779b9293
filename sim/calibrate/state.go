package main

import (
	"context"
	"fmt"
	"math/rand/v2"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// state is one cluster and a pod to schedule in it: everything either
// scheduler reads.
type state struct {
	nodes   []*corev1.Node
	slices  []*resourceapi.ResourceSlice
	classes []*resourceapi.DeviceClass
	sets    []*appsv1.ReplicaSet
	stss    []*appsv1.StatefulSet
	// pods are bound, each with its claims allocated.
	pods   []*corev1.Pod
	claims []*resourceapi.ResourceClaim
	// pod is the pod to schedule; podClaims its claims, not allocated.
	pod       *corev1.Pod
	podClaims []*resourceapi.ResourceClaim
}

const (
	namespace = "ml"
	gpuDriver = "gpu.example.com"
	nicDriver = "nic.example.com"
	poolLabel = "pool"
)

// images the nodes may hold, with their sizes: multi-GB serving images and
// small ones that score little or nothing.
type image struct {
	name string
	size int64
}

func images() []image {
	return []image{
		{"vllm/vllm-openai:v0.11.0", 8 << 30},
		{"lmsysorg/sglang:v0.5.0", 10 << 30},
		{"nvcr.io/nim/llama:1.0", 6 << 30},
		{"busybox:1.36", 4 << 20},
		{"envoy:v1.30", 180 << 20},
	}
}

type gpuModel struct{ model, memory string }

func gpuModels() []gpuModel {
	return []gpuModel{{"H100", "80Gi"}, {"L4", "24Gi"}, {"A100", "40Gi"}}
}

// sample draws a random state. What it varies is what the scores read:
// cpu and memory allocatable and in use, images on nodes, pods with owners
// and how many of them each node runs, PreferNoSchedule taints, zones; and
// what the filters read: devices, their attributes, taints, cordons.
func sample(rng *rand.Rand) (*state, error) {
	st := &state{classes: []*resourceapi.DeviceClass{kube.NewClass("gpu", gpuDriver), kube.NewClass("nic", nicDriver)}}
	nNodes := 2 + rng.IntN(23)
	if rng.IntN(8) == 0 {
		nNodes = 40 + rng.IntN(60)
	}
	zones := rng.IntN(4)
	model := gpuModels()[rng.IntN(len(gpuModels()))]
	for i := range nNodes {
		st.addNode(rng, fmt.Sprintf("node-%02d", i), zones, model.model, model.memory)
	}
	for i := range rng.IntN(5) {
		name := fmt.Sprintf("rs-%d", i)
		st.sets = append(st.sets, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name)},
			Spec:       appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
		})
	}
	for i := range rng.IntN(3) {
		name := fmt.Sprintf("sts-%d", i)
		st.stss = append(st.stss, &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name)},
			Spec:       appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
		})
	}
	// Bind pods on random nodes they fit, through the simulator's filter
	// and the structured allocator, so that every allocation is real; the
	// scores play no part in where they land.
	c, err := st.cluster(nil)
	if err != nil {
		return nil, err
	}
	for i := range rng.IntN(2 * nNodes) {
		pod, claims := st.newPod(rng, fmt.Sprintf("bound-%03d", i), model.model, model.memory)
		p, err := kube.NewPod(pod, claims...)
		if err != nil {
			return nil, err
		}
		e, err := c.Evaluate(context.Background(), p, kube.Default)
		if err != nil {
			return nil, err
		}
		if e.Unschedulable() {
			continue
		}
		if err := c.Bind(p, e.Scored[rng.IntN(len(e.Scored))], e); err != nil {
			return nil, err
		}
		st.pods = append(st.pods, pod)
		st.claims = append(st.claims, claims...)
	}
	st.pod, st.podClaims = st.newPod(rng, "incoming", model.model, model.memory)
	return st, nil
}

func (st *state) addNode(rng *rand.Rand, name string, zones int, model, memory string) {
	cpus := []string{"8", "16", "32", "48", "64", "96", "192"}
	mems := []string{"32Gi", "64Gi", "128Gi", "256Gi", "512Gi", "1Ti", "2Ti"}
	labels := map[string]string{poolLabel: fmt.Sprintf("pool-%d", rng.IntN(2))}
	if zones > 0 {
		labels[corev1.LabelTopologyZone] = fmt.Sprintf("zone-%d", rng.IntN(zones))
		if rng.IntN(4) == 0 {
			labels[corev1.LabelTopologyRegion] = "region-a"
		}
	}
	n := kube.NewNode(name, resource.MustParse(cpus[rng.IntN(len(cpus))]), resource.MustParse(mems[rng.IntN(len(mems))]), labels)
	switch rng.IntN(20) {
	case 0:
		n.Spec.Unschedulable = true
	case 1:
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "maintenance", Effect: corev1.TaintEffectNoSchedule})
	case 2, 3, 4:
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "spot", Value: "true", Effect: corev1.TaintEffectPreferNoSchedule})
	case 5:
		n.Spec.Taints = append(n.Spec.Taints,
			corev1.Taint{Key: "spot", Value: "true", Effect: corev1.TaintEffectPreferNoSchedule},
			corev1.Taint{Key: "noisy", Effect: corev1.TaintEffectPreferNoSchedule})
	}
	for _, img := range images() {
		if rng.IntN(3) == 0 {
			n.Status.Images = append(n.Status.Images, corev1.ContainerImage{Names: []string{img.name}, SizeBytes: img.size})
		}
	}
	st.nodes = append(st.nodes, n)
	if gpus := rng.IntN(9); gpus > 0 {
		mem := memory
		if rng.IntN(6) == 0 {
			mem = "24Gi"
		}
		st.slices = append(st.slices, kube.NewSlice(name, gpuDriver, kube.NewDevices("gpu", gpus,
			map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: &model}},
			map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(mem)})...))
	}
	if rng.IntN(3) == 0 {
		st.slices = append(st.slices, kube.NewSlice(name, nicDriver, kube.NewDevices("nic", 1+rng.IntN(2), nil, nil)...))
	}
}

// newPod is a random pod and its claims: requests (some missing, some
// zero), an image, an owner or none, a gang's anti-affinity or none,
// tolerations, and claims of GPUs and NICs with or without a selector.
func (st *state) newPod(rng *rand.Rand, name, model, memory string) (*corev1.Pod, []*resourceapi.ResourceClaim) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{}},
		Spec: corev1.PodSpec{
			SchedulerName: corev1.DefaultSchedulerName,
			NodeSelector:  map[string]string{poolLabel: fmt.Sprintf("pool-%d", rng.IntN(2))},
		},
	}
	ctr := corev1.Container{Name: "engine", Image: images()[rng.IntN(len(images()))].name, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}}}
	if rng.IntN(6) > 0 {
		ctr.Resources.Requests[corev1.ResourceCPU] = resource.MustParse([]string{"0", "100m", "500m", "1", "2", "4", "8", "16", "24"}[rng.IntN(9)])
	}
	if rng.IntN(6) > 0 {
		ctr.Resources.Requests[corev1.ResourceMemory] = resource.MustParse([]string{"0", "256Mi", "1Gi", "4Gi", "16Gi", "32Gi", "64Gi", "128Gi", "200Gi"}[rng.IntN(9)])
	}
	pod.Spec.Containers = []corev1.Container{ctr}
	if rng.IntN(4) == 0 {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "sidecar", Image: images()[3+rng.IntN(2)].name})
	}
	switch k := rng.IntN(4); {
	case k < 2 && len(st.sets) > 0:
		rs := st.sets[rng.IntN(len(st.sets))]
		pod.Labels["app"] = rs.Name
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: new(true)}}
	case k == 2 && len(st.stss) > 0:
		ss := st.stss[rng.IntN(len(st.stss))]
		pod.Labels["app"] = ss.Name
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: ss.Name, UID: ss.UID, Controller: new(true)}}
	}
	if rng.IntN(5) == 0 {
		gang := fmt.Sprintf("gang-%d", rng.IntN(3))
		pod.Labels["gang"] = gang
		pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"gang": gang}}, TopologyKey: corev1.LabelHostname,
		}}}}
	}
	switch rng.IntN(5) {
	case 0:
		pod.Spec.Tolerations = []corev1.Toleration{{Key: "spot", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectPreferNoSchedule}}
	case 1:
		pod.Spec.Tolerations = []corev1.Toleration{{Key: "maintenance", Operator: corev1.TolerationOpExists}}
	}
	var reqs []resourceapi.DeviceRequest
	if gpus := rng.Int64N(4); gpus > 0 {
		var sel []string
		switch rng.IntN(3) {
		case 0:
			sel = append(sel, fmt.Sprintf(`device.capacity[%q].memory.compareTo(quantity(%q)) >= 0`, gpuDriver, memory))
		case 1:
			// Mostly the fleet's model: a selector that rules out every
			// node proves nothing.
			m := model
			if rng.IntN(4) == 0 {
				m = gpuModels()[rng.IntN(len(gpuModels()))].model
			}
			sel = append(sel, fmt.Sprintf(`device.attributes[%q].model == %q`, gpuDriver, m))
		}
		reqs = append(reqs, kube.Exactly("gpu", "gpu", gpus, sel...))
	}
	if rng.IntN(10) == 0 {
		reqs = append(reqs, kube.Exactly("nic", "nic", 1))
	}
	if len(reqs) == 0 {
		return pod, nil
	}
	claim := kube.NewClaim(namespace, name+"-claim", reqs...)
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "devices", ResourceClaimName: &claim.Name}}
	return pod, []*resourceapi.ResourceClaim{claim}
}

// cluster is the state as the simulator's binder reads it, made of
// copies: the nodes, slices, classes and owners, and the given bound pods
// with their claims.
func (st *state) cluster(pods []*corev1.Pod) (*kube.Cluster, error) {
	classes := make([]*resourceapi.DeviceClass, len(st.classes))
	for i, dc := range st.classes {
		classes[i] = dc.DeepCopy()
	}
	c := kube.NewCluster(classes...)
	for _, n := range st.nodes {
		var slices []*resourceapi.ResourceSlice
		for _, s := range st.slices {
			if *s.Spec.NodeName == n.Name {
				slices = append(slices, s.DeepCopy())
			}
		}
		if err := c.AddNode(n.DeepCopy(), slices...); err != nil {
			return nil, err
		}
	}
	for _, rs := range st.sets {
		if err := c.AddOwner(rs.DeepCopy()); err != nil {
			return nil, err
		}
	}
	for _, ss := range st.stss {
		if err := c.AddOwner(ss.DeepCopy()); err != nil {
			return nil, err
		}
	}
	for _, pod := range pods {
		p, err := kube.NewPod(pod.DeepCopy(), st.claimsOf(pod)...)
		if err != nil {
			return nil, err
		}
		if err := c.AddPod(p); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// claimsOf are copies of a pod's claims, in the order it lists them.
func (st *state) claimsOf(pod *corev1.Pod) []*resourceapi.ResourceClaim {
	var out []*resourceapi.ResourceClaim
	for _, ref := range pod.Spec.ResourceClaims {
		for _, rc := range append(append([]*resourceapi.ResourceClaim{}, st.claims...), st.podClaims...) {
			if rc.Name == *ref.ResourceClaimName {
				out = append(out, rc.DeepCopy())
			}
		}
	}
	return out
}
