package scheduling

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

// What free-device accounting saved: the replicas a pass composed that
// whole-node accounting would have left unplaced.
func TestBeyondWholeNode(t *testing.T) {
	gpu := fx.GPU("gpu", 8, "80Gi")
	// Two nodes of 8 GPUs, both free: four 4-GPU replicas by free devices,
	// two by whole nodes.
	empty := fx.Cluster("a").Pools(fx.Pool("h100", 2).Devices(gpu).Observed(observedAt, 2, fx.NodesFree(2, "gpu", 8)).Obj()).Obj()
	// One of its two nodes taken by a tenant the replicas do not show.
	halfTaken := fx.Cluster("a").Pools(fx.Pool("h100", 2).Devices(gpu).Observed(observedAt, 2, fx.NodesFree(1, "gpu", 8)).Obj()).Obj()
	// Three of its four nodes taken by tenants.
	mostlyTaken := fx.Cluster("a").Pools(fx.Pool("h100", 4).Devices(gpu).Observed(observedAt, 4, fx.NodesFree(1, "gpu", 8)).Obj()).Obj()
	unreported := fx.Cluster("b").Pools(fx.Pool("h100", 2).Devices(gpu).Obj()).Obj()
	deployment := func(replicas int64) *v1alpha1.ModelDeployment {
		return fx.Deployment("m").Replicas(replicas).Engines(fx.Standalone("main", fx.GPURequest(4))).Obj()
	}
	type want struct {
		replicas        int
		beyondWholeNode int
	}
	cases := map[string]struct {
		reason string
		s      Snapshot
		want   want
	}{
		"FreeDevicesFitMore": {
			reason: "Free devices fit four 4-GPU replicas on two empty nodes of 8, whole nodes two: two beyond.",
			s:      snapshot(deployment(4), []*v1alpha1.InferenceCluster{empty}),
			want:   want{replicas: 4, beyondWholeNode: 2},
		},
		"NoReport": {
			reason: "A fleet without a usable report is accounted by whole nodes either way.",
			s:      snapshot(deployment(4), []*v1alpha1.InferenceCluster{unreported}),
			want:   want{replicas: 2},
		},
		"NothingPlacedAnew": {
			reason: "A pass that only retains (here, a ModelCache unresolved) places nothing anew, so nothing beyond.",
			s: func() Snapshot {
				s := snapshot(deployment(4), []*v1alpha1.InferenceCluster{empty})
				s.Options.RetainOnly = true
				return s
			}(),
			want: want{},
		},
		"WholeNodesWouldDoAsWell": {
			reason: "With a's second node taken by a tenant, free devices fit two replicas on a and two on b; whole nodes, blind to the tenant, two on each as well: none beyond.",
			s:      snapshot(deployment(4), []*v1alpha1.InferenceCluster{halfTaken, unreported}),
			want:   want{replicas: 4},
		},
		"WholeNodesWouldPlaceMore": {
			reason: "With three of a's four nodes taken, free devices fit two replicas on the free one, and whole nodes, blind to the tenants, three on three nodes: more placed by whole nodes is no saving, and counts 0.",
			s:      snapshot(deployment(3), []*v1alpha1.InferenceCluster{mostlyTaken}),
			want:   want{replicas: 2},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			plan, err := Schedule(tc.s)
			if err != nil {
				t.Fatalf("\n%s\nSchedule(...): %v", tc.reason, err)
			}
			beyond, err := BeyondWholeNode(tc.s, plan)
			if err != nil {
				t.Fatalf("\n%s\nBeyondWholeNode(...): %v", tc.reason, err)
			}
			got := want{replicas: len(plan.Replicas), beyondWholeNode: beyond}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("\n%s\nSchedule, BeyondWholeNode: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
