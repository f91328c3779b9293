// Package benchfleet builds the benchmark fleet: 100 InferenceClusters of 8
// freshly observed pools of 8xH100 nodes, carrying any number of realistic
// ModelReplicas of other deployments (a vLLM engine's pod template, stamped
// device requests, labels and status conditions), and the
// RunFunctionRequest Crossplane sends once it has fetched them. The
// benchmarks, the serving tests and the load driver (sim/cmd/fnload) share it.
package benchfleet

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/compose"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

// Shape of the benchmark fleet: 100 clusters of 8 pools of 8xH100 nodes.
const (
	Clusters     = 100
	Pools        = 8
	NodesPerPool = 32
	// NewReplicas is how many replicas Deployment wants, none placed yet.
	NewReplicas = 8
)

// Now is the benchmark's clock: every observation is 30s old at Now.
var Now = time.Date(2026, 10, 20, 20, 8, 0, 0, time.UTC) //nolint:gochecknoglobals // A fixed clock, never written.

// vllmTemplate is the pod template of a realistic vLLM member: the engine
// with its args, env, probes, resources and mounts, and a metrics sidecar.
func vllmTemplate(model string, tp int64) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{
"metadata":{"labels":{"app.kubernetes.io/name":"vllm","app.kubernetes.io/component":"engine","modelplane.ai/model":%[1]q},
  "annotations":{"prometheus.io/scrape":"true","prometheus.io/port":"8000","prometheus.io/path":"/metrics"}},
"spec":{"containers":[
  {"name":"vllm","image":"vllm/vllm-openai:v0.11.0","command":["python3","-m","vllm.entrypoints.openai.api_server"],
   "args":["--model","/models/%[1]s","--served-model-name",%[1]q,"--tensor-parallel-size","%[2]d","--max-model-len","32768",
     "--gpu-memory-utilization","0.92","--port","8000","--enable-prefix-caching","--disable-log-requests","--max-num-seqs","256"],
   "env":[{"name":"HF_HOME","value":"/models/.cache"},{"name":"VLLM_LOGGING_LEVEL","value":"INFO"},{"name":"NCCL_DEBUG","value":"WARN"},
     {"name":"VLLM_WORKER_MULTIPROC_METHOD","value":"spawn"},{"name":"POD_IP","valueFrom":{"fieldRef":{"fieldPath":"status.podIP"}}},
     {"name":"HF_TOKEN","valueFrom":{"secretKeyRef":{"name":"hf-token","key":"token"}}}],
   "ports":[{"name":"http","containerPort":8000,"protocol":"TCP"}],
   "resources":{"requests":{"cpu":"8","memory":"64Gi"},"limits":{"memory":"96Gi"}},
   "readinessProbe":{"httpGet":{"path":"/health","port":8000},"periodSeconds":5,"failureThreshold":3},
   "startupProbe":{"httpGet":{"path":"/health","port":8000},"periodSeconds":10,"failureThreshold":120},
   "volumeMounts":[{"name":"models","mountPath":"/models","readOnly":true},{"name":"shm","mountPath":"/dev/shm"}]},
  {"name":"metrics-exporter","image":"ghcr.io/modelplaneai/vllm-exporter:v0.4.2","args":["--target","http://localhost:8000/metrics","--listen",":9400"],
   "ports":[{"name":"metrics","containerPort":9400}],"resources":{"requests":{"cpu":"100m","memory":"128Mi"},"limits":{"memory":"256Mi"}}}],
 "volumes":[{"name":"models","persistentVolumeClaim":{"claimName":"model-cache","readOnly":true}},{"name":"shm","emptyDir":{"medium":"Memory","sizeLimit":"16Gi"}}],
 "tolerations":[{"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"}],
 "terminationGracePeriodSeconds":60}}`, model, tp))
}

// replica is a realistic observed ModelReplica: labels, a stamped device
// request, the vLLM pod template and status conditions. Its pods were
// scheduled at scheduledAt.
func replica(deployment, cluster, pool string, index int, gpus int64, scheduledAt time.Time) *v1alpha1.ModelReplica {
	model := "meta-llama-3-1-8b-instruct"
	if gpus >= 4 {
		model = "meta-llama-3-1-70b-instruct"
	}
	r := fx.Replica(deployment, cluster, index).
		Name(compose.ReplicaName(deployment, cluster, index)).
		Engines(v1alpha1.ReplicaEngine{Name: "main", Copies: new(int64(1)), Members: []v1alpha1.ReplicaMember{{
			Role: v1alpha1.RoleStandalone, NodePoolName: pool, DeviceRequests: []v1alpha1.DeviceRequest{fx.Stamped(gpus)},
			Template: vllmTemplate(model, gpus),
		}}}).
		Conditions(
			v1alpha1.Condition{Type: "Synced", Status: "True", Reason: "ReconcileSuccess", LastTransitionTime: scheduledAt.Add(-time.Minute).Format(time.RFC3339)},
			v1alpha1.Condition{Type: "PodsScheduled", Status: "True", Reason: "PodsBound", Message: "1/1 pods bound", LastTransitionTime: scheduledAt.Format(time.RFC3339)},
			v1alpha1.Condition{Type: "Ready", Status: "True", Reason: "Available", Message: "1/1 replicas ready", LastTransitionTime: scheduledAt.Add(3 * time.Minute).Format(time.RFC3339)},
		).Obj()
	r.Metadata.Labels["app.kubernetes.io/part-of"] = "modelplane"
	r.Metadata.Labels["modelplane.ai/model"] = model
	r.Spec.ModelCacheRef = &v1alpha1.LocalRef{Name: model}
	r.Spec.Serving = &v1alpha1.Serving{Mode: "OpenAI"}
	return r
}

// cluster is a cluster of Pools pools of 8xH100 nodes, each pool freshly
// observed (30s before now) with a realistic spread of free GPUs.
func cluster(i int, now time.Time) *v1alpha1.InferenceCluster {
	pools := make([]v1alpha1.GPUPool, 0, Pools)
	for p := range Pools {
		pools = append(pools, fx.Pool(fmt.Sprintf("h100-%d", p), NodesPerPool+8).
			Devices(fx.GPU("gpu", 8, "80Gi"), fx.NIC(8)).
			Observed(now.Add(-30*time.Second), NodesPerPool,
				fx.NodesFree(10, "gpu", 8), fx.NodesFree(6, "gpu", 4), fx.NodesFree(5, "gpu", 2),
				fx.NodesFree(4, "gpu", 1), fx.NodesFree(7, "gpu", 0)).Obj())
	}
	c := fx.Cluster(fmt.Sprintf("cluster-%03d", i)).
		Hostname(fmt.Sprintf("gw.cluster-%03d.inference.example.com", i)).
		Labels(map[string]string{"region": fmt.Sprintf("region-%d", i%5), "modelplane.ai/fleet": "prod"}).
		Pools(pools...).Obj()
	// As the API server returns it, with a uid and a resourceVersion.
	c.Metadata.UID = fmt.Sprintf("00000000-0000-4000-9000-%012d", i)
	c.Metadata.ResourceVersion = strconv.Itoa(900_000 + i)
	return c
}

// Fleet is the benchmark fleet carrying n replicas of other deployments,
// ten replicas each spread over ten clusters; one in a hundred was
// scheduled after its pool's observation, and is charged. Its pools were
// observed 30s before Now.
func Fleet(n int) ([]*v1alpha1.InferenceCluster, []*v1alpha1.ModelReplica) {
	return FleetAt(n, Now)
}

// FleetAt is Fleet observed 30s before now, for a server that judges the
// observations by its own clock.
func FleetAt(n int, now time.Time) ([]*v1alpha1.InferenceCluster, []*v1alpha1.ModelReplica) {
	return FleetOf(n, now, 100)
}

// FleetOf is Fleet observed 30s before now, of which one replica in every
// uncountedEvery was scheduled after its pool's observation. Each replica
// is labelled counted or not, as the function labels what it composes.
func FleetOf(n int, now time.Time, uncountedEvery int) ([]*v1alpha1.InferenceCluster, []*v1alpha1.ModelReplica) {
	clusters := make([]*v1alpha1.InferenceCluster, Clusters)
	for i := range clusters {
		clusters[i] = cluster(i, now)
	}
	replicas := make([]*v1alpha1.ModelReplica, 0, n)
	for i := range n {
		d := i / 10
		c := (d*7 + i%10) % Clusters
		at := now.Add(-time.Duration(1+i%240) * time.Hour)
		counted := i%uncountedEvery != uncountedEvery-1
		if !counted {
			at = now.Add(-10 * time.Second)
		}
		gpus := []int64{1, 2, 4, 8}[d%4]
		r := replica(fmt.Sprintf("model-%05d", d), fmt.Sprintf("cluster-%03d", c), fmt.Sprintf("h100-%d", d%Pools), 0, gpus, at)
		r.Metadata.Namespace = fmt.Sprintf("team-%02d", d%7)
		r.Metadata.Labels[v1alpha1.LabelCounted] = strconv.FormatBool(counted)
		// As the API server returns it, with a uid and a resourceVersion.
		r.Metadata.UID = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		r.Metadata.ResourceVersion = strconv.Itoa(100_000 + i)
		replicas = append(replicas, r)
	}
	return clusters, replicas
}

// Deployment wants NewReplicas replicas of 4 GPUs, none placed yet.
func Deployment(name string) *v1alpha1.ModelDeployment {
	d := fx.Deployment(name).Replicas(NewReplicas).Serving("OpenAI").Cache("meta-llama-3-1-70b-instruct").
		Labels(map[string]string{"modelplane.ai/model": "meta-llama-3-1-70b-instruct"}).Obj()
	e := fx.Standalone("main", fx.GPURequest(4))
	e.Members[0].Template = vllmTemplate("meta-llama-3-1-70b-instruct", 4)
	d.Spec.Template.Spec.Engines = []v1alpha1.Engine{e}
	return d
}

// MustStruct is obj, as JSON, in a protobuf Struct; it panics on an object
// that does not encode, which only a broken fixture is.
func MustStruct(obj any) *structpb.Struct {
	b, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(b, s); err != nil {
		panic(err)
	}
	return s
}

// NarrowRequest is the RunFunctionRequest Crossplane sends once it resolved
// a narrow call's required resources: the deployment's own replicas, and
// every one labelled not counted.
func NarrowRequest(xr *v1alpha1.ModelDeployment, clusters []*v1alpha1.InferenceCluster, replicas []*v1alpha1.ModelReplica, input *structpb.Struct) *fnv1.RunFunctionRequest {
	req := Request(xr, clusters, nil, input)
	delete(req.GetRequiredResources(), fleet.RequiredReplicas)
	own, uncounted := &fnv1.Resources{}, &fnv1.Resources{}
	for _, r := range replicas {
		if r.Metadata.Namespace == xr.Metadata.Namespace && r.Metadata.Labels[v1alpha1.LabelDeployment] == xr.Metadata.Name {
			own.Items = append(own.Items, &fnv1.Resource{Resource: MustStruct(r)})
		}
		if r.Metadata.Labels[v1alpha1.LabelCounted] == "false" {
			uncounted.Items = append(uncounted.Items, &fnv1.Resource{Resource: MustStruct(r)})
		}
	}
	req.RequiredResources[fleet.RequiredOwnReplicas] = own
	req.RequiredResources[fleet.RequiredUncountedReplicas] = uncounted
	return req
}

// Request is the RunFunctionRequest Crossplane sends once it resolved the
// required resources.
func Request(xr *v1alpha1.ModelDeployment, clusters []*v1alpha1.InferenceCluster, replicas []*v1alpha1.ModelReplica, input *structpb.Struct) *fnv1.RunFunctionRequest {
	req := &fnv1.RunFunctionRequest{
		Meta:     &fnv1.RequestMeta{Tag: "bench"},
		Input:    input,
		Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: MustStruct(xr)}},
		RequiredResources: map[string]*fnv1.Resources{
			fleet.RequiredClusters: {}, fleet.RequiredReplicas: {},
		},
	}
	if xr.Spec.Template.Spec.ModelCacheRef != nil {
		req.RequiredResources[fleet.RequiredCache] = &fnv1.Resources{Items: []*fnv1.Resource{{Resource: MustStruct(&v1alpha1.ModelCache{
			TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindModelCache},
			Metadata: v1alpha1.ObjectMeta{Name: xr.Spec.Template.Spec.ModelCacheRef.Name, Namespace: xr.Metadata.Namespace},
		})}}}
	}
	for _, c := range clusters {
		req.RequiredResources[fleet.RequiredClusters].Items = append(req.RequiredResources[fleet.RequiredClusters].Items, &fnv1.Resource{Resource: MustStruct(c)})
	}
	for _, r := range replicas {
		req.RequiredResources[fleet.RequiredReplicas].Items = append(req.RequiredResources[fleet.RequiredReplicas].Items, &fnv1.Resource{Resource: MustStruct(r)})
	}
	return req
}
