package scheduling

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/fixture"
)

func TestCapacity(t *testing.T) {
	gpu := fx.GPU("gpu", 8, "80Gi")
	wholeNode := fx.Cluster("a").Pools(fx.Pool("h100", 3).Devices(gpu).Obj()).Obj()
	freeDevice := fx.Cluster("b").Pools(fx.Pool("h100", 4).Devices(gpu).Observed(observedAt, 3, fx.NodesFree(2, "gpu", 8), fx.NodesFree(1, "gpu", 2)).Obj()).Obj()
	deployment := func(replicas int64, gpus int64) *v1alpha1.ModelDeployment {
		return fx.Deployment("m").Replicas(replicas).Engines(fx.Standalone("main", fx.GPURequest(gpus))).Obj()
	}
	cases := map[string]struct {
		reason string
		s      Snapshot
		want   []PoolCapacity
	}{
		"NothingToPlace": {
			reason: "A deployment of no replicas builds no ledger, and says so with no capacity.",
			s:      snapshot(deployment(0, 1), []*v1alpha1.InferenceCluster{wholeNode, freeDevice}),
		},
		"WholeNodeAndFreeDevices": {
			reason: "Each pool's ledger once the replicas are placed: a whole-node pool's empty nodes with every device free, its taken ones none; a free-device pool by its histogram, plus the node it can grow by, the most free first.",
			s:      snapshot(deployment(2, 4), []*v1alpha1.InferenceCluster{wholeNode, freeDevice}),
			want: []PoolCapacity{
				{Pool: PoolRef{"a", "h100"}, WholeNode: true, Devices: []string{"gpu"}, Groups: []NodeGroup{{Nodes: 2, Free: []int64{8}}, {Nodes: 1, Free: []int64{0}}}},
				{Pool: PoolRef{"b", "h100"}, Devices: []string{"gpu"}, Groups: []NodeGroup{{Nodes: 2, Free: []int64{8}}, {Nodes: 1, Free: []int64{4}}, {Nodes: 1, Free: []int64{2}}}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			plan, err := Schedule(tc.s)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, plan.Capacity); diff != "" {
				t.Errorf("%s\nSchedule(...).Capacity: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
