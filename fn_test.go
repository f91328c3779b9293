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

// replicaObject is a ModelReplica as generic JSON, to give any field any
// type.
func replicaObject(deployment, name string, engines, conditions any) map[string]any {
	return map[string]any{
		"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
		"metadata": map[string]any{"name": name, "namespace": fx.Namespace, "labels": map[string]any{
			"modelplane.ai/deployment": deployment, "modelplane.ai/replica-index": "0",
		}},
		"spec":   map[string]any{"clusterName": "a", "engines": engines},
		"status": map[string]any{"conditions": conditions},
	}
}

// TestRunFunctionUnreadableReplicas: which replicas that cannot be read
// fail the call, which are skipped with one warning, and in what order,
// whatever the fields the function no longer reads of settled replicas
// (found in review).
func TestRunFunctionUnreadableReplicas(t *testing.T) {
	observedAt := now.Add(-time.Minute)
	cluster := fx.Cluster("a").Pools(fx.Pool("default", 2).Devices(fx.GPU("gpu", 1, "80Gi")).
		Observed(observedAt, 2, fx.NodesFree(2, "gpu", 1)).Obj()).Obj()
	xr := fx.Deployment("m").Engines(fx.Standalone("main", fx.GPURequest(1))).Obj()
	badEngines := []any{map[string]any{"name": "main", "copies": "two", "members": []any{}}}
	scheduledBefore := []any{map[string]any{"type": "PodsScheduled", "status": "True", "lastTransitionTime": observedAt.Add(-time.Minute).Format(time.RFC3339)}}

	cases := map[string]struct {
		reason   string
		clusters []any
		replicas []any
		// want are the results of severity Fatal or Warning that name a
		// ModelReplica, by a part of their message each.
		want []string
		// wantSeverity is the severity of those results.
		wantSeverity fnv1.Severity
	}{
		"OwnUnreadableWithoutClusters": {
			reason:       "Our own replica that cannot be read fails the call even when there are no clusters, so it is never dropped.",
			replicas:     []any{replicaObject("m", "m-a-0", badEngines, nil)},
			want:         []string{"cannot read ModelReplica ml-team/m-a-0: spec.engines[0].copies"},
			wantSeverity: fnv1.Severity_SEVERITY_FATAL,
		},
		"FirstOwnUnreadableNamed": {
			reason:   "Of two own replicas that cannot be read, the first in the request is named.",
			clusters: []any{cluster},
			replicas: []any{
				replicaObject("m", "m-a-0", badEngines, nil),
				func() map[string]any {
					r := replicaObject("m", "m-a-1", []any{}, nil)
					r["metadata"].(map[string]any)["labels"].(map[string]any)["modelplane.ai/replica-index"] = 5.0
					return r
				}(),
			},
			want:         []string{"cannot read ModelReplica ml-team/m-a-0: spec.engines[0].copies"},
			wantSeverity: fnv1.Severity_SEVERITY_FATAL,
		},
		"OtherUnreadableOneWarning": {
			reason:       "Another deployment's replica the reports do not count, whose engines and conditions are both unreadable, is skipped with one warning, not one per defect.",
			clusters:     []any{cluster},
			replicas:     []any{replicaObject("other", "other-a-0", badEngines, "not a list")},
			want:         []string{"cannot read ModelReplica ml-team/other-a-0: spec.engines[0].copies"},
			wantSeverity: fnv1.Severity_SEVERITY_WARNING,
		},
		"OtherWithoutNamespaceNamed": {
			reason:   "A replica without a namespace is named without a slash.",
			clusters: []any{cluster},
			replicas: []any{func() map[string]any {
				r := replicaObject("other", "other-a-0", badEngines, nil)
				delete(r["metadata"].(map[string]any), "namespace")
				return r
			}()},
			want:         []string{"cannot read ModelReplica other-a-0: spec.engines[0].copies"},
			wantSeverity: fnv1.Severity_SEVERITY_WARNING,
		},
		"OtherSettledNotRead": {
			reason:   "Another deployment's replica every report counts charges nothing wherever it is pinned: its engines are not read, so not warned of.",
			clusters: []any{cluster},
			replicas: []any{replicaObject("other", "other-a-0", badEngines, scheduledBefore)},
		},
		"NullStatusIsNoStatus": {
			reason:   "A PodsScheduled condition with a null status is not scheduled, as one without a status: no warning.",
			clusters: []any{cluster},
			replicas: []any{replicaObject("other", "other-a-0", []any{}, []any{map[string]any{"type": "PodsScheduled", "status": nil}})},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rsp := run(t, request(t, xr, tc.clusters, tc.replicas))
			var got []string
			for _, r := range rsp.GetResults() {
				if strings.Contains(r.GetMessage(), "ModelReplica") || strings.Contains(r.GetMessage(), "status.conditions") {
					got = append(got, r.GetMessage())
					if r.GetSeverity() != tc.wantSeverity {
						t.Errorf("%s\nresult %q: severity %s, want %s", tc.reason, r.GetMessage(), r.GetSeverity(), tc.wantSeverity)
					}
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%s\nresults about replicas: %q, want %d, containing %q", tc.reason, got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("%s\nresult %d: %q, want it to contain %q", tc.reason, i, got[i], w)
				}
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
