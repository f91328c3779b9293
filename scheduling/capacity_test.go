package scheduling

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

func TestCapacity(t *testing.T) {
	gpu := fx.GPU("gpu", 8, "80Gi")
	wholeNode := fx.Cluster("a").Pools(fx.Pool("h100", 3).Devices(gpu).Obj()).Obj()
	freeDevice := fx.Cluster("b").Pools(fx.Pool("h100", 4).Devices(gpu).Observed(observedAt, 3, fx.NodesFree(2, "gpu", 8), fx.NodesFree(1, "gpu", 2)).Obj()).Obj()
	deployment := func(replicas int64, gpus int64) *v1alpha1.ModelDeployment {
		return fx.Deployment("m").Replicas(replicas).Engines(fx.Standalone("main", fx.GPURequest(gpus))).Obj()
	}
	asked := func(s Snapshot, c Capacity) Snapshot {
		s.Options.Capacity = c
		return s
	}
	cases := map[string]struct {
		reason string
		s      Snapshot
		want   []PoolCapacity
	}{
		"NothingToPlace": {
			reason: "A deployment of no replicas builds no ledger, and says so with no capacity.",
			s:      asked(snapshot(deployment(0, 1), []*v1alpha1.InferenceCluster{wholeNode, freeDevice}), CapacityGroups),
		},
		"NotAsked": {
			reason: "A pass whose options do not ask for capacity says nothing of it, though it placed replicas.",
			s:      snapshot(deployment(2, 4), []*v1alpha1.InferenceCluster{wholeNode, freeDevice}),
		},
		"WholeNodeAndFreeDevices": {
			reason: "Each pool's ledger once the replicas are placed: a whole-node pool's empty nodes with every device free, its taken ones none; a free-device pool by its histogram, plus the node it can grow by, the most free first.",
			s:      asked(snapshot(deployment(2, 4), []*v1alpha1.InferenceCluster{wholeNode, freeDevice}), CapacityGroups),
			want: []PoolCapacity{
				{Pool: PoolRef{"a", "h100"}, WholeNode: true, Devices: []string{"gpu"}, Largest: []int64{8}, Groups: []NodeGroup{{Nodes: 2, Free: []int64{8}}, {Nodes: 1, Free: []int64{0}}}},
				{Pool: PoolRef{"b", "h100"}, Devices: []string{"gpu"}, Largest: []int64{8}, Groups: []NodeGroup{{Nodes: 2, Free: []int64{8}}, {Nodes: 1, Free: []int64{4}}, {Nodes: 1, Free: []int64{2}}}},
			},
		},
		"SteeredPoolPacksBesideAnUnsteeredOne": {
			reason: "Binding is per pool: of two one-GPU replicas spread over b and c, the one on b (not steered, MostFree) takes a node with 8 free, the one on c (steered) the node with 2, whatever the pass assumes; the plan says which pool is steered.",
			s: asked(snapshot(deployment(2, 1), []*v1alpha1.InferenceCluster{freeDevice, fx.Cluster("c").Pools(fx.Pool("h100", 4).Devices(gpu).
				Observed(observedAt, 3, fx.NodesFree(2, "gpu", 8), fx.NodesFree(1, "gpu", 2)).Steered().Obj()).Obj()}), CapacityGroups),
			want: []PoolCapacity{
				{Pool: PoolRef{"b", "h100"}, Devices: []string{"gpu"}, Largest: []int64{8}, Groups: []NodeGroup{{Nodes: 2, Free: []int64{8}}, {Nodes: 1, Free: []int64{7}}, {Nodes: 1, Free: []int64{2}}}},
				{Pool: PoolRef{"c", "h100"}, Steered: true, Devices: []string{"gpu"}, Largest: []int64{8}, Groups: []NodeGroup{{Nodes: 3, Free: []int64{8}}, {Nodes: 1, Free: []int64{1}}}},
			},
		},
		"LargestOnly": {
			reason: "Asked for the largest free counts only (a server's metrics), a plan says them without the groups: six 8-GPU replicas take every whole node of a, and b's three nodes of 8 free, leaving its node of 2.",
			s:      asked(snapshot(deployment(6, 8), []*v1alpha1.InferenceCluster{wholeNode, freeDevice}), CapacityLargest),
			want: []PoolCapacity{
				{Pool: PoolRef{"a", "h100"}, WholeNode: true, Devices: []string{"gpu"}, Largest: []int64{0}},
				{Pool: PoolRef{"b", "h100"}, Devices: []string{"gpu"}, Largest: []int64{2}},
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
