package scheduling

import (
	"testing"
	"time"

	fx "github.com/modelplaneai/fleet-scheduler/internal/fixture"
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
