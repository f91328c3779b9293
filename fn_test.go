package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
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
	"github.com/modelplaneai/fleet-scheduler/internal/compose"
	fx "github.com/modelplaneai/fleet-scheduler/internal/fixture"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/internal/plan"
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
			fleet.RequiredClusters: resources(t, clusters...),
			fleet.RequiredReplicas: resources(t, replicas...),
		},
	}
}

// noCacheReferenced is ModelCacheResolved of a deployment that references
// no ModelCache.
var noCacheReferenced = cond(condModelCacheResolved, trueS, reasonNoCacheReferenced, "No ModelCache is referenced")

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
	f := &Function{log: logging.NewNopLogger(), now: func() time.Time { return now }, planner: plan.Planner{Selectors: scheduling.NewSelectors()}}
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
				v1alpha1.LabelCounted: "false",
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
		noCacheReferenced,
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
	req.RequiredResources[fleet.RequiredReplicas] = resources(t, replicaFrom(t, rsp, "replica-a-0"), replicaFrom(t, rsp, "replica-b-0"))
	rsp = run(t, req)
	name := "qwen3-8b-03a63"
	// The replica's name and labels, but for the label that says whether a
	// report counts it: only replicas carry that.
	endpointLabels := maps.Clone(wantReplica["metadata"].(map[string]any)["labels"].(map[string]any))
	delete(endpointLabels, v1alpha1.LabelCounted)
	wantEndpoint, _ := structpb.NewStruct(map[string]any{
		"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelEndpoint",
		"metadata": map[string]any{"name": name, "namespace": fx.Namespace, "labels": endpointLabels},
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
		noCacheReferenced,
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
	// As it was, status aside, and labelled not counted: its label was not
	// recomputed.
	kept := fx.Replica("m", "a", 0).Obj()
	kept.Metadata.Labels[v1alpha1.LabelCounted] = "false"
	want := toStruct(t, kept)
	if diff := cmp.Diff(want, rsp.GetDesired().GetResources()["replica-a-0"].GetResource(), protocmp.Transform()); diff != "" {
		t.Errorf("the observed replica stays desired as it was, status aside, labelled not counted: -want, +got:\n%s", diff)
	}
	wantStatus, _ := structpb.NewValue(map[string]any{"replicas": map[string]any{"total": 1.0, "ready": 0.0}})
	if diff := cmp.Diff(wantStatus, rsp.GetDesired().GetComposite().GetResource().GetFields()["status"], protocmp.Transform()); diff != "" {
		t.Errorf("XR status counts the replicas kept: -want, +got:\n%s", diff)
	}
	var c *fnv1.Condition
	for _, cc := range rsp.GetConditions() {
		if cc.GetType() == condReplicasScheduled {
			c = cc
		}
	}
	wantPrefix := "Invalid nodeSelector CEL expression: engine main member 0 (Standalone) request gpu: selector #0: compilation failed: ERROR: <input>:1:17: Syntax error"
	if c.GetReason() != reasonInvalidNodeSelector || c.GetStatus() != falseS || !strings.HasPrefix(c.GetMessage(), wantPrefix) {
		t.Errorf("ReplicasScheduled: want False, %s, a message starting %q; got %v", reasonInvalidNodeSelector, wantPrefix, c)
	}
}

// testCodec is the request codec, as main.go makes it.
var testCodec = codec.New(fleet.RequiredClusters, fleet.RequiredReplicas)

// serve runs f on a request as the server receives it, through the request
// codec.
func serve(t *testing.T, f *Function, req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
	t.Helper()
	return serveWith(t, testCodec, f, req)
}

// serveWith serves a request as serve does, through a request codec.
func serveWith(t *testing.T, requests *codec.Codec, f *Function, req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
	t.Helper()
	wire, err := proto.Marshal(req)
	if err != nil {
		t.Fatalf("proto.Marshal(...): %v", err)
	}
	// Through the codec, as the server decodes it: into a recycled copy.
	served := &fnv1.RunFunctionRequest{}
	if err := requests.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, served); err != nil {
		t.Fatalf("Unmarshal(...): %v", err)
	}
	rsp, err := requests.Server(f).RunFunction(context.Background(), served)
	if err != nil {
		t.Fatalf("RunFunction(...): %v", err)
	}
	return rsp
}

// replicaObject is a ModelReplica as generic JSON, to give any field any
// type.
// replicaObject is a ModelReplica of a deployment at index 0 on a cluster,
// its engines and conditions as given: any types, to make one that does not
// read.
func replicaObject(deployment, name string, cluster, engines, conditions any) map[string]any {
	return map[string]any{
		"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
		"metadata": map[string]any{"name": name, "namespace": fx.Namespace, "labels": map[string]any{
			"modelplane.ai/deployment": deployment, "modelplane.ai/replica-index": "0",
		}},
		"spec":   map[string]any{"clusterName": cluster, "engines": engines},
		"status": map[string]any{"conditions": conditions},
	}
}

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

// TestRunFunctionResponseBudget: a response larger than Crossplane accepts
// is not composed whole: a Fatal result that says so, and nothing desired.
// One just under the limit is composed.
func TestRunFunctionResponseBudget(t *testing.T) {
	// Labels are copied into every replica: 600 KB of them, in 8 replicas,
	// are more than 4 MiB; in 6 they are less.
	labels := map[string]string{"blob": strings.Repeat("x", 600_000)}
	clusters := []any{fx.Cluster("a").Pools(fx.Pool("default", 8).Devices(fx.GPU("gpu", 1, "141Gi")).Obj()).Obj()}
	cases := map[string]struct {
		reason   string
		replicas int64
		fatal    string
		composed int
	}{
		"OverTheLimit": {
			reason:   "Eight replicas of 600 KB of labels each are over 4 MiB: Fatal at the seventh, and nothing desired.",
			replicas: 8,
			fatal:    "cannot compose replica-a-6: the response would be over the 4 MiB Crossplane accepts from a function (4205670 bytes composed so far)",
		},
		"UnderTheLimit": {
			reason:   "Six are under it, and composed.",
			replicas: 6,
			composed: 6,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rsp := run(t, request(t, fx.Deployment("m").Replicas(tc.replicas).Labels(labels).Obj(), clusters, nil))
			fatal := ""
			for _, r := range rsp.GetResults() {
				if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
					fatal = r.GetMessage()
				}
			}
			if diff := cmp.Diff(tc.fatal, fatal); diff != "" {
				t.Errorf("%s\nRunFunction(...) Fatal result: -want, +got:\n%s", tc.reason, diff)
			}
			if got := composedReplicas(rsp); got != tc.composed {
				t.Errorf("%s\nRunFunction(...): %d replicas composed, want %d", tc.reason, got, tc.composed)
			}
		})
	}
}

// TestRunFunctionResponseBudgetCountsKeptReplicas: replicas kept exactly
// as observed (the deployment's own that do not read) count against the
// response's size as composed ones do: 8 of them with 600 KB of labels
// each are over 4 MiB, a Fatal result, and nothing desired.
func TestRunFunctionResponseBudgetCountsKeptReplicas(t *testing.T) {
	clusters := []any{fx.Cluster("a").Pools(fx.Pool("default", 8).Devices(fx.GPU("gpu", 1, "141Gi")).Obj()).Obj()}
	badEngines := []any{map[string]any{"name": "main", "copies": "two", "members": []any{}}}
	blob := strings.Repeat("x", 600_000)
	var replicas []any
	observed := map[string]*fnv1.Resource{}
	for i := range 8 {
		name := compose.ReplicaName("m", "a", i)
		r := replicaObject("m", name, "a", badEngines, nil)
		r["metadata"].(map[string]any)["labels"].(map[string]any)["modelplane.ai/replica-index"] = strconv.Itoa(i)
		replicas = append(replicas, r)
		obs := toStruct(t, fx.Replica("m", "a", i).Name(name).Obj()).AsMap()
		obs["metadata"].(map[string]any)["labels"].(map[string]any)["blob"] = blob
		o, err := structpb.NewStruct(obs)
		if err != nil {
			t.Fatal(err)
		}
		observed[fmt.Sprintf("replica-a-%d", i)] = &fnv1.Resource{Resource: o}
	}
	req := request(t, fx.Deployment("m").Replicas(8).Obj(), clusters, replicas)
	req.Observed.Resources = observed
	rsp := run(t, req)
	fatal := ""
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			fatal = r.GetMessage()
		}
	}
	if !strings.Contains(fatal, "the response would be over the 4 MiB Crossplane accepts from a function") {
		t.Errorf("RunFunction(...) with 8 kept replicas of 600 KB: Fatal result %q, want one saying the response is over 4 MiB", fatal)
	}
	if n := len(rsp.GetDesired().GetResources()); n != 0 {
		t.Errorf("RunFunction(...) over the budget: %d resources desired, want none", n)
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
