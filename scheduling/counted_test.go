package scheduling

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

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
			reason:     "A replica scheduled at the very time of a report is not counted by it: strictly before, as docs/spec.md#the-counted-rule says.",
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

func TestCounted(t *testing.T) {
	at := time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)
	cases := map[string]struct {
		reason string
		since  *time.Time
		want   bool
	}{
		"Before":        {reason: "Pods scheduled strictly before the report are counted by it.", since: new(at.Add(-time.Second)), want: true},
		"AtTheSameTime": {reason: "Pods scheduled at the very time of the report are not: not strictly older.", since: new(at)},
		"After":         {reason: "Pods scheduled after the report are not counted by it.", since: new(at.Add(time.Second))},
		"NotScheduled":  {reason: "A replica whose pods are not all scheduled is never counted.", since: nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Counted(tc.since, at); got != tc.want {
				t.Errorf("%s\nCounted(...): want %t, got %t", tc.reason, tc.want, got)
			}
		})
	}
}

// TestPlacementCounted: a plan says of each placement whether the usable
// report of every pool it holds counts it, which the function labels the
// composed replica with (docs/spec.md#narrow-requests).
func TestPlacementCounted(t *testing.T) {
	observedAt := time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)
	fresh := fx.Pool("p", 4).Devices(fx.GPU("gpu", 4, "80Gi")).Observed(observedAt, 4, fx.NodesFree(4, "gpu", 4)).Obj()
	unobserved := fx.Pool("q", 4).Devices(fx.GPU("gpu", 4, "80Gi")).Obj()
	cluster := fx.Cluster("a").Pools(fresh, unobserved).Obj()
	d := fx.Deployment("m").Replicas(2).Engines(fx.Standalone("main", fx.GPURequest(1))).Obj()
	on := func(pool string, index int) *fx.ReplicaWrapper {
		return fx.Replica("m", "a", index).Engines(fx.PinnedStandalone("main", pool, fx.Stamped(1)))
	}
	cases := map[string]struct {
		reason   string
		replicas []*v1alpha1.ModelReplica
		want     map[int]bool
	}{
		"ScheduledBeforeTheReport": {
			reason:   "A kept replica whose pods were scheduled before its pool's report is counted; the one placed now is not.",
			replicas: []*v1alpha1.ModelReplica{on("p", 0).PodsScheduled("True", observedAt.Add(-time.Minute)).Obj()},
			want:     map[int]bool{0: true, 1: false},
		},
		"ScheduledAtTheReport": {
			reason:   "Pods scheduled at the very time of the report are not counted by it.",
			replicas: []*v1alpha1.ModelReplica{on("p", 0).PodsScheduled("True", observedAt).Obj(), on("p", 1).PodsScheduled("False", observedAt.Add(-time.Hour)).Obj()},
			want:     map[int]bool{0: false, 1: false},
		},
		"WholeNodePool": {
			reason:   "A replica on a pool without a usable report is never counted, however long ago it was scheduled.",
			replicas: []*v1alpha1.ModelReplica{on("q", 0).PodsScheduled("True", observedAt.Add(-time.Hour)).Obj(), on("p", 1).Obj()},
			want:     map[int]bool{0: false, 1: false},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			plan, err := Schedule(snapshot(d, []*v1alpha1.InferenceCluster{cluster}, tc.replicas...))
			if err != nil {
				t.Fatal(err)
			}
			got := map[int]bool{}
			for _, p := range plan.Replicas {
				got[p.Index] = p.Counted
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nSchedule(...): counted by index, -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
