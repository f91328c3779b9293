package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

func TestRunFunctionConditions(t *testing.T) {
	fresh := now.Add(-time.Minute)
	observed := fx.Cluster("a").Pools(fx.Pool("default", 2).Devices(fx.GPU("gpu", 1, "141Gi")).Observed(fresh, 2, fx.NodesFree(2, "gpu", 1)).Obj()).Obj()
	invalid := fx.Cluster("b").Pools(fx.Pool("default", 2).Devices(fx.GPU("gpu", 1, "141Gi")).Observed(fresh, 2, fx.NodesFree(2, "gpu", 5)).Obj()).Obj()
	stale := fx.Cluster("c").Pools(fx.Pool("default", 2).Devices(fx.GPU("gpu", 1, "141Gi")).Observed(now.Add(-7*time.Minute), 2, fx.NodesFree(2, "gpu", 1)).Obj()).Obj()

	type want struct {
		conds   map[string]*fnv1.Condition
		results []*fnv1.Result
		ttl     time.Duration
		keys    []string
	}
	cases := map[string]struct {
		reason string
		req    *fnv1.RunFunctionRequest
		want   want
	}{
		"AllObserved": {
			reason: "Every pool of every Ready cluster accounted by free devices; the TTL ends when the report goes stale.",
			req:    request(t, fx.Deployment("m").Obj(), []any{observed}, nil),
			want: want{
				conds:   map[string]*fnv1.Condition{condCapacityObserved: cond(condCapacityObserved, trueS, reasonAllPoolsObserved, "Every pool of every Ready cluster is accounted by free devices")},
				results: []*fnv1.Result{result(fnv1.Severity_SEVERITY_NORMAL, "Scheduled 1 replicas across 1 clusters: a")},
				ttl:     time.Minute,
				keys:    []string{"replica-a-0"},
			},
		},
		"ExpiringObservationShortensTTL": {
			reason: "A usable report 4m30s old with a 5m maximum age is reconciled again in 30s.",
			req: request(t, fx.Deployment("m").Obj(), []any{fx.Cluster("a").Pools(fx.Pool("default", 2).Devices(fx.GPU("gpu", 1, "141Gi")).
				Observed(now.Add(-270*time.Second), 2, fx.NodesFree(2, "gpu", 1)).Obj()).Obj()}, nil),
			want: want{
				conds:   map[string]*fnv1.Condition{condCapacityObserved: cond(condCapacityObserved, trueS, reasonAllPoolsObserved, "Every pool of every Ready cluster is accounted by free devices")},
				results: []*fnv1.Result{result(fnv1.Severity_SEVERITY_NORMAL, "Scheduled 1 replicas across 1 clusters: a")},
				ttl:     30 * time.Second,
				keys:    []string{"replica-a-0"},
			},
		},
		"InvalidAndStaleFallBack": {
			reason: "An invalid report warns naming cluster, pool and field; a stale one says for how long; both fall back.",
			req:    request(t, fx.Deployment("m").Replicas(3).Obj(), []any{observed, invalid, stale}, nil),
			want: want{
				conds: map[string]*fnv1.Condition{condCapacityObserved: cond(condCapacityObserved, falseS, reasonWholeNodeFallback,
					"Whole-node accounting for b/default (invalid observation: nodesByFreeDevices[0].free[0].count: 5 free gpu is more than the 1 a node has), c/default (observation stale for 7m0s)")},
				results: []*fnv1.Result{
					result(fnv1.Severity_SEVERITY_WARNING, "InferenceCluster b pool default: invalid observation, using whole-node accounting: nodesByFreeDevices[0].free[0].count: 5 free gpu is more than the 1 a node has"),
					result(fnv1.Severity_SEVERITY_NORMAL, "Scheduled 3 replicas across 3 clusters: a, b, c"),
				},
				ttl:  time.Minute,
				keys: []string{"replica-a-0", "replica-b-0", "replica-c-0"},
			},
		},
		"NoClusters": {
			reason: "No InferenceClusters: NoClusters and a warning, as Modelplane.",
			req:    request(t, fx.Deployment("m").Obj(), nil, nil),
			want: want{
				conds:   map[string]*fnv1.Condition{condReplicasScheduled: cond(condReplicasScheduled, falseS, reasonNoClusters, "No InferenceCluster exists")},
				results: []*fnv1.Result{result(fnv1.Severity_SEVERITY_WARNING, "No InferenceClusters found")},
				ttl:     time.Minute,
			},
		},
		"NoClustersEchoesTheSelector": {
			reason: "A cluster selector that selects nothing is echoed, sorted, so that a typo in a label is plain.",
			req:    request(t, fx.Deployment("m").ClusterSelector(map[string]string{"region": "eu-wset", "gpu": "h100"}).Obj(), nil, nil),
			want: want{
				conds:   map[string]*fnv1.Condition{condReplicasScheduled: cond(condReplicasScheduled, falseS, reasonNoClusters, "No InferenceCluster has every label of clusterSelector.matchLabels {gpu=h100, region=eu-wset}")},
				results: []*fnv1.Result{result(fnv1.Severity_SEVERITY_WARNING, "No InferenceClusters found")},
				ttl:     time.Minute,
			},
		},
		"NodeSelectorMatchesNoPool": {
			reason: "A nodeSelector that no pool meets: the shortfall says so per cluster, and a warning names the selector and what the pools offer.",
			req: request(t, fx.Deployment("m").Engines(fx.Standalone("main", fx.Request("gpu", 1, `device.attributes["gpu.nvidia.com"].productName == "NVIDIA H200"`))).Obj(),
				[]any{fx.Cluster("a").Obj()}, nil),
			want: want{
				conds: map[string]*fnv1.Condition{condReplicasScheduled: cond(condReplicasScheduled, falseS, reasonInsufficientCapacity,
					"0 of 1 replicas scheduled (checked 1 clusters); 0/1 clusters can host another replica: a: engine main: no pool matches the nodeSelector")},
				results: []*fnv1.Result{result(fnv1.Severity_SEVERITY_WARNING,
					`nodeSelector: engine main member 0 (Standalone) request gpu matches no pool of a: selector #0 "device.attributes[\"gpu.nvidia.com\"].productName == \"NVIDIA H200\"" meets no device; the devices' productName: "NVIDIA GPU 141Gi"`)},
				ttl: time.Minute,
			},
		},
		"InsufficientCapacityExplained": {
			reason: "Nothing fits: the message counts clusters and says why each cannot host a replica.",
			req:    request(t, fx.Deployment("m").Obj(), []any{fx.Cluster("a").NotReady().Obj(), fx.Cluster("b").Taint("gpu", "", "NoSchedule").Obj()}, nil),
			want: want{
				conds: map[string]*fnv1.Condition{condReplicasScheduled: cond(condReplicasScheduled, falseS, reasonInsufficientCapacity,
					"0 of 1 replicas scheduled (checked 2 clusters); 0/2 clusters can host another replica: a: not Ready; b: untolerated taint gpu:NoSchedule")},
				ttl: time.Minute,
			},
		},
		"PartialFirstPlacementExplained": {
			reason: "Fewer placed than wanted on the first pass: Scheduling, with how many and why no cluster fits another.",
			req:    request(t, fx.Deployment("m").Replicas(2).Obj(), []any{fx.Cluster("a").Pools(fx.Pool("default", 1).Devices(fx.GPU("gpu", 1, "141Gi")).Obj()).Obj()}, nil),
			want: want{
				conds: map[string]*fnv1.Condition{condReplicasScheduled: cond(condReplicasScheduled, falseS, reasonScheduling,
					"Scheduled 1 of 2 replicas; 0/1 clusters can host another replica: a: engine main: pool default needs 1 free node, has 0")},
				results: []*fnv1.Result{result(fnv1.Severity_SEVERITY_NORMAL, "Scheduled 1 replicas across 1 clusters: a")},
				ttl:     time.Minute,
				keys:    []string{"replica-a-0"},
			},
		},
		"CacheNotFoundHoldsPlacement": {
			reason: "A referenced ModelCache that does not exist keeps existing replicas and places none.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, fx.Deployment("m").Replicas(2).Cache("qwen").Obj(), []any{fx.Cluster("a").Obj()}, []any{fx.Replica("m", "a", 0).Obj()})
				r.RequiredResources[fleet.RequiredCache] = &fnv1.Resources{}
				return r
			}(),
			want: want{
				conds: map[string]*fnv1.Condition{condModelCacheResolved: cond(condModelCacheResolved, falseS, reasonCacheNotFound, "ModelCache qwen not found; holding replica placement")},
				results: []*fnv1.Result{
					result(fnv1.Severity_SEVERITY_WARNING, "ModelCache qwen not found; holding replica placement"),
					result(fnv1.Severity_SEVERITY_NORMAL, "Scheduled 1 replicas across 1 clusters: a"),
				},
				ttl:  time.Minute,
				keys: []string{"replica-a-0"},
			},
		},
		"MalformedDeviceFieldWarnsAndKeeps": {
			reason: "A device capacity DRA cannot read is left out and warned of; a replica whose selector does not read it stays.",
			req: func() *fnv1.RunFunctionRequest {
				c := fx.Cluster("a").Obj()
				c.Status.GPUPools[0].Devices[0].Capacity["bandwidth"] = v1alpha1.DeviceCapacityVal{Value: "fast"}
				c.Status.GPUPools[0].Devices[0].Attributes["cc"] = v1alpha1.DeviceAttribute{Version: new("9.x")}
				return request(t, fx.Deployment("m").Obj(), []any{c}, []any{fx.Replica("m", "a", 0).Obj()})
			}(),
			want: want{
				results: []*fnv1.Result{
					result(fnv1.Severity_SEVERITY_WARNING, `InferenceCluster a pool default: devices[gpu].attributes[cc]: "9.x" is not a semantic version; selectors that read it do not match the device`),
					result(fnv1.Severity_SEVERITY_WARNING, `InferenceCluster a pool default: devices[gpu].capacity[bandwidth]: "fast" is not a quantity; selectors that read it do not match the device`),
					result(fnv1.Severity_SEVERITY_NORMAL, "Scheduled 1 replicas across 1 clusters: a"),
				},
				ttl:  time.Minute,
				keys: []string{"replica-a-0"},
			},
		},
		"BadBindingWarnsAndKeepsTheReport": {
			reason: "A binding other than Steered warns naming cluster, pool and field; the counts stay usable, so the pool is still accounted by free devices.",
			req: request(t, fx.Deployment("m").Obj(), []any{fx.Cluster("a").Pools(fx.Pool("default", 2).Devices(fx.GPU("gpu", 1, "141Gi")).
				Observed(fresh, 2, fx.NodesFree(2, "gpu", 1)).RawBinding(`"Pinned"`).Obj()).Obj()}, nil),
			want: want{
				conds: map[string]*fnv1.Condition{condCapacityObserved: cond(condCapacityObserved, trueS, reasonAllPoolsObserved, "Every pool of every Ready cluster is accounted by free devices")},
				results: []*fnv1.Result{
					result(fnv1.Severity_SEVERITY_WARNING, `InferenceCluster a pool default: binding: "Pinned" is not Steered, the one binding there is; ignored, the pool is not accounted as steered`),
					result(fnv1.Severity_SEVERITY_NORMAL, "Scheduled 1 replicas across 1 clusters: a"),
				},
				ttl:  time.Minute,
				keys: []string{"replica-a-0"},
			},
		},
		"SteeredIsQuiet": {
			reason: "A report that says binding Steered warns of nothing.",
			req: request(t, fx.Deployment("m").Obj(), []any{fx.Cluster("a").Pools(fx.Pool("default", 2).Devices(fx.GPU("gpu", 1, "141Gi")).
				Observed(fresh, 2, fx.NodesFree(2, "gpu", 1)).Steered().Obj()).Obj()}, nil),
			want: want{
				conds:   map[string]*fnv1.Condition{condCapacityObserved: cond(condCapacityObserved, trueS, reasonAllPoolsObserved, "Every pool of every Ready cluster is accounted by free devices")},
				results: []*fnv1.Result{result(fnv1.Severity_SEVERITY_NORMAL, "Scheduled 1 replicas across 1 clusters: a")},
				ttl:     time.Minute,
				keys:    []string{"replica-a-0"},
			},
		},
		"GarbageTimestampOnReplica": {
			reason: "A PodsScheduled condition with a garbage time warns and the replica is charged.",
			req:    request(t, fx.Deployment("m").Obj(), []any{observed}, []any{fx.Replica("other", "a", 0).Conditions(v1alpha1.Condition{Type: "PodsScheduled", Status: "True", LastTransitionTime: "yesterday"}).Obj()}),
			want: want{
				results: []*fnv1.Result{
					result(fnv1.Severity_SEVERITY_WARNING, `ModelReplica ml-team/other-a-0: status.conditions[0].lastTransitionTime: "yesterday" is not an RFC 3339 time; treating its pods as not yet counted by any observation`),
					result(fnv1.Severity_SEVERITY_NORMAL, "Scheduled 1 replicas across 1 clusters: a"),
				},
				ttl:  time.Minute,
				keys: []string{"replica-a-0"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rsp := run(t, tc.req)
			for typ, want := range tc.want.conds {
				var got *fnv1.Condition
				for _, c := range rsp.GetConditions() {
					if c.GetType() == typ {
						got = c
					}
				}
				if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
					t.Errorf("%s\nRunFunction(...) condition %s: -want, +got:\n%s", tc.reason, typ, diff)
				}
			}
			if diff := cmp.Diff(tc.want.results, rsp.GetResults(), protocmp.Transform(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nRunFunction(...) results: -want, +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(durationpb.New(tc.want.ttl), rsp.GetMeta().GetTtl(), protocmp.Transform()); diff != "" {
				t.Errorf("%s\nRunFunction(...) TTL: -want, +got:\n%s", tc.reason, diff)
			}
			var keys []string
			for k := range rsp.GetDesired().GetResources() {
				keys = append(keys, k)
			}
			if diff := cmp.Diff(tc.want.keys, keys, cmpopts.SortSlices(func(a, b string) bool { return a < b }), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nRunFunction(...) desired resources: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestRunFunctionWarningsDoNotDependOnOrder(t *testing.T) {
	garbage := func(name string) *v1alpha1.ModelReplica {
		return fx.Replica("other", "a", 0).Name(name).Conditions(v1alpha1.Condition{Type: "PodsScheduled", Status: "True", LastTransitionTime: "soon"}).Obj()
	}
	bad := func(name string) *v1alpha1.InferenceCluster {
		return fx.Cluster(name).Pools(fx.Pool("default", 2).Devices(fx.GPU("gpu", 1, "141Gi")).RawObservation(`"2026-10-20T20:07:00Z"`, `{"b":1,"a":2,"c":3}`, `[]`).Obj()).Obj()
	}
	xr := fx.Deployment("m").Obj()
	first := run(t, request(t, xr, []any{bad("a"), bad("b")}, []any{garbage("r1"), garbage("r2")}))
	for range 10 {
		again := run(t, request(t, xr, []any{bad("b"), bad("a")}, []any{garbage("r2"), garbage("r1")}))
		if diff := cmp.Diff(first.GetResults(), again.GetResults(), protocmp.Transform()); diff != "" {
			t.Fatalf("results depend on the order of the inputs: -first, +again:\n%s", diff)
		}
		if diff := cmp.Diff(first.GetConditions(), again.GetConditions(), protocmp.Transform()); diff != "" {
			t.Fatalf("conditions depend on the order of the inputs: -first, +again:\n%s", diff)
		}
	}
	if n := len(first.GetResults()); n != 5 {
		t.Errorf("want 4 warnings and 1 event, got %d results: %v", n, first.GetResults())
	}
}

func TestEveryPathSetsEveryCondition(t *testing.T) {
	// Crossplane keeps a condition a function stops returning: on each path
	// every condition the function owns is set, with what holds now.
	invalid := fx.Deployment("m").Engines(fx.Standalone("main", fx.Request("gpu", 1, "device.attributes["))).Obj()
	ready := &fnv1.Resource{Resource: toStruct(t, map[string]any{
		"apiVersion": v1alpha1.APIVersion, "kind": v1alpha1.KindModelReplica,
		"metadata": map[string]any{"name": "m-a-0", "namespace": fx.Namespace},
		"status":   map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}},
	})}
	type reasons map[string]string
	cases := map[string]struct {
		reason string
		req    *fnv1.RunFunctionRequest
		want   reasons
	}{
		"InvalidNodeSelector": {
			reason: "A nodeSelector that does not compile keeps what exists: one Ready replica, so ReplicasReady says all of it is ready, and CapacityObserved says how the pools are counted.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, invalid, []any{fx.Cluster("a").Obj()}, nil)
				r.Observed.Resources = map[string]*fnv1.Resource{"replica-a-0": ready}
				return r
			}(),
			want: reasons{condModelCacheResolved: reasonNoCacheReferenced, condReplicasScheduled: reasonInvalidNodeSelector, condReplicasReady: reasonAllReplicasReady, condCapacityObserved: reasonWholeNodeFallback},
		},
		"NoClusters": {
			reason: "With no cluster, nothing is scheduled, nothing is ready, and there is no pool to count.",
			req:    request(t, fx.Deployment("m").Obj(), nil, nil),
			want:   reasons{condModelCacheResolved: reasonNoCacheReferenced, condReplicasScheduled: reasonNoClusters, condReplicasReady: reasonNoReplicasScheduled, condCapacityObserved: reasonAllPoolsObserved},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := reasons{}
			for _, c := range run(t, tc.req).GetConditions() {
				got[c.GetType()] = c.GetReason()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nconditions, type to reason: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestRunFunctionWarningsBounded: of many warnings of one kind, the first
// hundred in order are given, then one that says how many more there are.
func TestRunFunctionWarningsBounded(t *testing.T) {
	var replicas []any
	for i := range maxWarnings + 50 {
		replicas = append(replicas, fx.Replica("other", "a", i).Name(fmt.Sprintf("r%03d", i)).
			Conditions(v1alpha1.Condition{Type: "PodsScheduled", Status: "True", LastTransitionTime: "soon"}).Obj())
	}
	rsp := run(t, request(t, fx.Deployment("m").Obj(), []any{fx.Cluster("a").Obj()}, replicas))
	var got []string
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_WARNING {
			got = append(got, r.GetMessage())
		}
	}
	if len(got) != maxWarnings+1 {
		t.Fatalf("want %d warnings, got %d", maxWarnings+1, len(got))
	}
	want := []string{
		`ModelReplica ml-team/r000: status.conditions[0].lastTransitionTime: "soon" is not an RFC 3339 time; treating its pods as not yet counted by any observation`,
		"50 more warnings like the ones above are not shown",
	}
	if diff := cmp.Diff(want, []string{got[0], got[len(got)-1]}); diff != "" {
		t.Errorf("the first and the last warnings: -want, +got:\n%s", diff)
	}
}

// TestEveryCallSetsEveryCondition: Crossplane keeps a condition a function
// stops returning, so every call that gets as far as the fleet sets every
// condition the function owns, on every path: placed, no clusters, an
// invalid nodeSelector, a ModelCache missing or not referenced.
func TestEveryCallSetsEveryCondition(t *testing.T) {
	g := &fleetGen{rng: rand.New(rand.NewPCG(7, 42))}
	paths := map[string]int{}
	for i := range 2000 {
		if i%4 == 0 {
			g.newEpisode()
		} else {
			g.evolve()
		}
		req := g.build()
		clock := g.now
		f := &Function{log: logging.NewNopLogger(), now: func() time.Time { return clock }}
		rsp, err := f.RunFunction(context.Background(), req)
		if err != nil {
			t.Fatalf("request %d: RunFunction(...): %v", i, err)
		}
		_, clusters := req.GetRequiredResources()[fleet.RequiredClusters]
		_, replicas := req.GetRequiredResources()[fleet.RequiredReplicas]
		_, cache := req.GetRequiredResources()[fleet.RequiredCache]
		fatal := slices.ContainsFunc(rsp.GetResults(), func(r *fnv1.Result) bool { return r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL })
		if fatal || !clusters || !replicas || (rsp.GetRequirements().GetResources()[fleet.RequiredCache] != nil && !cache) {
			continue
		}
		got := map[string]string{}
		for _, c := range rsp.GetConditions() {
			got[c.GetType()] = c.GetReason()
		}
		paths[got[condReplicasScheduled]]++
		for _, typ := range ownedConditions {
			if _, ok := got[typ]; !ok {
				t.Errorf("request %d: no %s condition; the response sets %v", i, typ, got)
			}
		}
	}
	for _, reason := range []string{reasonReplicasCreated, reasonScheduling, reasonInsufficientCapacity, reasonNoClusters, reasonInvalidNodeSelector} {
		if paths[reason] == 0 {
			t.Errorf("no request took the %s path: the generator is too narrow (paths taken: %v)", reason, paths)
		}
	}
}
