package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/codec"
	fx "github.com/modelplaneai/fleet-scheduler/internal/fixture"
	"github.com/modelplaneai/fleet-scheduler/internal/wire"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// testCodec is the request codec, as main.go makes it.
var testCodec = codec.New(requiredClusters, requiredReplicas)

// serve runs f on a request as the server receives it, through the request
// codec.
func serve(t *testing.T, f *Function, req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
	t.Helper()
	wire, err := proto.Marshal(req)
	if err != nil {
		t.Fatalf("proto.Marshal(...): %v", err)
	}
	// Through the codec, as the server decodes it: into a recycled copy.
	served := &fnv1.RunFunctionRequest{}
	if err := testCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, served); err != nil {
		t.Fatalf("Unmarshal(...): %v", err)
	}
	rsp, err := testCodec.Server(f).RunFunction(context.Background(), served)
	if err != nil {
		t.Fatalf("RunFunction(...): %v", err)
	}
	return rsp
}

func cachingFunction() *Function {
	return &Function{log: logging.NewNopLogger(), now: func() time.Time { return now }, caches: newCaches(), selectors: scheduling.NewSelectors()}
}

// versioned gives a replica the uid and resourceVersion the API server
// would.
func versioned(r *v1alpha1.ModelReplica, uid, resourceVersion string) *v1alpha1.ModelReplica {
	r.Metadata.UID, r.Metadata.ResourceVersion = uid, resourceVersion
	return r
}

// cacheFleet is a pool of two one-GPU nodes, observed a minute ago with one
// free: the other holds another deployment's replica, scheduled at
// scheduledAt. The cluster is at its first version.
func cacheFleet(t *testing.T, scheduledAt time.Time, resourceVersion string) *fnv1.RunFunctionRequest {
	t.Helper()
	return cacheFleetReported(t, scheduledAt, resourceVersion, 1, "c1")
}

// cacheFleetReported is cacheFleet with the cluster's report of free nodes
// and its resourceVersion.
func cacheFleetReported(t *testing.T, scheduledAt time.Time, resourceVersion string, free int64, clusterVersion string) *fnv1.RunFunctionRequest {
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
			f := cachingFunction()
			for i, c := range tc.calls {
				req := cacheFleet(t, c.scheduledAt, c.resourceVersion)
				want := run(t, req) // a server's first call: nothing cached
				got := serve(t, f, req)
				if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
					t.Errorf("%s\ncall %d: -uncached, +cached:\n%s", tc.reason, i, diff)
				}
			}
			if got := len(f.caches.replicas.entries); got != tc.wantCached {
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
	want := run(t, req)
	if !slices.ContainsFunc(want.GetResults(), func(r *fnv1.Result) bool {
		return strings.Contains(r.GetMessage(), `"yesterday" is not an RFC 3339 time`)
	}) {
		t.Fatalf("uncached call: no warning of the unreadable time in %v", want.GetResults())
	}
	f := cachingFunction()
	for i := range 3 {
		if diff := cmp.Diff(want, serve(t, f, req), protocmp.Transform()); diff != "" {
			t.Errorf("call %d: -uncached, +cached:\n%s", i, diff)
		}
	}
	if got := len(f.caches.replicas.entries); got != 1 {
		t.Errorf("cached replicas: want 1, got %d", got)
	}
}

// TestReplicaCacheChargesTheNewVersion checks the case above by its effect,
// not only against an uncached call: the changed replica must close the
// pool.
func TestReplicaCacheChargesTheNewVersion(t *testing.T) {
	f := cachingFunction()
	placed := composedReplicas
	if got := placed(serve(t, f, cacheFleet(t, now.Add(-2*time.Minute), "1"))); got != 1 {
		t.Fatalf("first call placed %d replicas, want 1 on the free node", got)
	}
	if got := placed(serve(t, f, cacheFleet(t, now.Add(-10*time.Second), "2"))); got != 0 {
		t.Errorf("after the other replica changed, placed %d replicas, want 0: it is charged on top of the report and the pool is full", got)
	}
}

func TestClusterCache(t *testing.T) {
	f := cachingFunction()
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
		want := run(t, req)
		got := serve(t, f, req)
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("call %d: -uncached, +cached:\n%s", i, diff)
		}
		if n := composedReplicas(got); n != c.placed {
			t.Errorf("call %d: placed %d replicas, want %d", i, n, c.placed)
		}
	}
	if got := len(f.caches.clusters.entries); got != 2 {
		t.Errorf("cached clusters: want 2 versions, got %d", got)
	}
}

func TestClusterCacheJudgedOnEveryCall(t *testing.T) {
	// A cached cluster's pool report is judged against each call's clock:
	// the same version, ten minutes on, is stale, and the pool falls back
	// to whole-node accounting, as on a server's first call.
	req := cacheFleet(t, now.Add(-2*time.Minute), "1")
	clock := now
	f := cachingFunction()
	f.now = func() time.Time { return clock }
	for _, at := range []time.Time{now, now.Add(10 * time.Minute)} {
		clock = at
		uncached := &Function{log: logging.NewNopLogger(), now: func() time.Time { return at }}
		want, err := uncached.RunFunction(context.Background(), req)
		if err != nil {
			t.Fatalf("RunFunction(...): %v", err)
		}
		if diff := cmp.Diff(want, serve(t, f, req), protocmp.Transform()); diff != "" {
			t.Errorf("at %s: -uncached, +cached:\n%s", at, diff)
		}
	}
	stale := slices.ContainsFunc(serve(t, f, req).GetConditions(), func(c *fnv1.Condition) bool {
		return strings.Contains(c.GetMessage(), "observation stale")
	})
	if !stale {
		t.Errorf("ten minutes on: no condition says the observation is stale")
	}
}

func TestReplicaCacheSweep(t *testing.T) {
	f := cachingFunction()
	serve(t, f, cacheFleet(t, now.Add(-2*time.Minute), "1"))
	// Calls that no longer carry the replica (its resourceVersion moved on)
	// leave the first version unread; a sweep drops it.
	for i := range replicaCacheSweepEvery * 2 {
		serve(t, f, cacheFleet(t, now.Add(-2*time.Minute), fmt.Sprint(2+i)))
	}
	// An entry outlives its last read by sweepEvery to 2 x sweepEvery calls.
	if got := len(f.caches.replicas.entries); got > 2*replicaCacheSweepEvery {
		t.Errorf("cached replicas after %d calls with a new version each: %d, want at most %d", replicaCacheSweepEvery*2, got, 2*replicaCacheSweepEvery)
	}
	if _, ok := f.caches.replicas.entries[string(appendObjectKey(nil,
		wire.Value{Kind: wire.KindString, Raw: []byte(fx.Namespace)}, wire.Value{Kind: wire.KindString, Raw: []byte("other-a-0")},
		wire.Value{Kind: wire.KindString, Raw: []byte("uid-other")}, wire.Value{Kind: wire.KindString, Raw: []byte("1")}))]; ok {
		t.Error("the first version, unread for many calls, is still cached")
	}
}

// TestReplicaCacheConcurrentCalls runs calls of one server at once, as
// gRPC does; run with -race it checks the cache is safe for it.
func TestReplicaCacheConcurrentCalls(t *testing.T) {
	f := cachingFunction()
	reqs := []*fnv1.RunFunctionRequest{
		cacheFleet(t, now.Add(-2*time.Minute), "1"),
		cacheFleet(t, now.Add(-10*time.Second), "2"),
	}
	want := []*fnv1.RunFunctionResponse{run(t, reqs[0]), run(t, reqs[1])}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 20 {
				k := (i + j) % 2
				if diff := cmp.Diff(want[k], serve(t, f, reqs[k]), protocmp.Transform()); diff != "" {
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
	if got := composedReplicas(run(t, req)); got != 0 {
		t.Errorf("placed %d replicas, want 0: the replica scheduled when the pool was observed holds its free node", got)
	}
}
