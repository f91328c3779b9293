package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/assume"
	"github.com/modelplaneai/fleet-scheduler/internal/codec"
	"github.com/modelplaneai/fleet-scheduler/internal/compose"
	fx "github.com/modelplaneai/fleet-scheduler/internal/fixture"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/internal/plan"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// assumeFleet is a fleet of real API objects (they carry uids): one
// cluster whose pool has free one-GPU nodes, freshly observed.
func assumeFleet(free int64) *v1alpha1.InferenceCluster {
	c := fx.Cluster("a").Pools(fx.Pool("default", free).Devices(fx.GPU("gpu", 1, "80Gi")).
		Observed(now.Add(-time.Minute), free, fx.NodesFree(free, "gpu", 1)).Obj()).Obj()
	c.Metadata.UID, c.Metadata.ResourceVersion = "uid-a", "1"
	return c
}

// assumeXR is a deployment, with its uid, wanting one one-GPU replica.
func assumeXR(name string) *v1alpha1.ModelDeployment {
	xr := fx.Deployment(name).Engines(fx.Standalone("main", fx.GPURequest(1))).Obj()
	xr.Metadata.UID = "uid-" + name
	return xr
}

// assumingFunction is a server that keeps assumed placements, its clock
// at now.
func assumingFunction() *Function {
	return &Function{log: logging.NewNopLogger(), now: func() time.Time { return now }, planner: plan.Planner{Ledger: assume.New(assume.DefaultTTL)}}
}

// composed are the keys of the ModelReplicas a response composes.
func composed(rsp *fnv1.RunFunctionResponse) []string {
	var out []string
	for k := range rsp.GetDesired().GetResources() {
		if compose.IsReplicaKey(k) {
			out = append(out, k)
		}
	}
	return out
}

func TestAssumedPlacements(t *testing.T) {
	type call struct {
		deployment string
		// shown are the deployments whose placed replicas the fleet shows
		// by this call (Crossplane created them), unscheduled.
		shown []string
		// cancelled is a call whose caller has gone.
		cancelled bool
		// placed is how many replicas the call should compose.
		placed int
	}
	cases := map[string]struct {
		reason string
		free   int64
		f      *Function
		// noUIDs makes the objects render fixtures: no uids.
		noUIDs bool
		calls  []call
	}{
		"SecondCallSeesTheFirstsPlacement": {
			reason: "One free node: the first deployment's call takes it; the second's, on the same stale fleet, charges that assumed placement and places nothing.",
			free:   1, f: assumingFunction(),
			calls: []call{{deployment: "d1", placed: 1}, {deployment: "d2", placed: 0}},
		},
		"WithoutTheLedgerBothTakeIt": {
			reason: "A server that assumes nothing lets the second call take the node the first took: the overcommit the ledger prevents.",
			free:   1, f: &Function{log: logging.NewNopLogger(), now: func() time.Time { return now }},
			calls: []call{{deployment: "d1", placed: 1}, {deployment: "d2", placed: 1}},
		},
		"RenderFixturesTakeNoPart": {
			reason: "Objects without uids (render fixtures) take no part: no fixture sees another's placements.",
			free:   1, f: assumingFunction(), noUIDs: true,
			calls: []call{{deployment: "d1", placed: 1}, {deployment: "d2", placed: 1}},
		},
		"ChargedOnceWhenShown": {
			reason: "Three free nodes: d1 and d2 take one each; by d3's call the fleet shows d1's (charged by the fleet, not again by the ledger) and not d2's (still assumed): one node is left, for d3.",
			free:   3, f: assumingFunction(),
			calls: []call{{deployment: "d1", placed: 1}, {deployment: "d2", placed: 1}, {deployment: "d3", shown: []string{"d1"}, placed: 1}, {deployment: "d4", shown: []string{"d1"}, placed: 0}},
		},
		"OwnNextCallDoesNotDoubleCharge": {
			reason: "d1's own next call, its replica not yet shown, places it again (the same replica) rather than charging itself for it.",
			free:   1, f: assumingFunction(),
			calls: []call{{deployment: "d1", placed: 1}, {deployment: "d1", placed: 1}},
		},
		"CallGivenUpAssumesNothing": {
			reason: "A call whose caller has gone stops with the context's error and records nothing: Crossplane will not apply its response, so the next call may take the node.",
			free:   1, f: assumingFunction(),
			calls: []call{{deployment: "d1", cancelled: true}, {deployment: "d2", placed: 1}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cluster := assumeFleet(tc.free)
			if tc.noUIDs {
				cluster.Metadata.UID, cluster.Metadata.ResourceVersion = "", ""
			}
			placed := map[string][]*v1alpha1.ModelReplica{}
			for i, c := range tc.calls {
				xr := assumeXR(c.deployment)
				if tc.noUIDs {
					xr.Metadata.UID = ""
				}
				var replicas []any
				for _, d := range c.shown {
					for _, r := range placed[d] {
						replicas = append(replicas, r)
					}
				}
				ctx, cancel := context.WithCancel(context.Background())
				if c.cancelled {
					cancel()
				}
				rsp, err := tc.f.RunFunction(ctx, request(t, xr, []any{cluster}, replicas))
				cancel()
				if c.cancelled {
					if !errors.Is(err, context.Canceled) {
						t.Fatalf("call %d: RunFunction(...) of a caller gone: want %v, got %v", i, context.Canceled, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("call %d: RunFunction(...): %v", i, err)
				}
				keys := composed(rsp)
				if len(keys) != c.placed {
					t.Errorf("%s\ncall %d (%s): composed %v, want %d replicas", tc.reason, i, c.deployment, keys, c.placed)
				}
				placed[c.deployment] = nil
				for _, k := range keys {
					r := replicaFrom(t, rsp, k)
					r.Metadata.UID, r.Metadata.ResourceVersion = "uid-"+r.Metadata.Name, "1"
					placed[c.deployment] = append(placed[c.deployment], r)
				}
			}
		})
	}
}

// TestAssumedPlacementsUnderConcurrentCalls: many deployments' calls at
// once, over a real gRPC connection with the request codec, on one stale
// fleet of a few free nodes: with the ledger no more replicas are placed
// than the pool has nodes, whatever the interleaving.
func TestAssumedPlacementsUnderConcurrentCalls(t *testing.T) {
	const free, callers = 5, 16
	cluster := assumeFleet(free)
	requests := codec.New(fleet.RequiredClusters, fleet.RequiredReplicas)
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.ForceServerCodecV2(requests))
	f := assumingFunction()
	f.fleet = fleet.NewReader()
	f.planner.Selectors = scheduling.NewSelectors()
	fnv1.RegisterFunctionRunnerServiceServer(srv, requests.Server(f))
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	client := fnv1.NewFunctionRunnerServiceClient(dialBufconn(t, lis))

	for round := range 5 {
		f.planner.Ledger = assume.New(assume.DefaultTTL)
		var mu sync.Mutex
		total := 0
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range callers {
			req := request(t, assumeXR(fmt.Sprintf("d%d", i)), []any{cluster}, nil)
			wg.Go(func() {
				<-start
				rsp, err := client.RunFunction(context.Background(), req)
				if err != nil {
					t.Errorf("round %d: RunFunction(...): %v", round, err)
					return
				}
				mu.Lock()
				total += len(composed(rsp))
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		if total != free {
			t.Errorf("round %d: %d concurrent calls placed %d replicas on a pool of %d free nodes, want exactly %d", round, callers, total, free, free)
		}
	}
}

// TestPropertyAssumedNeverOvercommits: any interleaving of calls of several
// deployments over one server, the fleet showing what was placed at random
// moments, never places more replicas than the pool has free nodes.
func TestPropertyAssumedNeverOvercommits(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		free := int64(1 + rng.IntN(4))
		cluster := assumeFleet(free)
		f := assumingFunction()
		deployments := 2 + rng.IntN(4)
		placed := map[string][]*v1alpha1.ModelReplica{}
		shown := map[string]bool{}
		for call := range 3 * deployments {
			d := fmt.Sprintf("d%d", rng.IntN(deployments))
			if rng.IntN(3) == 0 {
				// Crossplane created some deployment's replicas by now.
				shown[fmt.Sprintf("d%d", rng.IntN(deployments))] = true
			}
			var replicas []any
			for dep, ok := range shown {
				if ok {
					for _, r := range placed[dep] {
						replicas = append(replicas, r)
					}
				}
			}
			xr := assumeXR(d)
			xr.Spec.Replicas = int64(1 + rng.IntN(2))
			rsp, err := f.RunFunction(context.Background(), request(t, xr, []any{cluster}, replicas))
			if err != nil {
				t.Fatalf("seed %d call %d: RunFunction(...): %v", seed, call, err)
			}
			placed[d] = nil
			for _, k := range composed(rsp) {
				r := replicaFrom(t, rsp, k)
				r.Metadata.UID, r.Metadata.ResourceVersion = "uid-"+r.Metadata.Name, "1"
				placed[d] = append(placed[d], r)
			}
			n := 0
			for _, rs := range placed {
				n += len(rs)
			}
			if int64(n) > free {
				t.Fatalf("seed %d after call %d: the deployments' latest responses hold %d replicas on %d free nodes", seed, call, n, free)
			}
		}
	}
}
