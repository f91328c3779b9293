package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/input/v1beta1"
	"github.com/modelplaneai/fleet-scheduler/internal/assume"
	"github.com/modelplaneai/fleet-scheduler/internal/codec"
	"github.com/modelplaneai/fleet-scheduler/internal/compose"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/internal/plan"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
	"github.com/modelplaneai/fleet-scheduler/sim"
	"github.com/modelplaneai/fleet-scheduler/sim/caller"
)

// TestRunFunctionUnreadableObjects: an InferenceCluster or a ModelReplica
// that does not read never stops the rest of the fleet (docs/spec.md#bad-input). It
// is warned of by name and field; the deployment's own replica, or one on a
// cluster that does not read, stays desired exactly as observed; another
// deployment's is charged conservatively; only the XR and the input are
// Fatal.
func TestRunFunctionUnreadableObjects(t *testing.T) {
	observedAt := now.Add(-time.Minute)
	// a has one one-GPU node, free.
	oneNode := func(name string) *v1alpha1.InferenceCluster {
		return fx.Cluster(name).Pools(fx.Pool("default", 1).Devices(fx.GPU("gpu", 1, "80Gi")).
			Observed(observedAt, 1, fx.NodesFree(1, "gpu", 1)).Obj()).Obj()
	}
	malformedCluster := func(name string) map[string]any {
		c := toStruct(t, oneNode(name)).AsMap()
		c["status"].(map[string]any)["conditions"].([]any)[0].(map[string]any)["status"] = true
		return c
	}
	xr := fx.Deployment("m").Engines(fx.Standalone("main", fx.GPURequest(1))).Obj()
	badEngines := []any{map[string]any{"name": "main", "copies": "two", "members": []any{}}}
	scheduledBefore := []any{map[string]any{"type": "PodsScheduled", "status": "True", "lastTransitionTime": observedAt.Add(-time.Minute).Format(time.RFC3339)}}
	goodEngines := toStruct(t, fx.Replica("x", "a", 0).Obj()).AsMap()["spec"].(map[string]any)["engines"]
	// ours is an observed composed replica, as Crossplane sends it back.
	ours := func(cluster string) *fnv1.Resource {
		return &fnv1.Resource{Resource: toStruct(t, fx.Replica("m", cluster, 0).Name(compose.ReplicaName("m", cluster, 0)).Obj())}
	}
	oursNamed := func(cluster string, engines any) map[string]any {
		return replicaObject("m", compose.ReplicaName("m", cluster, 0), cluster, engines, nil)
	}

	type want struct {
		// warnings are substrings of the Warning results, one each.
		warnings []string
		// keptAsObserved are keys desired exactly as observed.
		keptAsObserved []string
		// placed are the keys of the other replicas composed.
		placed []string
	}
	cases := map[string]struct {
		reason   string
		clusters []any
		replicas []any
		observed map[string]*fnv1.Resource
		want     want
	}{
		"OwnUnreadableStaysAsObserved": {
			reason:   "The deployment's replica whose engines do not read stays desired as observed, counts toward spec.replicas, and nothing replaces it.",
			clusters: []any{oneNode("a"), oneNode("b")},
			replicas: []any{oursNamed("a", badEngines)},
			observed: map[string]*fnv1.Resource{"replica-a-0": ours("a")},
			want: want{
				warnings:       []string{"cannot read ModelReplica ml-team/" + compose.ReplicaName("m", "a", 0) + ": spec.engines[0].copies: cannot use a string as a whole number; it is this deployment's, and stays as observed"},
				keptAsObserved: []string{"replica-a-0"},
			},
		},
		"OwnUnreadableWithoutClusters": {
			reason:   "With no cluster at all, the replica that does not read still stays as observed.",
			replicas: []any{oursNamed("a", badEngines)},
			observed: map[string]*fnv1.Resource{"replica-a-0": ours("a")},
			want: want{
				warnings:       []string{"spec.engines[0].copies", "No InferenceClusters found"},
				keptAsObserved: []string{"replica-a-0"},
			},
		},
		"OwnUnreadableClusterNameFoundByName": {
			reason:   "When the replica's own cluster name does not read, it is found among the observed composed resources by name.",
			clusters: []any{oneNode("a")},
			replicas: []any{replicaObject("m", compose.ReplicaName("m", "a", 0), 7.0, badEngines, nil)},
			observed: map[string]*fnv1.Resource{"replica-a-0": ours("a")},
			want: want{
				warnings:       []string{"spec.clusterName: cannot use a number as a string; it is this deployment's"},
				keptAsObserved: []string{"replica-a-0"},
			},
		},
		"OwnOnMalformedClusterStaysAsObserved": {
			reason:   "A cluster whose Ready status is a boolean does not read: it takes no new replica, names its field, and the deployment's replica on it stays as observed; the second replica goes to b.",
			clusters: []any{malformedCluster("a"), oneNode("b")},
			replicas: []any{oursNamed("a", goodEngines)},
			observed: map[string]*fnv1.Resource{"replica-a-0": ours("a")},
			want: want{
				warnings:       []string{"cannot read InferenceCluster a: status.conditions[0].status: cannot use a boolean as a string; it takes no new replicas"},
				keptAsObserved: []string{"replica-a-0"},
			},
		},
		"MalformedPoolCountSkipsTheCluster": {
			reason: "A cluster whose pool's nodes is a string does not read; the replica goes to the other cluster.",
			clusters: []any{func() map[string]any {
				c := toStruct(t, oneNode("a")).AsMap()
				c["status"].(map[string]any)["gpuPools"].([]any)[0].(map[string]any)["nodes"] = "three"
				return c
			}(), oneNode("b")},
			want: want{
				warnings: []string{"cannot read InferenceCluster a: status.gpuPools[0].nodes: cannot use a string as a whole number"},
				placed:   []string{"replica-b-0"},
			},
		},
		"OtherUnreadableEnginesTakeAWholeNode": {
			reason:   "Another deployment's replica whose engines do not read could hold any pool of its cluster: it is charged a whole node of each, and the one node is taken. Its conditions, not a list, are a finding of their own.",
			clusters: []any{oneNode("a")},
			replicas: []any{replicaObject("other", "other-a-0", "a", badEngines, "not a list")},
			want: want{
				warnings: []string{
					"cannot read ModelReplica ml-team/other-a-0: spec.engines[0].copies: cannot use a string as a whole number; its pools do not read, so it is charged a whole node of every pool of a",
					"ModelReplica ml-team/other-a-0: status.conditions: not a list; treating its pods as not yet counted",
				},
			},
		},
		"OtherUnreadableLabelChargedAsUnscheduled": {
			reason:   "Another deployment's replica whose index label does not read is charged as not scheduled on the pool it is pinned to, though its pods were scheduled before the report: the node is taken.",
			clusters: []any{oneNode("a")},
			replicas: []any{func() map[string]any {
				r := replicaObject("other", "other-a-0", "a", goodEngines, scheduledBefore)
				r["metadata"].(map[string]any)["labels"].(map[string]any)["modelplane.ai/replica-index"] = 5.0
				return r
			}()},
			want: want{warnings: []string{"metadata.labels.modelplane.ai/replica-index: cannot use a number as a string; it is charged as not scheduled on the pools it is pinned to"}},
		},
		"OtherUnreadableClusterChargedNowhere": {
			reason:   "Another deployment's replica whose cluster does not read cannot be charged anywhere, and says so; the replica is placed.",
			clusters: []any{oneNode("a")},
			replicas: []any{replicaObject("other", "other-a-0", 7.0, badEngines, nil)},
			want: want{
				warnings: []string{"spec.clusterName: cannot use a number as a string; its cluster does not read either, so it cannot be charged to any pool"},
				placed:   []string{"replica-a-0"},
			},
		},
		"OtherWithoutNamespaceNamed": {
			reason:   "A replica without a namespace is named without a slash.",
			clusters: []any{oneNode("a")},
			replicas: []any{func() map[string]any {
				r := replicaObject("other", "other-a-0", "a", badEngines, nil)
				delete(r["metadata"].(map[string]any), "namespace")
				return r
			}()},
			want: want{warnings: []string{"cannot read ModelReplica other-a-0: spec.engines[0].copies"}},
		},
		"OtherSettledNotRead": {
			reason:   "Another deployment's replica every report counts charges nothing wherever it is pinned: its engines are not read, so not warned of.",
			clusters: []any{oneNode("a")},
			replicas: []any{replicaObject("other", "other-a-0", "a", badEngines, scheduledBefore)},
			want:     want{placed: []string{"replica-a-0"}},
		},
		"NullStatusIsNoStatus": {
			reason:   "A PodsScheduled condition with a null status is not scheduled, as one without a status: no warning, and it is charged.",
			clusters: []any{oneNode("a"), oneNode("b")},
			replicas: []any{replicaObject("other", "other-a-0", "a", goodEngines, []any{map[string]any{"type": "PodsScheduled", "status": nil}})},
			want:     want{placed: []string{"replica-b-0"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := request(t, xr, tc.clusters, tc.replicas)
			req.Observed.Resources = tc.observed
			rsp := run(t, req)
			var warnings []string
			for _, r := range rsp.GetResults() {
				switch r.GetSeverity() {
				case fnv1.Severity_SEVERITY_FATAL:
					t.Errorf("%s\nFatal result %q: only the XR and the input may be Fatal", tc.reason, r.GetMessage())
				case fnv1.Severity_SEVERITY_WARNING:
					warnings = append(warnings, r.GetMessage())
				case fnv1.Severity_SEVERITY_NORMAL, fnv1.Severity_SEVERITY_UNSPECIFIED:
				}
			}
			if len(warnings) != len(tc.want.warnings) {
				t.Errorf("%s\nwarnings: %q, want %d, containing %q", tc.reason, warnings, len(tc.want.warnings), tc.want.warnings)
			}
			for _, w := range tc.want.warnings {
				if !slices.ContainsFunc(warnings, func(got string) bool { return strings.Contains(got, w) }) {
					t.Errorf("%s\nno warning contains %q in %q", tc.reason, w, warnings)
				}
			}
			var kept, placed []string
			for key, d := range rsp.GetDesired().GetResources() {
				if !compose.IsReplicaKey(key) {
					continue
				}
				if obs, ok := tc.observed[key]; ok && proto.Equal(d.GetResource(), compose.ReplicaFromObserved(obs.GetResource())) {
					kept = append(kept, key)
					continue
				}
				placed = append(placed, key)
			}
			slices.Sort(kept)
			slices.Sort(placed)
			if diff := cmp.Diff(tc.want.keptAsObserved, kept, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nreplicas desired exactly as observed: -want, +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.placed, placed, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nreplicas composed anew: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestRunFunctionCallerGone: a call whose caller has gone stops its work
// and returns the context's error, which gRPC sends as its status code.
func TestRunFunctionCallerGone(t *testing.T) {
	xr := fx.Deployment("qwen3-8b").Obj()
	req := request(t, xr, []any{fx.Cluster("a").Obj()}, nil)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancelExpired := context.WithDeadline(context.Background(), now)
	defer cancelExpired()
	cases := map[string]struct {
		reason string
		ctx    context.Context
		want   error
	}{
		"Cancelled": {
			reason: "Crossplane gave the call up: nothing is scheduled or composed.",
			ctx:    cancelled,
			want:   context.Canceled,
		},
		"PastDeadline": {
			reason: "The call's deadline has passed: nothing is scheduled or composed.",
			ctx:    expired,
			want:   context.DeadlineExceeded,
		},
		"Live": {
			reason: "A caller still waiting gets its answer.",
			ctx:    context.Background(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &Function{log: logging.NewNopLogger(), now: func() time.Time { return now }}
			rsp, err := f.RunFunction(tc.ctx, proto.CloneOf(req))
			if diff := cmp.Diff(tc.want, err, cmpopts.EquateErrors()); diff != "" {
				t.Errorf("%s\nRunFunction(...): -want error, +got:\n%s", tc.reason, diff)
			}
			if got, want := composedReplicas(rsp), 1; tc.want == nil && got != want {
				t.Errorf("%s\nRunFunction(...): composed %d replicas, want %d", tc.reason, got, want)
			}
			if tc.want != nil && rsp != nil {
				t.Errorf("%s\nRunFunction(...): want no response, got %v", tc.reason, rsp)
			}
		})
	}
}

// TestRunFunctionReplacesStuckReplica: a replica whose pods stayed
// unscheduled for longer than replaceUnscheduledAfter is re-placed on
// another cluster, with a Warning that says from where, to where and for
// how long; the next call, with the old replica still being deleted, keeps
// the new one and moves nothing.
func TestRunFunctionReplacesStuckReplica(t *testing.T) {
	observedAt := now.Add(-time.Minute)
	// a's one node is taken (say by a pod the agent sees and we do not);
	// b's is free.
	a := fx.Cluster("a").Pools(fx.Pool("p1", 1).Devices(fx.GPU("gpu", 8, "80Gi")).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 0)).Obj()).Obj()
	b := fx.Cluster("b").Pools(fx.Pool("p1", 1).Devices(fx.GPU("gpu", 8, "80Gi")).Observed(observedAt, 1, fx.NodesFree(1, "gpu", 8)).Obj()).Obj()
	xr := fx.Deployment("m").Engines(fx.Standalone("main", fx.GPURequest(8))).Obj()
	stuck := fx.Replica("m", "a", 0).Name(compose.ReplicaName("m", "a", 0)).
		Engines(fx.PinnedStandalone("main", "p1", v1alpha1.DeviceRequest{Name: "gpu", DeviceClassName: fx.GPUClass, Count: 8, Selectors: []v1alpha1.Selector{{CEL: fx.MemAtLeast80Gi}}})).
		PodsScheduled("False", now.Add(-20*time.Minute)).Obj()

	first := request(t, xr, []any{a, b}, []any{stuck})
	first.Observed.Resources = map[string]*fnv1.Resource{"replica-a-0": {Resource: toStruct(t, stuck)}}
	rsp := run(t, first)
	if _, ok := rsp.GetDesired().GetResources()["replica-a-0"]; ok {
		t.Errorf("first call: the stuck replica is still desired; it should be dropped for its replacement")
	}
	moved := replicaFrom(t, rsp, "replica-b-0")
	memory, ok := scheduling.ParseReplacement(moved.Metadata.Annotations[v1alpha1.AnnotationReplacement])
	if want := (scheduling.Replacement{Moves: 1, MovedAt: now, StuckOn: []scheduling.PoolRef{{Cluster: "a", Pool: "p1"}}}); !ok || !cmp.Equal(want, memory) {
		t.Errorf("first call: the replacement remembers %+v (read %t), want %+v", memory, ok, want)
	}
	wantWarning := "Re-placed ModelReplica ml-team/" + stuck.Metadata.Name + " on another cluster: its pods were unscheduled for 20m0s on a/p1; now on b/p1"
	if !slices.ContainsFunc(rsp.GetResults(), func(r *fnv1.Result) bool {
		return r.GetSeverity() == fnv1.Severity_SEVERITY_WARNING && r.GetMessage() == wantWarning
	}) {
		t.Errorf("first call: no Warning %q in %v", wantWarning, rsp.GetResults())
	}
	for _, c := range rsp.GetConditions() {
		if c.GetType() == condReplicasScheduled && !strings.Contains(c.GetMessage(), "1 replica waits for its pods") {
			t.Errorf("first call: ReplicasScheduled %q does not count the replica waiting", c.GetMessage())
		}
	}

	// The next call: Crossplane created the new replica (its pods not yet
	// scheduled) and is deleting the old one.
	deleting := *stuck
	deleting.Metadata.DeletionTimestamp = new(now.Format(time.RFC3339))
	created := *moved
	created.Status = &v1alpha1.ModelReplicaStatus{Conditions: []any{map[string]any{"type": "PodsScheduled", "status": "False", "lastTransitionTime": now.Format(time.RFC3339)}}}
	second := request(t, xr, []any{a, b}, []any{&deleting, &created})
	second.Observed.Resources = map[string]*fnv1.Resource{"replica-b-0": {Resource: toStruct(t, &created)}}
	rsp = run(t, second)
	var keys []string
	for k := range rsp.GetDesired().GetResources() {
		keys = append(keys, k)
	}
	if diff := cmp.Diff([]string{"replica-b-0"}, keys); diff != "" {
		t.Errorf("second call: composed resources: -want, +got:\n%s", diff)
	}
	if got := replicaFrom(t, rsp, "replica-b-0").Metadata.Annotations[v1alpha1.AnnotationReplacement]; got != moved.Metadata.Annotations[v1alpha1.AnnotationReplacement] {
		t.Errorf("second call: the replacement's memory is %q, want it kept as %q", got, moved.Metadata.Annotations[v1alpha1.AnnotationReplacement])
	}
	if slices.ContainsFunc(rsp.GetResults(), func(r *fnv1.Result) bool { return strings.HasPrefix(r.GetMessage(), "Re-placed") }) {
		t.Errorf("second call: a replica moved again: %v", rsp.GetResults())
	}
}

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

// narrowing is a server that read a fleet of API objects whole, every
// ModelReplica labelled, for the deployment of uid at t: its next calls for
// it may read narrowly.
func narrowing(uid string, t time.Time) *fleet.Narrowing {
	n := fleet.NewNarrowing(fleet.DefaultFullEvery)
	n.ReadWhole(uid, 0, 0, t)
	n.Answered(uid, nil)
	return n
}

// answered is whether a response is an answer rather than only
// requirements: it sets conditions.
func answered(rsp *fnv1.RunFunctionResponse) bool { return len(rsp.GetConditions()) > 0 }

// narrowRequest is a request that carries what a narrow iteration asks
// for: the deployment's own replicas and the uncounted ones, by their
// labels, as Crossplane would select them from the fleet given.
func narrowRequest(t *testing.T, req *fnv1.RunFunctionRequest, xr *v1alpha1.ModelDeployment) *fnv1.RunFunctionRequest {
	t.Helper()
	out := proto.CloneOf(req)
	all := out.GetRequiredResources()[fleet.RequiredReplicas]
	delete(out.GetRequiredResources(), fleet.RequiredReplicas)
	own, uncounted := &fnv1.Resources{}, &fnv1.Resources{}
	for _, item := range all.GetItems() {
		md := item.GetResource().GetFields()["metadata"].GetStructValue().GetFields()
		labels := md["labels"].GetStructValue().GetFields()
		if labels[v1alpha1.LabelDeployment].GetStringValue() == xr.Metadata.Name && md["namespace"].GetStringValue() == xr.Metadata.Namespace {
			own.Items = append(own.Items, item)
		}
		if l, ok := labels[v1alpha1.LabelCounted]; ok && l.GetStringValue() == "false" {
			uncounted.Items = append(uncounted.Items, item)
		}
	}
	out.RequiredResources[fleet.RequiredOwnReplicas] = own
	out.RequiredResources[fleet.RequiredUncountedReplicas] = uncounted
	return out
}

// askedWhole is req with the context an iteration that asked for the whole
// fleet passes on to the call's next ones.
func askedWhole(req *fnv1.RunFunctionRequest) *fnv1.RunFunctionRequest {
	req.Context = &structpb.Struct{Fields: map[string]*structpb.Value{contextAskedWhole: structpb.NewBoolValue(true)}}
	return req
}

func TestNarrowHandshake(t *testing.T) {
	at := now
	xr := fx.Deployment("m").Engines(fx.Standalone("main", fx.GPURequest(1))).Obj()
	xr.Metadata.UID = "uid-m"
	usable := fx.Cluster("a").Pools(fx.Pool("p", 2).Devices(fx.GPU("gpu", 4, "80Gi")).Observed(at.Add(-time.Minute), 2, fx.NodesFree(2, "gpu", 4)).Obj()).Obj()
	stale := fx.Cluster("a").Pools(fx.Pool("p", 2).Devices(fx.GPU("gpu", 4, "80Gi")).Observed(at.Add(-time.Hour), 2, fx.NodesFree(2, "gpu", 4)).Obj()).Obj()
	// API objects: a call never narrows on a fixture's cluster.
	usable.Metadata.UID, usable.Metadata.ResourceVersion = "uid-a", "1"
	stale.Metadata.UID, stale.Metadata.ResourceVersion = "uid-a", "2"
	other := fx.Replica("o", "a", 0).Engines(fx.PinnedStandalone("main", "p", fx.Stamped(1))).Obj()
	other.Metadata.Labels[v1alpha1.LabelCounted] = "false"
	carrying := func(names ...string) *fnv1.RunFunctionRequest {
		req := request(t, xr, []any{usable}, []any{other})
		carried := map[string]*fnv1.Resources{fleet.RequiredClusters: req.GetRequiredResources()[fleet.RequiredClusters]}
		for _, n := range names {
			carried[n] = &fnv1.Resources{Items: []*fnv1.Resource{{Resource: toStruct(t, other)}}}
		}
		req.RequiredResources = carried
		return req
	}
	type want struct {
		askedFor []string
		answered bool
	}
	cases := map[string]struct {
		reason string
		n      *fleet.Narrowing
		req    *fnv1.RunFunctionRequest
		want   want
	}{
		"FirstIterationNarrow": {
			reason: "A server that read a labelled fleet whole asks narrowly from the first iteration, before any cluster is carried.",
			n:      narrowing("uid-m", at),
			req:    &fnv1.RunFunctionRequest{Observed: request(t, xr, nil, nil).GetObserved()},
			want:   want{askedFor: []string{fleet.RequiredClusters, fleet.RequiredOwnReplicas, fleet.RequiredUncountedReplicas}},
		},
		"NarrowResolved": {
			reason: "With the clusters' every pool usable and the narrow lists carried, it answers.",
			n:      narrowing("uid-m", at),
			req:    carrying(fleet.RequiredOwnReplicas, fleet.RequiredUncountedReplicas),
			want:   want{askedFor: []string{fleet.RequiredClusters, fleet.RequiredOwnReplicas, fleet.RequiredUncountedReplicas}, answered: true},
		},
		"StalePoolGoesFull": {
			reason: "A stale pool carried sends the call back to the whole fleet: it asks again, and answers nothing yet.",
			n:      narrowing("uid-m", at),
			req: func() *fnv1.RunFunctionRequest {
				req := carrying(fleet.RequiredOwnReplicas, fleet.RequiredUncountedReplicas)
				req.RequiredResources[fleet.RequiredClusters] = resources(t, stale)
				return req
			}(),
			want: want{askedFor: []string{fleet.RequiredReplicas, fleet.RequiredClusters}},
		},
		"OnceFullStaysFull": {
			reason: "An iteration whose context says an earlier one asked for the whole fleet stays full, though every pool is usable now.",
			n:      narrowing("uid-m", at),
			req:    askedWhole(carrying(fleet.RequiredReplicas)),
			want:   want{askedFor: []string{fleet.RequiredReplicas, fleet.RequiredClusters}, answered: true},
		},
		"SeededWholeFleetNarrows": {
			reason: "Crossplane v2.4 seeds a call with the whole fleet its last call required, and keeps it in every iteration: carried without the context's mark, it does not keep the call full.",
			n:      narrowing("uid-m", at),
			req:    carrying(fleet.RequiredReplicas, fleet.RequiredOwnReplicas, fleet.RequiredUncountedReplicas),
			want:   want{askedFor: []string{fleet.RequiredClusters, fleet.RequiredOwnReplicas, fleet.RequiredUncountedReplicas}, answered: true},
		},
		"NewServerReadsWhole": {
			reason: "A server just started (or restarted) knows no labels: it reads the fleet whole.",
			n:      fleet.NewNarrowing(fleet.DefaultFullEvery),
			req:    carrying(fleet.RequiredOwnReplicas, fleet.RequiredUncountedReplicas),
			want:   want{askedFor: []string{fleet.RequiredReplicas, fleet.RequiredClusters}},
		},
		"NoNarrowRequests": {
			reason: "--no-narrow-requests always reads the fleet whole.",
			req:    carrying(fleet.RequiredReplicas),
			want:   want{askedFor: []string{fleet.RequiredReplicas, fleet.RequiredClusters}, answered: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &Function{log: logging.NewNopLogger(), now: func() time.Time { return at }, narrowing: tc.n}
			rsp, err := f.RunFunction(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			got := want{askedFor: askedFor(rsp), answered: answered(rsp)}
			// An iteration that asks for the whole fleet marks the
			// context it passes on; one that asks narrowly does not.
			whole := slices.Contains(got.askedFor, fleet.RequiredReplicas)
			if marked := rsp.GetContext().GetFields()[contextAskedWhole].GetBoolValue(); marked != whole {
				t.Errorf("%s\nRunFunction(...): context %s is %t, want %t (it asks for %v)", tc.reason, contextAskedWhole, marked, whole, got.askedFor)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nRunFunction(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestNarrowLearnsFromWholeFleets: a server narrows only after a whole
// fleet it read was labelled throughout, and a whole fleet with one
// unlabelled replica (Modelplane v0.3's) stops every deployment's narrow
// calls until a whole fleet is labelled again.
func TestNarrowLearnsFromWholeFleets(t *testing.T) {
	at := now
	xr := fx.Deployment("m").Engines(fx.Standalone("main", fx.GPURequest(1))).Obj()
	xr.Metadata.UID = "uid-m"
	cluster := fx.Cluster("a").Pools(fx.Pool("p", 2).Devices(fx.GPU("gpu", 4, "80Gi")).Observed(at.Add(-time.Minute), 2, fx.NodesFree(2, "gpu", 4)).Obj()).Obj()
	cluster.Metadata.UID, cluster.Metadata.ResourceVersion = "uid-a", "1"
	replica := func(deployment string, labelled bool) *v1alpha1.ModelReplica {
		r := fx.Replica(deployment, "a", 0).Engines(fx.PinnedStandalone("main", "p", fx.Stamped(1))).Obj()
		r.Metadata.UID, r.Metadata.ResourceVersion = "uid-"+deployment, "1"
		if labelled {
			r.Metadata.Labels[v1alpha1.LabelCounted] = "false"
		}
		return r
	}
	f := &Function{log: logging.NewNopLogger(), now: func() time.Time { return at }, narrowing: fleet.NewNarrowing(fleet.DefaultFullEvery)}
	call := func(replicas ...any) []string {
		t.Helper()
		// An iteration after one that asked for the whole fleet.
		rsp, err := f.RunFunction(context.Background(), askedWhole(request(t, xr, []any{cluster}, replicas)))
		if err != nil {
			t.Fatal(err)
		}
		if !answered(rsp) {
			t.Fatalf("the whole-fleet call did not answer: it asks for %v", askedFor(rsp))
		}
		// The next call's first iteration says what the server now knows.
		first, err := f.RunFunction(context.Background(), &fnv1.RunFunctionRequest{Observed: request(t, xr, nil, nil).GetObserved()})
		if err != nil {
			t.Fatal(err)
		}
		return askedFor(first)
	}
	full := []string{fleet.RequiredReplicas, fleet.RequiredClusters}
	narrow := []string{fleet.RequiredClusters, fleet.RequiredOwnReplicas, fleet.RequiredUncountedReplicas}
	steps := []struct {
		reason   string
		replicas []any
		want     []string
	}{
		{"A whole fleet with an unlabelled replica: the next call reads whole again.", []any{replica("v03", false), replica("o", true)}, full},
		{"A whole fleet labelled throughout: the next call may read narrowly.", []any{replica("o", true)}, narrow},
		{"One unlabelled replica appears in a whole read: full again.", []any{replica("o", true), replica("v03", false)}, full},
	}
	for i, s := range steps {
		if got := call(s.replicas...); !slices.Equal(got, s.want) {
			t.Errorf("step %d: %s\nthe next call asks for %v, want %v", i, s.reason, got, s.want)
		}
	}
}

// labelCurrent labels every replica of a random request as its own
// deployment's last call would have, read independently of the function:
// counted when it reads whole, its cluster is one of the call's (once),
// and every pool its engines are pinned to there has a usable report
// (observation's judgement, as the call makes it) that became scheduled
// strictly before it was observed.
func labelCurrent(t *testing.T, req *fnv1.RunFunctionRequest, maxAge time.Duration, at time.Time) {
	t.Helper()
	clusters := map[string][]*v1alpha1.InferenceCluster{}
	for _, item := range req.GetRequiredResources()[fleet.RequiredClusters].GetItems() {
		var c v1alpha1.InferenceCluster
		if decodeInto(item.GetResource(), &c) != nil {
			// A cluster that does not decode: none of its replicas is counted.
			clusters[item.GetResource().GetFields()["metadata"].GetStructValue().GetFields()["name"].GetStringValue()] = nil
			continue
		}
		clusters[c.Metadata.Name] = append(clusters[c.Metadata.Name], &c)
	}
	for _, item := range req.GetRequiredResources()[fleet.RequiredReplicas].GetItems() {
		counted := false
		var r v1alpha1.ModelReplica
		if decodeInto(item.GetResource(), &r) == nil {
			read, finding := observation.Replica(&r)
			if cs := clusters[r.Spec.ClusterName]; len(cs) == 1 && finding == nil && read.ScheduledSince != nil {
				judged, _ := observation.Clusters(cs, at, maxAge)
				counted = len(r.Pools()) > 0 && len(judged) == 1
				for _, pool := range r.Pools() {
					obs := judged[0].Observed[pool]
					counted = counted && obs != nil && scheduling.Counted(read.ScheduledSince, obs.ObservedAt)
				}
				for _, e := range r.Spec.Engines {
					for _, m := range e.Members {
						counted = counted && m.NodePoolName != ""
					}
				}
			}
		}
		labels := item.GetResource().GetFields()["metadata"].GetStructValue().GetFields()["labels"].GetStructValue()
		labels.Fields[v1alpha1.LabelCounted] = structpb.NewStringValue(strconv.FormatBool(counted))
	}
}

// decodeInto decodes a Struct as the API server would give the object.
func decodeInto(s *structpb.Struct, out any) error {
	b, err := s.MarshalJSON()
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// everyPoolUsable is the narrow rule's test of the clusters a request
// carries, read independently of the function: every cluster decodes, and
// every pool of each has a usable report.
func everyPoolUsable(req *fnv1.RunFunctionRequest, maxAge time.Duration, at time.Time) bool {
	for _, item := range req.GetRequiredResources()[fleet.RequiredClusters].GetItems() {
		var c v1alpha1.InferenceCluster
		if decodeInto(item.GetResource(), &c) != nil {
			return false
		}
		if c.Metadata.UID == "" || c.Metadata.ResourceVersion == "" {
			// A fixture's cluster: a call never narrows on it.
			return false
		}
		_, pools := observation.Clusters([]*v1alpha1.InferenceCluster{&c}, at, maxAge)
		for _, p := range pools {
			if p.State != observation.Usable {
				return false
			}
		}
	}
	return true
}

// maxAgeOf is the observationMaxAge a random request's input sets.
func maxAgeOf(req *fnv1.RunFunctionRequest) (time.Duration, bool) {
	if req.GetInput() == nil {
		return 5 * time.Minute, true
	}
	var in v1beta1.Input
	if decodeInto(req.GetInput(), &in) != nil {
		return 0, false
	}
	s, err := plan.Read(&in)
	return s.ObservationMaxAge, err == nil
}

// TestNarrowCallsAnswerAsFull: over random fleets whose labels are
// current, a narrow call answers byte for byte what the same call given
// the whole fleet answers, but for what it asks for; where a pool of the
// clusters is not usable, it asks for the whole fleet instead. Most fleets
// here have usable reports throughout, so that most calls go narrow; the
// rest are fleetGen's usual mix. At least 10,000 calls answer narrowly.
func TestNarrowCallsAnswerAsFull(t *testing.T) {
	n, atLeast := 16_000, 10_000
	if testing.Short() {
		n, atLeast = 1_600, 1_000
	}
	g := &fleetGen{rng: rand.New(rand.NewPCG(21, 47))}
	deterministic := proto.MarshalOptions{Deterministic: true}
	var narrowed, refused, unresolved int
	for i := range n {
		if i%4 == 0 {
			g.usable = g.p(0.8)
			g.newEpisode()
		} else {
			g.evolve()
		}
		g.xr["metadata"].(map[string]any)["uid"] = "xr-uid"
		req := g.build()
		if req.GetRequiredResources()[fleet.RequiredReplicas] == nil {
			continue
		}
		clock := g.now
		maxAge, ok := maxAgeOf(req)
		if !ok {
			continue // a bad input is Fatal, before anything is asked for
		}
		labelCurrent(t, req, maxAge, clock)
		var xr v1alpha1.ModelDeployment
		if decodeInto(req.GetObserved().GetComposite().GetResource(), &xr) != nil {
			continue
		}
		full := &Function{log: logging.NewNopLogger(), now: func() time.Time { return clock }}
		want, err := full.RunFunction(context.Background(), proto.CloneOf(req))
		if err != nil {
			t.Fatal(err)
		}
		narrow := &Function{log: logging.NewNopLogger(), now: func() time.Time { return clock }, narrowing: narrowing("xr-uid", clock)}
		got, err := narrow.RunFunction(context.Background(), narrowRequest(t, req, &xr))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case slices.Contains(askedFor(got), fleet.RequiredReplicas):
			refused++
			if everyPoolUsable(req, maxAge, clock) {
				t.Fatalf("request %d: every pool is usable, yet the call asks for the whole fleet", i)
			}
			if answered(got) {
				t.Fatalf("request %d: a call that asks for the whole fleet answered before it had it", i)
			}
			continue
		case !answered(got):
			unresolved++ // waiting for the cache, as the full call is
		default:
			narrowed++
			if !everyPoolUsable(req, maxAge, clock) {
				t.Fatalf("request %d: a pool is not usable, yet the call answered narrowly", i)
			}
		}
		// What a call asks for, and the context that says so, differ.
		want.Requirements, got.Requirements = nil, nil
		want.Context, got.Context = nil, nil
		wb, _ := deterministic.Marshal(want)
		gb, _ := deterministic.Marshal(got)
		if !bytes.Equal(wb, gb) {
			t.Fatalf("request %d: narrow and full answers differ: -full, +narrow:\n%s", i, cmp.Diff(want, got, protocmp.Transform()))
		}
	}
	t.Logf("%d requests: %d answered narrowly, as the full call does; %d sent back to the whole fleet; %d waiting for their cache", n, narrowed, refused, unresolved)
	if narrowed < atLeast || refused < n/20 {
		t.Errorf("the generator is too narrow: %d narrow answers and %d refusals of %d", narrowed, refused, n)
	}
}

// TestNarrowStaleLabels: what a stale label can cost, and what it cannot.
// A replica labelled not counted that a report does count is read for
// nothing: the answer is the full call's. A replica labelled counted that
// no report counts (its deployment has not called since its pods moved)
// is missed: the narrow answer is the full call's on a fleet without it,
// so what it may overcommit is at most what that replica holds.
func TestNarrowStaleLabels(t *testing.T) {
	g := &fleetGen{rng: rand.New(rand.NewPCG(8, 13)), usable: true}
	deterministic := proto.MarshalOptions{Deterministic: true}
	compared := 0
	for i := range 2_000 {
		if i%4 == 0 {
			g.newEpisode()
		} else {
			g.evolve()
		}
		g.xr["metadata"].(map[string]any)["uid"] = "xr-uid"
		g.input = nil
		req := g.build()
		if req.GetRequiredResources()[fleet.RequiredReplicas] == nil {
			continue
		}
		clock := g.now
		labelCurrent(t, req, 5*time.Minute, clock)
		var xr v1alpha1.ModelDeployment
		if decodeInto(req.GetObserved().GetComposite().GetResource(), &xr) != nil {
			continue
		}
		// Stale both ways: every other deployment's counted replica is
		// labelled not counted, or one not counted is labelled counted.
		falseStale, trueStale := proto.CloneOf(req), proto.CloneOf(req)
		withoutStale := proto.CloneOf(req)
		withoutStale.RequiredResources[fleet.RequiredReplicas] = &fnv1.Resources{}
		flipped := false
		for j, item := range req.GetRequiredResources()[fleet.RequiredReplicas].GetItems() {
			md := item.GetResource().GetFields()["metadata"].GetStructValue().GetFields()
			ours := md["labels"].GetStructValue().GetFields()[v1alpha1.LabelDeployment].GetStringValue() == xr.Metadata.Name && md["namespace"].GetStringValue() == xr.Metadata.Namespace
			label := func(r *fnv1.RunFunctionRequest, v string) {
				r.GetRequiredResources()[fleet.RequiredReplicas].GetItems()[j].GetResource().GetFields()["metadata"].GetStructValue().GetFields()["labels"].GetStructValue().Fields[v1alpha1.LabelCounted] = structpb.NewStringValue(v)
			}
			counted := md["labels"].GetStructValue().GetFields()[v1alpha1.LabelCounted].GetStringValue() == "true"
			if !ours && counted {
				label(falseStale, "false")
			}
			if !ours && !counted && !flipped && g.p(0.5) {
				label(trueStale, "true")
				flipped = true
				continue
			}
			withoutStale.RequiredResources[fleet.RequiredReplicas].Items = append(withoutStale.RequiredResources[fleet.RequiredReplicas].Items, item)
		}
		for _, c := range []struct {
			what         string
			narrow, full *fnv1.RunFunctionRequest
		}{
			{"labelled not counted, counted", falseStale, req},
			{"labelled counted, not counted", trueStale, withoutStale},
		} {
			full := &Function{log: logging.NewNopLogger(), now: func() time.Time { return clock }}
			want, err := full.RunFunction(context.Background(), proto.CloneOf(c.full))
			if err != nil {
				t.Fatal(err)
			}
			n := &Function{log: logging.NewNopLogger(), now: func() time.Time { return clock }, narrowing: narrowing("xr-uid", clock)}
			got, err := n.RunFunction(context.Background(), narrowRequest(t, c.narrow, &xr))
			if err != nil {
				t.Fatal(err)
			}
			if !answered(got) || slices.Contains(askedFor(got), fleet.RequiredReplicas) {
				continue
			}
			compared++
			// What a call asks for, and the context that says so, differ.
			want.Requirements, got.Requirements = nil, nil
			want.Context, got.Context = nil, nil
			wb, _ := deterministic.Marshal(want)
			gb, _ := deterministic.Marshal(got)
			if !bytes.Equal(wb, gb) {
				t.Fatalf("request %d, a replica %s: -want, +narrow:\n%s", i, c.what, cmp.Diff(want, got, protocmp.Transform()))
			}
		}
	}
	if compared < 1_000 {
		t.Errorf("only %d narrow answers compared: the generator is too narrow", compared)
	}
}

// TestNarrowAssumedPlacements: a narrow call's fleet ends an assumed
// placement once it shows the replica it stood for. One whose replica is
// counted, and so labelled, by the time the server next calls is never in
// a narrow fleet: it is charged on top of the report that counts it until
// its TTL, and never after it (docs/spec.md#narrow-requests).
func TestNarrowAssumedPlacements(t *testing.T) {
	at := now
	const ttl = time.Minute
	// Two one-GPU nodes, both free at first.
	pool := func(free int64, observedAt time.Time) *v1alpha1.InferenceCluster {
		c := fx.Cluster("a").Pools(fx.Pool("default", 2).Devices(fx.GPU("gpu", 1, "80Gi")).
			Observed(observedAt, 2, fx.NodesFree(free, "gpu", 1)).Obj()).Obj()
		c.Metadata.UID, c.Metadata.ResourceVersion = "uid-a", "1"
		return c
	}
	a, b := assumeXR("a"), assumeXR("b")
	clock := at
	f := &Function{log: logging.NewNopLogger(), now: func() time.Time { return clock }, planner: plan.Planner{Ledger: assume.New(ttl)}, narrowing: fleet.NewNarrowing(fleet.DefaultFullEvery)}
	rsp, err := f.RunFunction(context.Background(), request(t, a, []any{pool(2, at.Add(-time.Minute))}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(composed(rsp)) != 1 {
		t.Fatalf("a placed %d replicas, want 1", len(composed(rsp)))
	}
	// a's replica is created and its pods scheduled at +5s; the report at
	// +10s counts its GPU, and a's next call labels it counted, so b's
	// narrow calls do not see it.
	placedA := replicaFrom(t, rsp, composed(rsp)[0])
	placedA.Metadata.UID, placedA.Metadata.ResourceVersion = "uid-ra", "1"
	placedA.Metadata.Labels[v1alpha1.LabelCounted] = "true"
	placedA = (&fx.ReplicaWrapper{ModelReplica: *placedA}).PodsScheduled("True", at.Add(5*time.Second)).Obj()
	counting := pool(1, at.Add(10*time.Second))
	for _, step := range []struct {
		reason string
		after  time.Duration
		placed int
	}{
		{"Within the TTL, b's narrow call is charged a's assumed replica on top of the report that counts it: the one node left looks taken.", 30 * time.Second, 0},
		{"Past the TTL the assumption has ended, and the report alone charges a's replica: b takes the node left.", ttl + 5*time.Second, 1},
	} {
		clock = at.Add(step.after)
		f.narrowing.ReadWhole(b.Metadata.UID, 0, 0, clock)
		rsp, err := f.RunFunction(context.Background(), narrowRequest(t, request(t, b, []any{counting}, []any{placedA}), b))
		if err != nil {
			t.Fatal(err)
		}
		if !answered(rsp) || slices.Contains(askedFor(rsp), fleet.RequiredReplicas) {
			t.Fatalf("%s\nb's call did not answer narrowly: it asks for %v", step.reason, askedFor(rsp))
		}
		if got := len(composed(rsp)); got != step.placed {
			t.Errorf("%s\nb placed %d replicas, want %d", step.reason, got, step.placed)
		}
	}
}

// narrowReport, when set, is where TestFleetSimNarrow writes what each run's
// calls cost on the wire beside what they placed:
//
//	go test -run TestFleetSimNarrow -count 1 . -args -narrow-report "$PWD/docs/narrow-calls.md"
var narrowReport = flag.String("narrow-report", "", "write TestFleetSimNarrow's report to this file")

// clockedCaller is Crossplane calling the function over gRPC, through the
// request codec, for the simulator's reconciles, the function's clock at
// each reconcile's time.
type clockedCaller struct {
	caller *caller.Caller
	clock  *time.Time
}

func (c clockedCaller) Reconcile(d *v1alpha1.ModelDeployment, clusters []*v1alpha1.InferenceCluster, replicas []*v1alpha1.ModelReplica, now time.Time) ([]*v1alpha1.ModelReplica, error) {
	*c.clock = now
	return c.caller.Reconcile(d, clusters, replicas, now)
}

// TestFleetSimNarrow runs simulated fleets twice: through the direct path,
// and through the function served over gRPC with its request codec, where
// Crossplane's side answers each iteration's requirements from the fleet,
// so calls go narrow where that is safe. The fleets must be the same round
// by round; the calls' bytes are the point.
func TestFleetSimNarrow(t *testing.T) {
	var scenarios []sim.Scenario
	for _, sc := range sim.Scenarios() {
		if sc.Name == "h100-mixed" || sc.Name == "l4-agent-silent" {
			scenarios = append(scenarios, sc)
		}
	}
	if len(scenarios) != 2 {
		t.Fatalf("want the scenarios h100-mixed and l4-agent-silent, found %d", len(scenarios))
	}
	if testing.Short() {
		scenarios = scenarios[1:]
	}
	var report bytes.Buffer
	report.WriteString(narrowReportHead)
	for _, sc := range scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			m := sim.Fresh()
			cfg := sc.Config(m, sim.KubeDefault, sim.Direct{Input: sim.Input(m.Binding)})
			cfg.ReconcileAll = true // every deployment called every round, as its TTL would
			want, err := sim.Run(cfg)
			if err != nil {
				t.Fatal(err)
			}

			var clock time.Time
			f := newFunction(logging.NewNopLogger(), true, 0)
			f.now = func() time.Time { return clock }
			f.narrowing = fleet.NewNarrowing(fleet.DefaultFullEvery)
			lis := bufconn.Listen(1 << 20)
			requests := codec.New(fleet.RequiredClusters, fleet.RequiredReplicas, fleet.RequiredOwnReplicas, fleet.RequiredUncountedReplicas)
			srv := grpc.NewServer(grpc.ForceServerCodecV2(requests), grpc.MaxRecvMsgSize(64<<20))
			fnv1.RegisterFunctionRunnerServiceServer(srv, requests.Server(f))
			go func() { _ = srv.Serve(lis) }()
			defer srv.Stop()
			in := mustStruct(map[string]any{"apiVersion": "scheduler.fn.modelplane.ai/v1beta1", "kind": "Input", "assumedBinding": string(m.Binding)})
			c := &caller.Caller{Client: fnv1.NewFunctionRunnerServiceClient(dialBufconn(t, lis)), Input: in}
			cfg.Reconciler = clockedCaller{caller: c, clock: &clock}
			got, err := sim.Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(want.Series, got.Series) {
				t.Errorf("through narrow calls the fleet differs from the direct path:\nwant %v\ngot  %v", want.Series, got.Series)
			}
			stats := narrowStats(c.Calls)
			if stats.narrow == 0 {
				t.Error("no call went narrow")
			}
			if sc.AgentStopsAfter > 0 && c.Calls[len(c.Calls)-1].Narrow {
				t.Error("the agent went silent and its reports stale, yet the last call went narrow")
			}
			t.Logf("%s: %d calls, %d narrow; bytes per call: full %.0f, narrow %.0f", sc.Name, len(c.Calls), stats.narrow, stats.fullBytes, stats.narrowBytes)
			fmt.Fprintf(&report, "| %s | %d | %d | %d | %d | %.0f | %.0f | %.0f | %d of %d |\n", sc.Name, got.Placed, got.Wanted, len(c.Calls), stats.narrow,
				stats.fullBytes, stats.narrowBytes, stats.allBytes, stats.iterations, len(c.Calls))
		})
	}
	if *narrowReport != "" {
		report.WriteString(narrowReportTail)
		if err := os.WriteFile(*narrowReport, report.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

const narrowReportHead = `# Narrow calls in the simulator

Generated by ` + "`go test -run TestFleetSimNarrow -count 1 . -args -narrow-report \"$PWD/docs/narrow-calls.md\"`" + `.
Each scenario runs with a fresh agent under the kube-default binder, every
deployment reconciled every round, through the function served over gRPC
with its request codec: Crossplane's side (` + "`sim/caller`" + `) answers each
iteration's requirements from the simulated fleet, so a call goes narrow
where docs/spec.md#narrow-requests allows. The placements equal the direct
path's round by round (the test fails otherwise). Bytes are of the request
that carried the fleet, averaged over the calls of each kind; "all
iterations" adds the requests that only carried requirements.

| scenario | placed | wanted | calls | narrow | bytes per full call | bytes per narrow call | bytes per call, all iterations | calls in 2 iterations |
|---|---:|---:|---:|---:|---:|---:|---:|---:|
`

const narrowReportTail = `
A deployment's first call on a server reads the whole fleet, and so does
every call while a pool of its clusters has no usable report (the silent
agent's reports go stale 5m after it stops), and at least every 5 minutes
(` + "`--full-read-every`" + `).
`

// callStats sum up a run's calls.
type callStats struct {
	narrow, iterations               int
	fullBytes, narrowBytes, allBytes float64
}

func narrowStats(calls []caller.Call) callStats {
	var s callStats
	var full, narrow int
	for _, c := range calls {
		s.allBytes += float64(c.AllBytes)
		if c.Iterations == 2 {
			s.iterations++
		}
		if c.Narrow {
			narrow++
			s.narrowBytes += float64(c.Bytes)
		} else {
			full++
			s.fullBytes += float64(c.Bytes)
		}
	}
	s.narrow = narrow
	s.fullBytes /= float64(max(full, 1))
	s.narrowBytes /= float64(max(narrow, 1))
	s.allBytes /= float64(max(len(calls), 1))
	return s
}

// TestFirstCallAnswersAsWarm: a server's first call after a restart, its
// caches empty, answers exactly what a server that has served the fleet
// before answers: over random fleets, the response of a fresh server to the
// decoded request, of a server just started as main.go starts it through
// a request codec of its own, and of one long-lived server through the
// request codec, with its caches and recycled buffers, are byte for byte
// the same. (These calls carry no assumed placements: a restart empties
// those by design, see docs/production.md.)
func TestFirstCallAnswersAsWarm(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 200
	}
	g := &fleetGen{rng: rand.New(rand.NewPCG(42, 7))}
	var clock time.Time
	warm := &Function{log: logging.NewNopLogger(), now: func() time.Time { return clock }, fleet: fleet.NewReader(), planner: plan.Planner{Selectors: scheduling.NewSelectors()}}
	for i := range n {
		if i%4 == 0 {
			g.newEpisode()
		} else {
			g.evolve()
		}
		req := g.build()
		clock = g.now
		fresh := &Function{log: logging.NewNopLogger(), now: func() time.Time { return clock }}
		want, err := fresh.RunFunction(context.Background(), proto.CloneOf(req))
		if err != nil {
			t.Fatalf("request %d: RunFunction(...): %v", i, err)
		}
		// With its ledger, as --assumed-placement-ttl defaults to; empty, it
		// assumes nothing on its first call.
		restarted := newFunction(logging.NewNopLogger(), true, 2*time.Minute)
		restarted.now = func() time.Time { return clock }
		first := serveWith(t, codec.New(fleet.RequiredClusters, fleet.RequiredReplicas), restarted, req)
		got := serve(t, warm, req)
		deterministic := proto.MarshalOptions{Deterministic: true}
		wb, err := deterministic.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		for server, rsp := range map[string]*fnv1.RunFunctionResponse{"restarted": first, "warm": got} {
			b, err := deterministic.Marshal(rsp)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(wb, b) {
				t.Fatalf("request %d: a %s server answers otherwise than a fresh one: -fresh, +%s:\n%s", i, server, server, cmp.Diff(want, rsp, protocmp.Transform()))
			}
		}
	}
}
