package main

import (
	"maps"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

// noCacheReferenced is ModelCacheResolved of a deployment that references
// no ModelCache.
var noCacheReferenced = cond(condModelCacheResolved, trueS, reasonNoCacheReferenced, "No ModelCache is referenced")

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

func TestRunFunctionHandshake(t *testing.T) {
	xr := fx.Deployment("m").ClusterSelector(map[string]string{"tier": "prod"}).Cache("qwen").Obj()
	ns := fx.Namespace
	want := &fnv1.Requirements{Resources: map[string]*fnv1.ResourceSelector{
		fleet.RequiredReplicas: {ApiVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindModelReplica, Match: &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{}}},
		fleet.RequiredCache:    {ApiVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindModelCache, Match: &fnv1.ResourceSelector_MatchName{MatchName: "qwen"}, Namespace: &ns},
		fleet.RequiredClusters: {ApiVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindInferenceCluster, Match: &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: map[string]string{"tier": "prod"}}}},
	}}
	cache := &v1alpha1.ModelCache{
		TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindModelCache},
		Metadata: v1alpha1.ObjectMeta{Name: "qwen", Namespace: ns},
		Spec:     v1alpha1.ModelCacheSpec{ClusterSelector: &v1alpha1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}},
	}
	withCache := clone(want)
	withCache.Resources[fleet.RequiredClusters].Match = &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: map[string]string{"tier": "prod", "region": "eu"}}}

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
				RequiredResources: map[string]*fnv1.Resources{fleet.RequiredCache: resources(t, cache)},
			},
			want: withCache,
		},
		"AllResolved": {
			reason: "With everything resolved the requirements are the same and replicas are placed.",
			req: &fnv1.RunFunctionRequest{
				Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: toStruct(t, xr)}},
				RequiredResources: map[string]*fnv1.Resources{
					fleet.RequiredCache:    resources(t, cache),
					fleet.RequiredClusters: resources(t, fx.Cluster("a").Obj()),
					fleet.RequiredReplicas: resources(t),
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
