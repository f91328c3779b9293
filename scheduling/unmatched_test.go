package scheduling

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

func TestUnmatched(t *testing.T) {
	// Two clusters: a has h100 (80Gi GPUs), b has l4 (24Gi GPUs) and a
	// Synthetic NIC.
	fleet := []*v1alpha1.InferenceCluster{
		fx.Cluster("a").Pools(fx.Pool("h100", 2).Devices(fx.GPU("gpu", 8, "80Gi")).Obj()).Obj(),
		fx.Cluster("b").Pools(fx.Pool("l4", 2).Devices(fx.GPU("gpu", 4, "24Gi"), fx.NIC(1)).Obj()).Obj(),
	}
	products := AttributeValues{Name: "productName", Values: []string{`"NVIDIA GPU 24Gi"`, `"NVIDIA GPU 80Gi"`}}
	deployment := func(reqs ...v1alpha1.DeviceSelector) *v1alpha1.ModelDeployment {
		return fx.Deployment("m").Engines(fx.Standalone("main", reqs...)).Obj()
	}
	type want struct {
		unmatched []UnmatchedRequest
		// evalError is what each diagnosis's EvalError holds, in part.
		evalError []string
	}
	base := UnmatchedRequest{Engine: "main", Role: v1alpha1.RoleStandalone, Request: "gpu", Clusters: []string{"a", "b"}, Count: 1}
	with := func(f func(*UnmatchedRequest)) UnmatchedRequest {
		u := base
		f(&u)
		return u
	}
	cases := map[string]struct {
		reason string
		d      *v1alpha1.ModelDeployment
		// fleet, when set, replaces the two clusters.
		fleet []*v1alpha1.InferenceCluster
		want  want
	}{
		"MatchesOnAClusterNotEligible": {
			reason: "An 80Gi selector: cluster a, not Ready, has the only pool it matches; b says no pool matches. Not a mistake: nothing to diagnose.",
			d:      deployment(fx.Request("gpu", 1, fx.MemAtLeast80Gi)),
			fleet: []*v1alpha1.InferenceCluster{
				fx.Cluster("a").NotReady().Pools(fx.Pool("h100", 2).Devices(fx.GPU("gpu", 8, "80Gi")).Obj()).Obj(),
				fx.Cluster("b").Pools(fx.Pool("l4", 2).Devices(fx.GPU("gpu", 4, "24Gi")).Obj()).Obj(),
			},
		},
		"NoDevices": {
			reason: "A cluster whose only pool publishes no device: said so, not blamed on a selector.",
			d:      deployment(fx.Request("gpu", 1, `device.driver == "gpu.nvidia.com"`)),
			fleet:  []*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(fx.Pool("bare", 2).Devices().Obj()).Obj()},
			want: want{unmatched: []UnmatchedRequest{{
				Engine: "main", Role: v1alpha1.RoleStandalone, Request: "gpu", Clusters: []string{"a"}, Count: 1, Selector: -1, NoDevices: true,
			}}, evalError: []string{""}},
		},
		"NoneOnANode": {
			reason: "A device that meets every selector, published with count 0: the count is why, not the selectors.",
			d:      deployment(fx.Request("gpu", 1, `device.driver == "gpu.nvidia.com"`)),
			fleet:  []*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(fx.Pool("empty", 2).Devices(fx.GPU("gpu", 0, "80Gi")).Obj()).Obj()},
			want: want{unmatched: []UnmatchedRequest{{
				Engine: "main", Role: v1alpha1.RoleStandalone, Request: "gpu", Clusters: []string{"a"}, Count: 1, Selector: -1, SelectorsMet: true,
			}}, evalError: []string{""}},
		},
		"NoSuchValue": {
			reason: "A product no pool has: the selector that meets no device, and the products the pools offer.",
			d:      deployment(fx.Request("gpu", 1, `device.attributes["gpu.nvidia.com"].productName == "NVIDIA H200"`)),
			want: want{unmatched: []UnmatchedRequest{with(func(u *UnmatchedRequest) {
				u.Selector, u.Expression, u.Offered = 0, `device.attributes["gpu.nvidia.com"].productName == "NVIDIA H200"`, []AttributeValues{products}
			})}, evalError: []string{""}},
		},
		"CaseTypo": {
			reason: "productname for productName: a CEL runtime error (no such key), named, with the spelling the devices publish.",
			d:      deployment(fx.Request("gpu", 1, `device.attributes["gpu.nvidia.com"].productname == "NVIDIA GPU 80Gi"`)),
			want: want{unmatched: []UnmatchedRequest{with(func(u *UnmatchedRequest) {
				u.Selector, u.Expression = 0, `device.attributes["gpu.nvidia.com"].productname == "NVIDIA GPU 80Gi"`
				u.Offered, u.Misspelt = []AttributeValues{products}, []Misspelling{{Used: "productname", Published: []string{"productName"}}}
			})}, evalError: []string{"productname"}},
		},
		"WrongDomain": {
			reason: "An attribute domain no device has: a CEL runtime error, named, with the domains the devices have.",
			d:      deployment(fx.Request("gpu", 1, `device.attributes["nvidia.com"].productName == "NVIDIA GPU 80Gi"`)),
			want: want{unmatched: []UnmatchedRequest{with(func(u *UnmatchedRequest) {
				u.Selector, u.Expression = 0, `device.attributes["nvidia.com"].productName == "NVIDIA GPU 80Gi"`
				u.Offered, u.Misspelt = []AttributeValues{products}, []Misspelling{{Used: "nvidia.com", Published: []string{"gpu.nvidia.com", "nic.nvidia.com"}}}
			})}, evalError: []string{"no such key"}},
		},
		"SecondSelector": {
			reason: "The first selector meets devices, the second none: the second is named.",
			d:      deployment(fx.Request("gpu", 1, fx.MemAtLeast80Gi, `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("200Gi")) >= 0`)),
			want: want{unmatched: []UnmatchedRequest{with(func(u *UnmatchedRequest) {
				u.Selector, u.Expression = 1, `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("200Gi")) >= 0`
			})}, evalError: []string{""}},
		},
		"TooManyOnANode": {
			reason: "Devices meet every selector, but none has 16 on one node: the most any has.",
			d:      deployment(fx.Request("gpu", 16, `device.driver == "gpu.nvidia.com"`)),
			want: want{unmatched: []UnmatchedRequest{with(func(u *UnmatchedRequest) {
				u.Count, u.MostOnANode, u.SelectorsMet, u.Selector = 16, 8, true, -1
			})}, evalError: []string{""}},
		},
		"SelectorsTogether": {
			reason: "Each selector meets some device, but no device meets both.",
			d:      deployment(fx.Request("gpu", 1, `device.driver == "gpu.nvidia.com"`, fx.IB)),
			want:   want{unmatched: []UnmatchedRequest{with(func(u *UnmatchedRequest) { u.Selector = -1 })}, evalError: []string{""}},
		},
		"MatchesElsewhere": {
			reason: "An 80Gi selector matches cluster a's pool, full, and no pool of b: not a mistake, nothing to diagnose.",
			d:      fx.Deployment("m").Replicas(99).Engines(fx.Standalone("main", fx.Request("gpu", 1, fx.MemAtLeast80Gi))).Obj(),
		},
		"Matches": {
			reason: "A selector that matches, on pools without room: a shortfall of capacity, nothing to diagnose.",
			d:      fx.Deployment("m").Replicas(99).Engines(fx.Standalone("main", fx.Request("gpu", 4, `device.driver == "gpu.nvidia.com"`))).Obj(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clusters := fleet
			if tc.fleet != nil {
				clusters = tc.fleet
			}
			plan, err := Schedule(snapshot(tc.d, clusters))
			if err != nil {
				t.Fatalf("%s\nSchedule(...): %v", tc.reason, err)
			}
			if plan.Shortfall == nil {
				t.Fatalf("%s\nSchedule(...): no shortfall", tc.reason)
			}
			got := plan.Shortfall.Unmatched
			if diff := cmp.Diff(tc.want.unmatched, got, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(UnmatchedRequest{}, "EvalError")); diff != "" {
				t.Errorf("%s\nSchedule(...).Shortfall.Unmatched: -want, +got:\n%s", tc.reason, diff)
			}
			for i, part := range tc.want.evalError {
				if i >= len(got) {
					break
				}
				if e := got[i].EvalError; (part == "") != (e == "") || !strings.Contains(e, part) {
					t.Errorf("%s\nUnmatched[%d].EvalError = %q, want one naming %q", tc.reason, i, e, part)
				}
			}
		})
	}
}

func TestUnmatchedString(t *testing.T) {
	cases := map[string]struct {
		reason string
		u      UnmatchedRequest
		want   string
	}{
		"Selector": {
			reason: "The selector, its runtime error, the misspelling and what the devices offer.",
			u: UnmatchedRequest{
				Engine: "main", Member: 0, Role: "Standalone", Request: "gpu", Clusters: []string{"a", "b"}, Selector: 0,
				Expression: `device.attributes["gpu.nvidia.com"].productname == "X"`, EvalError: "on device gpu: no such key: productname",
				Offered:  []AttributeValues{{Name: "productName", Values: []string{`"A"`, `"B"`}, More: 2}},
				Misspelt: []Misspelling{{Used: "productname", Published: []string{"productName"}}},
			},
			want: `engine main member 0 (Standalone) request gpu matches no pool of a, b: selector #0 "device.attributes[\"gpu.nvidia.com\"].productname == \"X\"" meets no device (evaluating it failed on device gpu: no such key: productname); it uses "productname", the devices publish productName; the devices' productName: "A", "B" and 2 more`,
		},
		"Count": {
			reason: "A claim larger than any node's devices.",
			u:      UnmatchedRequest{Engine: "main", Role: "Leader", Request: "gpu", Clusters: []string{"a"}, Selector: -1, Count: 16, MostOnANode: 8, SelectorsMet: true},
			want:   "engine main member 0 (Leader) request gpu matches no pool of a: devices meet its selectors, but it claims 16 on one node and a pool has at most 8",
		},
		"Together": {
			reason: "Selectors that each meet a device, never the same one.",
			u:      UnmatchedRequest{Engine: "main", Role: "Standalone", Request: "gpu", Clusters: []string{"a"}, Selector: -1},
			want:   "engine main member 0 (Standalone) request gpu matches no pool of a: each of its selectors meets some device, but no device meets them all",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.u.String(); got != tc.want {
				t.Errorf("%s\nString():\n got %s\nwant %s", tc.reason, got, tc.want)
			}
		})
	}
}
