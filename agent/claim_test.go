package agent

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// request is an exactly request of the class for count devices, with CEL
// selectors.
func request(name, class string, count int64, cel ...string) resourcev1.DeviceRequest {
	r := resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count,
	}}
	for _, e := range cel {
		r.Exactly.Selectors = append(r.Exactly.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: e}})
	}
	return r
}

// requesting is a claim of the requests, as the resourceclaim controller
// makes it from a pod's template.
func requesting(name string, reqs ...resourcev1.DeviceRequest) *resourcev1.ResourceClaim {
	c := claim(name).obj()
	c.Spec.Devices.Requests = reqs
	return c
}

// withModel is a pool device with a model attribute.
func withModel(d v1alpha1.Device, model string) v1alpha1.Device {
	d.Attributes = map[string]v1alpha1.DeviceAttribute{"gpu.example.com/model": {String: new(model)}}
	return d
}

func TestClaimSizer(t *testing.T) {
	// Pool: 4 H100 GPUs, 2 A100 GPUs (the same class), a Synthetic device,
	// 7 partitions and 2 NICs per node.
	mixed := gpuPool(
		withModel(poolDev("h100", gpuDriver, gpuClass, 4), "H100"),
		withModel(poolDev("a100", gpuDriver, gpuClass, 2), "A100"),
		v1alpha1.Device{Name: "cpu", Claim: v1alpha1.ClaimSynthetic, Driver: "cpu.example.com", Count: new(int64(64))},
		poolDev("mig", gpuDriver, migClass, 7),
		poolDev("nic", nicDriver, nicClass, 2),
	)
	type want struct {
		claim []int64
		err   string
	}
	cases := map[string]struct {
		reason string
		claims []*resourcev1.ResourceClaim
		want   want
	}{
		"FirstOfTheClass": {
			reason: "A request goes to the first DRA device of its class, as the ledger charges a stamped request; the Synthetic device has no count.",
			claims: []*resourcev1.ResourceClaim{requesting("a", request("gpu", gpuClass, 2))},
			want:   want{claim: []int64{2, 0, 0, 0}},
		},
		"CountLeft": {
			reason: "A request too big for the first device of its class that is left goes to the next that has it left.",
			claims: []*resourcev1.ResourceClaim{requesting("a", request("gpu", gpuClass, 3), request("more", gpuClass, 2))},
			want:   want{claim: []int64{3, 2, 0, 0}},
		},
		"Selectors": {
			reason: "A request's CEL selectors are evaluated on the devices' published attributes.",
			claims: []*resourcev1.ResourceClaim{requesting("a", request("gpu", gpuClass, 1, `device.attributes["gpu.example.com"].model == "A100"`))},
			want:   want{claim: []int64{0, 1, 0, 0}},
		},
		"MissingAttribute": {
			reason: "A selector reading an attribute a device does not publish does not match it (a CEL runtime error is no match).",
			claims: []*resourcev1.ResourceClaim{requesting("a", request("gpu", gpuClass, 1, `device.attributes["gpu.example.com"].memory == 80`))},
			want:   want{err: "no device of pool h100 is of DeviceClass gpu.example.com, satisfies its selectors and has 1 left"},
		},
		"ClaimsAndRequests": {
			reason: "Every request of every claim of the pod adds up, device by device.",
			claims: []*resourcev1.ResourceClaim{
				requesting("a", request("gpu", gpuClass, 1), request("nic", nicClass, 1)),
				requesting("b", request("mig", migClass, 3)),
			},
			want: want{claim: []int64{1, 0, 3, 1}},
		},
		"ZeroIsOne": {
			reason: "A count of zero is one, as the API server defaults it and the ledger reads it.",
			claims: []*resourcev1.ResourceClaim{requesting("a", request("nic", nicClass, 0))},
			want:   want{claim: []int64{0, 0, 0, 1}},
		},
		"All": {
			reason: "Allocation mode All takes every device of the pool device it resolves to.",
			claims: []*resourcev1.ResourceClaim{requesting("a", func() resourcev1.DeviceRequest {
				r := request("mig", migClass, 0)
				r.Exactly.AllocationMode = resourcev1.DeviceAllocationModeAll
				return r
			}())},
			want: want{claim: []int64{0, 0, 7, 0}},
		},
		"AdminAccess": {
			reason: "An admin-access request takes no device from others.",
			claims: []*resourcev1.ResourceClaim{requesting("a", request("gpu", gpuClass, 1), func() resourcev1.DeviceRequest {
				r := request("admin", nicClass, 1)
				r.Exactly.AdminAccess = new(true)
				return r
			}())},
			want: want{claim: []int64{1, 0, 0, 0}},
		},
		"TooBig": {
			reason: "A request no device has left is an error naming the claim and request: the ledger would charge a whole node; the agent releases the pod unpinned.",
			claims: []*resourcev1.ResourceClaim{requesting("a", request("gpu", gpuClass, 5))},
			want:   want{err: "ResourceClaim ml-team/a: spec.devices.requests[0] (gpu): no device of pool h100 is of DeviceClass gpu.example.com, satisfies its selectors and has 5 left on a node"},
		},
		"OtherClass": {
			reason: "A class the pool has no device of resolves to none.",
			claims: []*resourcev1.ResourceClaim{requesting("a", request("tpu", "tpu.example.com", 1))},
			want:   want{err: "is of DeviceClass tpu.example.com"},
		},
		"FirstAvailable": {
			reason: "A prioritized list is kube-scheduler's choice, not the ledger's: not sized.",
			claims: []*resourcev1.ResourceClaim{requesting("a", resourcev1.DeviceRequest{Name: "any", FirstAvailable: []resourcev1.DeviceSubRequest{{Name: "gpu", DeviceClassName: gpuClass, Count: 1}}})},
			want:   want{err: "ResourceClaim ml-team/a: spec.devices.requests[0] (any): not sized"},
		},
		"BadSelector": {
			reason: "A selector that does not compile is named by its field.",
			claims: []*resourcev1.ResourceClaim{requesting("a", request("gpu", gpuClass, 1, "device.driver =="))},
			want:   want{err: "ResourceClaim ml-team/a: spec.devices.requests[0].exactly.selectors[0].cel.expression: "},
		},
		"Nothing": {
			reason: "A pod without a claim takes nothing.",
			want:   want{claim: []int64{0, 0, 0, 0}},
		},
	}
	s, err := NewClaimSizer(mixed)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := s.Size(t.Context(), tc.claims...)
			if tc.want.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want.err) {
					t.Errorf("\n%s\nSize(...): want an error containing %q, got %v (claim %v)", tc.reason, tc.want.err, err, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("\n%s\nSize(...): %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want.claim, got); diff != "" {
				t.Errorf("\n%s\nSize(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestClaimSizerBadPool(t *testing.T) {
	_, err := NewClaimSizer(gpuPool(v1alpha1.Device{Name: "gpu", Driver: gpuDriver}))
	if err == nil || !strings.Contains(err.Error(), "deviceClassName: empty") {
		t.Errorf("NewClaimSizer of a device without a class: want its error, got %v", err)
	}
}
