package scheduling

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

// replaceNow is the clock of the re-placing tests; waits are measured back
// from it.
var replaceNow = time.Date(2026, 10, 20, 21, 0, 0, 0, time.UTC)

// waitingReplica is a replica whose PodsScheduled is False since since,
// remembering memory (nil: nothing) of moving.
func waitingReplica(r *v1alpha1.ModelReplica, since time.Time, memory *Replacement) Replica {
	if memory != nil {
		r.Metadata.Annotations = map[string]string{v1alpha1.AnnotationReplacement: memory.String()}
	}
	return Replica{Object: r, UnscheduledSince: &since}
}

func TestReplace(t *testing.T) {
	h100 := func(name string, nodes int64) v1alpha1.GPUPool {
		return fx.Pool(name, nodes).Devices(fx.GPU("gpu", 8, "80Gi")).Obj()
	}
	// Two clusters with a pool each; a has a second pool.
	fleet := func() []Cluster {
		return []Cluster{
			{Object: fx.Cluster("a").Pools(h100("p1", 2), h100("p2", 2)).Obj()},
			{Object: fx.Cluster("b").Pools(h100("p1", 2)).Obj()},
		}
	}
	oneCluster := func() []Cluster { return []Cluster{{Object: fx.Cluster("a").Pools(h100("p1", 2)).Obj()}} }
	d := fx.Deployment("m").Engines(fx.Standalone("main", fx.GPURequest(8))).Replicas(2).Obj()
	onA := func(index int, pool string) *v1alpha1.ModelReplica {
		return fx.Replica("m", "a", index).Engines(fx.PinnedStandalone("main", pool, fx.Stamped(8))).Obj()
	}
	onB := func(index int) *v1alpha1.ModelReplica {
		return fx.Replica("m", "b", index).Engines(fx.PinnedStandalone("main", "p1", fx.Stamped(8))).Obj()
	}
	long := replaceNow.Add(-20 * time.Minute)  // past the 15m default
	short := replaceNow.Add(-10 * time.Minute) // not yet
	older := replaceNow.Add(-40 * time.Minute) // before the moves below
	after := 15 * time.Minute

	type args struct {
		clusters []Cluster
		replicas []Replica
		after    time.Duration
		wanted   int64
		// deployment, when set, replaces the one-engine deployment d.
		deployment *v1alpha1.ModelDeployment
	}
	type want struct {
		placed  []string
		moves   []Move
		waiting Waiting
		// memory is what each placement remembers, by summary; absent for
		// none.
		memory map[string]Replacement
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"StuckMovesToTheFewestLoadedCluster": {
			reason: "A replica unscheduled for 20m (over 15m), not Ready, is re-placed by the fill rules: b hosts none of the deployment's, so it goes there as a new replica, and the stuck one is dropped.",
			args: args{clusters: fleet(), replicas: []Replica{
				waitingReplica(onA(0, "p1"), long, nil), {Object: onA(1, "p2")},
			}, after: after, wanted: 2},
			want: want{
				placed:  []string{"a/1 main=p2[gpu:8]", "b/0 main=p1[gpu:8] +"},
				moves:   []Move{{Name: "m-a-0", From: []PoolRef{{"a", "p1"}}, To: []PoolRef{{"b", "p1"}}, Unscheduled: 20 * time.Minute}},
				waiting: Waiting{Replicas: 1},
				memory:  map[string]Replacement{"b/0 main=p1[gpu:8] +": {Moves: 1, MovedAt: replaceNow, StuckOn: []PoolRef{{"a", "p1"}}}},
			},
		},
		"StuckMovesWithinItsCluster": {
			reason: "With one cluster, the stuck replica moves to another pool of it: the same replica (same identity), its pool changed.",
			args: args{clusters: []Cluster{{Object: fx.Cluster("a").Pools(h100("p1", 2), h100("p2", 2)).Obj()}}, replicas: []Replica{
				waitingReplica(onA(0, "p1"), long, nil),
			}, after: after, wanted: 1},
			want: want{
				placed:  []string{"a/0 main=p2[gpu:8]"},
				moves:   []Move{{Name: "m-a-0", From: []PoolRef{{"a", "p1"}}, To: []PoolRef{{"a", "p2"}}, Unscheduled: 20 * time.Minute, SameReplica: true}},
				waiting: Waiting{Replicas: 1},
				memory:  map[string]Replacement{"a/0 main=p2[gpu:8]": {Moves: 1, MovedAt: replaceNow, StuckOn: []PoolRef{{"a", "p1"}}}},
			},
		},
		"NotMovedAgainForTheSameWait": {
			reason: "On the next call the replica moved to p2 still carries its old PodsScheduled False; its wait starts at the move, a minute ago: not stuck, kept, memory carried.",
			args: args{clusters: []Cluster{{Object: fx.Cluster("a").Pools(h100("p1", 2), h100("p2", 2)).Obj()}}, replicas: []Replica{
				waitingReplica(onA(0, "p2"), long, &Replacement{Moves: 1, MovedAt: replaceNow.Add(-time.Minute), StuckOn: []PoolRef{{"a", "p1"}}}),
			}, after: after, wanted: 1},
			want: want{
				placed:  []string{"a/0 main=p2[gpu:8]"},
				waiting: Waiting{Replicas: 1, Longest: time.Minute},
				memory:  map[string]Replacement{"a/0 main=p2[gpu:8]": {Moves: 1, MovedAt: replaceNow.Add(-time.Minute), StuckOn: []PoolRef{{"a", "p1"}}}},
			},
		},
		"NeverBackWhereItWasStuck": {
			reason: "Stuck again on p2 after the second wait (30m, doubled), the replica may not go back to p1, where it was stuck, nor stay on p2: b is all that is left.",
			args: args{clusters: fleet(), replicas: []Replica{
				waitingReplica(onA(0, "p2"), older, &Replacement{Moves: 1, MovedAt: replaceNow.Add(-31 * time.Minute), StuckOn: []PoolRef{{"a", "p1"}}}),
			}, after: after, wanted: 1},
			want: want{
				placed:  []string{"b/0 main=p1[gpu:8] +"},
				moves:   []Move{{Name: "m-a-0", From: []PoolRef{{"a", "p2"}}, To: []PoolRef{{"b", "p1"}}, Unscheduled: 31 * time.Minute}},
				waiting: Waiting{Replicas: 1},
				memory:  map[string]Replacement{"b/0 main=p1[gpu:8] +": {Moves: 2, MovedAt: replaceNow, StuckOn: []PoolRef{{"a", "p1"}, {"a", "p2"}}}},
			},
		},
		"BackoffDoublesTheWait": {
			reason: "After one move the next wait is 30m: stuck for 20m since that move, it stays.",
			args: args{clusters: fleet(), replicas: []Replica{
				waitingReplica(onA(0, "p2"), long, &Replacement{Moves: 1, MovedAt: replaceNow.Add(-20 * time.Minute), StuckOn: []PoolRef{{"a", "p1"}}}),
			}, after: after, wanted: 1},
			want: want{
				placed:  []string{"a/0 main=p2[gpu:8]"},
				waiting: Waiting{Replicas: 1, Longest: 20 * time.Minute},
				memory:  map[string]Replacement{"a/0 main=p2[gpu:8]": {Moves: 1, MovedAt: replaceNow.Add(-20 * time.Minute), StuckOn: []PoolRef{{"a", "p1"}}}},
			},
		},
		"MovesBounded": {
			reason: "After MaxMoves (3) moves in one wait, the replica stays, however long it waits.",
			args: args{clusters: fleet(), replicas: []Replica{
				waitingReplica(onA(0, "p2"), replaceNow.Add(-24*time.Hour), &Replacement{Moves: MaxMoves, MovedAt: replaceNow.Add(-24 * time.Hour), StuckOn: []PoolRef{{"a", "p1"}}}),
			}, after: after, wanted: 1},
			want: want{
				placed:  []string{"a/0 main=p2[gpu:8]"},
				waiting: Waiting{Replicas: 1, Longest: 24 * time.Hour},
				memory:  map[string]Replacement{"a/0 main=p2[gpu:8]": {Moves: MaxMoves, MovedAt: replaceNow.Add(-24 * time.Hour), StuckOn: []PoolRef{{"a", "p1"}}}},
			},
		},
		"NotYetStuck": {
			reason: "Unscheduled for 10m, under 15m: it stays, and is counted as waiting.",
			args:   args{clusters: fleet(), replicas: []Replica{waitingReplica(onA(0, "p1"), short, nil)}, after: after, wanted: 1},
			want:   want{placed: []string{"a/0 main=p1[gpu:8]"}, waiting: Waiting{Replicas: 1, Longest: 10 * time.Minute}},
		},
		"ReadyNotMoved": {
			reason: "A Ready replica is not stuck, whatever PodsScheduled says.",
			args: args{clusters: fleet(), replicas: []Replica{func() Replica {
				r := waitingReplica(onA(0, "p1"), long, nil)
				r.Ready = true
				return r
			}()}, after: after, wanted: 1},
			want: want{placed: []string{"a/0 main=p1[gpu:8]"}},
		},
		"NoConditionNotMoved": {
			reason: "A replica with no PodsScheduled condition (no agent, as under Modelplane v0.3) is never stuck.",
			args:   args{clusters: fleet(), replicas: []Replica{{Object: onA(0, "p1")}}, after: after, wanted: 1},
			want:   want{placed: []string{"a/0 main=p1[gpu:8]"}},
		},
		"GangPartlyBoundIsStuck": {
			reason: "A gang with some pods bound and some not has PodsScheduled False: stuck like any other, and re-placed whole; a and b host none of the other replicas, so a wins by name, on its other pool.",
			args: args{clusters: fleet(), replicas: []Replica{
				waitingReplica(fx.Replica("m", "a", 0).Engines(fx.PinnedGang("main", "p1", 1, fx.Stamped(4))).Obj(), long, nil),
			}, after: after, wanted: 1, deployment: fx.Deployment("m").Engines(fx.Gang("main", 1, fx.GPURequest(4))).Obj()},
			want: want{
				placed:  []string{"a/0 main=p2[gpu:4],p2[gpu:4]"},
				moves:   []Move{{Name: "m-a-0", From: []PoolRef{{"a", "p1"}}, To: []PoolRef{{"a", "p2"}}, Unscheduled: 20 * time.Minute, SameReplica: true}},
				waiting: Waiting{Replicas: 1},
				memory:  map[string]Replacement{"a/0 main=p2[gpu:4],p2[gpu:4]": {Moves: 1, MovedAt: replaceNow, StuckOn: []PoolRef{{"a", "p1"}}}},
			},
		},
		"NowhereElseStays": {
			reason: "With no other pool that fits, the stuck replica stays where it is: re-placing never lowers the replica count.",
			args:   args{clusters: oneCluster(), replicas: []Replica{waitingReplica(onA(0, "p1"), long, nil)}, after: after, wanted: 1},
			want:   want{placed: []string{"a/0 main=p1[gpu:8]"}, waiting: Waiting{Replicas: 1, Longest: 20 * time.Minute}},
		},
		"ZeroTurnsItOff": {
			reason: "replaceUnscheduledAfter 0s re-places nothing.",
			args:   args{clusters: fleet(), replicas: []Replica{waitingReplica(onA(0, "p1"), long, nil)}, after: 0, wanted: 1},
			want:   want{placed: []string{"a/0 main=p1[gpu:8]"}, waiting: Waiting{Replicas: 1, Longest: 20 * time.Minute}},
		},
		"ScheduledDropsTheMemory": {
			reason: "Once its pods are scheduled the wait is over: the memory of moving is dropped, and a later wait may move it again.",
			args: args{clusters: fleet(), replicas: []Replica{func() Replica {
				r := waitingReplica(onA(0, "p2"), long, &Replacement{Moves: 2, MovedAt: long, StuckOn: []PoolRef{{"a", "p1"}}})
				r.UnscheduledSince, r.ScheduledSince = nil, &short
				return r
			}()}, after: after, wanted: 1},
			want: want{placed: []string{"a/0 main=p2[gpu:8]"}},
		},
		"OldReplicaBeingDeletedIsNotOurs": {
			reason: "The call after a move to b: the dropped replica on a is still in the fleet, being deleted. It is charged (a's p1 is full) but not ours: the new one on b is kept, nothing is scaled down or placed.",
			args: args{clusters: []Cluster{
				{Object: fx.Cluster("a").Pools(h100("p1", 1)).Obj()},
				{Object: fx.Cluster("b").Pools(h100("p1", 2)).Obj()},
			}, replicas: []Replica{
				func() Replica {
					r := waitingReplica(onA(0, "p1"), long, nil)
					r.Deleting = true
					return r
				}(),
				waitingReplica(onB(0), replaceNow.Add(-30*time.Second), &Replacement{Moves: 1, MovedAt: replaceNow.Add(-time.Minute), StuckOn: []PoolRef{{"a", "p1"}}}),
			}, after: after, wanted: 2},
			want: want{
				placed:  []string{"b/0 main=p1[gpu:8]", "b/1 main=p1[gpu:8] +"},
				waiting: Waiting{Replicas: 1, Longest: 30 * time.Second},
				memory:  map[string]Replacement{"b/0 main=p1[gpu:8]": {Moves: 1, MovedAt: replaceNow.Add(-time.Minute), StuckOn: []PoolRef{{"a", "p1"}}}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dep := *d
			if tc.args.deployment != nil {
				dep = *tc.args.deployment
			}
			dep.Spec.Replicas = tc.args.wanted
			s := Snapshot{
				Deployment: &dep, Clusters: tc.args.clusters, Replicas: tc.args.replicas, Now: replaceNow,
				Options: Options{ReplaceUnscheduledAfter: tc.args.after},
			}
			plan, err := Schedule(s)
			if err != nil {
				t.Fatalf("%s\nSchedule(...): %v", tc.reason, err)
			}
			memory := map[string]Replacement{}
			for _, p := range plan.Replicas {
				if p.Replacement != nil {
					memory[placed(p)] = *p.Replacement
				}
			}
			got := want{placed: summary(plan), moves: plan.Moves, waiting: plan.Waiting, memory: memory}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nSchedule(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestScaleDownOrder(t *testing.T) {
	// As a ReplicaSet ranks its pods: stuck first, then unscheduled, then
	// docs/spec.md#scaling-down's order (highest index on the most-loaded cluster).
	c := []Cluster{{Object: fx.Cluster("a").Obj()}, {Object: fx.Cluster("b").Obj()}}
	d := func(n int64) *v1alpha1.ModelDeployment { return fx.Deployment("m").Replicas(n).Obj() }
	long, short := replaceNow.Add(-time.Hour), replaceNow.Add(-time.Minute)
	cases := map[string]struct {
		reason   string
		wanted   int64
		replicas []Replica
		want     []string
	}{
		"StuckFirst": {
			reason: "Of three replicas, the stuck one goes first, though a holds more and its replica the highest index; a move is not needed then.",
			wanted: 2,
			replicas: []Replica{
				{Object: fx.Replica("m", "a", 0).Obj()},
				{Object: fx.Replica("m", "a", 1).Obj()},
				waitingReplica(fx.Replica("m", "b", 0).Obj(), long, nil),
			},
			want: []string{"a/0 main=default[gpu:1]", "a/1 main=default[gpu:1]"},
		},
		"UnscheduledNext": {
			reason: "With none stuck, one whose pods are not all scheduled goes before the rest.",
			wanted: 2,
			replicas: []Replica{
				{Object: fx.Replica("m", "a", 0).Obj()},
				{Object: fx.Replica("m", "a", 1).Obj()},
				waitingReplica(fx.Replica("m", "b", 0).Obj(), short, nil),
			},
			want: []string{"a/0 main=default[gpu:1]", "a/1 main=default[gpu:1]"},
		},
		"ThenTheContractsOrder": {
			reason: "Among replicas of one rank, the highest index on the most-loaded cluster goes.",
			wanted: 1,
			replicas: []Replica{
				waitingReplica(fx.Replica("m", "a", 0).Obj(), short, nil), waitingReplica(fx.Replica("m", "a", 1).Obj(), short, nil),
				{Object: fx.Replica("m", "b", 0).Obj()},
			},
			want: []string{"b/0 main=default[gpu:1]"},
		},
		"NoPodsScheduledAnywhere": {
			reason: "With no PodsScheduled False anywhere, 4.1's order alone: a holds more, its highest index goes first.",
			wanted: 2,
			replicas: []Replica{
				{Object: fx.Replica("m", "a", 0).Obj()}, {Object: fx.Replica("m", "a", 1).Obj()}, {Object: fx.Replica("m", "b", 0).Obj()},
			},
			want: []string{"a/0 main=default[gpu:1]", "b/0 main=default[gpu:1]"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			plan, err := Schedule(Snapshot{
				Deployment: d(tc.wanted), Clusters: c, Replicas: tc.replicas, Now: replaceNow,
				Options: Options{ReplaceUnscheduledAfter: 15 * time.Minute},
			})
			if err != nil {
				t.Fatalf("%s\nSchedule(...): %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want, summary(plan)); diff != "" {
				t.Errorf("%s\nSchedule(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestParseReplacement(t *testing.T) {
	r := Replacement{Moves: 2, MovedAt: replaceNow, StuckOn: []PoolRef{{"a", "p1"}, {"b", "p2"}}}
	got, ok := ParseReplacement(r.String())
	if !ok {
		t.Fatalf("ParseReplacement(%q): does not read", r.String())
	}
	if diff := cmp.Diff(r, got); diff != "" {
		t.Errorf("ParseReplacement(String()): -want, +got:\n%s", diff)
	}
	for _, garbage := range []string{"", "{", `{"moves":-1}`, `{"moves":"two"}`, "[]"} {
		if got, ok := ParseReplacement(garbage); ok {
			t.Errorf("ParseReplacement(%q): %+v, want it not to read", garbage, got)
		}
	}
}
