package scheduling

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/fixture"
)

var observedAt = time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)

// placed summarises a placement as "cluster/index engine=pool,...", with a
// trailing "+" for a new one.
func placed(p Placement) string {
	var engines []string
	for _, e := range p.Engines {
		pools := []string{}
		for _, m := range e.Members {
			pools = append(pools, m.Pool)
		}
		engines = append(engines, e.Name+"="+strings.Join(pools, ","))
	}
	s := fmt.Sprintf("%s/%d %s", p.Cluster, p.Index, strings.Join(engines, " "))
	if p.New {
		s += " +"
	}
	return s
}

func summary(plan *Plan) []string {
	out := []string{}
	for _, p := range plan.Replicas {
		out = append(out, placed(p))
	}
	return out
}

// snapshot builds a snapshot, reading agent observations off the fixture
// pools the way the observation package would for a fresh report.
func snapshot(d *v1alpha1.ModelDeployment, clusters []*v1alpha1.InferenceCluster, replicas ...*v1alpha1.ModelReplica) Snapshot {
	s := Snapshot{Deployment: d}
	for _, c := range clusters {
		s.Clusters = append(s.Clusters, Cluster{Object: c, Observed: observedPools(c)})
	}
	for _, r := range replicas {
		s.Replicas = append(s.Replicas, Replica{Object: r, ScheduledSince: scheduledSince(r)})
	}
	return s
}

func TestSchedule(t *testing.T) {
	h100 := func(nodes int64) v1alpha1.GPUPool {
		return fx.Pool("h100", nodes).Devices(fx.GPU("gpu", 8, "80Gi")).Obj()
	}
	h200 := func(nodes int64) v1alpha1.GPUPool {
		return fx.Pool("h200", nodes).Devices(fx.GPU("gpu", 8, "141Gi")).Obj()
	}
	mem141 := `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("141Gi")) >= 0`
	memUnder100 := `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("100Gi")) < 0`

	type args struct {
		snapshot Snapshot
	}
	type want struct {
		placed    []string
		shortfall string
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"SpreadAcrossClusters": {
			reason: "New replicas go one per cluster before any cluster gets a second.",
			args: args{snapshot(fx.Deployment("m").Replicas(3).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("c").Obj(), fx.Cluster("a").Obj(), fx.Cluster("b").Obj()})},
			want: want{placed: []string{"a/0 main=default +", "b/0 main=default +", "c/0 main=default +"}},
		},
		"PackWhenForced": {
			reason: "With one cluster, replicas pack onto it at successive indices.",
			args:   args{snapshot(fx.Deployment("m").Replicas(2).Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()})},
			want:   want{placed: []string{"a/0 main=default +", "a/1 main=default +"}},
		},
		"CapacityShortfall": {
			reason: "A two-node pool takes two one-GPU replicas under whole-node accounting; the third is explained.",
			args:   args{snapshot(fx.Deployment("m").Replicas(3).Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()})},
			want: want{
				placed:    []string{"a/0 main=default +", "a/1 main=default +"},
				shortfall: "0/1 clusters can host another replica: a: engine main: pool default needs 1 free node, has 0",
			},
		},
		"RetainOnDegradedCluster": {
			reason: "A replica on a cluster that is not Ready and has no gateway is kept where it is.",
			args: args{snapshot(fx.Deployment("m").Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").NotReady().Gateway("").Obj(), fx.Cluster("b").Obj()},
				fx.Replica("m", "a", 0).Obj())},
			want: want{placed: []string{"a/0 main=default"}},
		},
		"ReplaceWhenClusterDeleted": {
			reason: "A replica whose cluster is gone is dropped and a new one placed elsewhere.",
			args: args{snapshot(fx.Deployment("m").Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("b").Obj()},
				fx.Replica("m", "gone", 0).Obj())},
			want: want{placed: []string{"b/0 main=default +"}},
		},
		"ReplaceWhenPinnedPoolStopsMatching": {
			reason: "A replica whose pinned pool no longer satisfies the edited nodeSelector is re-placed on one that does.",
			args: args{snapshot(
				fx.Deployment("m").Engines(fx.Standalone("main", fx.Request("gpu", 1, mem141))).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(h100(2), h200(2)).Obj()},
				fx.Replica("m", "a", 0).Engines(fx.PinnedStandalone("main", "h100", fx.Stamped(1))).Obj())},
			want: want{placed: []string{"a/0 main=h200 +"}},
		},
		"ReplaceWhenPinnedPoolDeleted": {
			reason: "A replica pinned to a pool the cluster no longer publishes is re-placed.",
			args: args{snapshot(fx.Deployment("m").Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()},
				fx.Replica("m", "a", 0).Engines(fx.PinnedStandalone("main", "old", fx.Stamped(1))).Obj())},
			want: want{placed: []string{"a/0 main=default +"}},
		},
		"ReplaceWhenEnginesNoLongerLineUp": {
			reason: "A replica whose engines were renamed in the deployment is re-placed.",
			args: args{snapshot(fx.Deployment("m").Engines(fx.Standalone("renamed", fx.GPURequest(1))).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()}, fx.Replica("m", "a", 0).Obj())},
			want: want{placed: []string{"a/0 renamed=default +"}},
		},
		"ScaleDownMostLoadedHighestIndexFirst": {
			reason: "Scaling 4 to 2 drops a/1 (most-loaded cluster, highest index), then c/0 (tie on load, later name).",
			args: args{snapshot(fx.Deployment("m").Replicas(2).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Obj(), fx.Cluster("b").Obj(), fx.Cluster("c").Obj()},
				fx.Replica("m", "a", 0).Obj(), fx.Replica("m", "a", 1).Obj(), fx.Replica("m", "b", 0).Obj(), fx.Replica("m", "c", 0).Obj())},
			want: want{placed: []string{"a/0 main=default", "b/0 main=default"}},
		},
		"ReuseLowestFreeIndex": {
			reason: "A new replica takes the lowest index not in use on its cluster.",
			args: args{snapshot(fx.Deployment("m").Replicas(2).Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()},
				fx.Replica("m", "a", 1).Obj())},
			want: want{placed: []string{"a/0 main=default +", "a/1 main=default"}},
		},
		"GangNeedsEnoughNodes": {
			reason: "A Leader plus two Workers needs three whole nodes; a two-node pool cannot host it.",
			args: args{snapshot(fx.Deployment("m").Engines(fx.Gang("main", 2, fx.GPURequest(1))).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()})},
			want: want{shortfall: "0/1 clusters can host another replica: a: engine main: pool default needs 3 free nodes, has 2"},
		},
		"GangFitsEnoughNodes": {
			reason: "The same gang fits a three-node pool.",
			args: args{snapshot(fx.Deployment("m").Engines(fx.Gang("main", 2, fx.GPURequest(1))).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(fx.Pool("default", 3).Devices(fx.GPU("gpu", 1, "141Gi")).Obj()).Obj()})},
			want: want{placed: []string{"a/0 main=default,default +"}},
		},
		"EnginesOnDifferentPoolsOfOneCluster": {
			reason: "Each engine of a replica takes the first pool that fits it, all on one cluster.",
			args: args{snapshot(fx.Deployment("m").Engines(
				fx.Phase(fx.Standalone("prefill", fx.Request("gpu", 4, mem141)), "Prefill"),
				fx.Phase(fx.Standalone("decode", fx.Request("gpu", 4, memUnder100)), "Decode"),
			).Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(h100(1), h200(1)).Obj()})},
			want: want{placed: []string{"a/0 prefill=h200 decode=h100 +"}},
		},
		"SyntheticOnlyMemberClaimsNothing": {
			reason: "A member matching only a Synthetic NIC rides along free; the GPU member is charged.",
			args: args{snapshot(fx.Deployment("m").Replicas(2).Engines(v1alpha1.Engine{Name: "main", Members: []v1alpha1.Member{
				fx.Member(v1alpha1.RoleLeader, 0, fx.Request("nic", 1, fx.IB)),
				fx.Member(v1alpha1.RoleWorker, 1, fx.GPURequest(1)),
			}}).Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(fx.Pool("default", 2).Devices(fx.GPU("gpu", 1, "141Gi"), fx.NIC(1)).Obj()).Obj()})},
			want: want{placed: []string{"a/0 main=default,default +", "a/1 main=default,default +"}},
		},
		"SyntheticOnlyEngineIsNotPlaced": {
			reason: "An engine none of whose members claims a DRA device has no pool.",
			args: args{snapshot(fx.Deployment("m").Engines(fx.Standalone("main", fx.Request("nic", 1, fx.IB))).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(fx.Pool("default", 2).Devices(fx.GPU("gpu", 1, "141Gi"), fx.NIC(1)).Obj()).Obj()})},
			want: want{shortfall: "0/1 clusters can host another replica: a: engine main: no pool matches the nodeSelector"},
		},
		"ClaimlessLeaderCostsNothing": {
			reason: "A Leader without a nodeSelector takes no node; two replicas of Leader plus one GPU Worker fit two nodes.",
			args: args{snapshot(fx.Deployment("m").Replicas(2).Engines(v1alpha1.Engine{Name: "main", Members: []v1alpha1.Member{
				fx.Member(v1alpha1.RoleLeader, 0),
				fx.Member(v1alpha1.RoleWorker, 1, fx.GPURequest(1)),
			}}).Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()})},
			want: want{placed: []string{"a/0 main=default,default +", "a/1 main=default,default +"}},
		},
		"NoScheduleKeepsNewReplicasOff": {
			reason: "An untolerated NoSchedule taint repels new replicas.",
			args:   args{snapshot(fx.Deployment("m").Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Taint("gpu", "maint", "NoSchedule").Obj()})},
			want:   want{shortfall: "0/1 clusters can host another replica: a: untolerated taint gpu=maint:NoSchedule"},
		},
		"NoScheduleLeavesExistingReplica": {
			reason: "NoSchedule does not evict a replica already there.",
			args: args{snapshot(fx.Deployment("m").Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Taint("gpu", "", "NoSchedule").Obj()},
				fx.Replica("m", "a", 0).Obj())},
			want: want{placed: []string{"a/0 main=default"}},
		},
		"TolerationAllowsPlacement": {
			reason: "An Exists toleration of the key admits the tainted cluster.",
			args: args{snapshot(fx.Deployment("m").Tolerations(v1alpha1.Toleration{Key: "gpu", Operator: "Exists"}).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Taint("gpu", "maint", "NoSchedule").Obj()})},
			want: want{placed: []string{"a/0 main=default +"}},
		},
		"NoExecuteDrainsAndReschedules": {
			reason: "An untolerated NoExecute taint evicts the replica, which is re-placed on a tolerated cluster.",
			args: args{snapshot(fx.Deployment("m").Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Taint("gpu", "", "NoExecute").Obj(), fx.Cluster("b").Obj()},
				fx.Replica("m", "a", 0).Obj())},
			want: want{placed: []string{"b/0 main=default +"}},
		},
		"NoExecuteTolerationRetains": {
			reason: "A tolerated NoExecute taint keeps the replica.",
			args: args{snapshot(fx.Deployment("m").Tolerations(v1alpha1.Toleration{Key: "gpu", Operator: "Exists", Effect: "NoExecute"}).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Taint("gpu", "", "NoExecute").Obj(), fx.Cluster("b").Obj()},
				fx.Replica("m", "a", 0).Obj())},
			want: want{placed: []string{"a/0 main=default"}},
		},
		"NoScheduleTolerationDoesNotCoverNoExecute": {
			reason: "A toleration for NoSchedule does not tolerate a NoExecute taint of the same key.",
			args: args{snapshot(fx.Deployment("m").Tolerations(v1alpha1.Toleration{Key: "gpu", Operator: "Exists", Effect: "NoSchedule"}).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Taint("gpu", "", "NoExecute").Obj()},
				fx.Replica("m", "a", 0).Obj())},
			want: want{shortfall: "0/1 clusters can host another replica: a: untolerated taint gpu:NoExecute"},
		},
		"EqualTolerationMatchesOnValue": {
			reason: "An Equal toleration with another value does not tolerate the taint.",
			args: args{snapshot(fx.Deployment("m").Tolerations(v1alpha1.Toleration{Key: "team", Value: "b"}).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Taint("team", "a", "NoSchedule").Obj(), fx.Cluster("b").Taint("team", "b", "NoSchedule").Obj()})},
			want: want{placed: []string{"b/0 main=default +"}},
		},
		"KeylessExistsToleratesEverything": {
			reason: "An Exists toleration without a key tolerates every taint.",
			args: args{snapshot(fx.Deployment("m").Tolerations(v1alpha1.Toleration{Operator: "Exists"}).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Taint("x", "1", "NoSchedule").Taint("y", "", "NoExecute").Obj()})},
			want: want{placed: []string{"a/0 main=default +"}},
		},
		"OtherDeploymentsAreCharged": {
			reason: "Another team's replicas hold a's nodes, so the new replica goes to b despite the name order.",
			args: args{snapshot(fx.Deployment("m").Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Obj(), fx.Cluster("b").Obj()},
				fx.Replica("other", "a", 0).Obj(), fx.Replica("other", "a", 1).Obj())},
			want: want{placed: []string{"b/0 main=default +"}},
		},
		"SameNameOtherNamespaceIsNotOurs": {
			reason: "A replica labelled with our name in another namespace is another deployment's: charged, never retained.",
			args: args{snapshot(fx.Deployment("m").Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(fx.Pool("default", 1).Devices(fx.GPU("gpu", 1, "141Gi")).Obj()).Obj()},
				fx.Replica("m", "a", 0).Namespace("other-team").Obj())},
			want: want{shortfall: "0/1 clusters can host another replica: a: engine main: pool default needs 1 free node, has 0"},
		},
		"DroppedReplicaIsNotCharged": {
			reason: "Our replica dropped for a pool that stopped matching frees its node for its replacement.",
			args: args{snapshot(fx.Deployment("m").Engines(fx.Standalone("main", fx.Request("gpu", 1, mem141))).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(fx.Pool("default", 1).Devices(fx.GPU("gpu", 1, "80Gi")).Obj(), fx.Pool("big", 1).Devices(fx.GPU("gpu", 1, "141Gi")).Obj()).Obj()},
				fx.Replica("m", "a", 0).Engines(fx.PinnedStandalone("main", "default", fx.Stamped(1))).Obj())},
			want: want{placed: []string{"a/0 main=big +"}},
		},
		"DuplicateIdentityKeepsFirstByName": {
			reason: "Two replicas claiming one (cluster, index): the first by name is kept.",
			args: args{snapshot(fx.Deployment("m").Engines(fx.Standalone("main", fx.Request("gpu", 1, mem141))).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(h100(2), h200(2)).Obj()},
				fx.Replica("m", "a", 0).Name("z").Engines(fx.PinnedStandalone("main", "h100", fx.Stamped(1))).Obj(),
				fx.Replica("m", "a", 0).Name("b").Engines(fx.PinnedStandalone("main", "h200", fx.Stamped(1))).Obj())},
			want: want{placed: []string{"a/0 main=h200"}},
		},
		"CELRuntimeErrorIsNonMatch": {
			reason: "A selector reading an attribute a device lacks does not match that device, and is not an error.",
			args: args{snapshot(fx.Deployment("m").Engines(fx.Standalone("main", fx.Request("gpu", 1, `device.attributes["gpu.nvidia.com"].architecture == "Hopper"`))).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()})},
			want: want{shortfall: "0/1 clusters can host another replica: a: engine main: no pool matches the nodeSelector"},
		},
		"GatewayHostnamePreferred": {
			reason: "A cluster with only the newer hostname is eligible.",
			args:   args{snapshot(fx.Deployment("m").Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Gateway("").Hostname("a.example.com").Obj()})},
			want:   want{placed: []string{"a/0 main=default +"}},
		},
		"NoGatewayNotEligible": {
			reason: "A Ready cluster with no gateway hostname or address takes no new replica.",
			args:   args{snapshot(fx.Deployment("m").Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Gateway("").Obj()})},
			want:   want{shortfall: "0/1 clusters can host another replica: a: no gateway hostname or address"},
		},
		"NotReadyNotEligible": {
			reason: "A cluster that is not Ready takes no new replica.",
			args:   args{snapshot(fx.Deployment("m").Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").NotReady().Obj()})},
			want:   want{shortfall: "0/1 clusters can host another replica: a: not Ready"},
		},
		"RetainOnlyPlacesNothingNew": {
			reason: "With the ModelCache unresolved, existing replicas stay and nothing new is placed.",
			args: args{func() Snapshot {
				s := snapshot(fx.Deployment("m").Replicas(2).Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()}, fx.Replica("m", "a", 0).Obj())
				s.Options.RetainOnly = true
				return s
			}()},
			want: want{placed: []string{"a/0 main=default"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			checkPlan(t, tc.reason, tc.args.snapshot, tc.want.placed, tc.want.shortfall)
		})
	}
}

// checkPlan schedules a snapshot and compares the placements and the
// rendered shortfall with what a case wants.
func checkPlan(t *testing.T, reason string, s Snapshot, placed []string, shortfall string) {
	t.Helper()
	plan, err := Schedule(s)
	if err != nil {
		t.Fatalf("%s\nSchedule(...): unexpected error: %v", reason, err)
	}
	// Selectors compiled in an earlier pass, or in this one, change
	// nothing: twice through a shared cache, the plan is the same.
	shared := s
	shared.Options.Selectors = NewSelectors()
	for range 2 {
		again, err := Schedule(shared)
		if err != nil {
			t.Fatalf("%s\nSchedule(...) with shared selectors: unexpected error: %v", reason, err)
		}
		if diff := cmp.Diff(plan, again, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s\nSchedule(...) with shared selectors: -without, +with:\n%s", reason, diff)
		}
	}
	if diff := cmp.Diff(placed, summary(plan), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("%s\nSchedule(...) placements: -want, +got:\n%s", reason, diff)
	}
	if diff := cmp.Diff(shortfall, plan.Shortfall.String()); diff != "" {
		t.Errorf("%s\nSchedule(...) shortfall: -want, +got:\n%s", reason, diff)
	}
}

func TestScheduleInvalidSelector(t *testing.T) {
	// Nested walks over every attribute of every domain: DRA's cost
	// estimator puts the worst case near ten times its limit.
	expensive := `device.attributes.all(d, device.attributes[d].all(k, device.attributes.all(e, device.attributes[e].all(l, k != l))))`
	cases := map[string]struct {
		reason string
		cel    string
		want   string
	}{
		"DoesNotCompile": {
			reason: "A malformed expression names the engine, member and request.",
			cel:    `device.attributes["gpu.nvidia.com"].memory >=`,
			want:   "engine main member 0 (Standalone) request gpu: selector #0: compilation failed",
		},
		"NotBoolean": {
			reason: "An expression that does not evaluate to a bool is refused as DRA refuses it.",
			cel:    `device.driver`,
			want:   "engine main member 0 (Standalone) request gpu: selector #0: must evaluate to bool",
		},
		"OverCost": {
			reason: "An expression whose estimated cost is over DRA's limit is refused.",
			cel:    expensive,
			want:   "engine main member 0 (Standalone) request gpu: selector #0: estimated cost 9705731 is over the limit of 1000000",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := fx.Deployment("m").Engines(fx.Standalone("main", fx.Request("gpu", 1, tc.cel))).Obj()
			s := snapshot(d, []*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()})
			// Without a shared cache, then twice with one: a selector refused
			// once is refused again, for the same reason.
			for _, selectors := range []*Selectors{nil, NewSelectors()} {
				s.Options.Selectors = selectors
				for range 2 {
					_, err := Schedule(s)
					if _, ok := errors.AsType[*InvalidSelectorError](err); !ok {
						t.Fatalf("%s\nSchedule(...): want an InvalidSelectorError, got %v", tc.reason, err)
					}
					if !strings.Contains(err.Error(), tc.want) {
						t.Errorf("%s\nSchedule(...): error %q does not contain %q", tc.reason, err, tc.want)
					}
				}
			}
		})
	}
}

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
			out = append(out, fmt.Sprintf("a/%d main=l4 +", i))
		}
		return out
	}
	before, after := observedAt.Add(-time.Minute), observedAt.Add(time.Minute)

	type want struct {
		placed    []string
		shortfall string
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
				shortfall: "0/1 clusters can host another replica: a: engine main: pool l4 needs 1 free node, has 0",
			},
		},
		"GrowableNodesAreEmpty": {
			reason:   "A pool of 3 nodes with 1 observed, full, can grow by 2 empty nodes: 8 one-GPU replicas.",
			snapshot: snapshot(oneGPU().Replicas(9).Obj(), cluster(l4(3).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 0)).Obj())),
			want: want{
				placed:    fourNodesOf(8),
				shortfall: "0/1 clusters can host another replica: a: engine main: pool l4 needs room for 1 pod with 1 free gpu, has room for 0",
			},
		},
		"SurgeDoesNotGrowNegative": {
			reason:   "During a surge observedNodes exceeds nodes; the pool grows by nothing, not by a negative count.",
			snapshot: snapshot(oneGPU().Obj(), cluster(l4(2).Observed(observedAt, 3, fx.NodesFree(3, "gpu", 0)).Obj())),
			want:     want{shortfall: "0/1 clusters can host another replica: a: engine main: pool l4 needs room for 1 pod with 1 free gpu, has room for 0"},
		},
		"BootingNodeIsNeitherFreeNorGrowable": {
			reason:   "A node in observedNodes but not in the histogram (booting) offers nothing.",
			snapshot: snapshot(oneGPU().Obj(), cluster(l4(2).Observed(observedAt, 2, fx.NodesFree(1, "gpu", 0)).Obj())),
			want:     want{shortfall: "0/1 clusters can host another replica: a: engine main: pool l4 needs room for 1 pod with 1 free gpu, has room for 0"},
		},
		"GangNeedsDistinctNodes": {
			reason: "A gang of two 4-GPU pods does not fit one node with 8 free.",
			snapshot: snapshot(fx.Deployment("m").Engines(fx.Gang("main", 1, anyGPU(4))).Obj(),
				cluster(h100(1).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 8)).Obj())),
			want: want{shortfall: "0/1 clusters can host another replica: a: engine main: pool h100: gang needs 2 nodes with 4 free gpu, 1 has"},
		},
		"GangFitsTwoHalfFreeNodes": {
			reason: "The same gang fits two nodes with 4 free each.",
			snapshot: snapshot(fx.Deployment("m").Engines(fx.Gang("main", 1, anyGPU(4))).Obj(),
				cluster(h100(2).Observed(observedAt, 2, fx.NodesFree(2, "gpu", 4)).Obj())),
			want: want{placed: []string{"a/0 main=h100,h100 +"}},
		},
		"PrefillAndDecodeShareANode": {
			reason: "Two Standalone engines of 4 GPUs each share one node with 8 free.",
			snapshot: snapshot(fx.Deployment("m").Engines(fx.Phase(fx.Standalone("prefill", anyGPU(4)), "Prefill"), fx.Phase(fx.Standalone("decode", anyGPU(4)), "Decode")).Obj(),
				cluster(h100(1).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 8)).Obj())),
			want: want{placed: []string{"a/0 prefill=h100 decode=h100 +"}},
		},
		"MostFreeSpreadsAndStrandsTheBigEngine": {
			reason: "MostFree puts the 4-GPU engine on the 8-free node, leaving no node for the 8-GPU engine.",
			snapshot: snapshot(fx.Deployment("m").Engines(fx.Standalone("small", anyGPU(4)), fx.Standalone("big", anyGPU(8))).Obj(),
				cluster(h100(2).Observed(observedAt, 2, fx.NodesFree(1, "gpu", 8), fx.NodesFree(1, "gpu", 4)).Obj())),
			want: want{shortfall: "0/1 clusters can host another replica: a: engine big: pool h100 needs room for 1 pod with 8 free gpu, has room for 0"},
		},
		"LeastFreePacksAndFitsTheBigEngine": {
			reason: "LeastFree puts the 4-GPU engine on the 4-free node, leaving the 8-free node for the 8-GPU engine.",
			snapshot: binding(snapshot(fx.Deployment("m").Engines(fx.Standalone("small", anyGPU(4)), fx.Standalone("big", anyGPU(8))).Obj(),
				cluster(h100(2).Observed(observedAt, 2, fx.NodesFree(1, "gpu", 8), fx.NodesFree(1, "gpu", 4)).Obj())), LeastFree),
			want: want{placed: []string{"a/0 small=h100 big=h100 +"}},
		},
		"ScheduledBeforeObservationIsCounted": {
			reason: "A replica whose pods scheduled strictly before observedAt is already in the histogram and not charged again.",
			snapshot: snapshot(oneGPU().Obj(), cluster(l4(1).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 1)).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "l4", stamped(3))).PodsScheduled("True", before).Obj()),
			want: want{placed: []string{"a/0 main=l4 +"}},
		},
		"ScheduledAtObservationIsCharged": {
			reason: "A replica whose pods scheduled at the very time of the observation is charged: not strictly older.",
			snapshot: snapshot(oneGPU().Obj(), cluster(l4(1).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 4)).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "l4", stamped(4))).PodsScheduled("True", observedAt).Obj()),
			want: want{shortfall: "0/1 clusters can host another replica: a: engine main: pool l4 needs room for 1 pod with 1 free gpu, has room for 0"},
		},
		"ScheduledAfterObservationIsCharged": {
			reason: "A replica whose pods scheduled after observedAt is not yet in the histogram and is charged.",
			snapshot: snapshot(oneGPU().Replicas(2).Obj(), cluster(l4(1).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 4)).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "l4", stamped(3))).PodsScheduled("True", after).Obj()),
			want: want{
				placed:    []string{"a/0 main=l4 +"},
				shortfall: "0/1 clusters can host another replica: a: engine main: pool l4 needs room for 1 pod with 1 free gpu, has room for 0",
			},
		},
		"NotScheduledIsCharged": {
			reason: "A replica whose pods are not scheduled is charged whatever its timestamp.",
			snapshot: snapshot(oneGPU().Obj(), cluster(l4(1).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 4)).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "l4", stamped(4))).PodsScheduled("False", before).Obj()),
			want: want{shortfall: "0/1 clusters can host another replica: a: engine main: pool l4 needs room for 1 pod with 1 free gpu, has room for 0"},
		},
		"NoConditionIsCharged": {
			reason: "A replica with no PodsScheduled condition is charged.",
			snapshot: snapshot(oneGPU().Obj(), cluster(l4(1).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 4)).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "l4", stamped(4))).Obj()),
			want: want{shortfall: "0/1 clusters can host another replica: a: engine main: pool l4 needs room for 1 pod with 1 free gpu, has room for 0"},
		},
		"UnresolvableStampedRequestTakesAWholeNode": {
			reason: "A stamped request of a class the pool lacks is charged a whole node, conservatively.",
			snapshot: snapshot(oneGPU().Replicas(2).Obj(), cluster(l4(2).Observed(observedAt, 2, fx.NodesFree(2, "gpu", 4)).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "l4", v1alpha1.DeviceRequest{Name: "x", DeviceClassName: "tpu.google.com", Count: 1})).Obj()),
			want: want{placed: []string{"a/0 main=l4 +", "a/1 main=l4 +"}},
		},
		"UnfitChargeHoldsTheMostFreeNode": {
			reason: "A pending replica that fits no node holds the node with the most free, whole: here the only one.",
			snapshot: snapshot(oneGPU().Obj(), cluster(l4(1).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 2)).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "l4", stamped(4))).Obj()),
			want: want{shortfall: "0/1 clusters can host another replica: a: engine main: pool l4 needs room for 1 pod with 1 free gpu, has room for 0"},
		},
		"UnfitChargeLeavesThePoolOpen": {
			reason: "A pending 8-GPU replica on nodes with 4 free holds one node; the rest of the pool still takes new replicas.",
			snapshot: snapshot(oneGPU().Replicas(2).Obj(), cluster(h100(4).Observed(observedAt, 4, fx.NodesFree(4, "gpu", 4)).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "h100", stamped(8))).Obj()),
			want: want{placed: []string{"a/0 main=h100 +", "a/1 main=h100 +"}},
		},
		"WholeNodePoolInDeficitTakesNothingNew": {
			reason: "Without a report, a pool whose charged pods exceed its nodes takes nothing new, as Modelplane.",
			snapshot: snapshot(oneGPU().Obj(), cluster(l4(1).Obj()),
				fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "l4", stamped(1))).Obj(),
				fx.Replica("other", "a", 1).Engines(fx.PinnedStandalone("main", "l4", stamped(1))).Obj()),
			want: want{shortfall: "0/1 clusters can host another replica: a: engine main: pool l4 already holds more claiming pods than it can fit"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			checkPlan(t, tc.reason, tc.snapshot, tc.want.placed, tc.want.shortfall)
		})
	}
}

func TestSelectorsBounded(t *testing.T) {
	// A cache as full as it gets starts over, and compiles on.
	s := NewSelectors()
	for i := range maxSelectors + 1 {
		if p, detail := s.compile(fmt.Sprintf("device.driver == %q", strconv.Itoa(i))); p == nil {
			t.Fatalf("compile(...) #%d: %s", i, detail)
		}
	}
	if n := len(s.compiled); n > maxSelectors {
		t.Errorf("compile(...) %d times: %d selectors cached, want at most %d", maxSelectors+1, n, maxSelectors)
	}
}

func TestSelectorsConcurrent(t *testing.T) {
	// Passes share the cache concurrently (run with -race).
	s := NewSelectors()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if p, detail := s.compile(fmt.Sprintf("device.driver == %q", strconv.Itoa(i%2))); p == nil {
				t.Errorf("compile(...): %s", detail)
			}
		})
	}
	wg.Wait()
}

func TestParseIndex(t *testing.T) {
	cases := map[string]struct {
		reason string
		label  string
		want   int
	}{
		"Plain":          {reason: "A decimal index.", label: "3", want: 3},
		"Absent":         {reason: "No label reads as 0.", label: "", want: 0},
		"Underscores":    {reason: "Python's int() reads 1_0 as 10.", label: "1_0", want: 10},
		"DoubleUnderbar": {reason: "1__0 is not a number to Python either.", label: "1__0", want: 0},
		"TrailingUnder":  {reason: "10_ is not a number.", label: "10_", want: 0},
		"Garbage":        {reason: "Anything else reads as 0.", label: "x", want: 0},
		"Overflow":       {reason: "A number past an int reads as 0.", label: "99999999999999999999999", want: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := parseIndex(tc.label); got != tc.want {
				t.Errorf("%s\nparseIndex(%q): want %d, got %d", tc.reason, tc.label, tc.want, got)
			}
		})
	}
}

func TestShortfallString(t *testing.T) {
	full := Reason{Kind: ReasonCapacity, Engine: "main", Pools: []PoolShortage{{Pool: "l4", WholeNode: true, Pods: 1}}}
	many := func(n int) *Shortfall {
		var v []ClusterVerdict
		for i := range n {
			v = append(v, ClusterVerdict{Cluster: fmt.Sprintf("c%03d", i), Reason: full})
		}
		return newShortfall(v)
	}
	cases := map[string]struct {
		reason string
		s      *Shortfall
		want   string
	}{
		"Nil": {reason: "No shortfall renders as nothing.", want: ""},
		"SharedReason": {
			reason: "Clusters with the same reason share it; others keep their own.",
			s:      newShortfall([]ClusterVerdict{{Cluster: "b", Reason: full}, {Cluster: "c", Reason: Reason{Kind: ReasonNotReady}}, {Cluster: "a", Reason: full}}),
			want:   "0/3 clusters can host another replica: a, b: engine main: pool l4 needs 1 free node, has 0; c: not Ready",
		},
		"ManyClusters": {
			reason: "Past eight clusters of one reason, the rest are counted.",
			s:      many(100),
			want:   "0/100 clusters can host another replica: c000, c001, c002, c003, c004, c005, c006, c007 and 92 more: engine main: pool l4 needs 1 free node, has 0",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.s.String()); diff != "" {
				t.Errorf("%s\nString(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
	var v []ClusterVerdict
	for i := range 1000 {
		v = append(v, ClusterVerdict{Cluster: fmt.Sprintf("c%03d", i), Reason: Reason{Kind: ReasonCapacity, Engine: "main", Pools: []PoolShortage{{Pool: "l4", WholeNode: true, Pods: 1, Have: int64(i)}}}})
	}
	if got := newShortfall(v).String(); len(got) > maxShortfallBytes+len(" …") {
		t.Errorf("a thousand distinct reasons render to %d bytes, want at most %d", len(got), maxShortfallBytes)
	}
}

func TestCountedBefore(t *testing.T) {
	t1 := time.Date(2026, 10, 20, 20, 0, 0, 0, time.UTC)
	t2 := t1.Add(time.Minute)
	obs := func(at time.Time) *PoolObservation { return &PoolObservation{ObservedAt: at} }
	twoPools := fx.Cluster("a").Pools(fx.Pool("p", 1).Obj(), fx.Pool("q", 1).Obj()).Obj()
	at := func(t time.Time) Replica { return Replica{ScheduledSince: &t} }
	cases := map[string]struct {
		reason      string
		cluster     Cluster
		wantBefore  time.Time
		wantOK      bool
		replica     Replica
		wantCounted bool
	}{
		"EveryPoolObserved": {
			reason:      "Every pool's report counts a replica scheduled before the least recent of them.",
			cluster:     Cluster{Object: twoPools, Observed: map[string]*PoolObservation{"p": obs(t2), "q": obs(t1)}},
			wantBefore:  t1,
			wantOK:      true,
			replica:     at(t1.Add(-time.Second)),
			wantCounted: true,
		},
		"ScheduledWhenObserved": {
			reason:     "A replica scheduled at the very time of a report is not counted by it: strictly before, as CONTRACT 4.3 says.",
			cluster:    Cluster{Object: twoPools, Observed: map[string]*PoolObservation{"p": obs(t2), "q": obs(t1)}},
			wantBefore: t1,
			wantOK:     true,
			replica:    at(t1),
		},
		"NotScheduled": {
			reason:     "A replica whose pods are not all scheduled is counted by no report.",
			cluster:    Cluster{Object: twoPools, Observed: map[string]*PoolObservation{"p": obs(t2), "q": obs(t1)}},
			wantBefore: t1,
			wantOK:     true,
		},
		"APoolUnobserved": {
			reason:  "A pool on whole-node accounting counts no replica: a replica on the cluster may be charged.",
			cluster: Cluster{Object: twoPools, Observed: map[string]*PoolObservation{"p": obs(t2)}},
		},
		"NoPools": {
			reason:  "A cluster without pools gives no time.",
			cluster: Cluster{Object: fx.Cluster("a").Pools().Obj()},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before, ok := CountedBefore(tc.cluster)
			if !before.Equal(tc.wantBefore) || ok != tc.wantOK {
				t.Errorf("%s\nCountedBefore(...) = %v, %v; want %v, %v", tc.reason, before, ok, tc.wantBefore, tc.wantOK)
			}
			if got := ok && tc.replica.CountedBy(before); got != tc.wantCounted {
				t.Errorf("%s\ncounted: got %v, want %v", tc.reason, got, tc.wantCounted)
			}
		})
	}
}
