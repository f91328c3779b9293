package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modelplaneai/fleet-scheduler/agent"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// A pool of two nodes with four GPUs each, one of them cordoned, and a
// claim holding one GPU of the other.
func ExamplePoolReport() {
	// The pool, as the InferenceCluster publishes it; its nodes are
	// labelled modelplane.ai/pool=h100.
	pool := agent.Pool{Name: "h100", Devices: []v1alpha1.Device{{
		Name: "gpu", Claim: v1alpha1.ClaimDRA, Driver: "gpu.nvidia.com", DeviceClassName: "gpu.nvidia.com", Count: new(int64(4)),
	}}}

	// The view: what the agent listed, and when it started listing.
	view := agent.View{
		DeviceClasses: []*resourcev1.DeviceClass{{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"},
			Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
				CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "gpu.nvidia.com"`},
			}}},
		}},
		ResourceClaims: []*resourcev1.ResourceClaim{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ml-team", Name: "qwen-0-engine"},
			Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{
				Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
					Request: "gpu", Driver: "gpu.nvidia.com", Pool: "node-a", Device: "gpu-2",
				}}},
			}},
		}},
		SyncedAt: time.Date(2026, 10, 20, 20, 6, 0, 400_000_000, time.UTC),
	}
	for _, name := range []string{"node-a", "node-b"} {
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelPool: "h100"}},
			Spec:       corev1.NodeSpec{Unschedulable: name == "node-b"},
			Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		}
		s := &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-gpu"},
			Spec: resourcev1.ResourceSliceSpec{
				Driver: "gpu.nvidia.com", NodeName: new(name),
				Pool: resourcev1.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1},
			},
		}
		for i := range 4 {
			s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-%d", i)})
		}
		view.Nodes = append(view.Nodes, n)
		view.ResourceSlices = append(view.ResourceSlices, s)
	}

	report, err := agent.PoolReport(context.Background(), pool, view)
	if err != nil {
		fmt.Println(err)
		return
	}

	// Publish it: its JSON is the three fields of the pool's
	// PoolObservation status (the cluster agent writes them there), or
	// set them on the InferenceCluster's pool as the function reads it.
	patch, err := json.Marshal(report)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(patch))

	gpuPool := v1alpha1.GPUPool{Name: "h100", Nodes: new(int64(4)), Devices: pool.Devices}
	report.Fill(&gpuPool)
	fmt.Println(gpuPool.ObservedNodes, gpuPool.ObservedAt)
	// Output:
	// {"observedNodes":2,"observedAt":"2026-10-20T20:06:00Z","nodesByFreeDevices":[{"nodes":1,"free":[{"name":"gpu","count":3}]}]}
	// 2 2026-10-20T20:06:00Z
}
