package scheduling

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

func TestPodNodes(t *testing.T) {
	gpu := fx.GPU("gpu", 8, "80Gi")
	wholeNode := fx.Cluster("a").Pools(fx.Pool("h100", 3).Devices(gpu).Obj()).Obj()
	// Two nodes of 8 free and one of 2 reported, and one node to grow by.
	freeDevice := fx.Cluster("b").Pools(fx.Pool("h100", 4).Devices(gpu).Observed(observedAt, 3, fx.NodesFree(2, "gpu", 8), fx.NodesFree(1, "gpu", 2)).Obj()).Obj()
	standalone := func(replicas, gpus int64) *v1alpha1.ModelDeployment {
		return fx.Deployment("m").Replicas(replicas).Engines(fx.Standalone("main", fx.GPURequest(gpus))).Obj()
	}
	gang := fx.Deployment("m").Replicas(1).Engines(fx.Gang("main", 1, fx.GPURequest(4))).Obj()
	asked := func(s Snapshot, b Binding) Snapshot {
		s.Options.PodNodes, s.Options.Binding = true, b
		return s
	}
	pod := func(claim, free int64) PodNode { return PodNode{Claim: []int64{claim}, Free: []int64{free}} }
	cases := map[string]struct {
		reason string
		s      Snapshot
		// want is each placement's engines' pod nodes.
		want [][][]PodNode
	}{
		"NotAsked": {
			reason: "A pass whose options do not ask says nothing of its pods' nodes.",
			s:      snapshot(standalone(2, 4), []*v1alpha1.InferenceCluster{freeDevice}),
			want:   [][][]PodNode{{nil}, {nil}},
		},
		"LeastFree": {
			reason: "Best fit: the first 4-GPU pod takes a node of 8 (the node of 2 is too small), the second the 4 that leaves.",
			s:      asked(snapshot(standalone(2, 4), []*v1alpha1.InferenceCluster{freeDevice}), LeastFree),
			want:   [][][]PodNode{{{pod(4, 8)}}, {{pod(4, 4)}}},
		},
		"MostFree": {
			reason: "The most free: both 4-GPU pods take a node of 8 each.",
			s:      asked(snapshot(standalone(2, 4), []*v1alpha1.InferenceCluster{freeDevice}), MostFree),
			want:   [][][]PodNode{{{pod(4, 8)}}, {{pod(4, 8)}}},
		},
		"Gang": {
			reason: "A gang's two 4-GPU pods take distinct nodes, both of 8 free, though one would hold both.",
			s:      asked(snapshot(gang, []*v1alpha1.InferenceCluster{freeDevice}), LeastFree),
			want:   [][][]PodNode{{{pod(4, 8), pod(4, 8)}}},
		},
		"WholeNode": {
			reason: "A whole-node pool's ledger assumes no node's free devices: none are said.",
			s:      asked(snapshot(standalone(1, 4), []*v1alpha1.InferenceCluster{wholeNode}), LeastFree),
			want:   [][][]PodNode{{nil}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			plan, err := Schedule(tc.s)
			if err != nil {
				t.Fatal(err)
			}
			var got [][][]PodNode
			for _, p := range plan.Replicas {
				var engines [][]PodNode
				for _, e := range p.Engines {
					engines = append(engines, e.PodNodes)
				}
				got = append(got, engines)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nSchedule(...) pod nodes by placement and engine: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
