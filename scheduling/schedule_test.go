package scheduling

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

var observedAt = time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)

// placed summarises a placement as "cluster/index engine=pool,...", with a
// trailing "+" for a new one.
func placed(p Placement) string {
	var engines []string
	for _, e := range p.Engines {
		pools := []string{}
		for _, m := range e.Members {
			pools = append(pools, m.Pool+requested(m.DeviceRequests))
		}
		engines = append(engines, e.Name+"="+strings.Join(pools, ","))
	}
	s := fmt.Sprintf("%s/%d %s", p.Cluster, p.Index, strings.Join(engines, " "))
	if p.New {
		s += " +"
	}
	if p.AsObserved {
		s += " (as observed " + p.Name + ")"
	}
	return s
}

// requested summarises a member's device requests as "[name:count,...]",
// empty for a member that claims nothing.
func requested(reqs []v1alpha1.DeviceRequest) string {
	if len(reqs) == 0 {
		return ""
	}
	parts := make([]string, 0, len(reqs))
	for _, r := range reqs {
		parts = append(parts, fmt.Sprintf("%s:%d", r.Name, r.Count))
	}
	return "[" + strings.Join(parts, ",") + "]"
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
		shortfall *Shortfall
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
			want: want{placed: []string{"a/0 main=default[gpu:1] +", "b/0 main=default[gpu:1] +", "c/0 main=default[gpu:1] +"}},
		},
		"PackWhenForced": {
			reason: "With one cluster, replicas pack onto it at successive indices.",
			args:   args{snapshot(fx.Deployment("m").Replicas(2).Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()})},
			want:   want{placed: []string{"a/0 main=default[gpu:1] +", "a/1 main=default[gpu:1] +"}},
		},
		"CapacityShortfall": {
			reason: "A two-node pool takes two one-GPU replicas under whole-node accounting; the third is explained.",
			args:   args{snapshot(fx.Deployment("m").Replicas(3).Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()})},
			want: want{
				placed:    []string{"a/0 main=default[gpu:1] +", "a/1 main=default[gpu:1] +"},
				shortfall: cannotHost(capacity("a", "main", wholeNodes("default", 1, 0))),
			},
		},
		"RetainedEnginesFollowTheDeploymentsOrder": {
			reason: "A retained replica's engines mirror the deployment's, in the deployment's order, whatever order the replica lists them in.",
			args: args{snapshot(fx.Deployment("m").Engines(fx.Standalone("prefill", fx.GPURequest(1)), fx.Standalone("decode", fx.GPURequest(1))).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()},
				fx.Replica("m", "a", 0).Engines(fx.PinnedStandalone("decode", "default", fx.Stamped(1)), fx.PinnedStandalone("prefill", "default", fx.Stamped(1))).Obj())},
			want: want{placed: []string{"a/0 prefill=default[gpu:1] decode=default[gpu:1]"}},
		},
		"UnreadableClusterKeepsOursAsObserved": {
			reason: "A cluster that does not read takes no new replica and says why; the deployment's replica on it is kept exactly as observed, and counts toward spec.replicas.",
			args: args{unreadableCluster(snapshot(fx.Deployment("m").Replicas(4).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Obj(), fx.Cluster("b").Obj()},
				fx.Replica("m", "a", 0).Obj()), "a", "status.conditions[0].status: cannot use a boolean as a string")},
			want: want{
				placed:    []string{"a/0 main=default[gpu:1] (as observed m-a-0)", "b/0 main=default[gpu:1] +", "b/1 main=default[gpu:1] +"},
				shortfall: cannotHost(unreadable("a", "status.conditions[0].status: cannot use a boolean as a string"), capacity("b", "main", wholeNodes("default", 1, 0))),
			},
		},
		"UnreadableOwnReplicaNeverDropped": {
			reason: "The deployment's replica that did not read stays as observed even when the deployment scales to zero: dropping it would delete what may be running.",
			args: args{unreadableReplica(snapshot(fx.Deployment("m").Replicas(0).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()},
				fx.Replica("m", "a", 0).Obj(), fx.Replica("m", "a", 1).Obj()), 1, "spec.engines[0].copies: cannot use a string as a whole number")},
			want: want{placed: []string{"a/1 main=default[gpu:1] (as observed m-a-1)"}},
		},
		"UnreadableOwnReplicaCounts": {
			reason: "Kept as observed, the replica holds its identity and counts: one more is placed, at the next index.",
			args: args{unreadableReplica(snapshot(fx.Deployment("m").Replicas(2).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()},
				fx.Replica("m", "a", 0).Obj()), 0, "metadata.labels: cannot use a list as an object")},
			want: want{placed: []string{"a/0 main=default[gpu:1] (as observed m-a-0)", "a/1 main=default[gpu:1] +"}},
		},
		"RetainOnDegradedCluster": {
			reason: "A replica on a cluster that is not Ready and has no gateway is kept where it is.",
			args: args{snapshot(fx.Deployment("m").Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").NotReady().Gateway("").Obj(), fx.Cluster("b").Obj()},
				fx.Replica("m", "a", 0).Obj())},
			want: want{placed: []string{"a/0 main=default[gpu:1]"}},
		},
		"ReplaceWhenClusterDeleted": {
			reason: "A replica whose cluster is gone is dropped and a new one placed elsewhere.",
			args: args{snapshot(fx.Deployment("m").Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("b").Obj()},
				fx.Replica("m", "gone", 0).Obj())},
			want: want{placed: []string{"b/0 main=default[gpu:1] +"}},
		},
		"ReplaceWhenPinnedPoolStopsMatching": {
			reason: "A replica whose pinned pool no longer satisfies the edited nodeSelector is re-placed on one that does.",
			args: args{snapshot(
				fx.Deployment("m").Engines(fx.Standalone("main", fx.Request("gpu", 1, mem141))).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(h100(2), h200(2)).Obj()},
				fx.Replica("m", "a", 0).Engines(fx.PinnedStandalone("main", "h100", fx.Stamped(1))).Obj())},
			want: want{placed: []string{"a/0 main=h200[gpu:1] +"}},
		},
		"ReplaceWhenPinnedPoolDeleted": {
			reason: "A replica pinned to a pool the cluster no longer publishes is re-placed.",
			args: args{snapshot(fx.Deployment("m").Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()},
				fx.Replica("m", "a", 0).Engines(fx.PinnedStandalone("main", "old", fx.Stamped(1))).Obj())},
			want: want{placed: []string{"a/0 main=default[gpu:1] +"}},
		},
		"ReplaceWhenEnginesNoLongerLineUp": {
			reason: "A replica whose engines were renamed in the deployment is re-placed.",
			args: args{snapshot(fx.Deployment("m").Engines(fx.Standalone("renamed", fx.GPURequest(1))).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()}, fx.Replica("m", "a", 0).Obj())},
			want: want{placed: []string{"a/0 renamed=default[gpu:1] +"}},
		},
		"ScaleDownMostLoadedHighestIndexFirst": {
			reason: "Scaling 4 to 2 drops a/1 (most-loaded cluster, highest index), then c/0 (tie on load, later name).",
			args: args{snapshot(fx.Deployment("m").Replicas(2).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Obj(), fx.Cluster("b").Obj(), fx.Cluster("c").Obj()},
				fx.Replica("m", "a", 0).Obj(), fx.Replica("m", "a", 1).Obj(), fx.Replica("m", "b", 0).Obj(), fx.Replica("m", "c", 0).Obj())},
			want: want{placed: []string{"a/0 main=default[gpu:1]", "b/0 main=default[gpu:1]"}},
		},
		"ReuseLowestFreeIndex": {
			reason: "A new replica takes the lowest index not in use on its cluster.",
			args: args{snapshot(fx.Deployment("m").Replicas(2).Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()},
				fx.Replica("m", "a", 1).Obj())},
			want: want{placed: []string{"a/0 main=default[gpu:1] +", "a/1 main=default[gpu:1]"}},
		},
		"GangNeedsEnoughNodes": {
			reason: "A Leader plus two Workers needs three whole nodes; a two-node pool cannot host it.",
			args: args{snapshot(fx.Deployment("m").Engines(fx.Gang("main", 2, fx.GPURequest(1))).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()})},
			want: want{shortfall: cannotHost(capacity("a", "main", wholeNodes("default", 3, 2)))},
		},
		"GangFitsEnoughNodes": {
			reason: "The same gang fits a three-node pool.",
			args: args{snapshot(fx.Deployment("m").Engines(fx.Gang("main", 2, fx.GPURequest(1))).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(fx.Pool("default", 3).Devices(fx.GPU("gpu", 1, "141Gi")).Obj()).Obj()})},
			want: want{placed: []string{"a/0 main=default[gpu:1],default[gpu:1] +"}},
		},
		"EnginesOnDifferentPoolsOfOneCluster": {
			reason: "Each engine of a replica takes the first pool that fits it, all on one cluster.",
			args: args{snapshot(fx.Deployment("m").Engines(
				fx.Phase(fx.Standalone("prefill", fx.Request("gpu", 4, mem141)), "Prefill"),
				fx.Phase(fx.Standalone("decode", fx.Request("gpu", 4, memUnder100)), "Decode"),
			).Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(h100(1), h200(1)).Obj()})},
			want: want{placed: []string{"a/0 prefill=h200[gpu:4] decode=h100[gpu:4] +"}},
		},
		"SyntheticOnlyMemberClaimsNothing": {
			reason: "A member matching only a Synthetic NIC rides along free; the GPU member is charged.",
			args: args{snapshot(fx.Deployment("m").Replicas(2).Engines(v1alpha1.Engine{Name: "main", Members: []v1alpha1.Member{
				fx.Member(v1alpha1.RoleLeader, 0, fx.Request("nic", 1, fx.IB)),
				fx.Member(v1alpha1.RoleWorker, 1, fx.GPURequest(1)),
			}}).Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(fx.Pool("default", 2).Devices(fx.GPU("gpu", 1, "141Gi"), fx.NIC(1)).Obj()).Obj()})},
			want: want{placed: []string{"a/0 main=default,default[gpu:1] +", "a/1 main=default,default[gpu:1] +"}},
		},
		"SyntheticOnlyEngineIsNotPlaced": {
			reason: "An engine none of whose members claims a DRA device has no pool.",
			args: args{snapshot(fx.Deployment("m").Engines(fx.Standalone("main", fx.Request("nic", 1, fx.IB))).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(fx.Pool("default", 2).Devices(fx.GPU("gpu", 1, "141Gi"), fx.NIC(1)).Obj()).Obj()})},
			want: want{shortfall: cannotHost(noPoolMatches("a", "main"))},
		},
		"ClaimlessLeaderCostsNothing": {
			reason: "A Leader without a nodeSelector takes no node; two replicas of Leader plus one GPU Worker fit two nodes.",
			args: args{snapshot(fx.Deployment("m").Replicas(2).Engines(v1alpha1.Engine{Name: "main", Members: []v1alpha1.Member{
				fx.Member(v1alpha1.RoleLeader, 0),
				fx.Member(v1alpha1.RoleWorker, 1, fx.GPURequest(1)),
			}}).Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()})},
			want: want{placed: []string{"a/0 main=default,default[gpu:1] +", "a/1 main=default,default[gpu:1] +"}},
		},
		"NoScheduleKeepsNewReplicasOff": {
			reason: "An untolerated NoSchedule taint repels new replicas.",
			args:   args{snapshot(fx.Deployment("m").Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Taint("gpu", "maint", "NoSchedule").Obj()})},
			want:   want{shortfall: cannotHost(untoleratedTaint("a", "gpu", "maint", "NoSchedule"))},
		},
		"NoScheduleLeavesExistingReplica": {
			reason: "NoSchedule does not evict a replica already there.",
			args: args{snapshot(fx.Deployment("m").Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Taint("gpu", "", "NoSchedule").Obj()},
				fx.Replica("m", "a", 0).Obj())},
			want: want{placed: []string{"a/0 main=default[gpu:1]"}},
		},
		"TolerationAllowsPlacement": {
			reason: "An Exists toleration of the key admits the tainted cluster.",
			args: args{snapshot(fx.Deployment("m").Tolerations(v1alpha1.Toleration{Key: "gpu", Operator: "Exists"}).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Taint("gpu", "maint", "NoSchedule").Obj()})},
			want: want{placed: []string{"a/0 main=default[gpu:1] +"}},
		},
		"NoExecuteDrainsAndReschedules": {
			reason: "An untolerated NoExecute taint evicts the replica, which is re-placed on a tolerated cluster.",
			args: args{snapshot(fx.Deployment("m").Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Taint("gpu", "", "NoExecute").Obj(), fx.Cluster("b").Obj()},
				fx.Replica("m", "a", 0).Obj())},
			want: want{placed: []string{"b/0 main=default[gpu:1] +"}},
		},
		"NoExecuteTolerationRetains": {
			reason: "A tolerated NoExecute taint keeps the replica.",
			args: args{snapshot(fx.Deployment("m").Tolerations(v1alpha1.Toleration{Key: "gpu", Operator: "Exists", Effect: "NoExecute"}).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Taint("gpu", "", "NoExecute").Obj(), fx.Cluster("b").Obj()},
				fx.Replica("m", "a", 0).Obj())},
			want: want{placed: []string{"a/0 main=default[gpu:1]"}},
		},
		"NoScheduleTolerationDoesNotCoverNoExecute": {
			reason: "A toleration for NoSchedule does not tolerate a NoExecute taint of the same key.",
			args: args{snapshot(fx.Deployment("m").Tolerations(v1alpha1.Toleration{Key: "gpu", Operator: "Exists", Effect: "NoSchedule"}).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Taint("gpu", "", "NoExecute").Obj()},
				fx.Replica("m", "a", 0).Obj())},
			want: want{shortfall: cannotHost(untoleratedTaint("a", "gpu", "", "NoExecute"))},
		},
		"EqualTolerationMatchesOnValue": {
			reason: "An Equal toleration with another value does not tolerate the taint.",
			args: args{snapshot(fx.Deployment("m").Tolerations(v1alpha1.Toleration{Key: "team", Value: "b"}).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Taint("team", "a", "NoSchedule").Obj(), fx.Cluster("b").Taint("team", "b", "NoSchedule").Obj()})},
			want: want{placed: []string{"b/0 main=default[gpu:1] +"}},
		},
		"KeylessExistsToleratesEverything": {
			reason: "An Exists toleration without a key tolerates every taint.",
			args: args{snapshot(fx.Deployment("m").Tolerations(v1alpha1.Toleration{Operator: "Exists"}).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Taint("x", "1", "NoSchedule").Taint("y", "", "NoExecute").Obj()})},
			want: want{placed: []string{"a/0 main=default[gpu:1] +"}},
		},
		"OtherDeploymentsAreCharged": {
			reason: "Another team's replicas hold a's nodes, so the new replica goes to b despite the name order.",
			args: args{snapshot(fx.Deployment("m").Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Obj(), fx.Cluster("b").Obj()},
				fx.Replica("other", "a", 0).Obj(), fx.Replica("other", "a", 1).Obj())},
			want: want{placed: []string{"b/0 main=default[gpu:1] +"}},
		},
		"SameNameOtherNamespaceIsNotOurs": {
			reason: "A replica labelled with our name in another namespace is another deployment's: charged, never retained.",
			args: args{snapshot(fx.Deployment("m").Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(fx.Pool("default", 1).Devices(fx.GPU("gpu", 1, "141Gi")).Obj()).Obj()},
				fx.Replica("m", "a", 0).Namespace("other-team").Obj())},
			want: want{shortfall: cannotHost(capacity("a", "main", wholeNodes("default", 1, 0)))},
		},
		"DroppedReplicaIsNotCharged": {
			reason: "Our replica dropped for a pool that stopped matching frees its node for its replacement.",
			args: args{snapshot(fx.Deployment("m").Engines(fx.Standalone("main", fx.Request("gpu", 1, mem141))).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(fx.Pool("default", 1).Devices(fx.GPU("gpu", 1, "80Gi")).Obj(), fx.Pool("big", 1).Devices(fx.GPU("gpu", 1, "141Gi")).Obj()).Obj()},
				fx.Replica("m", "a", 0).Engines(fx.PinnedStandalone("main", "default", fx.Stamped(1))).Obj())},
			want: want{placed: []string{"a/0 main=big[gpu:1] +"}},
		},
		"DuplicateIdentityKeepsFirstByName": {
			reason: "Two replicas claiming one (cluster, index): the first by name is kept.",
			args: args{snapshot(fx.Deployment("m").Engines(fx.Standalone("main", fx.Request("gpu", 1, mem141))).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(h100(2), h200(2)).Obj()},
				fx.Replica("m", "a", 0).Name("z").Engines(fx.PinnedStandalone("main", "h100", fx.Stamped(1))).Obj(),
				fx.Replica("m", "a", 0).Name("b").Engines(fx.PinnedStandalone("main", "h200", fx.Stamped(1))).Obj())},
			want: want{placed: []string{"a/0 main=h200[gpu:1]"}},
		},
		"CELRuntimeErrorIsNonMatch": {
			reason: "A selector reading an attribute a device lacks does not match that device, and is not an error.",
			args: args{snapshot(fx.Deployment("m").Engines(fx.Standalone("main", fx.Request("gpu", 1, `device.attributes["gpu.nvidia.com"].architecture == "Hopper"`))).Obj(),
				[]*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()})},
			want: want{shortfall: cannotHost(noPoolMatches("a", "main"))},
		},
		"GatewayHostnamePreferred": {
			reason: "A cluster with only the newer hostname is eligible.",
			args:   args{snapshot(fx.Deployment("m").Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Gateway("").Hostname("a.example.com").Obj()})},
			want:   want{placed: []string{"a/0 main=default[gpu:1] +"}},
		},
		"NoGatewayNotEligible": {
			reason: "A Ready cluster with no gateway hostname or address takes no new replica.",
			args:   args{snapshot(fx.Deployment("m").Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Gateway("").Obj()})},
			want:   want{shortfall: cannotHost(noGateway("a"))},
		},
		"NotReadyNotEligible": {
			reason: "A cluster that is not Ready takes no new replica.",
			args:   args{snapshot(fx.Deployment("m").Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").NotReady().Obj()})},
			want:   want{shortfall: cannotHost(notReady("a"))},
		},
		"RetainOnlyPlacesNothingNew": {
			reason: "With the ModelCache unresolved, existing replicas stay and nothing new is placed.",
			args: args{func() Snapshot {
				s := snapshot(fx.Deployment("m").Replicas(2).Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()}, fx.Replica("m", "a", 0).Obj())
				s.Options.RetainOnly = true
				return s
			}()},
			want: want{placed: []string{"a/0 main=default[gpu:1]"}},
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
func checkPlan(t *testing.T, reason string, s Snapshot, placed []string, shortfall *Shortfall) {
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
	if diff := cmp.Diff(shortfall, plan.Shortfall, ignoreUnmatched); diff != "" {
		t.Errorf("%s\nSchedule(...) shortfall: -want, +got:\n%s", reason, diff)
	}
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

func TestLowestFreeIndex(t *testing.T) {
	used := map[int]bool{0: true, 1: true, 3: true}
	cases := map[string]struct {
		reason string
		from   int
		want   int
	}{
		"FromZero":      {reason: "The lowest index not in use.", from: 0, want: 2},
		"FromAFreeOne":  {reason: "A search from a free index ends there.", from: 2, want: 2},
		"FromAUsedOne":  {reason: "A search from an index in use goes past it.", from: 3, want: 4},
		"PastEveryUsed": {reason: "Past every index in use, the first one searched.", from: 7, want: 7},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := lowestFreeIndex(used, tc.from); got != tc.want {
				t.Errorf("%s\nlowestFreeIndex(%v, %d): want %d, got %d", tc.reason, used, tc.from, tc.want, got)
			}
		})
	}
}
