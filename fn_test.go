package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/codec"
	fx "github.com/modelplaneai/fleet-scheduler/internal/fixture"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

var now = time.Date(2026, 10, 20, 20, 8, 0, 0, time.UTC)

func toStruct(t *testing.T, obj any) *structpb.Struct {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(b, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func resources(t *testing.T, objs ...any) *fnv1.Resources {
	t.Helper()
	out := &fnv1.Resources{}
	for _, o := range objs {
		out.Items = append(out.Items, &fnv1.Resource{Resource: toStruct(t, o)})
	}
	return out
}

// request is a RunFunctionRequest for the XR with the fleet resolved.
func request(t *testing.T, xr *v1alpha1.ModelDeployment, clusters []any, replicas []any) *fnv1.RunFunctionRequest {
	t.Helper()
	return &fnv1.RunFunctionRequest{
		Meta:     &fnv1.RequestMeta{Tag: "t"},
		Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: toStruct(t, xr)}},
		RequiredResources: map[string]*fnv1.Resources{
			requiredClusters: resources(t, clusters...),
			requiredReplicas: resources(t, replicas...),
		},
	}
}

func cond(typ string, status fnv1.Status, reason, msg string) *fnv1.Condition {
	c := &fnv1.Condition{Type: typ, Status: status, Reason: reason, Target: fnv1.Target_TARGET_COMPOSITE.Enum()}
	if msg != "" {
		c.Message = &msg
	}
	return c
}

func result(sev fnv1.Severity, msg string) *fnv1.Result {
	return &fnv1.Result{Severity: sev, Message: msg, Target: fnv1.Target_TARGET_COMPOSITE.Enum()}
}

// run runs the function on a request twice: as tests build it, decoded,
// and as the server receives it, through the request codec, which leaves
// the fleet on the wire. Both must give the same response; the second
// finds the selectors the first compiled.
func run(t *testing.T, req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
	t.Helper()
	f := &Function{log: logging.NewNopLogger(), now: func() time.Time { return now }, selectors: scheduling.NewSelectors()}
	viaCodec := serve(t, f, req)
	rsp, err := f.RunFunction(context.Background(), req)
	if err != nil {
		t.Fatalf("RunFunction(...): unexpected error: %v", err)
	}
	if diff := cmp.Diff(rsp, viaCodec, protocmp.Transform()); diff != "" {
		t.Fatalf("RunFunction(...): decoded request, -want, through the request codec, +got:\n%s", diff)
	}
	return rsp
}

const (
	trueS  = fnv1.Status_STATUS_CONDITION_TRUE
	falseS = fnv1.Status_STATUS_CONDITION_FALSE
)

func TestRunFunctionHandshake(t *testing.T) {
	xr := fx.Deployment("m").ClusterSelector(map[string]string{"tier": "prod"}).Cache("qwen").Obj()
	ns := fx.Namespace
	want := &fnv1.Requirements{Resources: map[string]*fnv1.ResourceSelector{
		requiredReplicas: {ApiVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindModelReplica, Match: &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{}}},
		requiredCache:    {ApiVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindModelCache, Match: &fnv1.ResourceSelector_MatchName{MatchName: "qwen"}, Namespace: &ns},
		requiredClusters: {ApiVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindInferenceCluster, Match: &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: map[string]string{"tier": "prod"}}}},
	}}
	cache := &v1alpha1.ModelCache{
		TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindModelCache},
		Metadata: v1alpha1.ObjectMeta{Name: "qwen", Namespace: ns},
		Spec:     v1alpha1.ModelCacheSpec{ClusterSelector: &v1alpha1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}},
	}
	withCache := clone(want)
	withCache.Resources[requiredClusters].Match = &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: map[string]string{"tier": "prod", "region": "eu"}}}

	cases := map[string]struct {
		reason string
		req    *fnv1.RunFunctionRequest
		want   *fnv1.Requirements
		placed bool
	}{
		"FirstCall": {
			reason: "Before anything is resolved the function asks for every required resource and places nothing.",
			req:    &fnv1.RunFunctionRequest{Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: toStruct(t, xr)}}},
			want:   want,
		},
		"CacheResolved": {
			reason: "Once the ModelCache resolves, its footprint narrows the clusters asked for.",
			req: &fnv1.RunFunctionRequest{
				Observed:          &fnv1.State{Composite: &fnv1.Resource{Resource: toStruct(t, xr)}},
				RequiredResources: map[string]*fnv1.Resources{requiredCache: resources(t, cache)},
			},
			want: withCache,
		},
		"AllResolved": {
			reason: "With everything resolved the requirements are the same and replicas are placed.",
			req: &fnv1.RunFunctionRequest{
				Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: toStruct(t, xr)}},
				RequiredResources: map[string]*fnv1.Resources{
					requiredCache:    resources(t, cache),
					requiredClusters: resources(t, fx.Cluster("a").Obj()),
					requiredReplicas: resources(t),
				},
			},
			want:   withCache,
			placed: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rsp := run(t, tc.req)
			if diff := cmp.Diff(tc.want, rsp.GetRequirements(), protocmp.Transform()); diff != "" {
				t.Errorf("%s\nRunFunction(...) requirements: -want, +got:\n%s", tc.reason, diff)
			}
			if got := len(rsp.GetDesired().GetResources()) > 0; got != tc.placed {
				t.Errorf("%s\nRunFunction(...) placed replicas: want %t, got %t", tc.reason, tc.placed, got)
			}
		})
	}
}

func clone(r *fnv1.Requirements) *fnv1.Requirements {
	return proto.Clone(r).(*fnv1.Requirements)
}

func TestRunFunctionFatal(t *testing.T) {
	xr := fx.Deployment("m").Obj()
	input := func(s string) *structpb.Struct {
		st := &structpb.Struct{}
		if err := protojson.Unmarshal([]byte(s), st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	badXR := toStruct(t, xr)
	badXR.Fields["spec"].GetStructValue().Fields["replicas"] = structpb.NewStringValue("three")

	cases := map[string]struct {
		reason string
		req    *fnv1.RunFunctionRequest
		want   string
	}{
		"UnparseableDuration": {
			reason: "An observationMaxAge that is not a duration is Fatal and names the field.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, xr, nil, nil)
				r.Input = input(`{"apiVersion":"scheduler.fn.modelplane.ai/v1beta1","kind":"Input","observationMaxAge":"five minutes"}`)
				return r
			}(),
			want: `invalid Function input: observationMaxAge: Invalid value: "five minutes": must be a duration such as 5m or 90s`,
		},
		"NegativeDuration": {
			reason: "A negative observationMaxAge is out of range.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, xr, nil, nil)
				r.Input = input(`{"apiVersion":"scheduler.fn.modelplane.ai/v1beta1","kind":"Input","observationMaxAge":"-1m"}`)
				return r
			}(),
			want: `invalid Function input: observationMaxAge: Invalid value: "-1m": must be positive`,
		},
		"UnknownBinding": {
			reason: "An unknown assumedBinding is Fatal and names the field and the supported values.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, xr, nil, nil)
				r.Input = input(`{"apiVersion":"scheduler.fn.modelplane.ai/v1beta1","kind":"Input","assumedBinding":"Random"}`)
				return r
			}(),
			want: `invalid Function input: assumedBinding: Unsupported value: "Random": supported values: "MostFree", "LeastFree"`,
		},
		"WrongTypeInXR": {
			reason: "An XR field of the wrong type is Fatal and names the field.",
			req:    &fnv1.RunFunctionRequest{Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: badXR}}},
			want:   "cannot read ModelDeployment: spec.replicas: cannot use a JSON string as int64",
		},
		"DuplicateEngineNames": {
			reason: "Two engines of one name are refused, naming the field, rather than composed.",
			req: request(t, fx.Deployment("m").Engines(fx.Standalone("main", fx.GPURequest(1)), fx.Gang("main", 1, fx.GPURequest(1))).Obj(),
				[]any{fx.Cluster("a").Obj()}, nil),
			want: `invalid ModelDeployment: spec.template.spec.engines[1].name: Duplicate value: "main"`,
		},
		"MissingXR": {
			reason: "A request without an observed XR is Fatal, not a panic.",
			req:    &fnv1.RunFunctionRequest{},
			want:   "cannot read ModelDeployment: it is missing from the request",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rsp := run(t, tc.req)
			want := []*fnv1.Result{result(fnv1.Severity_SEVERITY_FATAL, tc.want)}
			if diff := cmp.Diff(want, rsp.GetResults(), protocmp.Transform()); diff != "" {
				t.Errorf("%s\nRunFunction(...) results: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// readyReplica is a composed ModelReplica as Crossplane observes it, Ready.
func observedReady(t *testing.T, obj any) *fnv1.Resource {
	t.Helper()
	s := toStruct(t, obj)
	st, _ := structpb.NewStruct(map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}})
	s.Fields["status"] = structpb.NewStructValue(st)
	return &fnv1.Resource{Resource: s}
}

func TestRunFunctionCompose(t *testing.T) {
	xr := fx.Deployment("qwen3-8b").Replicas(2).Labels(map[string]string{"team": "ml", v1alpha1.LabelCluster: "spoofed"}).Serving("Unified").Obj()
	a := fx.Cluster("a").PlacementLabels(map[string]string{"region": "eu", "team": "platform"}).Obj()
	b := fx.Cluster("b").Gateway("10.0.0.2").Obj()

	wantReplica := map[string]any{
		"apiVersion": "modelplane.ai/v1alpha1",
		"kind":       "ModelReplica",
		"metadata": map[string]any{
			"name":      "qwen3-8b-03a63",
			"namespace": fx.Namespace,
			"labels": map[string]any{
				"team": "platform", "region": "eu",
				v1alpha1.LabelDeployment: "qwen3-8b", v1alpha1.LabelCluster: "a", v1alpha1.LabelReplicaIndex: "0",
			},
		},
		"spec": map[string]any{
			"clusterName": "a",
			"serving":     map[string]any{"mode": "Unified"},
			"engines": []any{map[string]any{
				"name": "main", "copies": 1.0,
				"members": []any{map[string]any{
					"role": "Standalone", "nodePoolName": "default",
					"deviceRequests": []any{map[string]any{
						"name": "gpu", "deviceClassName": fx.GPUClass, "count": 1.0,
						"selectors": []any{map[string]any{"cel": fx.MemAtLeast80Gi}},
					}},
					"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "engine", "image": "vllm/vllm-openai:v0.11.0"}}}},
				}},
			}},
		},
	}
	wantStruct, err := structpb.NewStruct(wantReplica)
	if err != nil {
		t.Fatal(err)
	}

	req := request(t, xr, []any{b, a}, nil)
	rsp := run(t, req)
	if diff := cmp.Diff(wantStruct, rsp.GetDesired().GetResources()["replica-a-0"].GetResource(), protocmp.Transform()); diff != "" {
		t.Errorf("the composed ModelReplica: -want, +got:\n%s", diff)
	}
	wantConds := []*fnv1.Condition{
		cond(condReplicasScheduled, falseS, reasonScheduling, ""),
		cond(condReplicasReady, falseS, reasonModelStarting, "0 of 2 ready"),
		cond(condCapacityObserved, falseS, reasonWholeNodeFallback, "Whole-node accounting for a/default (no observation), b/default (no observation)"),
	}
	if diff := cmp.Diff(wantConds, rsp.GetConditions(), protocmp.Transform()); diff != "" {
		t.Errorf("conditions on first placement: -want, +got:\n%s", diff)
	}
	wantResults := []*fnv1.Result{result(fnv1.Severity_SEVERITY_NORMAL, "Scheduled 2 replicas across 2 clusters: a, b")}
	if diff := cmp.Diff(wantResults, rsp.GetResults(), protocmp.Transform()); diff != "" {
		t.Errorf("results on first placement: -want, +got:\n%s", diff)
	}
	if _, ok := rsp.GetDesired().GetResources()["endpoint-a-0"]; ok {
		t.Errorf("an endpoint was composed for a replica not yet Ready")
	}

	// Next reconcile: both replicas observed, a's Ready.
	req.Observed.Resources = map[string]*fnv1.Resource{
		"replica-a-0": observedReady(t, rsp.GetDesired().GetResources()["replica-a-0"].GetResource()),
		"replica-b-0": rsp.GetDesired().GetResources()["replica-b-0"],
	}
	req.RequiredResources[requiredReplicas] = resources(t, replicaFrom(t, rsp, "replica-a-0"), replicaFrom(t, rsp, "replica-b-0"))
	rsp = run(t, req)
	name := "qwen3-8b-03a63"
	wantEndpoint, _ := structpb.NewStruct(map[string]any{
		"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelEndpoint",
		"metadata": wantReplica["metadata"],
		"spec": map[string]any{
			"url":         "http://gw.a.example.com/" + fx.Namespace + "/" + name + "/v1",
			"rewritePath": "/" + fx.Namespace + "/" + name + "/",
		},
	})
	if diff := cmp.Diff(wantEndpoint, rsp.GetDesired().GetResources()["endpoint-a-0"].GetResource(), protocmp.Transform()); diff != "" {
		t.Errorf("the composed ModelEndpoint: -want, +got:\n%s", diff)
	}
	if _, ok := rsp.GetDesired().GetResources()["endpoint-b-0"]; ok {
		t.Errorf("an endpoint was composed for replica b-0, which is not Ready")
	}
	if got := rsp.GetDesired().GetResources()["replica-a-0"].GetReady(); got != fnv1.Ready_READY_TRUE {
		t.Errorf("replica-a-0 ready: want READY_TRUE, got %v", got)
	}
	wantConds = []*fnv1.Condition{
		cond(condReplicasScheduled, trueS, reasonReplicasCreated, "Scheduled 2 of 2 replicas"),
		cond(condReplicasReady, falseS, reasonModelStarting, "1 of 2 ready"),
		cond(condCapacityObserved, falseS, reasonWholeNodeFallback, "Whole-node accounting for a/default (no observation), b/default (no observation)"),
	}
	if diff := cmp.Diff(wantConds, rsp.GetConditions(), protocmp.Transform()); diff != "" {
		t.Errorf("conditions once observed: -want, +got:\n%s", diff)
	}
	if len(rsp.GetResults()) != 0 {
		t.Errorf("results once observed: want none, got %v", rsp.GetResults())
	}
	wantStatus, _ := structpb.NewValue(map[string]any{"replicas": map[string]any{"total": 2.0, "ready": 1.0}})
	if diff := cmp.Diff(wantStatus, rsp.GetDesired().GetComposite().GetResource().GetFields()["status"], protocmp.Transform()); diff != "" {
		t.Errorf("XR status: -want, +got:\n%s", diff)
	}
}

// replicaFrom reads back a desired ModelReplica as the fleet would list it.
func replicaFrom(t *testing.T, rsp *fnv1.RunFunctionResponse, key string) *v1alpha1.ModelReplica {
	t.Helper()
	b, err := protojson.Marshal(rsp.GetDesired().GetResources()[key].GetResource())
	if err != nil {
		t.Fatal(err)
	}
	r := &v1alpha1.ModelReplica{}
	if err := json.Unmarshal(b, r); err != nil {
		t.Fatal(err)
	}
	return r
}

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
				conds:   map[string]*fnv1.Condition{condReplicasScheduled: cond(condReplicasScheduled, falseS, reasonNoClusters, "")},
				results: []*fnv1.Result{result(fnv1.Severity_SEVERITY_WARNING, "No InferenceClusters found")},
				ttl:     time.Minute,
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
				r.RequiredResources[requiredCache] = &fnv1.Resources{}
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

func TestRunFunctionInvalidSelectorKeepsReplicas(t *testing.T) {
	xr := fx.Deployment("m").Engines(fx.Standalone("main", fx.Request("gpu", 1, "device.driver =="))).Obj()
	req := request(t, xr, []any{fx.Cluster("a").Obj()}, nil)
	observed := toStruct(t, fx.Replica("m", "a", 0).Obj())
	observed.Fields["status"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"ready": structpb.NewBoolValue(true)}})
	req.Observed.Resources = map[string]*fnv1.Resource{"replica-a-0": {Resource: observed}}

	rsp := run(t, req)
	want := toStruct(t, fx.Replica("m", "a", 0).Obj())
	if diff := cmp.Diff(want, rsp.GetDesired().GetResources()["replica-a-0"].GetResource(), protocmp.Transform()); diff != "" {
		t.Errorf("the observed replica stays desired as it was, status aside: -want, +got:\n%s", diff)
	}
	wantStatus, _ := structpb.NewValue(map[string]any{"replicas": map[string]any{"total": 1.0, "ready": 0.0}})
	if diff := cmp.Diff(wantStatus, rsp.GetDesired().GetComposite().GetResource().GetFields()["status"], protocmp.Transform()); diff != "" {
		t.Errorf("XR status counts the replicas kept: -want, +got:\n%s", diff)
	}
	c := rsp.GetConditions()[0]
	wantPrefix := "Invalid nodeSelector CEL expression: engine main member 0 (Standalone) request gpu: selector #0: compilation failed: ERROR: <input>:1:17: Syntax error"
	if c.GetReason() != reasonInvalidNodeSelector || c.GetStatus() != falseS || !strings.HasPrefix(c.GetMessage(), wantPrefix) {
		t.Errorf("ReplicasScheduled: want False, %s, a message starting %q; got %v", reasonInvalidNodeSelector, wantPrefix, c)
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
