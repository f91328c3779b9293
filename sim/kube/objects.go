package kube

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// MaxPods is a node's allocatable pods, the kubelet's default.
const MaxPods = 110

// NewNode is a Ready node with the cpu and memory allocatable, MaxPods
// pods, and the labels plus its hostname.
func NewNode(name string, cpu, memory resource.Quantity, lbls map[string]string) *corev1.Node {
	l := map[string]string{corev1.LabelHostname: name}
	maps.Copy(l, lbls)
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    cpu,
		corev1.ResourceMemory: memory,
		corev1.ResourcePods:   *resource.NewQuantity(MaxPods, resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, UID: types.UID("node-" + name)},
		Status: corev1.NodeStatus{
			Capacity:    alloc.DeepCopy(),
			Allocatable: alloc,
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

// NewSlice is a node's ResourceSlice of a driver: the whole of a pool
// named after the node, generation 1.
func NewSlice(node, driver string, devices ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			NodeName: &node,
			Devices:  devices,
		},
	}
}

// NewDevices are n devices named <prefix>-0 ... with the attributes and
// capacities.
func NewDevices(prefix string, n int, attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, capacity map[resourceapi.QualifiedName]resource.Quantity) []resourceapi.Device {
	out := make([]resourceapi.Device, n)
	for i := range out {
		d := resourceapi.Device{Name: fmt.Sprintf("%s-%d", prefix, i), Attributes: maps.Clone(attrs), Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}}
		if d.Attributes == nil {
			d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
		}
		for k, v := range capacity {
			d.Capacity[k] = resourceapi.DeviceCapacity{Value: v}
		}
		out[i] = d
	}
	return out
}

// NewClass is a DeviceClass of a driver's devices.
func NewClass(name, driver string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)},
		}}},
	}
}

// Exactly is a request of count devices of a class that satisfy every CEL
// expression.
func Exactly(name, class string, count int64, cel ...string) resourceapi.DeviceRequest {
	r := &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
	for _, e := range cel {
		r.Selectors = append(r.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: e}})
	}
	return resourceapi.DeviceRequest{Name: name, Exactly: r}
}

// NewClaim is an unallocated claim of the requests.
func NewClaim(namespace, name string, requests ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("claim-" + namespace + "-" + name)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: requests}},
	}
}
