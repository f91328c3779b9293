package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	fsv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// state is one cluster and the pods to schedule in it, in order:
// everything either scheduler reads.
type state struct {
	family  string
	nodes   []*corev1.Node
	slices  []*resourceapi.ResourceSlice
	classes []*resourceapi.DeviceClass
	rules   []*resourceapi.DeviceTaintRule
	sets    []*appsv1.ReplicaSet
	stss    []*appsv1.StatefulSet
	// pods are bound, each with its claims allocated.
	pods   []*corev1.Pod
	claims []*resourceapi.ResourceClaim
	// incoming are the pods to schedule, one after another.
	incoming []incoming
}

// incoming is a pod to schedule and the claims it needs, unallocated
// (those it names, those made from its templates, which its status
// names); a claim it shares with a bound pod is among the state's claims.
type incoming struct {
	pod    *corev1.Pod
	claims []*resourceapi.ResourceClaim
}

const (
	namespace = "ml"
	gpuDriver = "gpu.example.com"
	nicDriver = "nic.example.com"
	poolLabel = "pool"
	// gpuResource is the extended resource the gpu DeviceClass backs in
	// the extended-resources family; fpgaResource one only a device
	// plugin advertises.
	gpuResource  = "example.com/gpu"
	fpgaResource = "example.com/fpga"
	// numaAttribute is the NUMA node of GPUs and NICs alike, which a
	// claim's matchAttribute constraint can hold equal.
	numaAttribute = "example.com/numa"
	// gpuClass names the GPUs' DeviceClass, the GPU requests and the
	// devices' prefix alike; memory is their capacity and counter.
	gpuClass = "gpu"
	memory   = "memory"
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

// sampler draws one state of a family.
type sampler struct {
	rng   *rand.Rand
	fam   family
	st    *state
	model gpuModel
	// c is the simulator's view of the state while its bound pods are
	// placed.
	c *kube.Cluster
	n int
	// pools is how many node pools the nodes are dealt into.
	pools int
	// incoming is whether the pod being drawn is one to schedule.
	incoming bool
}

// bound is 1 while the sampler draws a bound pod, 0 for one to schedule.
func (s *sampler) bound() int {
	if s.incoming {
		return 0
	}
	return 1
}

// sample draws a random state of a family. What it varies is what the
// scores read: cpu and memory allocatable and in use, images on nodes,
// pods with owners and how many of them each node runs, PreferNoSchedule
// taints, zones, affinity terms; and what the filters read: devices, their
// attributes, counters, capacity and taints; node taints, cordons, affinity,
// extended resources. The bound pods are placed on random nodes they fit
// through the simulator's filter, so every allocation is the allocator's.
func sample(ctx context.Context, rng *rand.Rand, fam family) (*state, error) {
	s := &sampler{rng: rng, fam: fam, st: &state{family: fam.name}, model: gpuModels()[rng.IntN(len(gpuModels()))]}
	gpu := kube.NewClass(gpuClass, gpuDriver)
	if fam.has(extendedResources) {
		gpu.Spec.ExtendedResourceName = new(gpuResource)
	}
	s.st.classes = []*resourceapi.DeviceClass{gpu, kube.NewClass("nic", nicDriver)}
	nNodes := 2 + rng.IntN(23)
	if rng.IntN(8) == 0 {
		nNodes = 40 + rng.IntN(60)
	}
	if fam.has(large) {
		nNodes = 100 + rng.IntN(401)
	}
	zones := rng.IntN(4)
	s.pools = 2
	if fam.has(large) && rng.IntN(2) == 0 {
		// One pool: most nodes fit, the search stops early.
		s.pools = 1
	}
	for i := range nNodes {
		s.addNode(fmt.Sprintf("node-%03d", i), zones)
	}
	if fam.has(taintRules) {
		s.addTaintRules()
	}
	for i := range rng.IntN(5) {
		name := fmt.Sprintf("rs-%d", i)
		s.st.sets = append(s.st.sets, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name)},
			Spec:       appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
		})
	}
	for i := range rng.IntN(3) {
		name := fmt.Sprintf("sts-%d", i)
		s.st.stss = append(s.st.stss, &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name)},
			Spec:       appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
		})
	}
	var err error
	if s.c, err = s.st.cluster(nil, ""); err != nil {
		return nil, err
	}
	bound := rng.IntN(2 * nNodes)
	if fam.has(large) {
		bound = rng.IntN(nNodes)
	}
	for i := range bound {
		if err := s.bindOne(ctx, fmt.Sprintf("bound-%03d", i)); err != nil {
			return nil, err
		}
	}
	pods := 1 + rng.IntN(3)
	if fam.has(large) {
		pods = 2 + rng.IntN(4)
	}
	for i := range pods {
		pod, claims := s.newPod(fmt.Sprintf("incoming-%d", i), true)
		in := incoming{pod: pod}
		for _, rc := range claims {
			if rc.Status.Allocation == nil {
				in.claims = append(in.claims, rc)
			}
		}
		s.st.incoming = append(s.st.incoming, in)
	}
	return s.st, nil
}

// bindOne binds a new pod to a random node of those it fits, of up to
// eight tried, and adds it to the state; a pod that fits none is dropped.
func (s *sampler) bindOne(ctx context.Context, name string) error {
	pod, claims := s.newPod(name, false)
	p, err := kube.NewPod(pod, claims...)
	if err != nil {
		return err
	}
	var tries []string
	for range 8 {
		tries = append(tries, s.st.nodes[s.rng.IntN(len(s.st.nodes))].Name)
	}
	e, err := s.c.EvaluateOn(ctx, p, tries)
	if err != nil {
		return err
	}
	if e.Unschedulable() {
		return nil
	}
	if err := s.c.Bind(p, e.Scored[s.rng.IntN(len(e.Scored))], e); err != nil {
		return err
	}
	s.st.pods = append(s.st.pods, pod)
	for _, rc := range p.Claims {
		// A device whose driver attaches it at once.
		rc.Status.Devices = s.st.attached(rc.Status.Allocation, rc.Status.Devices)
		if !slices.Contains(s.st.claims, rc) {
			s.st.claims = append(s.st.claims, rc)
		}
	}
	return nil
}

func (s *sampler) addNode(name string, zones int) {
	rng, fam := s.rng, s.fam
	cpus := []string{"8", "16", "32", "48", "64", "96", "192"}
	mems := []string{"32Gi", "64Gi", "128Gi", "256Gi", "512Gi", "1Ti", "2Ti"}
	pool := fmt.Sprintf("pool-%d", rng.IntN(s.pools))
	labels := map[string]string{poolLabel: pool}
	if fam.has(modelplane) {
		labels = map[string]string{fsv1alpha1.LabelPool: pool}
	}
	if zones > 0 {
		labels[corev1.LabelTopologyZone] = fmt.Sprintf("zone-%d", rng.IntN(zones))
		if rng.IntN(4) == 0 {
			labels[corev1.LabelTopologyRegion] = "region-a"
		}
	}
	if rng.IntN(3) == 0 {
		labels["tier"] = []string{"spot", "reserved"}[rng.IntN(2)]
	}
	n := kube.NewNode(name, resource.MustParse(cpus[rng.IntN(len(cpus))]), resource.MustParse(mems[rng.IntN(len(mems))]), labels)
	if rng.IntN(10) == 0 {
		// A node of a few pods at most (kubelet's maxPods).
		setAllocatable(n, corev1.ResourcePods, int64(1+rng.IntN(3)))
	}
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
	if fam.has(noExecute) && rng.IntN(3) == 0 {
		key := []string{"node.kubernetes.io/unreachable", "drain"}[rng.IntN(2)]
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoExecute})
	}
	for _, img := range images() {
		if rng.IntN(3) == 0 {
			n.Status.Images = append(n.Status.Images, corev1.ContainerImage{Names: []string{img.name}, SizeBytes: img.size})
		}
	}
	if fam.has(devicePlugin) && rng.IntN(2) == 0 {
		setAllocatable(n, fpgaResource, int64(rng.IntN(5)))
	}
	gpus := rng.IntN(9)
	if fam.has(extendedResources) && gpus > 0 && rng.IntN(3) == 0 {
		// A node whose GPUs a device plugin advertises instead.
		setAllocatable(n, gpuResource, int64(gpus))
		gpus = 0
	}
	if fam.has(modelplane) && gpus > 0 {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule})
	}
	s.st.nodes = append(s.st.nodes, n)
	if gpus > 0 {
		s.addGPUs(name, gpus)
	}
	if rng.IntN(3) == 0 || fam.has(allMode) || fam.has(matchAttribute) {
		nics := kube.NewDevices("nic", 1+rng.IntN(2), nil, nil)
		for i := range nics {
			numa := int64(i % 2)
			nics[i].Attributes[numaAttribute] = resourceapi.DeviceAttribute{IntValue: &numa}
		}
		s.st.slices = append(s.st.slices, kube.NewSlice(name, nicDriver, nics...))
	}
}

func setAllocatable(n *corev1.Node, name corev1.ResourceName, count int64) {
	q := *resource.NewQuantity(count, resource.DecimalSI)
	n.Status.Allocatable[name] = q
	n.Status.Capacity[name] = q
}

// addGPUs publishes a node's GPUs: one slice, or two of one pool, or, for
// partitionable devices, a slice of counters and one of whole GPUs and
// their halves that draw on them; with taints, binding conditions, or
// shared (consumable) memory as the family has them.
func (s *sampler) addGPUs(node string, gpus int) {
	rng, fam := s.rng, s.fam
	mem := s.model.memory
	if rng.IntN(6) == 0 {
		mem = "24Gi"
	}
	model := s.model.model
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: &model}}
	devs := kube.NewDevices(gpuClass, gpus, attrs, map[resourceapi.QualifiedName]resource.Quantity{memory: resource.MustParse(mem)})
	for i := range devs {
		numa := int64(i % 2)
		devs[i].Attributes[numaAttribute] = resourceapi.DeviceAttribute{IntValue: &numa}
		if fam.has(deviceTaints) && rng.IntN(4) == 0 {
			effect := []resourceapi.DeviceTaintEffect{resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute, resourceapi.DeviceTaintEffectNone}[rng.IntN(3)]
			devs[i].Taints = append(devs[i].Taints, resourceapi.DeviceTaint{Key: "ecc-errors", Value: "high", Effect: effect})
		}
		if fam.has(bindingConditions) && rng.IntN(2) == 0 {
			devs[i].BindsToNode = new(true)
			devs[i].BindingConditions = []string{"attached"}
			devs[i].BindingFailureConditions = []string{"attach-failed"}
		}
		if fam.has(consumable) && rng.IntN(4) > 0 {
			devs[i].AllowMultipleAllocations = new(true)
			step := resource.MustParse("4Gi")
			devs[i].Capacity[memory] = resourceapi.DeviceCapacity{
				Value: resource.MustParse(mem),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default:    new(resource.MustParse("8Gi")),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: new(resource.MustParse("4Gi")), Step: &step},
				},
			}
			// Shares of the compute in tenths: a fractional range, which
			// v1.37 (DRAFractionalCapacityRange off) rounds up to whole
			// units, four to a device.
			devs[i].Capacity["compute"] = resourceapi.DeviceCapacity{
				Value: resource.MustParse("4"),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default:    new(resource.MustParse("100m")),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: new(resource.MustParse("100m")), Step: new(resource.MustParse("100m"))},
				},
			}
		}
	}
	switch {
	case fam.has(partitionable):
		// Each GPU is a counter set of memory; the whole GPU takes it all,
		// each half (a partition) half of it.
		counters := make([]resourceapi.CounterSet, 0, gpus)
		all := make([]resourceapi.Device, 0, 3*len(devs))
		for i, d := range devs {
			set := fmt.Sprintf("gpu-%d-counters", i)
			whole := resource.MustParse(mem)
			half := whole.DeepCopy()
			half.Set(whole.Value() / 2)
			counters = append(counters, resourceapi.CounterSet{Name: set, Counters: map[string]resourceapi.Counter{memory: {Value: whole}}})
			d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: map[string]resourceapi.Counter{memory: {Value: whole}}}}
			all = append(all, d)
			for h := range 2 {
				part := *d.DeepCopy()
				part.Name = fmt.Sprintf("gpu-%d-half-%d", i, h)
				part.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{memory: {Value: half}}
				part.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: map[string]resourceapi.Counter{memory: {Value: half}}}}
				all = append(all, part)
			}
		}
		countersSlice := kube.NewSlice(node, gpuDriver)
		countersSlice.Name += "-counters"
		countersSlice.Spec.SharedCounters = counters
		devices := kube.NewSlice(node, gpuDriver, all...)
		countersSlice.Spec.Pool.ResourceSliceCount, devices.Spec.Pool.ResourceSliceCount = 2, 2
		s.st.slices = append(s.st.slices, countersSlice, devices)
	case fam.has(multiSlice) && gpus > 1:
		a := kube.NewSlice(node, gpuDriver, devs[:gpus/2]...)
		b := kube.NewSlice(node, gpuDriver, devs[gpus/2:]...)
		a.Name += "-a"
		b.Name += "-b"
		a.Spec.Pool.ResourceSliceCount, b.Spec.Pool.ResourceSliceCount = 2, 2
		s.st.slices = append(s.st.slices, a, b)
	default:
		s.st.slices = append(s.st.slices, kube.NewSlice(node, gpuDriver, devs...))
	}
}

// addTaintRules adds DeviceTaintRules: one tainting a whole pool (a
// node's GPUs), one a single device, one every GPU of the driver with an
// effect that keeps nothing off (None), one without a selector.
func (s *sampler) addTaintRules() {
	rng := s.rng
	rule := func(name string, sel *resourceapi.DeviceTaintSelector, effect resourceapi.DeviceTaintEffect) {
		s.st.rules = append(s.st.rules, &resourceapi.DeviceTaintRule{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       resourceapi.DeviceTaintRuleSpec{DeviceSelector: sel, Taint: resourceapi.DeviceTaint{Key: "maintenance", Value: name, Effect: effect}},
		})
	}
	for i := range 1 + len(s.st.nodes)/4 {
		node := s.st.nodes[rng.IntN(len(s.st.nodes))].Name
		rule(fmt.Sprintf("pool-%d", i), &resourceapi.DeviceTaintSelector{Driver: new(gpuDriver), Pool: &node}, resourceapi.DeviceTaintEffectNoSchedule)
	}
	node := s.st.nodes[rng.IntN(len(s.st.nodes))].Name
	rule("device", &resourceapi.DeviceTaintSelector{Driver: new(gpuDriver), Pool: &node, Device: new("gpu-0")}, resourceapi.DeviceTaintEffectNoExecute)
	if rng.IntN(2) == 0 {
		node = s.st.nodes[rng.IntN(len(s.st.nodes))].Name
		rule("nic", &resourceapi.DeviceTaintSelector{Driver: new(nicDriver), Pool: &node}, resourceapi.DeviceTaintEffectNoSchedule)
	}
	rule("informational", &resourceapi.DeviceTaintSelector{Driver: new(gpuDriver)}, resourceapi.DeviceTaintEffectNone)
	rule("no-selector", nil, resourceapi.DeviceTaintEffectNoSchedule)
}

// newPod is a random pod of the family and its claims.
func (s *sampler) newPod(name string, incoming bool) (*corev1.Pod, []*resourceapi.ResourceClaim) {
	s.incoming = incoming
	if s.fam.has(modelplane) && s.rng.IntN(5) > 0 {
		return s.modelplanePod(name)
	}
	return s.plainPod(name, incoming)
}

// modelplanePod is a pod as Modelplane v0.3 composes it: no cpu or memory
// requests, the nvidia.com/gpu NoSchedule toleration, pinned to its pool
// by the modelplane.ai/pool node selector, its GPUs claimed from a
// ResourceClaimTemplate (the claim the resourceclaim controller made from
// it, owned by the pod and named in its status), /dev/shm in memory, and
// a Deployment's ReplicaSet or a LeaderWorkerSet's StatefulSet as owner.
func (s *sampler) modelplanePod(name string) (*corev1.Pod, []*resourceapi.ResourceClaim) {
	rng := s.rng
	pool := fmt.Sprintf("pool-%d", rng.IntN(s.pools))
	workload := fmt.Sprintf("qwen-%d", rng.IntN(3))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"modelplane.ai/workload": workload}},
		Spec: corev1.PodSpec{
			SchedulerName: corev1.DefaultSchedulerName,
			NodeSelector:  map[string]string{fsv1alpha1.LabelPool: pool},
			Tolerations:   []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name: "engine", Image: images()[rng.IntN(3)].name,
				VolumeMounts: []corev1.VolumeMount{{Name: "dshm", MountPath: "/dev/shm"}},
			}},
			Volumes: []corev1.Volume{{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}},
		},
	}
	if rng.IntN(2) == 0 && len(s.st.sets) > 0 {
		rs := s.st.sets[rng.IntN(len(s.st.sets))]
		pod.Labels["app"] = rs.Name
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: new(true)}}
	} else if len(s.st.stss) > 0 {
		ss := s.st.stss[rng.IntN(len(s.st.stss))]
		pod.Labels["app"] = ss.Name
		pod.Labels["leaderworkerset.sigs.k8s.io/name"] = workload
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: ss.Name, UID: ss.UID, Controller: new(true)}}
	}
	gpus := 1 + rng.Int64N(4)
	var sel []string
	if rng.IntN(2) == 0 {
		sel = append(sel, fmt.Sprintf(`device.attributes[%q].model == %q`, gpuDriver, s.model.model))
	}
	rc := s.fromTemplate(pod, "gpus", kube.Exactly(gpuClass, gpuClass, gpus, sel...))
	return pod, []*resourceapi.ResourceClaim{rc}
}

// fromTemplate is the claim the resourceclaim controller makes for a pod
// from a template: owned by the pod, named in its status.
func (s *sampler) fromTemplate(pod *corev1.Pod, ref string, reqs ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	s.n++
	rc := kube.NewClaim(pod.Namespace, fmt.Sprintf("%s-%s-%05d", pod.Name, ref, s.n), reqs...)
	rc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: new(true), BlockOwnerDeletion: new(true)}}
	pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: ref, ResourceClaimTemplateName: new(pod.Name + "-" + ref)})
	pod.Status.ResourceClaimStatuses = append(pod.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: ref, ResourceClaimName: &rc.Name})
	return rc
}

// plainPod is a random pod and its claims: requests (some missing, some
// zero), an image, an owner or none, a gang's anti-affinity or none,
// tolerations, claims of GPUs and NICs with or without a selector, and
// what the family adds.
func (s *sampler) plainPod(name string, incoming bool) (*corev1.Pod, []*resourceapi.ResourceClaim) {
	rng, fam := s.rng, s.fam
	pool := fmt.Sprintf("pool-%d", rng.IntN(s.pools))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{}},
		Spec: corev1.PodSpec{
			SchedulerName: corev1.DefaultSchedulerName,
			NodeSelector:  map[string]string{poolLabel: pool},
		},
	}
	if fam.has(modelplane) {
		pod.Spec.NodeSelector = map[string]string{fsv1alpha1.LabelPool: pool}
	}
	if rng.IntN(3) == 0 {
		pod.Labels["tier"] = []string{"batch", "serving"}[rng.IntN(2)]
	}
	ctr := corev1.Container{Name: "engine", Image: images()[rng.IntN(len(images()))].name, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}}}
	if rng.IntN(6) > 0 {
		ctr.Resources.Requests[corev1.ResourceCPU] = resource.MustParse([]string{"0", "100m", "500m", "1", "2", "4", "8", "16", "24"}[rng.IntN(9)])
	}
	if rng.IntN(6) > 0 {
		ctr.Resources.Requests[corev1.ResourceMemory] = resource.MustParse([]string{"0", "256Mi", "1Gi", "4Gi", "16Gi", "32Gi", "64Gi", "128Gi", "200Gi"}[rng.IntN(9)])
	}
	if fam.has(devicePlugin) && rng.IntN(2) == 0 {
		q := *resource.NewQuantity(1+rng.Int64N(3), resource.DecimalSI)
		ctr.Resources.Requests[fpgaResource] = q
		ctr.Resources.Limits = corev1.ResourceList{fpgaResource: q}
	}
	extendedGPUs := fam.has(extendedResources) && rng.IntN(2) == 0
	if extendedGPUs {
		q := *resource.NewQuantity(1+rng.Int64N(3), resource.DecimalSI)
		ctr.Resources.Requests[gpuResource] = q
		ctr.Resources.Limits = corev1.ResourceList{gpuResource: q}
	}
	pod.Spec.Containers = []corev1.Container{ctr}
	if rng.IntN(4) == 0 {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "sidecar", Image: images()[3+rng.IntN(2)].name})
	}
	switch k := rng.IntN(4); {
	case k < 2 && len(s.st.sets) > 0:
		rs := s.st.sets[rng.IntN(len(s.st.sets))]
		pod.Labels["app"] = rs.Name
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: new(true)}}
	case k == 2 && len(s.st.stss) > 0:
		ss := s.st.stss[rng.IntN(len(s.st.stss))]
		pod.Labels["app"] = ss.Name
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: ss.Name, UID: ss.UID, Controller: new(true)}}
	}
	if rng.IntN(5) == 0 {
		gang := fmt.Sprintf("gang-%d", rng.IntN(3))
		pod.Labels["gang"] = gang
		s.affinity(pod).PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"gang": gang}}, TopologyKey: corev1.LabelHostname,
		}}}
	}
	s.affinityTerms(pod, incoming)
	switch rng.IntN(5) {
	case 0:
		pod.Spec.Tolerations = []corev1.Toleration{{Key: "spot", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectPreferNoSchedule}}
	case 1:
		pod.Spec.Tolerations = []corev1.Toleration{{Key: "maintenance", Operator: corev1.TolerationOpExists}}
	}
	if fam.has(noExecute) && rng.IntN(2) == 0 {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: "drain", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})
	}
	if extendedGPUs {
		return pod, nil
	}
	return pod, s.claims(pod)
}

func (s *sampler) affinity(pod *corev1.Pod) *corev1.Affinity {
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	return pod.Spec.Affinity
}

// affinityTerms adds the family's affinity: preferred node affinity and
// preferred pod (anti-)affinity; required pod affinity; or, on bound pods
// only, required anti-affinity against pods the incoming ones may be
// (asymmetric: the incoming pods have none against them).
func (s *sampler) affinityTerms(pod *corev1.Pod, incoming bool) {
	rng, fam := s.rng, s.fam
	if fam.has(preferred) && rng.IntN(3) > 0 {
		s.preferredTerms(pod, incoming)
	}
	if fam.has(podAffinity) && rng.IntN(2) == 0 {
		s.requiredAffinity(pod, incoming)
	}
	if fam.has(podAffinity) && incoming && rng.IntN(2) == 0 {
		a := s.affinity(pod)
		if a.PodAntiAffinity == nil {
			a.PodAntiAffinity = &corev1.PodAntiAffinity{}
		}
		a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, s.podTerm())
	}
	if fam.has(asymmetric) && !incoming && rng.IntN(3) == 0 {
		a := s.affinity(pod)
		if a.PodAntiAffinity == nil {
			a.PodAntiAffinity = &corev1.PodAntiAffinity{}
		}
		a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, s.podTerm())
	}
}

// podTerm is a random pod affinity term: a tier or a ReplicaSet's pods, by
// hostname or zone.
func (s *sampler) podTerm() corev1.PodAffinityTerm {
	rng := s.rng
	key := []string{corev1.LabelHostname, corev1.LabelTopologyZone}[rng.IntN(2)]
	sel := map[string]string{"tier": []string{"batch", "serving"}[rng.IntN(2)]}
	if rng.IntN(2) == 0 && len(s.st.sets) > 0 {
		sel = map[string]string{"app": s.st.sets[rng.IntN(len(s.st.sets))].Name}
	}
	return corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: sel}, TopologyKey: key}
}

// weightedTerms are one or two random pod affinity terms, weighted.
func (s *sampler) weightedTerms() []corev1.WeightedPodAffinityTerm {
	n := 1 + s.rng.IntN(2)
	out := make([]corev1.WeightedPodAffinityTerm, 0, n)
	for range n {
		out = append(out, corev1.WeightedPodAffinityTerm{Weight: 1 + s.rng.Int32N(100), PodAffinityTerm: s.podTerm()})
	}
	return out
}

// preferredTerms adds preferred node affinity (on bound pods half the
// time) and preferred pod affinity and anti-affinity.
func (s *sampler) preferredTerms(pod *corev1.Pod, incoming bool) {
	rng := s.rng
	if incoming || rng.IntN(2) == 0 {
		pref := []corev1.PreferredSchedulingTerm{{Weight: 1 + rng.Int32N(100), Preference: corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "tier", Operator: corev1.NodeSelectorOpIn, Values: []string{"reserved"}}},
		}}}
		if rng.IntN(2) == 0 {
			pref = append(pref, corev1.PreferredSchedulingTerm{Weight: 1 + rng.Int32N(100), Preference: corev1.NodeSelectorTerm{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-0"}}},
			}})
		}
		s.affinity(pod).NodeAffinity = &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: pref}
	}
	a := s.affinity(pod)
	if rng.IntN(2) == 0 {
		a.PodAffinity = &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: s.weightedTerms()}
	}
	if rng.IntN(2) == 0 {
		if a.PodAntiAffinity == nil {
			a.PodAntiAffinity = &corev1.PodAntiAffinity{}
		}
		a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution = s.weightedTerms()
	}
}

// requiredAffinity sets required pod affinity: to other pods, to the
// pod's own kind, or to a cohort of pods to schedule.
func (s *sampler) requiredAffinity(pod *corev1.Pod, incoming bool) {
	rng := s.rng
	a := s.affinity(pod)
	a.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{s.podTerm()}}
	switch {
	case incoming && rng.IntN(2) == 0:
		// A cohort no bound pod belongs to: its first pod has no pod
		// to follow and lands on any node (every node has a
		// hostname), the rest follow it.
		pod.Labels["cohort"] = "new"
		a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"cohort": "new"}}, TopologyKey: corev1.LabelHostname,
		}}
	case rng.IntN(3) == 0:
		// Affinity to its own kind, which bound pods may already
		// be.
		pod.Labels["tier"] = "serving"
		a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "serving"}}, TopologyKey: corev1.LabelTopologyZone,
		}}
	}
}

// claims are a plain pod's claims: GPUs and NICs with or without a
// selector, and what the family adds (more claims, templates, admin
// access, device tolerations, consumed capacity, prioritized lists, All,
// matchAttribute, a claim shared with a bound pod).
func (s *sampler) claims(pod *corev1.Pod) []*resourceapi.ResourceClaim {
	rng, fam := s.rng, s.fam
	var reqs []resourceapi.DeviceRequest
	if gpus := rng.Int64N(4); gpus > 0 {
		reqs = append(reqs, s.gpuRequest(gpus))
	}
	if rng.IntN(10) == 0 || fam.has(allMode) && rng.IntN(2) == 0 || fam.has(matchAttribute) && rng.IntN(2) == 0 {
		nic := kube.Exactly("nic", "nic", 1)
		if fam.has(allMode) && rng.IntN(2) == 0 {
			nic.Exactly.AllocationMode, nic.Exactly.Count = resourceapi.DeviceAllocationModeAll, 0
		}
		reqs = append(reqs, nic)
	}
	var claims []*resourceapi.ResourceClaim
	if len(reqs) > 0 {
		claims = append(claims, s.devicesClaim(pod, reqs))
	}
	if fam.has(multiClaim) && rng.IntN(3) > 0 {
		// A second and third claim: one more GPU, a NIC.
		extra := kube.NewClaim(namespace, pod.Name+"-extra", kube.Exactly(gpuClass, gpuClass, 1))
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "extra", ResourceClaimName: &extra.Name})
		claims = append(claims, extra)
		if rng.IntN(2) == 0 {
			claims = append(claims, s.fromTemplate(pod, "nic", kube.Exactly("nic", "nic", 1)))
		}
	}
	if fam.has(sharedClaims) && rng.IntN(4) > 0 {
		if shared := s.sharedClaim(); shared != nil {
			pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "shared", ResourceClaimName: &shared.Name})
			claims = append(claims, shared)
		}
	}
	return claims
}

// gpuRequest is a request of gpus GPUs: with a selector or none, and what
// the family adds (device tolerations, a capacity request, admin access, a
// partition's size, a prioritized list).
func (s *sampler) gpuRequest(gpus int64) resourceapi.DeviceRequest {
	rng, fam := s.rng, s.fam
	var sel []string
	switch rng.IntN(3) {
	case 0:
		sel = append(sel, fmt.Sprintf(`device.capacity[%q].memory.compareTo(quantity(%q)) >= 0`, gpuDriver, s.model.memory))
	case 1:
		// Mostly the fleet's model: a selector that rules out every
		// node proves nothing.
		m := s.model.model
		if rng.IntN(4) == 0 {
			m = gpuModels()[rng.IntN(len(gpuModels()))].model
		}
		sel = append(sel, fmt.Sprintf(`device.attributes[%q].model == %q`, gpuDriver, m))
	}
	req := kube.Exactly(gpuClass, gpuClass, gpus, sel...)
	if fam.has(deviceTaints) && rng.IntN(2) == 0 {
		req.Exactly.Tolerations = []resourceapi.DeviceToleration{{Key: "ecc-errors", Operator: resourceapi.DeviceTolerationOpExists, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	if fam.has(taintRules) && rng.IntN(2) == 0 {
		req.Exactly.Tolerations = append(req.Exactly.Tolerations, resourceapi.DeviceToleration{Key: "maintenance", Operator: resourceapi.DeviceTolerationOpExists})
	}
	if fam.has(consumable) && rng.IntN(4) > 0 {
		req.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			memory:    resource.MustParse([]string{"4Gi", "10Gi", "16Gi", "32Gi"}[rng.IntN(4)]),
			"compute": resource.MustParse([]string{"250m", "300m", "500m"}[rng.IntN(3)]),
		}}
	}
	if fam.has(adminAccess) && rng.IntN(3) < 1+s.bound() {
		// Bound pods more often: what they hold is what admin access
		// ignores.
		req.Exactly.AdminAccess = new(true)
	}
	if fam.has(partitionable) && rng.IntN(2) == 0 {
		half := resource.MustParse(s.model.memory)
		half.Set(half.Value() / 2)
		req.Exactly.Selectors = append(req.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.capacity[%q].memory.compareTo(quantity(%q)) <= 0`, gpuDriver, half.String()),
		}})
	}
	if fam.has(firstAvailable) && rng.IntN(6) > 0 {
		req = resourceapi.DeviceRequest{Name: gpuClass, FirstAvailable: []resourceapi.DeviceSubRequest{
			{
				Name: "big", DeviceClassName: gpuClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: gpus + 1,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf(`device.attributes[%q].model == %q`, gpuDriver, s.model.model)}}},
			},
			{Name: "exact", DeviceClassName: gpuClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: gpus},
			{Name: "one", DeviceClassName: gpuClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		}}
	}
	return req
}

// devicesClaim is the pod's claim of its requests: by name, or (in the
// multi-claim family, half the time) from a template.
func (s *sampler) devicesClaim(pod *corev1.Pod, reqs []resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	var claim *resourceapi.ResourceClaim
	if s.fam.has(multiClaim) && s.rng.IntN(2) == 0 {
		claim = s.fromTemplate(pod, "devices", reqs...)
	} else {
		claim = kube.NewClaim(namespace, pod.Name+"-claim", reqs...)
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "devices", ResourceClaimName: &claim.Name})
	}
	if s.fam.has(matchAttribute) && len(reqs) > 1 && reqs[0].Name == gpuClass && reqs[0].Exactly != nil {
		claim.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{gpuClass, "nic"}, MatchAttribute: new(resourceapi.FullyQualifiedName(numaAttribute))}}
	}
	return claim
}

// sharedClaim is a claim a bound pod holds, to be shared with another pod,
// or nil.
func (s *sampler) sharedClaim() *resourceapi.ResourceClaim {
	for _, i := range s.rng.Perm(len(s.st.claims)) {
		rc := s.st.claims[i]
		if len(rc.OwnerReferences) == 0 && rc.Annotations[resourceapi.ExtendedResourceClaimAnnotation] == "" {
			return rc
		}
	}
	return nil
}

// attached is the status of an allocation's devices once their driver
// met their binding conditions: the devices with binding conditions get
// them True, the others keep what they had.
func (st *state) attached(a *resourceapi.AllocationResult, have []resourceapi.AllocatedDeviceStatus) []resourceapi.AllocatedDeviceStatus {
	out := slices.Clone(have)
	for _, r := range a.Devices.Results {
		if len(r.BindingConditions) == 0 {
			continue
		}
		ds := resourceapi.AllocatedDeviceStatus{Driver: r.Driver, Pool: r.Pool, Device: r.Device}
		if r.ShareID != nil {
			ds.ShareID = new(string(*r.ShareID))
		}
		for _, c := range r.BindingConditions {
			ds.Conditions = append(ds.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "Attached", LastTransitionTime: metav1.Now()})
		}
		out = append(out, ds)
	}
	return out
}

// cluster is the state as the simulator's binder reads it, with a
// mutation or none: the nodes, slices, classes, taint rules and owners,
// which the binder only reads and every run shares, and copies of the
// given bound pods with their claims, which binding changes.
func (st *state) cluster(pods []*corev1.Pod, m kube.Mutation) (*kube.Cluster, error) {
	c := kube.NewCluster(st.classes...)
	if err := c.Mutate(m); err != nil {
		return nil, err
	}
	for _, r := range st.rules {
		c.AddDeviceTaintRule(r)
	}
	byNode := map[string][]*resourceapi.ResourceSlice{}
	for _, s := range st.slices {
		byNode[*s.Spec.NodeName] = append(byNode[*s.Spec.NodeName], s)
	}
	for _, n := range st.nodes {
		if err := c.AddNode(n, byNode[n.Name]...); err != nil {
			return nil, err
		}
	}
	for _, rs := range st.sets {
		if err := c.AddOwner(rs); err != nil {
			return nil, err
		}
	}
	for _, ss := range st.stss {
		if err := c.AddOwner(ss); err != nil {
			return nil, err
		}
	}
	claims := map[string]*resourceapi.ResourceClaim{}
	for _, rc := range st.claims {
		claims[rc.Name] = rc.DeepCopy()
	}
	for _, pod := range pods {
		p, err := kube.NewPod(pod.DeepCopy(), st.claimsOf(pod, claims)...)
		if err != nil {
			return nil, err
		}
		if err := c.AddPod(p); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// claimsOf are a pod's claims, in the order NewPod takes them, from the
// claims by name.
func (st *state) claimsOf(pod *corev1.Pod, claims map[string]*resourceapi.ResourceClaim) []*resourceapi.ResourceClaim {
	var out []*resourceapi.ResourceClaim
	statuses := map[string]*string{}
	for _, s := range pod.Status.ResourceClaimStatuses {
		statuses[s.Name] = s.ResourceClaimName
	}
	for _, ref := range pod.Spec.ResourceClaims {
		name := ref.ResourceClaimName
		if name == nil {
			name = statuses[ref.Name]
		}
		if name != nil && claims[*name] != nil {
			out = append(out, claims[*name])
		}
	}
	if s := pod.Status.ExtendedResourceClaimStatus; s != nil && claims[s.ResourceClaimName] != nil {
		out = append(out, claims[s.ResourceClaimName])
	}
	return out
}

// apiObjects are copies of the objects kube-scheduler's informers start
// with: all but the nodes and the pods to schedule and their claims.
func (st *state) apiObjects() []runtime.Object {
	out := copies(nil, st.slices)
	out = copies(out, st.classes)
	out = copies(out, st.rules)
	out = copies(out, st.sets)
	out = copies(out, st.stss)
	out = copies(out, st.pods)
	return copies(out, st.claims)
}

func copies[T runtime.Object](out []runtime.Object, objs []T) []runtime.Object {
	for _, o := range objs {
		out = append(out, o.DeepCopyObject())
	}
	return out
}
