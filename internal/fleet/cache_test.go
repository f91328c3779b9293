package fleet

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/internal/wire"
	"github.com/modelplaneai/fleet-scheduler/observation"
)

// cacheFleet is a pool of two one-GPU nodes, observed a minute ago with one
// free: the other holds another deployment's replica, scheduled at
// scheduledAt. The cluster is at its first version.
func cacheFleet(t *testing.T, scheduledAt time.Time, resourceVersion string) readRequest {
	t.Helper()
	return cacheFleetReported(t, scheduledAt, resourceVersion, 1, "c1")
}

// cacheFleetReported is cacheFleet with the cluster's report of free nodes
// and its resourceVersion.
func cacheFleetReported(t *testing.T, scheduledAt time.Time, resourceVersion string, free int64, clusterVersion string) readRequest {
	t.Helper()
	cluster := fx.Cluster("a").Pools(fx.Pool("default", 2).Devices(fx.GPU("gpu", 1, "80Gi")).
		Observed(now.Add(-time.Minute), 2, fx.NodesFree(free, "gpu", 1), fx.NodesFree(2-free, "gpu", 0)).Obj()).Obj()
	cluster.Metadata.UID, cluster.Metadata.ResourceVersion = "uid-a", clusterVersion
	other := versioned(fx.Replica("other", "a", 0).PodsScheduled("True", scheduledAt).Obj(), "uid-other", resourceVersion)
	xr := fx.Deployment("m").Engines(fx.Standalone("main", fx.GPURequest(1))).Obj()
	return request(t, xr, []any{cluster}, []any{other})
}

func TestReplicaCache(t *testing.T) {
	counted := now.Add(-2 * time.Minute)  // before the pool's report: counted by it
	charged := now.Add(-10 * time.Second) // after it: charged on top
	type call struct {
		scheduledAt     time.Time
		resourceVersion string
	}
	cases := map[string]struct {
		reason string
		calls  []call
		// wantCached is how many replicas the cache holds after the calls.
		wantCached int
	}{
		"UnchangedReplicaServedFromCache": {
			reason:     "A replica whose resourceVersion did not change is read once and served from the cache after.",
			calls:      []call{{counted, "1"}, {counted, "1"}, {counted, "1"}},
			wantCached: 1,
		},
		"ChangedReplicaReadAgain": {
			reason:     "A replica whose resourceVersion changed is read again: its pods were rescheduled after the report, so it is now charged and the pool is full.",
			calls:      []call{{counted, "1"}, {charged, "2"}},
			wantCached: 2,
		},
		"ChangedBack": {
			reason:     "Each version is cached under its own resourceVersion.",
			calls:      []call{{counted, "1"}, {charged, "2"}, {counted, "3"}},
			wantCached: 3,
		},
		"NoResourceVersionNotCached": {
			reason:     "An object without a resourceVersion, as in a render fixture, is never cached.",
			calls:      []call{{counted, ""}, {charged, ""}},
			wantCached: 0,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := NewReader()
			for i, c := range tc.calls {
				req := cacheFleet(t, c.scheduledAt, c.resourceVersion)
				want := read(t, nil, req) // a server's first call: nothing cached
				got := read(t, f, req)
				if diff := diffFleet(want, got); diff != "" {
					t.Errorf("%s\ncall %d: -uncached, +cached:\n%s", tc.reason, i, diff)
				}
			}
			if got := len(f.replicas.entries); got != tc.wantCached {
				t.Errorf("%s\ncached replicas: want %d, got %d", tc.reason, tc.wantCached, got)
			}
		})
	}
}

func TestReplicaCacheKeepsFindings(t *testing.T) {
	// A replica whose PodsScheduled time cannot be read is cached as
	// observed, finding and all: every call served from the cache warns of
	// it as the first did.
	cluster := fx.Cluster("a").Obj()
	other := versioned(fx.Replica("other", "a", 0).Conditions(v1alpha1.Condition{Type: "PodsScheduled", Status: "True", LastTransitionTime: "yesterday"}).Obj(), "uid-other", "1")
	req := request(t, fx.Deployment("m").Obj(), []any{cluster}, []any{other})
	want := read(t, nil, req)
	if !slices.ContainsFunc(want.Findings, func(f observation.ReplicaFinding) bool {
		return strings.Contains(f.Defect, `"yesterday" is not an RFC 3339 time`)
	}) {
		t.Fatalf("uncached call: no finding of the unreadable time in %v", want.Findings)
	}
	f := NewReader()
	for i := range 3 {
		if diff := diffFleet(want, read(t, f, req)); diff != "" {
			t.Errorf("call %d: -uncached, +cached:\n%s", i, diff)
		}
	}
	if got := len(f.replicas.entries); got != 1 {
		t.Errorf("cached replicas: want 1, got %d", got)
	}
}

// TestReplicaCacheChargesTheNewVersion checks the case above by its effect,
// not only against an uncached call: the changed replica must close the
// pool.
func TestReplicaCacheChargesTheNewVersion(t *testing.T) {
	f := NewReader()
	first := cacheFleet(t, now.Add(-2*time.Minute), "1")
	if got := placed(t, first, read(t, f, first)); got != 1 {
		t.Fatalf("first call placed %d replicas, want 1 on the free node", got)
	}
	second := cacheFleet(t, now.Add(-10*time.Second), "2")
	if got := placed(t, second, read(t, f, second)); got != 0 {
		t.Errorf("after the other replica changed, placed %d replicas, want 0: it is charged on top of the report and the pool is full", got)
	}
}

func TestClusterCache(t *testing.T) {
	f := NewReader()
	counted := now.Add(-2 * time.Minute)
	for i, c := range []struct {
		free    int64
		version string
		placed  int
	}{
		{free: 1, version: "c1", placed: 1},
		{free: 1, version: "c1", placed: 1},
		// The agent reported the free node taken: a new version, read again.
		{free: 0, version: "c2", placed: 0},
	} {
		req := cacheFleetReported(t, counted, "1", c.free, c.version)
		want := read(t, nil, req)
		got := read(t, f, req)
		if diff := diffFleet(want, got); diff != "" {
			t.Errorf("call %d: -uncached, +cached:\n%s", i, diff)
		}
		if n := placed(t, req, got); n != c.placed {
			t.Errorf("call %d: placed %d replicas, want %d", i, n, c.placed)
		}
	}
	if got := len(f.clusters.entries); got != 2 {
		t.Errorf("cached clusters: want 2 versions, got %d", got)
	}
}

func TestClusterCacheJudgedOnEveryCall(t *testing.T) {
	// A cached cluster's pool report is judged against each call's clock:
	// the same version, ten minutes on, is stale, and the pool falls back
	// to whole-node accounting, as on a server's first call.
	req := cacheFleet(t, now.Add(-2*time.Minute), "1")
	f := NewReader()
	later := now.Add(10 * time.Minute)
	for _, at := range []time.Time{now, later} {
		if diff := diffFleet(readAt(t, nil, req, at), readAt(t, f, req, at)); diff != "" {
			t.Errorf("at %s: -uncached, +cached:\n%s", at, diff)
		}
	}
	if pools := readAt(t, f, req, later).Pools; len(pools) != 1 || pools[0].State != observation.Stale {
		t.Errorf("ten minutes on: pool reports %v, want the one pool's stale", pools)
	}
}

func TestReplicaCacheSweep(t *testing.T) {
	f := NewReader()
	read(t, f, cacheFleet(t, now.Add(-2*time.Minute), "1"))
	// Calls that no longer carry the replica (its resourceVersion moved on)
	// leave the first version unread; a sweep drops it.
	for i := range replicaCacheSweepEvery * 2 {
		read(t, f, cacheFleet(t, now.Add(-2*time.Minute), fmt.Sprint(2+i)))
	}
	// An entry outlives its last read by sweepEvery to 2 x sweepEvery calls.
	if got := len(f.replicas.entries); got > 2*replicaCacheSweepEvery {
		t.Errorf("cached replicas after %d calls with a new version each: %d, want at most %d", replicaCacheSweepEvery*2, got, 2*replicaCacheSweepEvery)
	}
	if _, ok := f.replicas.entries[string(appendObjectKey(nil,
		wire.Value{Kind: wire.KindString, Raw: []byte(fx.Namespace)}, wire.Value{Kind: wire.KindString, Raw: []byte("other-a-0")},
		wire.Value{Kind: wire.KindString, Raw: []byte("uid-other")}, wire.Value{Kind: wire.KindString, Raw: []byte("1")}))]; ok {
		t.Error("the first version, unread for many calls, is still cached")
	}
}

// TestReplicaCacheConcurrentCalls runs calls of one server at once, as
// gRPC does; run with -race it checks the cache is safe for it.
func TestReplicaCacheConcurrentCalls(t *testing.T) {
	f := NewReader()
	reqs := []readRequest{
		cacheFleet(t, now.Add(-2*time.Minute), "1"),
		cacheFleet(t, now.Add(-10*time.Second), "2"),
	}
	want := []*Fleet{read(t, nil, reqs[0]), read(t, nil, reqs[1])}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 20 {
				k := (i + j) % 2
				if diff := diffFleet(want[k], read(t, f, reqs[k])); diff != "" {
					t.Errorf("concurrent call: -uncached, +cached:\n%s", diff)
				}
			}
		})
	}
	wg.Wait()
}

// TestReplicaScheduledWhenObservedIsCharged: a replica whose pods became
// scheduled at the very time of its pool's report is not counted by it, so
// its engines are read and it is charged: the pool's one free node is
// taken.
func TestReplicaScheduledWhenObservedIsCharged(t *testing.T) {
	req := cacheFleet(t, now.Add(-time.Minute), "1") // the pool was observed a minute ago
	if got := placed(t, req, read(t, nil, req)); got != 0 {
		t.Errorf("placed %d replicas, want 0: the replica scheduled when the pool was observed holds its free node", got)
	}
}

// diffFleet compares two fleets read by what they hold, not how they index it.
func diffFleet(want, got *Fleet) string {
	return cmp.Diff(want, got, cmpopts.IgnoreUnexported(Fleet{}))
}
