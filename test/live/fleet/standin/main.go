// Command standin stands in, in the live fleet test, for two of Modelplane
// v0.3's composition functions, which are Python and do not run there:
//
//   - compose-inference-cluster, for an InferenceCluster of source Existing:
//     the ClusterProviderConfig of its workload cluster, and its status
//     (providerConfigRef, namespace, gpuPools from its node pools' classes,
//     gateway) and ClusterReady, as v0.3 writes them. It composes no
//     ServingStack: the test installs the cluster agent itself.
//   - compose-model-replica: a provider-kubernetes Object for each workload
//     sim/composereplica builds (v0.3.1's pods), marked ready as v0.3
//     marks them, and ModelAccepted and ModelReady.
//
// It is a test fixture, never shipped. Installed under Modelplane's own
// Function names, it serves v0.3.1's Compositions, whose steps carry no
// input: --input gives it the InferenceClasses instead.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/crossplane/function-sdk-go"
	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/response"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/sim/composereplica"
)

func main() {
	address := flag.String("address", "127.0.0.1:9443", "address to serve gRPC on")
	certs := flag.String("tls-server-certs-dir", "", "tls.crt, tls.key and the client CA's ca.crt")
	inputFile := flag.String("input", "", "a JSON file holding the Input for steps that have none (v0.3.1's Compositions give none)")
	flag.Parse()
	log, err := function.NewLogger(true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fn := &Function{log: log}
	if *inputFile != "" {
		b, err := os.ReadFile(*inputFile)
		if err == nil {
			err = json.Unmarshal(b, &fn.input)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "cannot read --input %s: %v\n", *inputFile, err)
			os.Exit(1)
		}
	}
	if err := function.Serve(fn, function.Listen("tcp", *address), function.MTLSCertificates(*certs), function.WithMetricsServer("")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// Function is the stand-in.
type Function struct {
	fnv1.UnimplementedFunctionRunnerServiceServer

	log logging.Logger
	// input is the Input of a step that has none.
	input Input
}

// Input is the stand-in's step input: what Modelplane's InferenceClasses
// declare, by class name.
type Input struct {
	// Classes are each InferenceClass's spec.devices.
	Classes map[string][]any `json:"classes"`
	// GatewayDomain names each cluster's gateway: <cluster>.<domain>.
	GatewayDomain string `json:"gatewayDomain"`
}

// RunFunction composes for an InferenceCluster or a ModelReplica.
func (f *Function) RunFunction(_ context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	rsp := response.To(req, response.DefaultTTL)
	if rsp.GetDesired() == nil {
		rsp.Desired = &fnv1.State{}
	}
	if rsp.Desired.Resources == nil {
		rsp.Desired.Resources = map[string]*fnv1.Resource{}
	}
	xr := req.GetObserved().GetComposite().GetResource().AsMap()
	var err error
	switch xr["kind"] {
	case v1alpha1.KindInferenceCluster:
		err = f.cluster(req, rsp, xr)
	case v1alpha1.KindModelReplica:
		err = f.replica(req, rsp, xr)
	default:
		err = fmt.Errorf("cannot compose a %v", xr["kind"])
	}
	if err != nil {
		response.Fatal(rsp, err)
	}
	return rsp, nil
}

func str(m map[string]any, path ...string) string {
	for _, p := range path[:len(path)-1] {
		m, _ = m[p].(map[string]any)
	}
	s, _ := m[path[len(path)-1]].(string)
	return s
}

func setResource(rsp *fnv1.RunFunctionResponse, key string, m map[string]any, ready bool) error {
	s, err := structpb.NewStruct(m)
	if err != nil {
		return fmt.Errorf("cannot compose %s: %w", key, err)
	}
	r := &fnv1.Resource{Resource: s}
	if ready {
		r.Ready = fnv1.Ready_READY_TRUE
	}
	rsp.Desired.Resources[key] = r
	return nil
}

// cluster is compose-inference-cluster's Existing path
// (compose_existing, write_status, gpu_pools).
func (f *Function) cluster(req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse, xr map[string]any) error {
	in := f.input
	if req.GetInput() != nil {
		b, err := json.Marshal(req.GetInput().AsMap())
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &in); err != nil {
			return fmt.Errorf("cannot read the input: %w", err)
		}
	}
	name := str(xr, "metadata", "name")
	spec, _ := xr["spec"].(map[string]any)
	if str(spec, "cluster", "source") != "Existing" {
		return errors.New("the stand-in composes InferenceClusters of source Existing only")
	}
	secret := str(spec, "cluster", "existing", "secretRef", "name")
	key := str(spec, "cluster", "existing", "secretRef", "key")
	if key == "" {
		key = "kubeconfig"
	}
	pc := v1alpha1.ChildName(name, "cluster-kubeconfig")
	if err := setResource(rsp, "cluster-provider-config-kubernetes", map[string]any{
		"apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
		"kind":       "ClusterProviderConfig",
		"metadata":   map[string]any{"name": pc},
		"spec": map[string]any{"credentials": map[string]any{
			"source":    "Secret",
			"secretRef": map[string]any{"namespace": "modelplane-system", "name": secret, "key": key},
		}},
	}, true); err != nil {
		return err
	}
	var pools []any
	nodePools, _ := spec["nodePools"].([]any)
	for _, p := range nodePools {
		pool, _ := p.(map[string]any)
		devices, ok := in.Classes[str(pool, "className")]
		if !ok || len(devices) == 0 {
			continue
		}
		nodes := pool["maxNodeCount"]
		if nodes == nil {
			nodes = pool["nodeCount"]
		}
		pools = append(pools, map[string]any{"name": str(pool, "name"), "nodes": nodes, "devices": devices})
	}
	status := map[string]any{
		"providerConfigRef": map[string]any{"name": pc},
		"namespace":         "modelplane-system",
		"gpuPools":          pools,
	}
	if in.GatewayDomain != "" {
		status["gateway"] = map[string]any{"address": name + "." + in.GatewayDomain}
	}
	s, err := structpb.NewValue(status)
	if err != nil {
		return err
	}
	if rsp.GetDesired().GetComposite() == nil {
		rsp.Desired.Composite = &fnv1.Resource{}
	}
	if rsp.GetDesired().GetComposite().GetResource() == nil {
		rsp.Desired.Composite.Resource = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	rsp.Desired.Composite.Resource.Fields["status"] = s
	response.ConditionTrue(rsp, "ClusterReady", "ClusterRunning").TargetComposite()
	return nil
}

// replica is compose-model-replica: resolve the cluster, compose each
// workload as a provider-kubernetes Object, derive the conditions.
func (f *Function) replica(req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse, xr map[string]any) error {
	r := &v1alpha1.ModelReplica{}
	b, err := json.Marshal(xr)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, r); err != nil {
		return fmt.Errorf("cannot read the ModelReplica: %w", err)
	}
	rsp.Requirements = &fnv1.Requirements{Resources: map[string]*fnv1.ResourceSelector{
		"cluster": {ApiVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindInferenceCluster, Match: &fnv1.ResourceSelector_MatchName{MatchName: r.Spec.ClusterName}},
	}}
	var pc string
	if items := req.GetRequiredResources()["cluster"].GetItems(); len(items) > 0 {
		pc = str(items[0].GetResource().AsMap(), "status", "providerConfigRef", "name")
	}
	if pc == "" {
		response.ConditionFalse(rsp, "ModelAccepted", "WaitingForCluster").TargetComposite()
		response.ConditionFalse(rsp, "ModelReady", "WaitingForModel").TargetComposite()
		return nil
	}
	composed, err := composereplica.Compose(r, composereplica.Options{})
	if err != nil {
		return err
	}
	observed := req.GetObserved().GetResources()
	var workloads []string
	for _, c := range composed {
		readiness := map[string]any{"policy": "SuccessfulCreate"}
		workload := c.ReadyCEL != "" && c.Key != composereplica.EndpointPickerKey
		if c.ReadyCEL != "" {
			readiness = map[string]any{"policy": "DeriveFromCelQuery", "celQuery": c.ReadyCEL}
		}
		if workload {
			workloads = append(workloads, c.Key)
		}
		o, seen := observed[c.Key]
		// v0.3 marks ready only what it observed: a workload once its
		// Object is Ready, anything else once it exists.
		ready := seen && (!workload || conditionTrue(o.GetResource().AsMap(), "Ready"))
		if err := setResource(rsp, c.Key, map[string]any{
			"apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
			"kind":       "Object",
			"spec": map[string]any{
				"providerConfigRef": map[string]any{"kind": "ClusterProviderConfig", "name": pc},
				"readiness":         readiness,
				"forProvider":       map[string]any{"manifest": c.Manifest},
			},
		}, ready); err != nil {
			return err
		}
	}
	accepted, serving := true, true
	for _, k := range workloads {
		o, ok := observed[k]
		if !ok || len(mapAt(o.GetResource().AsMap(), "status", "atProvider", "manifest")) == 0 {
			accepted = false
		}
		if !ok || !conditionTrue(o.GetResource().AsMap(), "Ready") {
			serving = false
		}
	}
	switch {
	case accepted:
		response.ConditionTrue(rsp, "ModelAccepted", "Accepted").TargetComposite()
	default:
		response.ConditionFalse(rsp, "ModelAccepted", "Deploying").TargetComposite()
	}
	switch {
	case serving:
		response.ConditionTrue(rsp, "ModelReady", "Serving").TargetComposite()
	case accepted:
		response.ConditionFalse(rsp, "ModelReady", "ModelStarting").TargetComposite()
	default:
		response.ConditionFalse(rsp, "ModelReady", "WaitingForModel").TargetComposite()
	}
	return nil
}

func mapAt(m map[string]any, path ...string) map[string]any {
	for _, p := range path {
		m, _ = m[p].(map[string]any)
	}
	return m
}

func conditionTrue(o map[string]any, typ string) bool {
	conds, _ := mapAt(o, "status")["conditions"].([]any)
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m["status"] == "True"
		}
	}
	return false
}
