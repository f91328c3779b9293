package assume

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

var at = time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)

// shown is a fleet that holds the replicas of the names given, on the
// clusters and pools given ("ns/name" to "cluster/pool").
type shown map[string]string

func (s shown) Shows(namespace, name, cluster string, pools []string) bool {
	want, ok := s[namespace+"/"+name]
	return ok && len(pools) == 1 && want == cluster+"/"+pools[0]
}

func entry(deployment, cluster, pool string, index int, when time.Time) Entry {
	r := fx.Replica(deployment, cluster, index).Engines(fx.PinnedStandalone("main", pool, fx.Stamped(1))).Obj()
	return Entry{Replica: r, ClusterUID: "uid-" + cluster, At: when}
}

func TestLedger(t *testing.T) {
	a := Deployment{UID: "uid-a", Namespace: fx.Namespace, Name: "a"}
	b := Deployment{UID: "uid-b", Namespace: fx.Namespace, Name: "b"}
	// The clusters of the call's fleet, by uid.
	clusters := map[string]string{"uid-c1": "c1", "uid-c2": "c2"}
	type call struct {
		// record is what a deployment's call places.
		record map[Deployment][]Entry
		// then a call of deployment from, at now, on fleet, sees want.
		from  Deployment
		now   time.Time
		fleet shown
		want  []string
	}
	cases := map[string]struct {
		reason string
		calls  []call
	}{
		"AnotherDeploymentSeesIt": {
			reason: "What a's call placed is charged to b's next call, on the cluster as b's fleet names it.",
			calls: []call{{
				record: map[Deployment][]Entry{a: {entry("a", "c1", "p", 0, at)}},
				from:   b, now: at.Add(time.Second),
				want: []string{"a-c1-0 on c1/p"},
			}},
		},
		"OwnNextCallDoesNotChargeIt": {
			reason: "a's own next call does not charge what a placed: its plan already holds it.",
			calls: []call{{
				record: map[Deployment][]Entry{a: {entry("a", "c1", "p", 0, at)}},
				from:   a, now: at.Add(time.Second),
			}},
		},
		"EndsWhenTheFleetShowsIt": {
			reason: "Once the fleet shows the replica where it was placed, the fleet charges it: the ledger drops it, for good.",
			calls: []call{
				{
					record: map[Deployment][]Entry{a: {entry("a", "c1", "p", 0, at)}},
					from:   b, now: at.Add(time.Second), fleet: shown{fx.Namespace + "/a-c1-0": "c1/p"},
				},
				{from: b, now: at.Add(2 * time.Second)},
			},
		},
		"ShownElsewhereIsStillAssumed": {
			reason: "A replica the fleet shows on other pools (moved within its cluster, not yet updated) is still assumed where it was placed.",
			calls: []call{{
				record: map[Deployment][]Entry{a: {entry("a", "c1", "p2", 0, at)}},
				from:   b, now: at.Add(time.Second), fleet: shown{fx.Namespace + "/a-c1-0": "c1/p1"},
				want: []string{"a-c1-0 on c1/p2"},
			}},
		},
		"EndsAfterTheTTL": {
			reason: "A replica never shown stops being charged after the TTL.",
			calls: []call{
				{
					record: map[Deployment][]Entry{a: {entry("a", "c1", "p", 0, at)}},
					from:   b, now: at.Add(time.Minute), want: []string{"a-c1-0 on c1/p"},
				},
				{from: b, now: at.Add(2*time.Minute + time.Second)},
			},
		},
		"EndsWhenTheDeploymentNoLongerWantsIt": {
			reason: "a's next call placed nothing new: what it placed before ends.",
			calls: []call{
				{record: map[Deployment][]Entry{a: {entry("a", "c1", "p", 0, at), entry("a", "c2", "p", 0, at)}}, from: b, now: at, want: []string{"a-c1-0 on c1/p", "a-c2-0 on c2/p"}},
				{record: map[Deployment][]Entry{a: {entry("a", "c2", "p", 0, at)}}, from: b, now: at, want: []string{"a-c2-0 on c2/p"}},
				{record: map[Deployment][]Entry{a: nil}, from: b, now: at},
			},
		},
		"OtherClustersLeftOut": {
			reason: "A placement on a cluster the call's fleet does not hold cannot be charged there, and is left out.",
			calls: []call{{
				record: map[Deployment][]Entry{a: {entry("a", "c3", "p", 0, at)}},
				from:   b, now: at,
			}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			l := New(DefaultTTL)
			for i, c := range tc.calls {
				l.Lock()
				for d, entries := range c.record {
					l.Record(d, entries)
				}
				var got []string
				for _, r := range l.Assumed(c.from, clusters, c.fleet, c.now) {
					got = append(got, r.Metadata.Name+" on "+r.Spec.ClusterName+"/"+r.Pools()[0])
				}
				l.Unlock()
				if diff := cmp.Diff(c.want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b }), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("%s\ncall %d: Assumed(...): -want, +got:\n%s", tc.reason, i, diff)
				}
			}
		})
	}
}

func TestLedgerCopiesWhatItCharges(t *testing.T) {
	// A call may change the replicas it is given (their cluster's name, say)
	// without changing what the ledger holds.
	l := New(DefaultTTL)
	l.Lock()
	defer l.Unlock()
	l.Record(Deployment{UID: "a"}, []Entry{entry("a", "c1", "p", 0, at)})
	first := l.Assumed(Deployment{UID: "b"}, map[string]string{"uid-c1": "renamed"}, shown{}, at)
	first[0].Spec.ClusterName = "changed"
	second := l.Assumed(Deployment{UID: "b"}, map[string]string{"uid-c1": "c1"}, shown{}, at)
	if got := second[0].Spec.ClusterName; got != "c1" {
		t.Errorf("Assumed(...) after a caller changed what it was given: cluster %q, want c1", got)
	}
	if got := l.entries[Deployment{UID: "a"}][0].Replica.Spec.ClusterName; got != "c1" {
		t.Errorf("the ledger's entry: cluster %q, want c1", got)
	}
}

func TestHeld(t *testing.T) {
	l := New(2 * time.Minute)
	a := Deployment{UID: "uid-a", Namespace: fx.Namespace, Name: "a"}
	b := Deployment{UID: "uid-b", Namespace: fx.Namespace, Name: "b"}
	l.Lock()
	l.Record(a, []Entry{entry("a", "c1", "p", 0, at), entry("a", "c1", "p", 1, at)})
	l.Record(b, []Entry{entry("b", "c1", "p", 0, at.Add(time.Minute))})
	l.Unlock()
	cases := map[string]struct {
		reason string
		now    time.Time
		want   int
	}{
		"AllHeld":     {reason: "Every entry within its TTL is held.", now: at.Add(time.Minute), want: 3},
		"AtTheTTL":    {reason: "An entry is held up to its TTL, as Assumed charges it.", now: at.Add(2 * time.Minute), want: 3},
		"SomeExpired": {reason: "a's entries expired; b's, placed a minute later, are held.", now: at.Add(2*time.Minute + time.Second), want: 1},
		"AllExpired":  {reason: "Expired entries, not yet dropped by a call, are not held.", now: at.Add(time.Hour), want: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := l.Held(tc.now); got != tc.want {
				t.Errorf("%s\nHeld(%s): got %d, want %d", tc.reason, tc.now, got, tc.want)
			}
		})
	}
}
