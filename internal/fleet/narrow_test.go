package fleet

import (
	"testing"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// at is when the narrowing tests' calls are made.
var at = time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)

func TestNarrow(t *testing.T) {
	observedAt := at.Add(-time.Minute)
	pool := func(name string, observed bool) v1alpha1.GPUPool {
		p := fx.Pool(name, 2).Devices(fx.GPU("gpu", 4, "80Gi"))
		if observed {
			p = p.Observed(observedAt, 2, fx.NodesFree(2, "gpu", 4))
		}
		return p.Obj()
	}
	judged := func(pools ...v1alpha1.GPUPool) []scheduling.Cluster {
		cs, _ := observation.Clusters([]*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(pools...).Obj()}, at, 5*time.Minute)
		return cs
	}
	usable := judged(pool("p", true), pool("q", true))
	// labelled is a server that read a labelled fleet whole for d, at.
	labelled := func() *Narrowing {
		n := NewNarrowing(DefaultFullEvery)
		n.ReadWhole("uid-d", 0, 0, at)
		n.Answered("uid-d", usable)
		return n
	}
	cases := map[string]struct {
		reason string
		n      *Narrowing
		ask    Ask
		want   bool
	}{
		"EveryPoolUsable": {
			reason: "A labelled fleet, read whole a minute ago, and every pool of the clusters carried usable: narrow.",
			n:      labelled(),
			ask:    Ask{Deployment: "uid-d", Carried: true, Clusters: usable, Now: at.Add(time.Minute)},
			want:   true,
		},
		"NoClustersYet": {
			reason: "Before Crossplane has fetched the clusters, the first iteration may ask narrowly, every pool having been usable at the last call: the next decides again.",
			n:      labelled(),
			ask:    Ask{Deployment: "uid-d", Now: at},
			want:   true,
		},
		"NoClustersYetStaleLastTime": {
			reason: "Before the clusters come, a deployment whose last call found a pool without a usable report asks for the whole fleet: a narrow iteration would only be replaced.",
			n: func() *Narrowing {
				n := labelled()
				n.Answered("uid-d", judged(pool("p", true), pool("q", false)))
				return n
			}(),
			ask: Ask{Deployment: "uid-d", Now: at},
		},
		"NoClustersCarried": {
			reason: "Crossplane fetched the clusters and found none: nothing carried can be unusable, whatever the last call found.",
			n: func() *Narrowing {
				n := labelled()
				n.Answered("uid-d", judged(pool("p", true), pool("q", false)))
				return n
			}(),
			ask:  Ask{Deployment: "uid-d", Carried: true, Now: at},
			want: true,
		},
		"APoolOnWholeNodes": {
			reason: "A pool without a usable report charges every replica on it, counted or not: full.",
			n:      labelled(),
			ask:    Ask{Deployment: "uid-d", Carried: true, Clusters: judged(pool("p", true), pool("q", false)), Now: at},
		},
		"AClusterUnreadable": {
			reason: "A cluster that does not read has pools no one knows: full.",
			n:      labelled(),
			ask:    Ask{Deployment: "uid-d", Carried: true, Clusters: append(usable, scheduling.Cluster{Object: fx.Cluster("b").Obj(), Unreadable: "status: bad"}), Now: at},
		},
		"WentFull": {
			reason: "Once an iteration of a call asked for the whole fleet, the call stays full.",
			n:      labelled(),
			ask:    Ask{Deployment: "uid-d", WentFull: true, Carried: true, Clusters: usable, Now: at},
		},
		"Fixture": {
			reason: "An XR without a uid is a fixture's: it never reads narrowly.",
			n:      labelled(),
			ask:    Ask{Carried: true, Clusters: usable, Now: at},
		},
		"FixtureClusters": {
			reason: "A render's clusters carry no uid: Crossplane v2.4 gives the XR a uid, the same on every render, so another fixture of the same XR may have read a labelled fleet whole on this server; this one's replicas are not that fleet's. Full.",
			n:      labelled(),
			ask:    Ask{Deployment: "uid-d", Carried: true, Clusters: usable, Fixtures: 1, Now: at},
		},
		"NeverReadWhole": {
			reason: "A server that has not read a fleet whole (just started) knows of no labels: full.",
			n:      NewNarrowing(DefaultFullEvery),
			ask:    Ask{Deployment: "uid-d", Carried: true, Clusters: usable, Now: at},
		},
		"AnUnlabelledReplica": {
			reason: "A whole fleet with one replica unlabelled (Modelplane v0.3's, or an older version's) never goes narrow.",
			n: func() *Narrowing {
				n := labelled()
				n.ReadWhole("uid-other", 1, 0, at)
				return n
			}(),
			ask: Ask{Deployment: "uid-d", Carried: true, Clusters: usable, Now: at},
		},
		"FixturesProveNothing": {
			reason: "A fleet of fixtures, unlabelled, does not change what the server knows of the fleet.",
			n: func() *Narrowing {
				n := labelled()
				n.ReadWhole("uid-other", 3, 3, at)
				return n
			}(),
			ask:  Ask{Deployment: "uid-d", Carried: true, Clusters: usable, Now: at},
			want: true,
		},
		"DueAFullRead": {
			reason: "A deployment reads the whole fleet at least every five minutes, whatever else holds.",
			n:      labelled(),
			ask:    Ask{Deployment: "uid-d", Carried: true, Clusters: usable, Now: at.Add(DefaultFullEvery)},
		},
		"AnotherDeployment": {
			reason: "Another deployment's full read does not count for this one's: it reads the fleet whole first.",
			n:      labelled(),
			ask:    Ask{Deployment: "uid-e", Carried: true, Clusters: usable, Now: at},
		},
		"ClockBackwards": {
			reason: "A clock before the last full read proves nothing about how long ago it was.",
			n:      labelled(),
			ask:    Ask{Deployment: "uid-d", Carried: true, Clusters: usable, Now: at.Add(-time.Second)},
		},
		"NoNarrowing": {
			reason: "A server run with --no-narrow-requests always reads the fleet whole.",
			ask:    Ask{Deployment: "uid-d", Carried: true, Clusters: usable, Now: at},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.n.Narrow(tc.ask); got != tc.want {
				t.Errorf("%s\nNarrow(...) = %v, want %v", tc.reason, got, tc.want)
			}
		})
	}
}

// TestNarrowingForgets: a server bounds what it remembers of deployments,
// forgetting first those due a full read anyway.
func TestNarrowingForgets(t *testing.T) {
	n := NewNarrowing(time.Minute)
	for i := range maxRemembered + 10 {
		n.ReadWhole(string(rune('a'+i%26))+string(rune(i)), 0, 0, at.Add(-time.Hour))
	}
	n.ReadWhole("uid-d", 0, 0, at)
	if got := len(n.full); got != 1 {
		t.Errorf("after a read with %d deployments remembered, %d remain; want only the one read now", maxRemembered+11, got)
	}
	n.Answered("uid-d", nil)
	if !n.Narrow(Ask{Deployment: "uid-d", Now: at}) {
		t.Error("the deployment read now was forgotten")
	}
}
