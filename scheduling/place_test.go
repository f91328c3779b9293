package scheduling

import (
	"fmt"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

func TestScheduleFreeDevices(t *testing.T) {
	l4 := func(nodes int64) *fx.PoolWrapper { return fx.Pool("l4", nodes).Devices(fx.GPU("gpu", 4, "24Gi")) }
	h100 := func(nodes int64) *fx.PoolWrapper { return fx.Pool("h100", nodes).Devices(fx.GPU("gpu", 8, "80Gi")) }
	anyGPU := func(count int64) v1alpha1.DeviceSelector {
		return fx.Request("gpu", count, `device.driver == "gpu.nvidia.com"`)
	}
	oneGPU := func() *fx.DeploymentWrapper { return fx.Deployment("m").Engines(fx.Standalone("main", anyGPU(1))) }
	stamped := func(count int64) v1alpha1.DeviceRequest {
		return v1alpha1.DeviceRequest{Name: "gpu", DeviceClassName: fx.GPUClass, Count: count}
	}
	cluster := func(p ...v1alpha1.GPUPool) []*v1alpha1.InferenceCluster {
		return []*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(p...).Obj()}
	}
	binding := func(s Snapshot, b Binding) Snapshot { s.Options.Binding = b; return s }
	fourNodesOf := func(n int) []string {
		out := []string{}
		for i := range n {
			out = append(out, fmt.Sprintf("a/%d main=l4[gpu:1] +", i))
		}
		return out
	}
	before, after := observedAt.Add(-time.Minute), observedAt.Add(time.Minute)

	type want struct {
		placed    []string
		shortfall *Shortfall
	}
	cases := map[string]struct {
		reason   string
		snapshot Snapshot
		want     want
	}{
		"OneGPUReplicasFourToANode": {
			reason:   "Two empty 4xL4 nodes take eight one-GPU replicas, four to a node.",
			snapshot: snapshot(oneGPU().Replicas(8).Obj(), cluster(l4(2).Observed(observedAt, 2, fx.NodesFree(2, "gpu", 4)).Obj())),
			want:     want{placed: fourNodesOf(8)},
		},
		"WholeNodeFallbackWithoutObservation": {
			reason:   "The same pool without a report takes one replica per node.",
			snapshot: snapshot(oneGPU().Replicas(8).Obj(), cluster(l4(2).Obj())),
			want: want{
				placed:    fourNodesOf(2),
				shortfall: cannotHost(capacity("a", "main", wholeNodes("l4", 1, 0))),
			},
		},
		"GrowableNodesAreEmpty": {
			reason:   "A pool of 3 nodes with 1 observed, full, can grow by 2 empty nodes: 8 one-GPU replicas.",
			snapshot: snapshot(oneGPU().Replicas(9).Obj(), cluster(l4(3).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 0)).Obj())),
			want: want{
				placed:    fourNodesOf(8),
				shortfall: cannotHost(capacity("a", "main", roomFor("l4", 1, []DeviceCount{{Name: "gpu", Count: 1}}, 0))),
			},
		},
		"SurgeDoesNotGrowNegative": {
			reason:   "During a surge observedNodes exceeds nodes; the pool grows by nothing, not by a negative count.",
			snapshot: snapshot(oneGPU().Obj(), cluster(l4(2).Observed(observedAt, 3, fx.NodesFree(3, "gpu", 0)).Obj())),
			want:     want{shortfall: cannotHost(capacity("a", "main", roomFor("l4", 1, []DeviceCount{{Name: "gpu", Count: 1}}, 0)))},
		},
		"BootingNodeIsNeitherFreeNorGrowable": {
			reason:   "A node in observedNodes but not in the histogram (booting) offers nothing.",
			snapshot: snapshot(oneGPU().Obj(), cluster(l4(2).Observed(observedAt, 2, fx.NodesFree(1, "gpu", 0)).Obj())),
			want:     want{shortfall: cannotHost(capacity("a", "main", roomFor("l4", 1, []DeviceCount{{Name: "gpu", Count: 1}}, 0)))},
		},
		"GangNeedsDistinctNodes": {
			reason: "A gang of two 4-GPU pods does not fit one node with 8 free.",
			snapshot: snapshot(fx.Deployment("m").Engines(fx.Gang("main", 1, anyGPU(4))).Obj(),
				cluster(h100(1).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 8)).Obj())),
			want: want{shortfall: cannotHost(capacity("a", "main", gangNodes("h100", 2, []DeviceCount{{Name: "gpu", Count: 4}}, 1)))},
		},
		"GangFitsTwoHalfFreeNodes": {
			reason: "The same gang fits two nodes with 4 free each.",
			snapshot: snapshot(fx.Deployment("m").Engines(fx.Gang("main", 1, anyGPU(4))).Obj(),
				cluster(h100(2).Observed(observedAt, 2, fx.NodesFree(2, "gpu", 4)).Obj())),
			want: want{placed: []string{"a/0 main=h100[gpu:4],h100[gpu:4] +"}},
		},
		"PrefillAndDecodeShareANode": {
			reason: "Two Standalone engines of 4 GPUs each share one node with 8 free.",
			snapshot: snapshot(fx.Deployment("m").Engines(fx.Phase(fx.Standalone("prefill", anyGPU(4)), "Prefill"), fx.Phase(fx.Standalone("decode", anyGPU(4)), "Decode")).Obj(),
				cluster(h100(1).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 8)).Obj())),
			want: want{placed: []string{"a/0 prefill=h100[gpu:4] decode=h100[gpu:4] +"}},
		},
		"MostFreeSpreadsAndStrandsTheBigEngine": {
			reason: "MostFree puts the 4-GPU engine on the 8-free node, leaving no node for the 8-GPU engine.",
			snapshot: snapshot(fx.Deployment("m").Engines(fx.Standalone("small", anyGPU(4)), fx.Standalone("big", anyGPU(8))).Obj(),
				cluster(h100(2).Observed(observedAt, 2, fx.NodesFree(1, "gpu", 8), fx.NodesFree(1, "gpu", 4)).Obj())),
			want: want{shortfall: cannotHost(capacity("a", "big", roomFor("h100", 1, []DeviceCount{{Name: "gpu", Count: 8}}, 0)))},
		},
		"LeastFreePacksAndFitsTheBigEngine": {
			reason: "LeastFree puts the 4-GPU engine on the 4-free node, leaving the 8-free node for the 8-GPU engine.",
			snapshot: binding(snapshot(fx.Deployment("m").Engines(fx.Standalone("small", anyGPU(4)), fx.Standalone("big", anyGPU(8))).Obj(),
				cluster(h100(2).Observed(observedAt, 2, fx.NodesFree(1, "gpu", 8), fx.NodesFree(1, "gpu", 4)).Obj())), LeastFree),
			want: want{placed: []string{"a/0 small=h100[gpu:4] big=h100[gpu:8] +"}},
		},
		"SteeredPacksUnderMostFree": {
			reason: "A pool whose report says binding Steered is accounted with best fit whatever the assumed binding: under MostFree it packs as LeastFree, and the 8-GPU engine fits.",
			snapshot: binding(snapshot(fx.Deployment("m").Engines(fx.Standalone("small", anyGPU(4)), fx.Standalone("big", anyGPU(8))).Obj(),
				cluster(h100(2).Observed(observedAt, 2, fx.NodesFree(1, "gpu", 8), fx.NodesFree(1, "gpu", 4)).Steered().Obj())), MostFree),
			want: want{placed: []string{"a/0 small=h100[gpu:4] big=h100[gpu:8] +"}},
		},
		"SteeredChargesPackToo": {
			reason: "Pods charged to a steered pool take the best-fit node too: another team's 4-GPU replica, not yet counted, takes the node with 4 free, and leaves the node with 8 for an 8-GPU replica.",
			snapshot: binding(snapshot(fx.Deployment("m").Engines(fx.Standalone("big", anyGPU(8))).Obj(),
				cluster(h100(2).Observed(observedAt, 2, fx.NodesFree(1, "gpu", 8), fx.NodesFree(1, "gpu", 4)).Steered().Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "h100", stamped(4))).Obj()), MostFree),
			want: want{placed: []string{"a/0 big=h100[gpu:8] +"}},
		},
		"UnsteeredChargesSpread": {
			reason: "The same charge on the same pool without Steered, under MostFree, takes the node with 8 free, and the 8-GPU replica fits nowhere.",
			snapshot: binding(snapshot(fx.Deployment("m").Engines(fx.Standalone("big", anyGPU(8))).Obj(),
				cluster(h100(2).Observed(observedAt, 2, fx.NodesFree(1, "gpu", 8), fx.NodesFree(1, "gpu", 4)).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "h100", stamped(4))).Obj()), MostFree),
			want: want{shortfall: cannotHost(capacity("a", "big", roomFor("h100", 1, []DeviceCount{{Name: "gpu", Count: 8}}, 0)))},
		},
		"SteeredWithoutAReportIsWholeNode": {
			reason:   "Steered belongs to a usable report: a pool with none is accounted by whole nodes, one replica per node.",
			snapshot: snapshot(oneGPU().Replicas(8).Obj(), cluster(l4(2).Steered().Obj())),
			want: want{
				placed:    fourNodesOf(2),
				shortfall: cannotHost(capacity("a", "main", wholeNodes("l4", 1, 0))),
			},
		},
		"ScheduledBeforeObservationIsCounted": {
			reason: "A replica whose pods scheduled strictly before observedAt is already in the histogram and not charged again.",
			snapshot: snapshot(oneGPU().Obj(), cluster(l4(1).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 1)).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "l4", stamped(3))).PodsScheduled("True", before).Obj()),
			want: want{placed: []string{"a/0 main=l4[gpu:1] +"}},
		},
		"ScheduledAtObservationIsCharged": {
			reason: "A replica whose pods scheduled at the very time of the observation is charged: not strictly older.",
			snapshot: snapshot(oneGPU().Obj(), cluster(l4(1).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 4)).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "l4", stamped(4))).PodsScheduled("True", observedAt).Obj()),
			want: want{shortfall: cannotHost(capacity("a", "main", roomFor("l4", 1, []DeviceCount{{Name: "gpu", Count: 1}}, 0)))},
		},
		"ScheduledAfterObservationIsCharged": {
			reason: "A replica whose pods scheduled after observedAt is not yet in the histogram and is charged.",
			snapshot: snapshot(oneGPU().Replicas(2).Obj(), cluster(l4(1).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 4)).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "l4", stamped(3))).PodsScheduled("True", after).Obj()),
			want: want{
				placed:    []string{"a/0 main=l4[gpu:1] +"},
				shortfall: cannotHost(capacity("a", "main", roomFor("l4", 1, []DeviceCount{{Name: "gpu", Count: 1}}, 0))),
			},
		},
		"NotScheduledIsCharged": {
			reason: "A replica whose pods are not scheduled is charged whatever its timestamp.",
			snapshot: snapshot(oneGPU().Obj(), cluster(l4(1).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 4)).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "l4", stamped(4))).PodsScheduled("False", before).Obj()),
			want: want{shortfall: cannotHost(capacity("a", "main", roomFor("l4", 1, []DeviceCount{{Name: "gpu", Count: 1}}, 0)))},
		},
		"NoConditionIsCharged": {
			reason: "A replica with no PodsScheduled condition is charged.",
			snapshot: snapshot(oneGPU().Obj(), cluster(l4(1).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 4)).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "l4", stamped(4))).Obj()),
			want: want{shortfall: cannotHost(capacity("a", "main", roomFor("l4", 1, []DeviceCount{{Name: "gpu", Count: 1}}, 0)))},
		},
		"UnresolvableStampedRequestTakesAWholeNode": {
			reason: "A stamped request of a class the pool lacks is charged a whole node, conservatively.",
			snapshot: snapshot(oneGPU().Replicas(2).Obj(), cluster(l4(2).Observed(observedAt, 2, fx.NodesFree(2, "gpu", 4)).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "l4", v1alpha1.DeviceRequest{Name: "x", DeviceClassName: "tpu.google.com", Count: 1})).Obj()),
			want: want{placed: fourNodesOf(2)},
		},
		"UnfitChargeHoldsTheMostFreeNode": {
			reason: "A pending replica that fits no node holds the node with the most free, whole: here the only one.",
			snapshot: snapshot(oneGPU().Obj(), cluster(l4(1).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 2)).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "l4", stamped(4))).Obj()),
			want: want{shortfall: cannotHost(capacity("a", "main", roomFor("l4", 1, []DeviceCount{{Name: "gpu", Count: 1}}, 0)))},
		},
		"UnfitChargeLeavesThePoolOpen": {
			reason: "A pending 8-GPU replica on nodes with 4 free holds one node; the rest of the pool still takes new replicas.",
			snapshot: snapshot(oneGPU().Replicas(2).Obj(), cluster(h100(4).Observed(observedAt, 4, fx.NodesFree(4, "gpu", 4)).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "h100", stamped(8))).Obj()),
			want: want{placed: []string{"a/0 main=h100[gpu:1] +", "a/1 main=h100[gpu:1] +"}},
		},
		"UnreadableEnginesTakeAWholeNode": {
			reason: "Another deployment's replica whose engines did not read is charged a whole node of each pool of its cluster: of two empty 8-GPU nodes one is left, for one of the two replicas.",
			snapshot: func() Snapshot {
				s := snapshot(fx.Deployment("m").Engines(fx.Standalone("main", anyGPU(8))).Replicas(2).Obj(), cluster(h100(2).Observed(observedAt, 2, fx.NodesFree(2, "gpu", 8)).Obj()),
					fx.Replica("other", "a", 0).Engines().Obj())
				return unreadableReplica(s, 0, "spec.engines[0].copies: cannot use a string as a whole number")
			}(),
			want: want{
				placed:    []string{"a/0 main=h100[gpu:8] +"},
				shortfall: cannotHost(capacity("a", "main", roomFor("h100", 1, []DeviceCount{{Name: "gpu", Count: 8}}, 0))),
			},
		},
		"UnreadableReplicaChargedAsUnscheduled": {
			reason: "Another deployment's replica that did not read whole but whose engines did is charged where they are pinned, as not scheduled, whatever its PodsScheduled said.",
			snapshot: func() Snapshot {
				s := snapshot(fx.Deployment("m").Engines(fx.Standalone("main", anyGPU(8))).Replicas(2).Obj(), cluster(h100(2).Observed(observedAt, 2, fx.NodesFree(2, "gpu", 8)).Obj()),
					fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "h100", stamped(8))).PodsScheduled("True", before).Obj())
				return unreadableReplica(s, 0, "metadata.labels.modelplane.ai/replica-index: cannot use a number as a string")
			}(),
			want: want{
				placed:    []string{"a/0 main=h100[gpu:8] +"},
				shortfall: cannotHost(capacity("a", "main", roomFor("h100", 1, []DeviceCount{{Name: "gpu", Count: 8}}, 0))),
			},
		},
		"UnreadableWholeNodePool": {
			reason: "Under whole-node accounting the replica whose engines did not read takes one node of each pool.",
			snapshot: func() Snapshot {
				s := snapshot(oneGPU().Replicas(2).Obj(), cluster(l4(2).Obj()), fx.Replica("other", "a", 0).Engines().Obj())
				return unreadableReplica(s, 0, "spec.engines: cannot use a string as a list")
			}(),
			want: want{
				placed:    []string{"a/0 main=l4[gpu:1] +"},
				shortfall: cannotHost(capacity("a", "main", wholeNodes("l4", 1, 0))),
			},
		},
		"WholeNodePoolInDeficitTakesNothingNew": {
			reason: "Without a report, a pool whose charged pods exceed its nodes takes nothing new, as Modelplane.",
			snapshot: snapshot(oneGPU().Obj(), cluster(l4(1).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "l4", stamped(1))).Obj(),
				fx.Replica("other", "a", 1).Engines(fx.PinnedStandalone("main", "l4", stamped(1))).Obj()),
			want: want{shortfall: cannotHost(capacity("a", "main", saturated("l4", true)))},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			checkPlan(t, tc.reason, tc.snapshot, tc.want.placed, tc.want.shortfall)
		})
	}
}

func TestGangs(t *testing.T) {
	cases := map[string]struct {
		reason string
		d      demand
		want   [][][]int64
	}{
		"StandaloneCopyThenMember": {
			reason: "A Standalone engine's pods are each a gang of one, copy by copy, and member by member within a copy, unsorted.",
			d:      demand{copies: 2, members: []podGroup{{pods: 1, claim: []int64{1, 0}}, {pods: 1, claim: []int64{4, 0}}}},
			want:   [][][]int64{{{1, 0}}, {{4, 0}}, {{1, 0}}, {{4, 0}}},
		},
		"ClaimlessLeftOut": {
			reason: "A claimless member costs nothing and is no pod of the layout.",
			d:      demand{copies: 1, gang: true, members: []podGroup{{pods: 1}, {pods: 2, claim: []int64{2}}}},
			want:   [][][]int64{{{2}, {2}}},
		},
		"GangBiggestSumFirst": {
			reason: "A gang's claims go biggest first, by their sum.",
			d:      demand{copies: 1, gang: true, members: []podGroup{{pods: 1, claim: []int64{1, 0}}, {pods: 2, claim: []int64{0, 4}}}},
			want:   [][][]int64{{{0, 4}, {0, 4}, {1, 0}}},
		},
		"GangEqualSumsByClaim": {
			reason: "Claims of equal sums go by the claim, device by device in pool order, descending: the order is total.",
			d:      demand{copies: 2, gang: true, members: []podGroup{{pods: 1, claim: []int64{0, 2}}, {pods: 1, claim: []int64{1, 1}}, {pods: 1, claim: []int64{2, 0}}}},
			want:   [][][]int64{{{2, 0}, {1, 1}, {0, 2}}, {{2, 0}, {1, 1}, {0, 2}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := gocmp.Diff(tc.want, tc.d.gangs()); diff != "" {
				t.Errorf("%s\ngangs(): -want, +got:\n%s", tc.reason, diff)
			}
			if !tc.d.gang {
				return
			}
			// A gang's order is the claims', not the members': an agent that
			// sees only the pods' claims follows it exactly.
			reversed := tc.d
			reversed.members = slices.Clone(tc.d.members)
			slices.Reverse(reversed.members)
			if diff := gocmp.Diff(tc.want, reversed.gangs()); diff != "" {
				t.Errorf("%s\ngangs() of the members reversed: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
