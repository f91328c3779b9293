package scheduling

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

// matchedPass is a pass prepared for one deployment on one cluster, for
// the matching rules alone.
func matchedPass(t *testing.T, d *v1alpha1.ModelDeployment, c *v1alpha1.InferenceCluster) (*pass, *cluster) {
	t.Helper()
	engines, err := compileEngines(d, nil)
	if err != nil {
		t.Fatalf("compileEngines(...): %v", err)
	}
	p := newPass(Snapshot{Deployment: d, Clusters: []Cluster{{Object: c}}}, engines)
	return p, p.clusters[c.Metadata.Name]
}

func TestMatchMember(t *testing.T) {
	gpu8 := fx.GPU("gpu", 8, "80Gi")
	gpu1 := fx.GPU("small", 1, "24Gi")
	type want struct {
		// matched is false when the member does not match the pool.
		matched  bool
		requests []v1alpha1.DeviceRequest
		claim    []int64
	}
	cases := map[string]struct {
		reason  string
		devices []v1alpha1.Device
		member  v1alpha1.Member
		want    want
	}{
		"GreedyInOrder": {
			reason:  "Requests take devices greedily in order: the first device that satisfies a request and has its count left on one node.",
			devices: []v1alpha1.Device{gpu1, gpu8},
			member:  fx.Member(v1alpha1.RoleStandalone, 0, fx.Request("a", 1), fx.Request("b", 1)),
			want: want{matched: true, claim: []int64{1, 1}, requests: []v1alpha1.DeviceRequest{
				{Name: "a", DeviceClassName: fx.GPUClass, Count: 1}, {Name: "b", DeviceClassName: fx.GPUClass, Count: 1},
			}},
		},
		"CountLeftOnOneNode": {
			reason:  "A request that does not fit what is left of the first device takes the next.",
			devices: []v1alpha1.Device{gpu1, gpu8},
			member:  fx.Member(v1alpha1.RoleStandalone, 0, fx.Request("a", 4)),
			want:    want{matched: true, claim: []int64{0, 4}, requests: []v1alpha1.DeviceRequest{{Name: "a", DeviceClassName: fx.GPUClass, Count: 4}}},
		},
		"SelectorsRuleOut": {
			reason:  "A device that fails a selector is no match for the request.",
			devices: []v1alpha1.Device{gpu1},
			member:  fx.Member(v1alpha1.RoleStandalone, 0, fx.Request("a", 1, fx.MemAtLeast80Gi)),
		},
		"CELRuntimeErrorIsNoMatch": {
			reason:  "A selector that errs on a device (an attribute it lacks) makes that device a non-match, not a failure.",
			devices: []v1alpha1.Device{gpu8},
			member:  fx.Member(v1alpha1.RoleStandalone, 0, fx.Request("a", 1, `device.attributes["gpu.nvidia.com"].model == "h100"`)),
		},
		"SyntheticMatchedNotClaimed": {
			reason:  "A Synthetic device is matched but never claimed: the member matches and claims nothing.",
			devices: []v1alpha1.Device{fx.NIC(1)},
			member:  fx.Member(v1alpha1.RoleStandalone, 0, fx.Request("nic", 1, fx.IB)),
			want:    want{matched: true, claim: []int64{0}},
		},
		"NoSelectorClaimsNothing": {
			reason:  "A member with no nodeSelector matches every pool and claims nothing.",
			devices: []v1alpha1.Device{gpu8},
			member:  fx.Member(v1alpha1.RoleStandalone, 0),
			want:    want{matched: true, claim: []int64{0}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := fx.Deployment("m").Engines(v1alpha1.Engine{Name: "main", Members: []v1alpha1.Member{tc.member}}).Obj()
			c := fx.Cluster("a").Pools(fx.Pool("p", 1).Devices(tc.devices...).Obj()).Obj()
			p, cl := matchedPass(t, d, c)
			mm := cl.match(cl.pools[0], p.engines, 0, 0)
			var got want
			if mm != nil {
				got = want{matched: true, requests: mm.requests, claim: mm.claim}
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nmatch(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestMatchOnPool(t *testing.T) {
	// Two pools: one with only a Synthetic NIC, one with GPUs. A request
	// with no selector matches any device with the count: the NIC on the
	// first pool (claiming nothing), a GPU on the second.
	c := fx.Cluster("a").Pools(
		fx.Pool("nics", 1).Devices(fx.NIC(1)).Obj(),
		fx.Pool("gpus", 1).Devices(fx.GPU("gpu", 8, "80Gi")).Obj(),
	).Obj()
	anyDevice := fx.Request("any", 1)
	cases := map[string]struct {
		reason    string
		engine    v1alpha1.Engine
		claimable []bool
		// want is, per pool in published order, "" when the engine may not
		// go there, else "claims" or "claims nothing".
		want []string
	}{
		"NoStrandedClaimingMember": {
			reason:    "A member that claims a device on some pool may not be placed where it would claim nothing: matched on both pools, it may go only to the GPU pool.",
			engine:    fx.Standalone("main", anyDevice),
			claimable: []bool{true},
			want:      []string{"", "claims"},
		},
		"ClaimlessMemberGoesAnywhere": {
			reason:    "A member with no nodeSelector claims nowhere, and goes with its engine to any pool.",
			engine:    v1alpha1.Engine{Name: "main", Members: []v1alpha1.Member{fx.Member(v1alpha1.RoleStandalone, 0)}},
			claimable: []bool{false},
			want:      []string{"claims nothing", "claims nothing"},
		},
		"MixedEngine": {
			reason:    "An engine of a claiming and a claimless member goes where the claiming one claims.",
			engine:    v1alpha1.Engine{Name: "main", Members: []v1alpha1.Member{fx.Member(v1alpha1.RoleStandalone, 0), fx.Member(v1alpha1.RoleStandalone, 0, anyDevice)}},
			claimable: []bool{false, true},
			want:      []string{"", "claims"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, cl := matchedPass(t, fx.Deployment("m").Engines(tc.engine).Obj(), c)
			claimable := cl.claimable(p.engines, 0)
			if diff := cmp.Diff(tc.claimable, claimable); diff != "" {
				t.Errorf("%s\nclaimable(...): -want, +got:\n%s", tc.reason, diff)
			}
			got := make([]string, 0, len(cl.pools))
			for _, pool := range cl.pools {
				m := cl.matchOnPool(pool, p.engines, 0, claimable)
				switch {
				case m == nil:
					got = append(got, "")
				case engineClaims(m):
					got = append(got, "claims")
				default:
					got = append(got, "claims nothing")
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nmatchOnPool(...) per pool: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
