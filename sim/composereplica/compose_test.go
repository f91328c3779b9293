package composereplica

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

func TestChildName(t *testing.T) {
	long := strings.Repeat("a", 60)
	cases := map[string]struct {
		reason string
		parts  []string
		want   string
	}{
		"Short": {
			reason: "compose-serving-stack's tests precompute this value with the Python SDK's child_name",
			parts:  []string{"test-backend", "cluster"},
			want:   "test-backend-cluster-63fde",
		},
		"Long": {
			reason: "the join is cut to 57 characters; the hash is of the whole join",
			parts:  []string{long, "main"},
			want:   strings.Repeat("a", 57) + "-" + sha5(long+"-main"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := v1alpha1.ChildName(tc.parts...)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nChildName(%q): -want, +got:\n%s", tc.reason, tc.parts, diff)
			}
			if len(got) > 63 {
				t.Errorf("v1alpha1.ChildName(%q) = %q is %d characters, more than a DNS label", tc.parts, got, len(got))
			}
		})
	}
}

// sha5 is written apart from ChildName: the first 5 hex of the SHA-256.
func sha5(s string) string {
	if s == strings.Repeat("a", 60)+"-main" {
		return "8bf5d"
	}
	return "?"
}

// replica is qwen's replica with engines; its name is short, so that
// child names read.
func replica(engines ...v1alpha1.ReplicaEngine) *fixture.ReplicaWrapper {
	return fixture.Replica("qwen", "eks", 0).Name("qwen-1a2b3").Namespace("ml-team").Engines(engines...)
}

func withTemplate(e v1alpha1.ReplicaEngine, tmpl string) v1alpha1.ReplicaEngine {
	for i := range e.Members {
		e.Members[i].Template = json.RawMessage(tmpl)
	}
	return e
}

// yamlOf reads YAML as decoded JSON, to compare with manifests.
func yamlOf(t *testing.T, s string) []any {
	t.Helper()
	var v []any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// asJSON is v as decoded JSON: numbers float64, as yamlOf reads them.
func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// composed is what Compose returned, as decoded JSON: a key, its
// manifest and its readiness query each.
func composed(t *testing.T, rs []Resource) []any {
	t.Helper()
	out := make([]any, 0, len(rs))
	for _, r := range rs {
		out = append(out, map[string]any{"key": r.Key, "readyCEL": r.ReadyCEL, "manifest": r.Manifest})
	}
	return asJSON(t, out).([]any)
}

// eppOf is the endpoint picker of replica qwen-1a2b3, as YAML.
const eppOf = `
- key: epp
  readyCEL: has(object.status.conditions) && object.status.conditions.exists(c, c.type == "Available" && c.status == "True")
  manifest:
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: qwen-1a2b3-epp, namespace: default}
    spec:
      replicas: 1
      selector: {matchLabels: {app: qwen-1a2b3-epp}}
      template:
        metadata: {labels: {app: qwen-1a2b3-epp}}
        spec:
          serviceAccountName: qwen-1a2b3-epp
          containers:
          - name: epp
            image: ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.9.0
            args: [--pool-name=qwen-1a2b3-pool, --pool-namespace=default, --pool-group=inference.networking.k8s.io, --config-file=/config/epp-config.yaml, --grpc-port=9002]
            ports: [{name: grpc, containerPort: 9002}, {name: grpc-health, containerPort: 9003}]
            volumeMounts: [{name: config, mountPath: /config}]
          volumes: [{name: config, configMap: {name: qwen-1a2b3-epp}}]
`

func TestCompose(t *testing.T) {
	// The child names of qwen-1a2b3's engine main, its member's template
	// and the cache's claim, computed with `printf %s | sha256sum`.
	const (
		mainName   = "qwen-1a2b3-main-1d4fc"
		mainClaim  = "qwen-1a2b3-main-standalone-devices-614ea"
		leaderTmpl = "qwen-1a2b3-main-leader-devices-b6d93"
		workerTmpl = "qwen-1a2b3-main-worker-devices-dc662"
		cachePVC   = "modelcache-ml-team-weights-124df"
	)
	cpu2 := resource.MustParse
	type args struct {
		replica *v1alpha1.ModelReplica
		opts    Options
	}
	cases := map[string]struct {
		reason string
		args   args
		want   string // YAML
	}{
		"StandaloneOneGPU": {
			reason: "native.py: a Deployment pinned to its pool, tolerating the GPU taint, claiming through its template, with /dev/shm and no cpu or memory request; its template; the picker",
			args:   args{replica: replica(fixture.PinnedStandalone("main", "l4", fixture.Stamped(1))).Obj()},
			want: `
- key: model-serving-main
  readyCEL: has(object.status.conditions) && object.status.conditions.exists(c, c.type == "Available" && c.status == "True")
  manifest:
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: ` + mainName + `, namespace: default}
    spec:
      replicas: 1
      selector: {matchLabels: {modelplane.ai/workload: ` + mainName + `}}
      template:
        metadata:
          labels: {modelplane.ai/serving: qwen-1a2b3, modelplane.ai/workload: ` + mainName + `}
        spec:
          containers:
          - name: engine
            image: vllm/vllm-openai:v0.11.0
            args: []
            ports: [{containerPort: 8000}]
            volumeMounts: [{name: dshm, mountPath: /dev/shm}]
            readinessProbe: {httpGet: {path: /health, port: 8000}, initialDelaySeconds: 30, periodSeconds: 10, timeoutSeconds: 5}
            resources: {claims: [{name: devices}]}
          volumes: [{name: dshm, emptyDir: {medium: Memory}}]
          nodeSelector: {modelplane.ai/pool: l4}
          resourceClaims: [{name: devices, resourceClaimTemplateName: ` + mainClaim + `}]
          tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
- key: resource-claim-main-standalone
  readyCEL: ""
  manifest:
    apiVersion: resource.k8s.io/v1
    kind: ResourceClaimTemplate
    metadata: {name: ` + mainClaim + `, namespace: default}
    spec:
      # a ResourceClaimTemplate's spec holds a claim's spec
      spec:
        devices:
          requests:
          - name: gpu
            exactly:
              deviceClassName: gpu.nvidia.com
              count: 1
              selectors: [{cel: {expression: 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'}}]
` + eppOf,
		},
		"StandaloneSized": {
			reason: "the open proposal's sizing: base plus per device, on the engine container beside its claim",
			args: args{
				replica: replica(fixture.PinnedStandalone("main", "l4", fixture.Stamped(2))).Obj(),
				opts:    Options{Sizing: &Sizing{BaseCPU: cpu2("2"), BaseMemory: cpu2("8Gi"), PerDeviceCPU: cpu2("2"), PerDeviceMemory: cpu2("24Gi")}},
			},
			want: `
- key: model-serving-main
  readyCEL: has(object.status.conditions) && object.status.conditions.exists(c, c.type == "Available" && c.status == "True")
  manifest:
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: ` + mainName + `, namespace: default}
    spec:
      replicas: 1
      selector: {matchLabels: {modelplane.ai/workload: ` + mainName + `}}
      template:
        metadata:
          labels: {modelplane.ai/serving: qwen-1a2b3, modelplane.ai/workload: ` + mainName + `}
        spec:
          containers:
          - name: engine
            image: vllm/vllm-openai:v0.11.0
            args: []
            ports: [{containerPort: 8000}]
            volumeMounts: [{name: dshm, mountPath: /dev/shm}]
            readinessProbe: {httpGet: {path: /health, port: 8000}, initialDelaySeconds: 30, periodSeconds: 10, timeoutSeconds: 5}
            resources: {claims: [{name: devices}], requests: {cpu: "6", memory: 56Gi}}
          volumes: [{name: dshm, emptyDir: {medium: Memory}}]
          nodeSelector: {modelplane.ai/pool: l4}
          resourceClaims: [{name: devices, resourceClaimTemplateName: ` + mainClaim + `}]
          tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
- key: resource-claim-main-standalone
  readyCEL: ""
  manifest:
    apiVersion: resource.k8s.io/v1
    kind: ResourceClaimTemplate
    metadata: {name: ` + mainClaim + `, namespace: default}
    spec:
      # a ResourceClaimTemplate's spec holds a claim's spec
      spec:
        devices:
          requests:
          - name: gpu
            exactly:
              deviceClassName: gpu.nvidia.com
              count: 2
              selectors: [{cel: {expression: 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'}}]
` + eppOf,
		},
		"StandaloneTemplateAndCache": {
			reason: "the member's labels and annotations under the managed labels, its command, env and pull secrets; a cache mounts its PVC and adds --model only without a command; a template's resources are not read (the XRD prunes them)",
			args: args{replica: func() *v1alpha1.ModelReplica {
				r := replica(withTemplate(fixture.PinnedStandalone("main", "l4", fixture.Stamped(1)), `{
					"metadata": {"labels": {"team": "a"}, "annotations": {"note": "b"}},
					"spec": {"containers": [{"name": "engine", "image": "img", "command": ["python3"], "args": ["-m", "x"],
						"env": [{"name": "A", "value": "1"}], "resources": {"requests": {"cpu": "99"}}}],
						"imagePullSecrets": [{"name": "pull"}]}}`)).Obj()
				r.Spec.ModelCacheRef = &v1alpha1.LocalRef{Name: "weights"}
				return r
			}()},
			want: `
- key: model-serving-main
  readyCEL: has(object.status.conditions) && object.status.conditions.exists(c, c.type == "Available" && c.status == "True")
  manifest:
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: ` + mainName + `, namespace: default}
    spec:
      replicas: 1
      selector: {matchLabels: {modelplane.ai/workload: ` + mainName + `}}
      template:
        metadata:
          labels: {team: a, modelplane.ai/serving: qwen-1a2b3, modelplane.ai/workload: ` + mainName + `}
          annotations: {note: b}
        spec:
          containers:
          - name: engine
            image: img
            command: [python3]
            args: ["-m", "x"]
            env: [{name: A, value: "1"}]
            ports: [{containerPort: 8000}]
            volumeMounts: [{name: dshm, mountPath: /dev/shm}, {name: model-cache, mountPath: /mnt/models}]
            readinessProbe: {httpGet: {path: /health, port: 8000}, initialDelaySeconds: 30, periodSeconds: 10, timeoutSeconds: 5}
            resources: {claims: [{name: devices}]}
          volumes: [{name: dshm, emptyDir: {medium: Memory}}, {name: model-cache, persistentVolumeClaim: {claimName: ` + cachePVC + `}}]
          nodeSelector: {modelplane.ai/pool: l4}
          resourceClaims: [{name: devices, resourceClaimTemplateName: ` + mainClaim + `}]
          tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
          imagePullSecrets: [{name: pull}]
- key: resource-claim-main-standalone
  readyCEL: ""
  manifest:
    apiVersion: resource.k8s.io/v1
    kind: ResourceClaimTemplate
    metadata: {name: ` + mainClaim + `, namespace: default}
    spec:
      # a ResourceClaimTemplate's spec holds a claim's spec
      spec:
        devices:
          requests:
          - name: gpu
            exactly:
              deviceClassName: gpu.nvidia.com
              count: 1
              selectors: [{cel: {expression: 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'}}]
` + eppOf,
		},
		"Gang": {
			reason: "llmd.py: a LeaderWorkerSet of size 1 + worker.nodes; the leader serves and carries the serving and role labels; the workers carry none of v0.3's; the gang env first; a template per claiming member",
			args:   args{replica: replica(fixture.PinnedGang("main", "h100", 2, fixture.Stamped(8))).Obj()},
			want: `
- key: model-serving-main
  readyCEL: has(object.status.conditions) && object.status.conditions.exists(c, c.type == "Available" && c.status == "True")
  manifest:
    apiVersion: leaderworkerset.x-k8s.io/v1
    kind: LeaderWorkerSet
    metadata: {name: ` + mainName + `, namespace: default}
    spec:
      replicas: 1
      leaderWorkerTemplate:
        size: 3
        leaderTemplate:
          metadata:
            labels: {modelplane.ai/serving: qwen-1a2b3, modelplane.ai/lws-role: leader}
          spec:
            containers:
            - name: engine
              image: vllm/vllm-openai:v0.11.0
              volumeMounts: [{name: dshm, mountPath: /dev/shm}]
              resources: {claims: [{name: devices}]}
              env: [{name: MODELPLANE_LEADER_ADDRESS, value: $(LWS_LEADER_ADDRESS)}, {name: MODELPLANE_RANK, value: $(LWS_WORKER_INDEX)}]
              ports: [{containerPort: 8000}]
              readinessProbe: {httpGet: {path: /health, port: 8000}, initialDelaySeconds: 30, periodSeconds: 10, timeoutSeconds: 5}
            volumes: [{name: dshm, emptyDir: {medium: Memory}}]
            nodeSelector: {modelplane.ai/pool: h100}
            resourceClaims: [{name: devices, resourceClaimTemplateName: ` + leaderTmpl + `}]
            tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
        workerTemplate:
          spec:
            containers:
            - name: engine
              image: vllm/vllm-openai:v0.11.0
              volumeMounts: [{name: dshm, mountPath: /dev/shm}]
              resources: {claims: [{name: devices}]}
              env: [{name: MODELPLANE_LEADER_ADDRESS, value: $(LWS_LEADER_ADDRESS)}, {name: MODELPLANE_RANK, value: $(LWS_WORKER_INDEX)}]
            volumes: [{name: dshm, emptyDir: {medium: Memory}}]
            nodeSelector: {modelplane.ai/pool: h100}
            resourceClaims: [{name: devices, resourceClaimTemplateName: ` + workerTmpl + `}]
            tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
- key: resource-claim-main-leader
  readyCEL: ""
  manifest:
    apiVersion: resource.k8s.io/v1
    kind: ResourceClaimTemplate
    metadata: {name: ` + leaderTmpl + `, namespace: default}
    spec: {spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: 8, selectors: [{cel: {expression: 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'}}]}}]}}}
- key: resource-claim-main-worker
  readyCEL: ""
  manifest:
    apiVersion: resource.k8s.io/v1
    kind: ResourceClaimTemplate
    metadata: {name: ` + workerTmpl + `, namespace: default}
    spec: {spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: 8, selectors: [{cel: {expression: 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'}}]}}]}}}
` + eppOf,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Compose(tc.args.replica, tc.args.opts)
			if err != nil {
				t.Fatalf("Compose: %v", err)
			}
			if diff := cmp.Diff(yamlOf(t, tc.want), composed(t, got)); diff != "" {
				t.Errorf("%s\nCompose(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestComposePrefillDecode(t *testing.T) {
	prefill := fixture.PinnedStandalone("prefill", "h100", fixture.Stamped(4))
	prefill.Phase = "Prefill"
	decode := withTemplate(fixture.PinnedStandalone("decode", "h100", fixture.Stamped(4)),
		`{"spec":{"containers":[{"name":"engine","image":"img","args":["--port","8100"]}]}}`)
	decode.Phase = "Decode"
	r := replica(prefill, decode).Obj()
	r.Spec.Serving = &v1alpha1.Serving{Mode: "PrefillDecode"}
	got, err := Compose(r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]any{}
	for _, c := range composed(t, got) {
		m := c.(map[string]any)
		if m["key"] == "model-serving-prefill" || m["key"] == "model-serving-decode" {
			pods[m["key"].(string)] = m["manifest"].(map[string]any)["spec"].(map[string]any)["template"]
		}
	}
	want := yamlOf(t, `
- metadata:
    labels: {modelplane.ai/serving: qwen-1a2b3, modelplane.ai/workload: qwen-1a2b3-prefill-d3ae0, llm-d.ai/role: prefill, llm-d.ai/inference-serving: "true", app: qwen-1a2b3}
  spec:
    containers:
    - name: engine
      image: vllm/vllm-openai:v0.11.0
      args: []
      ports: [{containerPort: 8000}]
      volumeMounts: [{name: dshm, mountPath: /dev/shm}]
      readinessProbe: {httpGet: {path: /health, port: 8000}, initialDelaySeconds: 30, periodSeconds: 10, timeoutSeconds: 5}
      resources: {claims: [{name: devices}]}
      env: [{name: VLLM_NIXL_SIDE_CHANNEL_HOST, valueFrom: {fieldRef: {fieldPath: status.podIP}}}, {name: VLLM_NIXL_SIDE_CHANNEL_PORT, value: "5557"}]
    volumes: [{name: dshm, emptyDir: {medium: Memory}}, {name: nixl-shm, emptyDir: {medium: Memory}}]
    nodeSelector: {modelplane.ai/pool: h100}
    resourceClaims: [{name: devices, resourceClaimTemplateName: qwen-1a2b3-prefill-standalone-devices-ff7dd}]
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
- metadata:
    labels: {modelplane.ai/serving: qwen-1a2b3, modelplane.ai/workload: qwen-1a2b3-decode-f6ab9, llm-d.ai/role: decode, llm-d.ai/inference-serving: "true", app: qwen-1a2b3}
  spec:
    containers:
    - name: engine
      image: img
      args: ["--port", "8100"]
      ports: [{containerPort: 8100}]
      volumeMounts: [{name: dshm, mountPath: /dev/shm}]
      readinessProbe: {httpGet: {path: /health, port: 8100}, initialDelaySeconds: 30, periodSeconds: 10, timeoutSeconds: 5}
      resources: {claims: [{name: devices}]}
      env: [{name: VLLM_NIXL_SIDE_CHANNEL_HOST, valueFrom: {fieldRef: {fieldPath: status.podIP}}}, {name: VLLM_NIXL_SIDE_CHANNEL_PORT, value: "5557"}]
    - name: pd-sidecar
      image: ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.9.0
      args: [--secure-proxy=false, --kv-connector=nixlv2, --vllm-port=8100]
      ports: [{containerPort: 8000}]
      readinessProbe: {httpGet: {path: /health, port: 8000}, initialDelaySeconds: 30, periodSeconds: 10, timeoutSeconds: 5}
    volumes: [{name: dshm, emptyDir: {medium: Memory}}, {name: nixl-shm, emptyDir: {medium: Memory}}]
    nodeSelector: {modelplane.ai/pool: h100}
    resourceClaims: [{name: devices, resourceClaimTemplateName: qwen-1a2b3-decode-standalone-devices-f6d77}]
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
`)
	if diff := cmp.Diff(want, []any{pods["model-serving-prefill"], pods["model-serving-decode"]}); diff != "" {
		t.Errorf("routing._disaggregated: the prefill and decode pod templates: -want, +got:\n%s", diff)
	}
}

func TestComposeErrors(t *testing.T) {
	cases := map[string]struct {
		reason  string
		replica *v1alpha1.ModelReplica
		want    string
	}{
		"NoEngineContainer": {
			reason:  "the XRD requires one container named engine",
			replica: replica(withTemplate(fixture.PinnedStandalone("main", "l4", fixture.Stamped(1)), `{"spec":{"containers":[{"name":"x","image":"i"}]}}`)).Obj(),
			want:    "cannot compose ModelReplica ml-team/qwen-1a2b3: engine main: member Standalone: template: no container named engine",
		},
		"TemplateNotJSON": {
			reason:  "a template that does not decode names the member",
			replica: replica(withTemplate(fixture.PinnedStandalone("main", "l4", fixture.Stamped(1)), `{"spec":`)).Obj(),
			want:    "cannot compose ModelReplica ml-team/qwen-1a2b3: engine main: member Standalone: template: unexpected end of JSON input",
		},
		"GangWithoutWorker": {
			reason: "a gang needs both members",
			replica: replica(v1alpha1.ReplicaEngine{Name: "main", Members: []v1alpha1.ReplicaMember{
				{Role: v1alpha1.RoleLeader, NodePoolName: "h100", Template: fixture.PodTemplate()},
			}}).Obj(),
			want: "cannot compose ModelReplica ml-team/qwen-1a2b3: engine main: a gang engine needs a Leader and a Worker member",
		},
		"PrefillDecodeWithoutDecode": {
			reason: "PrefillDecode names both phases",
			replica: func() *v1alpha1.ModelReplica {
				r := replica(fixture.PinnedStandalone("main", "l4", fixture.Stamped(1))).Obj()
				r.Spec.Serving = &v1alpha1.Serving{Mode: "PrefillDecode"}
				return r
			}(),
			want: "cannot compose ModelReplica ml-team/qwen-1a2b3: serving mode PrefillDecode needs an engine of phase Prefill and one of phase Decode",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Compose(tc.replica, Options{})
			got := ""
			if err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nCompose(...) error: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
