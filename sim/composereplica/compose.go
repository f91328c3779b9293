// Package composereplica is what Modelplane v0.3.1's compose-model-replica
// function makes of a ModelReplica in its workload cluster, written in Go
// from its Python (functions/compose-model-replica/function/backends/base.py,
// native.py and llmd.py, and routing.py, in modelplaneai/modelplane at
// v0.3.1): a Deployment per Standalone engine, a LeaderWorkerSet per gang
// engine, a ResourceClaimTemplate per claiming member, and the replica's
// endpoint picker. Compose returns the manifests as v0.3 writes them; Pods
// returns the pods the workload controllers make of them.
//
// v0.3's pods request no cpu or memory: the engine container's resources
// name only its DRA claim, and the ModelDeployment XRD's curated pod template
// has no resources field, so an API server prunes any a user writes.
// Options.Sizing adds requests in proportion to a member's devices, which
// models Modelplane's open proposal to size them; it is off by default.
//
// The fleet simulator builds its pods here, and so does the live test's
// stand-in for compose-model-replica (which is Python and does not run
// there).
package composereplica

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// Names of what compose-model-replica composes.
const (
	// PodClaimName is the pod-level claim of a claiming member's pods.
	PodClaimName = "devices"
	// EnginePort is where an engine serves the OpenAI API.
	EnginePort = 8000
	// AvailableCEL is the readiness query of a workload's Object: its
	// Available condition True.
	AvailableCEL = `has(object.status.conditions) && object.status.conditions.exists(c, c.type == "Available" && c.status == "True")`
)

// Kinds of the workloads.
const (
	KindDeployment      = "Deployment"
	KindLeaderWorkerSet = "LeaderWorkerSet"
	// APIVersionLWS is LeaderWorkerSet's.
	APIVersionLWS = "leaderworkerset.x-k8s.io/v1"
)

// Resource is one object compose-model-replica composes for a replica, under
// the key of its response.
type Resource struct {
	Key string
	// Manifest is the object as v0.3 writes it into its provider-kubernetes
	// Object's spec.forProvider.manifest.
	Manifest map[string]any
	// ReadyCEL is the Object's readiness query (policy DeriveFromCelQuery);
	// empty means the policy SuccessfulCreate.
	ReadyCEL string
}

// Options change what is composed.
type Options struct {
	// Sizing, when set, gives the engine container of every claiming member
	// cpu and memory requests. Nil composes v0.3's pods, which request
	// neither.
	Sizing *Sizing
}

// Sizing is cpu and memory in proportion to a member's devices: Base, plus
// PerDevice for each device its pods claim (the sum of its requests'
// counts). It models Modelplane's open proposal to size a replica's pods;
// v0.3 does not.
type Sizing struct {
	BaseCPU, BaseMemory           resource.Quantity
	PerDeviceCPU, PerDeviceMemory resource.Quantity
}

// requests are the cpu and memory of a member claiming devices.
func (s *Sizing) requests(devices int64) map[string]any {
	cpu, mem := s.BaseCPU.DeepCopy(), s.BaseMemory.DeepCopy()
	for range devices {
		cpu.Add(s.PerDeviceCPU)
		mem.Add(s.PerDeviceMemory)
	}
	return map[string]any{"cpu": cpu.String(), "memory": mem.String()}
}

// ClaimTemplateName is the name of a member's ResourceClaimTemplate.
func ClaimTemplateName(replica, engine, role string) string {
	return v1alpha1.ChildName(replica, engine, strings.ToLower(role), PodClaimName)
}

// memberTemplate is the curated pod template of a member, as the
// ModelDeployment XRD allows it: labels, annotations, one engine container
// and image pull secrets. What else a template holds the API server prunes.
type memberTemplate struct {
	Metadata struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Containers       []container      `json:"containers"`
		ImagePullSecrets []map[string]any `json:"imagePullSecrets"`
	} `json:"spec"`
}

// container is the engine container of a member's template.
type container struct {
	Name    string           `json:"name"`
	Image   string           `json:"image"`
	Command []string         `json:"command"`
	Args    []string         `json:"args"`
	Env     []map[string]any `json:"env"`
}

// composer composes one replica.
type composer struct {
	replica *v1alpha1.ModelReplica
	opts    Options
}

// Compose returns what compose-model-replica v0.3.1 composes for a replica,
// in its order: each engine's workload, then its claiming members'
// ResourceClaimTemplates, then the endpoint picker's Deployment. The
// picker's ServiceAccount, RBAC, ConfigMap and Service, the InferencePool
// and the HTTPRoute hold no pod and are left out, as is the checksum of
// its configuration on its pod template. A replica it cannot compose (no
// engine container, a template that is not JSON) is an error naming the
// engine and member.
func Compose(r *v1alpha1.ModelReplica, opts Options) ([]Resource, error) {
	c := composer{replica: r, opts: opts}
	var out []Resource
	for _, e := range r.Spec.Engines {
		var rs []Resource
		var err error
		if e.Gang() {
			rs, err = c.gang(e)
		} else {
			rs, err = c.standalone(e)
		}
		if err != nil {
			return nil, fmt.Errorf("cannot compose ModelReplica %s/%s: engine %s: %w", r.Metadata.Namespace, r.Metadata.Name, e.Name, err)
		}
		out = append(out, rs...)
	}
	if r.Spec.Serving != nil && r.Spec.Serving.Mode == "PrefillDecode" {
		if err := disaggregate(out, r); err != nil {
			return nil, fmt.Errorf("cannot compose ModelReplica %s/%s: %w", r.Metadata.Namespace, r.Metadata.Name, err)
		}
	}
	return append(out, endpointPicker(r.Metadata.Name)), nil
}

// WorkloadKey is the response key of an engine's workload.
func WorkloadKey(engine string) string { return "model-serving-" + engine }

// ClaimKey is the response key of a member's ResourceClaimTemplate.
func ClaimKey(engine, role string) string {
	return "resource-claim-" + engine + "-" + strings.ToLower(role)
}

// EndpointPickerKey is the response key of the endpoint picker's
// Deployment.
const EndpointPickerKey = "epp"

func member(e v1alpha1.ReplicaEngine, role string) (v1alpha1.ReplicaMember, bool) {
	for _, m := range e.Members {
		if roleOf(m) == role {
			return m, true
		}
	}
	return v1alpha1.ReplicaMember{}, false
}

func roleOf(m v1alpha1.ReplicaMember) string {
	if m.Role == "" {
		return v1alpha1.RoleStandalone
	}
	return m.Role
}

func copiesOf(e v1alpha1.ReplicaEngine) int64 {
	if e.Copies == nil || *e.Copies == 0 {
		return 1
	}
	return *e.Copies
}

// template reads a member's template and its engine container.
func template(m v1alpha1.ReplicaMember) (memberTemplate, container, error) {
	var t memberTemplate
	if len(m.Template) > 0 {
		if err := json.Unmarshal(m.Template, &t); err != nil {
			return t, container{}, fmt.Errorf("member %s: template: %w", roleOf(m), err)
		}
	}
	for _, c := range t.Spec.Containers {
		if c.Name == "engine" {
			return t, c, nil
		}
	}
	return t, container{}, fmt.Errorf("member %s: template: no container named engine", roleOf(m))
}

// podMetadata is a member's template metadata with the managed labels
// merged over its labels (base.pod_metadata); nil when there is nothing.
func podMetadata(t memberTemplate, managed map[string]string) map[string]any {
	labels := map[string]any{}
	for k, v := range t.Metadata.Labels {
		labels[k] = v
	}
	for k, v := range managed {
		labels[k] = v
	}
	meta := map[string]any{}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	if len(t.Metadata.Annotations) > 0 {
		ann := map[string]any{}
		for k, v := range t.Metadata.Annotations {
			ann[k] = v
		}
		meta["annotations"] = ann
	}
	return meta
}

// cacheMounts are the replica's model cache volume and mount, if it has a
// cache (base.cache_mounts).
func (c composer) cacheMounts() (volumes, mounts []any) {
	ref := c.replica.Spec.ModelCacheRef
	if ref == nil || ref.Name == "" {
		return nil, nil
	}
	pvc := v1alpha1.ChildName("modelcache", c.replica.Metadata.Namespace, ref.Name)
	return []any{map[string]any{"name": "model-cache", "persistentVolumeClaim": map[string]any{"claimName": pvc}}},
		[]any{map[string]any{"name": "model-cache", "mountPath": "/mnt/models"}}
}

// cacheArgs adds --model for the cache's mount to a vLLM engine's args
// (base.apply_cache_args): not when there is no cache, the engine brings
// its own command, or the args set --model already.
func (c composer) cacheArgs(args []string, ctr container) []string {
	if c.replica.Spec.ModelCacheRef == nil || len(ctr.Command) > 0 {
		return args
	}
	for _, a := range args {
		if a == "--model" || strings.HasPrefix(a, "--model=") {
			return args
		}
	}
	return append(args, "--model=/mnt/models")
}

// resources are a claiming member's engine container's resources: the
// pod-level claim, and with a sizing its requests.
func (c composer) resources(m v1alpha1.ReplicaMember) map[string]any {
	res := map[string]any{"claims": []any{map[string]any{"name": PodClaimName}}}
	if c.opts.Sizing != nil {
		var devices int64
		for _, r := range m.DeviceRequests {
			devices += max(r.Count, 1)
		}
		res["requests"] = c.opts.Sizing.requests(devices)
	}
	return res
}

func readinessProbe(port int) map[string]any {
	return map[string]any{
		"httpGet":             map[string]any{"path": "/health", "port": int64(port)},
		"initialDelaySeconds": int64(30),
		"periodSeconds":       int64(10),
		"timeoutSeconds":      int64(5),
	}
}

func strings2any(ss []string) []any {
	out := make([]any, 0, len(ss))
	for _, s := range ss {
		out = append(out, s)
	}
	return out
}

func maps2any(ms []map[string]any) []any {
	out := make([]any, 0, len(ms))
	for _, m := range ms {
		out = append(out, m)
	}
	return out
}

// placePod pins a member's pod to its pool, claims its devices through its
// template, and tolerates the GPU taint (base.place_pod).
func (c composer) placePod(spec map[string]any, e v1alpha1.ReplicaEngine, m v1alpha1.ReplicaMember) {
	spec["nodeSelector"] = map[string]any{v1alpha1.LabelPool: m.NodePoolName}
	if len(m.DeviceRequests) > 0 {
		spec["resourceClaims"] = []any{map[string]any{
			"name": PodClaimName, "resourceClaimTemplateName": ClaimTemplateName(c.replica.Metadata.Name, e.Name, roleOf(m)),
		}}
	}
	tolerations, _ := spec["tolerations"].([]any)
	spec["tolerations"] = append(tolerations, map[string]any{"key": v1alpha1.GPUTaintKey, "operator": "Exists", "effect": "NoSchedule"})
}

// podSpec is a member's pod spec around its container.
func (c composer) podSpec(e v1alpha1.ReplicaEngine, m v1alpha1.ReplicaMember, t memberTemplate, ctr map[string]any) map[string]any {
	cacheVolumes, _ := c.cacheMounts()
	spec := map[string]any{
		"containers": []any{ctr},
		"volumes":    append([]any{map[string]any{"name": "dshm", "emptyDir": map[string]any{"medium": "Memory"}}}, cacheVolumes...),
	}
	c.placePod(spec, e, m)
	if len(t.Spec.ImagePullSecrets) > 0 {
		spec["imagePullSecrets"] = maps2any(t.Spec.ImagePullSecrets)
	}
	return spec
}

// standalone is native.py: a Deployment of the engine's copies and the
// member's ResourceClaimTemplate.
func (c composer) standalone(e v1alpha1.ReplicaEngine) ([]Resource, error) {
	m, _ := member(e, v1alpha1.RoleStandalone)
	t, ctr, err := template(m)
	if err != nil {
		return nil, err
	}
	name := v1alpha1.WorkloadName(c.replica.Metadata.Name, e.Name)
	_, cacheMounts := c.cacheMounts()
	container := map[string]any{
		"name":           "engine",
		"image":          ctr.Image,
		"args":           strings2any(c.cacheArgs(ctr.Args, ctr)),
		"ports":          []any{map[string]any{"containerPort": int64(EnginePort)}},
		"volumeMounts":   append([]any{map[string]any{"name": "dshm", "mountPath": "/dev/shm"}}, cacheMounts...),
		"readinessProbe": readinessProbe(EnginePort),
	}
	if len(m.DeviceRequests) > 0 {
		container["resources"] = c.resources(m)
	}
	if len(ctr.Command) > 0 {
		container["command"] = strings2any(ctr.Command)
	}
	if len(ctr.Env) > 0 {
		container["env"] = maps2any(ctr.Env)
	}
	deployment := map[string]any{
		"apiVersion": "apps/v1",
		"kind":       KindDeployment,
		"metadata":   map[string]any{"name": name, "namespace": v1alpha1.WorkloadNamespace},
		"spec": map[string]any{
			"replicas": copiesOf(e),
			"selector": map[string]any{"matchLabels": map[string]any{v1alpha1.LabelWorkload: name}},
			"template": map[string]any{
				"metadata": podMetadata(t, map[string]string{v1alpha1.LabelServing: c.replica.Metadata.Name, v1alpha1.LabelWorkload: name}),
				"spec":     c.podSpec(e, m, t, container),
			},
		},
	}
	out := []Resource{{Key: WorkloadKey(e.Name), Manifest: deployment, ReadyCEL: AvailableCEL}}
	if len(m.DeviceRequests) > 0 {
		out = append(out, c.claimTemplate(e, m))
	}
	return out, nil
}

// gang is llmd.py: a LeaderWorkerSet of the engine's copies, each a leader
// and worker.nodes workers, and a ResourceClaimTemplate per claiming
// member.
func (c composer) gang(e v1alpha1.ReplicaEngine) ([]Resource, error) {
	leader, okL := member(e, v1alpha1.RoleLeader)
	worker, okW := member(e, v1alpha1.RoleWorker)
	if !okL || !okW {
		return nil, fmt.Errorf("a gang engine needs a Leader and a Worker member")
	}
	name := v1alpha1.WorkloadName(c.replica.Metadata.Name, e.Name)
	size := int64(2)
	if worker.Worker != nil {
		size = 1 + worker.Worker.Nodes
	}
	lt, lctr, err := template(leader)
	if err != nil {
		return nil, err
	}
	wt, wctr, err := template(worker)
	if err != nil {
		return nil, err
	}
	leaderPod := map[string]any{
		"metadata": podMetadata(lt, map[string]string{v1alpha1.LabelServing: c.replica.Metadata.Name, v1alpha1.LabelLWSRole: "leader"}),
		"spec":     c.podSpec(e, leader, lt, c.gangContainer(leader, lctr, true)),
	}
	workerPod := map[string]any{"spec": c.podSpec(e, worker, wt, c.gangContainer(worker, wctr, false))}
	if meta := podMetadata(wt, nil); len(meta) > 0 {
		workerPod["metadata"] = meta
	}
	lws := map[string]any{
		"apiVersion": APIVersionLWS,
		"kind":       KindLeaderWorkerSet,
		"metadata":   map[string]any{"name": name, "namespace": v1alpha1.WorkloadNamespace},
		"spec": map[string]any{
			"replicas": copiesOf(e),
			"leaderWorkerTemplate": map[string]any{
				"size":           size,
				"leaderTemplate": leaderPod,
				"workerTemplate": workerPod,
			},
		},
	}
	out := []Resource{{Key: WorkloadKey(e.Name), Manifest: lws, ReadyCEL: AvailableCEL}}
	for _, m := range []v1alpha1.ReplicaMember{leader, worker} {
		if len(m.DeviceRequests) > 0 {
			out = append(out, c.claimTemplate(e, m))
		}
	}
	return out, nil
}

// gangContainer is a gang member's engine container; the leader's serves.
func (c composer) gangContainer(m v1alpha1.ReplicaMember, ctr container, serving bool) map[string]any {
	args := ctr.Args
	if serving {
		args = c.cacheArgs(args, ctr)
	}
	_, cacheMounts := c.cacheMounts()
	out := map[string]any{
		"name":         "engine",
		"image":        ctr.Image,
		"volumeMounts": append([]any{map[string]any{"name": "dshm", "mountPath": "/dev/shm"}}, cacheMounts...),
	}
	if len(m.DeviceRequests) > 0 {
		out["resources"] = c.resources(m)
	}
	if len(ctr.Command) > 0 {
		out["command"] = strings2any(ctr.Command)
	}
	if len(args) > 0 {
		out["args"] = strings2any(args)
	}
	env := make([]any, 0, 2+len(ctr.Env))
	env = append(env,
		map[string]any{"name": "MODELPLANE_LEADER_ADDRESS", "value": "$(LWS_LEADER_ADDRESS)"},
		map[string]any{"name": "MODELPLANE_RANK", "value": "$(LWS_WORKER_INDEX)"},
	)
	out["env"] = append(env, maps2any(ctr.Env)...)
	if serving {
		out["ports"] = []any{map[string]any{"containerPort": int64(EnginePort)}}
		out["readinessProbe"] = readinessProbe(EnginePort)
	}
	return out
}

// claimTemplate is a member's ResourceClaimTemplate: one DRA request per
// resolved device request (base.resource_claim_template).
func (c composer) claimTemplate(e v1alpha1.ReplicaEngine, m v1alpha1.ReplicaMember) Resource {
	requests := make([]any, 0, len(m.DeviceRequests))
	for _, r := range m.DeviceRequests {
		exactly := map[string]any{"deviceClassName": r.DeviceClassName, "count": max(r.Count, 1)}
		var selectors []any
		for _, s := range r.Selectors {
			if s.CEL != "" {
				selectors = append(selectors, map[string]any{"cel": map[string]any{"expression": s.CEL}})
			}
		}
		if len(selectors) > 0 {
			exactly["selectors"] = selectors
		}
		requests = append(requests, map[string]any{"name": r.Name, "exactly": exactly})
	}
	return Resource{Key: ClaimKey(e.Name, roleOf(m)), Manifest: map[string]any{
		"apiVersion": "resource.k8s.io/v1",
		"kind":       "ResourceClaimTemplate",
		"metadata":   map[string]any{"name": ClaimTemplateName(c.replica.Metadata.Name, e.Name, roleOf(m)), "namespace": v1alpha1.WorkloadNamespace},
		"spec":       map[string]any{"spec": map[string]any{"devices": map[string]any{"requests": requests}}},
	}}
}

// EndpointPickerImage is the image of v0.3's endpoint picker.
const EndpointPickerImage = "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.9.0"

// endpointPicker is the replica's endpoint picker's Deployment
// (routing._epp_objects): one pod, with no node selector, toleration or
// requests. It does not tolerate the GPU taint, so it runs on a node
// outside the GPU pools.
func endpointPicker(replica string) Resource {
	epp := replica + "-epp"
	return Resource{Key: EndpointPickerKey, ReadyCEL: AvailableCEL, Manifest: map[string]any{
		"apiVersion": "apps/v1",
		"kind":       KindDeployment,
		"metadata":   map[string]any{"name": epp, "namespace": v1alpha1.WorkloadNamespace},
		"spec": map[string]any{
			"replicas": int64(1),
			"selector": map[string]any{"matchLabels": map[string]any{"app": epp}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": epp}},
				"spec": map[string]any{
					"serviceAccountName": epp,
					"containers": []any{map[string]any{
						"name":  "epp",
						"image": EndpointPickerImage,
						"args": []any{
							"--pool-name=" + replica + "-pool", "--pool-namespace=" + v1alpha1.WorkloadNamespace,
							"--pool-group=inference.networking.k8s.io", "--config-file=/config/epp-config.yaml", "--grpc-port=9002",
						},
						"ports": []any{
							map[string]any{"name": "grpc", "containerPort": int64(9002)},
							map[string]any{"name": "grpc-health", "containerPort": int64(9003)},
						},
						"volumeMounts": []any{map[string]any{"name": "config", "mountPath": "/config"}},
					}},
					"volumes": []any{map[string]any{"name": "config", "configMap": map[string]any{"name": epp}}},
				},
			},
		},
	}}
}
