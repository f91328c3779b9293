package agent

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// Fixture names: one GPU driver whose devices are whole GPUs or MIG-style
// partitions of one, and a NIC driver.
const (
	gpuDriver = "gpu.example.com"
	nicDriver = "nic.example.com"
	gpuClass  = "gpu.example.com"
	migClass  = "mig-1g.gpu.example.com"
	nicClass  = "nic.example.com"
	h100      = "h100"
)

// syncedAt is the fixtures' sync time.
var syncedAt = time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)

// nodeWrapper builds a Node: Ready, schedulable, untainted, in pool h100.
type nodeWrapper struct{ corev1.Node }

func node(name string) *nodeWrapper {
	return &nodeWrapper{corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelPool: h100}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
		}},
	}}
}

func (w *nodeWrapper) ready(s corev1.ConditionStatus) *nodeWrapper {
	w.Status.Conditions[1].Status = s
	return w
}

func (w *nodeWrapper) noConditions() *nodeWrapper { w.Status.Conditions = nil; return w }

func (w *nodeWrapper) cordoned() *nodeWrapper { w.Spec.Unschedulable = true; return w }

func (w *nodeWrapper) taint(key string, effect corev1.TaintEffect) *nodeWrapper {
	w.Spec.Taints = append(w.Spec.Taints, corev1.Taint{Key: key, Value: "true", Effect: effect})
	return w
}

func (w *nodeWrapper) pool(name string) *nodeWrapper { w.Labels[v1alpha1.LabelPool] = name; return w }

func (w *nodeWrapper) obj() *corev1.Node { return w.DeepCopy() }

// sliceWrapper builds a ResourceSlice: the only slice, generation 1, of a
// pool named after its node.
type sliceWrapper struct{ resourcev1.ResourceSlice }

func slice(name, driver, nodeName string) *sliceWrapper {
	return &sliceWrapper{resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   driver,
			NodeName: new(nodeName),
			Pool:     resourcev1.ResourcePool{Name: nodeName, Generation: 1, ResourceSliceCount: 1},
		},
	}}
}

// gpuSlice is a node's slice of n whole H100 GPUs, gpu-0 to gpu-<n-1>.
func gpuSlice(nodeName string, n int) *sliceWrapper {
	return slice(nodeName+"-gpu", gpuDriver, nodeName).devices(gpus(0, n, "H100")...)
}

func (w *sliceWrapper) pool(name string, generation, count int64) *sliceWrapper {
	w.Spec.Pool = resourcev1.ResourcePool{Name: name, Generation: generation, ResourceSliceCount: count}
	return w
}

func (w *sliceWrapper) devices(d ...resourcev1.Device) *sliceWrapper {
	w.Spec.Devices = append(w.Spec.Devices, d...)
	return w
}

// counters makes the slice the pool's counter slice, with one set.
func (w *sliceWrapper) counters(set string, counters map[string]string) *sliceWrapper {
	w.Spec.SharedCounters = append(w.Spec.SharedCounters, resourcev1.CounterSet{Name: set, Counters: counterValues(counters)})
	return w
}

// allNodes makes the slice's devices reachable from every node.
func (w *sliceWrapper) allNodes() *sliceWrapper {
	w.Spec.NodeName, w.Spec.AllNodes = nil, new(true)
	return w
}

func (w *sliceWrapper) obj() *resourcev1.ResourceSlice { return w.DeepCopy() }

// deviceWrapper builds a device of a slice.
type deviceWrapper struct{ resourcev1.Device }

// gpu is a whole GPU of the model, 80Gi.
func gpu(name, model string) *deviceWrapper {
	return &deviceWrapper{resourcev1.Device{
		Name: name,
		Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type":  {StringValue: new("gpu")},
			"model": {StringValue: new(model)},
		},
		Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}},
	}}
}

// gpus are whole GPUs gpu-<from> to gpu-<from+n-1>.
func gpus(from, n int, model string) []resourcev1.Device {
	out := make([]resourcev1.Device, 0, n)
	for i := from; i < from+n; i++ {
		out = append(out, gpu(fmt.Sprintf("gpu-%d", i), model).obj())
	}
	return out
}

// mig is a 1g partition of a GPU, 10Gi.
func mig(name string) *deviceWrapper {
	return &deviceWrapper{resourcev1.Device{
		Name: name,
		Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type":  {StringValue: new("mig-1g")},
			"model": {StringValue: new("H100")},
		},
		Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse("10Gi")}},
	}}
}

// nic is a NIC.
func nic(name string) *deviceWrapper {
	return &deviceWrapper{resourcev1.Device{
		Name:       name,
		Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"type": {StringValue: new("nic")}},
	}}
}

func (w *deviceWrapper) consumes(set string, counters map[string]string) *deviceWrapper {
	w.ConsumesCounters = append(w.ConsumesCounters, resourcev1.DeviceCounterConsumption{CounterSet: set, Counters: counterValues(counters)})
	return w
}

func (w *deviceWrapper) taint(key string, effect resourcev1.DeviceTaintEffect) *deviceWrapper {
	w.Taints = append(w.Taints, resourcev1.DeviceTaint{Key: key, Value: "true", Effect: effect})
	return w
}

// shared makes the device allocatable to many claims at once, each
// consuming 10Gi of its memory unless it asks for more.
func (w *deviceWrapper) shared() *deviceWrapper {
	w.AllowMultipleAllocations = new(true)
	c := w.Capacity["memory"]
	c.RequestPolicy = &resourcev1.CapacityRequestPolicy{
		Default:    new(resource.MustParse("10Gi")),
		ValidRange: &resourcev1.CapacityRequestPolicyRange{Min: new(resource.MustParse("1Gi"))},
	}
	w.Capacity["memory"] = c
	return w
}

func (w *deviceWrapper) obj() resourcev1.Device { return *w.DeepCopy() }

func counterValues(in map[string]string) map[string]resourcev1.Counter {
	out := make(map[string]resourcev1.Counter, len(in))
	for k, v := range in {
		out[k] = resourcev1.Counter{Value: resource.MustParse(v)}
	}
	return out
}

// class is a DeviceClass with the CEL selectors.
func class(name string, cel ...string) *resourcev1.DeviceClass {
	c := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, e := range cel {
		c.Spec.Selectors = append(c.Spec.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: e}})
	}
	return c
}

// The fixture classes: whole GPUs, 1g partitions, NICs, each of its driver.
func classes() []*resourcev1.DeviceClass {
	return []*resourcev1.DeviceClass{
		class(gpuClass, `device.driver == "gpu.example.com"`, `device.attributes["gpu.example.com"].type == "gpu"`),
		class(migClass, `device.driver == "gpu.example.com"`, `device.attributes["gpu.example.com"].type == "mig-1g"`),
		class(nicClass, `device.driver == "nic.example.com"`),
	}
}

// claimWrapper builds a ResourceClaim.
type claimWrapper struct{ resourcev1.ResourceClaim }

func claim(name string) *claimWrapper {
	return &claimWrapper{resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml-team"}}}
}

// allocated records the devices of the pool as allocated to the claim.
func (w *claimWrapper) allocated(driver, pool string, devices ...string) *claimWrapper {
	for _, d := range devices {
		w.result(resourcev1.DeviceRequestAllocationResult{Request: "gpu", Driver: driver, Pool: pool, Device: d})
	}
	return w
}

// admin records an admin-access allocation, which takes nothing.
func (w *claimWrapper) admin(driver, pool, device string) *claimWrapper {
	return w.result(resourcev1.DeviceRequestAllocationResult{Request: "gpu", Driver: driver, Pool: pool, Device: device, AdminAccess: new(true)})
}

// share records one share of a device with consumable capacity.
func (w *claimWrapper) share(driver, pool, device, memory string) *claimWrapper {
	return w.result(resourcev1.DeviceRequestAllocationResult{
		Request: "gpu", Driver: driver, Pool: pool, Device: device,
		ShareID:          new(types.UID("share-" + w.Name)),
		ConsumedCapacity: map[resourcev1.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)},
	})
}

func (w *claimWrapper) result(r resourcev1.DeviceRequestAllocationResult) *claimWrapper {
	if w.Status.Allocation == nil {
		w.Status.Allocation = &resourcev1.AllocationResult{}
	}
	w.Status.Allocation.Devices.Results = append(w.Status.Allocation.Devices.Results, r)
	return w
}

func (w *claimWrapper) obj() *resourcev1.ResourceClaim { return w.DeepCopy() }

// poolDev is a DRA pool device.
func poolDev(name, driver, class string, count int64) v1alpha1.Device {
	return v1alpha1.Device{Name: name, Claim: v1alpha1.ClaimDRA, Driver: driver, DeviceClassName: class, Count: new(count)}
}

// gpuPool is pool h100 of 8 whole GPUs per node.
func gpuPool(devices ...v1alpha1.Device) Pool {
	if devices == nil {
		devices = []v1alpha1.Device{poolDev("gpu", gpuDriver, gpuClass, 8)}
	}
	return Pool{Name: h100, Devices: devices}
}

// buckets is a histogram, written compactly: nodes, then name and count
// pairs.
func bucket(nodes int64, free ...any) agentv1alpha1.Bucket {
	b := agentv1alpha1.Bucket{Nodes: nodes, Free: []agentv1alpha1.Free{}}
	for i := 0; i+1 < len(free); i += 2 {
		b.Free = append(b.Free, agentv1alpha1.Free{Name: free[i].(string), Count: int64(free[i+1].(int))})
	}
	return b
}

// objs builds the objects of the wrappers.
func objs[T any, W interface{ obj() T }](w ...W) []T {
	out := make([]T, 0, len(w))
	for _, x := range w {
		out = append(out, x.obj())
	}
	return out
}

func nodes(w ...*nodeWrapper) []*corev1.Node { return objs[*corev1.Node](w...) }

func resourceSlices(w ...*sliceWrapper) []*resourcev1.ResourceSlice {
	return objs[*resourcev1.ResourceSlice](w...)
}

func claims(w ...*claimWrapper) []*resourcev1.ResourceClaim {
	return objs[*resourcev1.ResourceClaim](w...)
}
