package fleet

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/relay"
	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

const (
	agentAPIVersion = "agent.modelplane.ai/v1alpha1"
	agentNamespace  = "modelplane-cluster-agent"
	gpuDriver       = "gpu.nvidia.com"
	poolLabel       = "modelplane.ai/pool"
	clusterLabel    = "fleet.test/cluster"
)

// workloadSpec is a workload cluster: its pools, and its kube-scheduler's
// profile.
type workloadSpec struct {
	name string
	// mostAllocated runs kube-scheduler with NodeResourcesFit scoring
	// MostAllocated; otherwise its default profile (LeastAllocated).
	mostAllocated bool
	pools         []poolSpec
	// steer names the pools its InferenceCluster asks the agent to steer
	// (agent.modelplane.ai/steer-pools).
	steer string
	// labels are its InferenceCluster's, besides clusterLabel.
	labels map[string]string
	// noAgent installs the agent's CRDs and objects but runs no agent:
	// its pools are never reported, and fall back to whole nodes.
	noAgent bool
	// agentApplied installs the agent from deploy/cluster-agent/, as
	// kubectl apply -k does, instead of with helm install of its chart
	// (TestAgentRelease's adoption of an agent applied by hand).
	agentApplied bool
	// agentByRelease leaves installing the agent to the relay's Release
	// (the input's agentRelease, provider-helm): the test runs the agent
	// only once the Release has applied its Deployment (TestAgentRelease).
	agentByRelease bool
}

// poolSpec is a GPU pool: nodes of one InferenceClass.
type poolSpec struct {
	name, class string
	nodes       int
	// mortal gives each node a KWOK process of its own, which a scenario
	// stops to stop the node's heartbeats (nodeDies).
	mortal bool
}

// classSpec is an InferenceClass: what each of its nodes has.
type classSpec struct {
	gpus            int
	product         string
	memory          string
	cpu, nodeMemory string
}

// gpuClasses are the InferenceClasses of the fleet: AWS's g6.12xlarge (4
// L4), g5.12xlarge (4 A10G) and g6e.48xlarge (8 L40S), less what a kubelet
// reserves; and a10g-4x-lean, the A10G node with 2 cores and 8Gi.
//
// lean is there for kube-scheduler's scores, not as a machine anyone buys.
// v0.3's pods request nothing, which NodeResourcesFit and
// BalancedAllocation score as 100m and 200Mi a pod, in whole points of
// 100: on 47 cores and 180Gi an empty node and a node with one such pod
// both score 99 and tie, and kube-scheduler picks either at random. On 2
// cores and 8Gi the empty node scores 96 and 98 against 92 and 97, so the
// default profile spreads such pods, always (wrongGuess needs it to).
func gpuClasses() map[string]classSpec {
	return map[string]classSpec{
		"l4-4x":        {gpus: 4, product: "NVIDIA L4", memory: "23034Mi", cpu: "47", nodeMemory: "180Gi"},
		"a10g-4x":      {gpus: 4, product: "NVIDIA A10G", memory: "23028Mi", cpu: "47", nodeMemory: "180Gi"},
		"a10g-4x-lean": {gpus: 4, product: "NVIDIA A10G", memory: "23028Mi", cpu: "2", nodeMemory: "8Gi"},
		// The scale run's, as fleetsim's p5.48xlarge (sim.Waves): 80Gi
		// a GPU, so that sim's CEL selector (80Gi or more) picks it.
		"h100-8x": {gpus: 8, product: "NVIDIA H100", memory: "80Gi", cpu: "190", nodeMemory: "1980Gi"},
		"a100-4x": {gpus: 4, product: "NVIDIA A100", memory: "40960Mi", cpu: "47", nodeMemory: "180Gi"},
		"l40s-8x": {gpus: 8, product: "NVIDIA L40S", memory: "46068Mi", cpu: "191", nodeMemory: "1500Gi"},
	}
}

// workloads are the workload clusters: alpha runs kube-scheduler's
// default profile, beta MostAllocated. Each pool's class pins what lands
// on it (its CEL selectors name the product); pair comes before spare, so
// that a replica placed on alpha goes to pair first. alpha's agent steers
// pair (wrongGuess turns that off for a while); no other pool is steered.
// beta's mortal pool is nodeDies': each node has a KWOK of its own, and
// only that scenario asks for its product.
func workloads() []workloadSpec {
	return []workloadSpec{
		{name: "alpha", steer: "pair", pools: []poolSpec{{name: "quad", class: "l4-4x", nodes: 1}, {name: "pair", class: "a10g-4x-lean", nodes: 2}, {name: "spare", class: "a10g-4x", nodes: 1}}},
		{name: "beta", mostAllocated: true, pools: []poolSpec{{name: "octo", class: "l40s-8x", nodes: 1}, {name: "mortal", class: "a100-4x", nodes: 2, mortal: true}}},
	}
}

// classes are the devices each InferenceClass declares, as the
// stand-in's input: status.gpuPools[].devices as v0.3 copies them.
func classes() map[string]any {
	out := map[string]any{}
	for name, c := range gpuClasses() {
		out[name] = []any{map[string]any{
			"name": "gpu", "claim": "DRA", "driver": gpuDriver, "deviceClassName": gpuDriver, "count": int64(c.gpus),
			"attributes": map[string]any{"productName": map[string]any{"string": c.product}},
			"capacity":   map[string]any{"memory": map[string]any{"value": c.memory}},
		}}
	}
	return out
}

// workload is a running workload cluster.
type workload struct {
	spec      workloadSpec
	api       *apiServer
	scheduler *harness.Process
	schedArgs []string
	// kwok is the kubelet of its GPU pool nodes (kwok_test.go), but of a
	// mortal pool's, each of which has its own in mortal, by node.
	kwok   *harness.Process
	mortal map[string]*harness.Process
	// controllers is its kube-controller-manager.
	controllers     *harness.Process
	controllersArgs []string
	// agent is the agent process started last; agents counts those
	// started, naming their Pods.
	agent  *agentProcess
	agents int
	// agentPod is the Deployment's pod template, in its namespace; the
	// agent's arguments are its kubeconfig and the template's.
	agentPod  corev1.PodTemplateSpec
	agentArgs []string
	manifests []*unstructured.Unstructured // the agent's objects as installed, steering's included
}

// startWorkload starts a workload cluster on the fleet's etcd, registers
// its nodes and their GPUs, starts KWOK as its pool nodes' kubelet,
// installs the cluster agent, and adds its InferenceCluster to the control
// plane.
func (f *fleet) startWorkload(t *testing.T, spec workloadSpec) *workload {
	t.Helper()
	w := &workload{spec: spec, api: f.startAPIServer(t, spec.name, f.etcd)}
	_, kubeconfig := w.api.adminKubeconfig(t)
	w.controllersArgs = []string{
		"--kubeconfig=" + kubeconfig,
		// Deployments make ReplicaSets, ReplicaSets pods, and the
		// resourceclaim controller each pod's claim from its template.
		// The node-lifecycle controller marks a node whose Lease is not
		// renewed NotReady and taints it; the taint-eviction controller
		// evicts its pods once they no longer tolerate that; the pod
		// garbage collector deletes those left on a Node deleted or
		// tainted out-of-service (nodeDies).
		"--controllers=deployment-controller,replicaset-controller,resourceclaim-controller,garbage-collector-controller," +
			"node-lifecycle-controller,taint-eviction-controller,pod-garbage-collector-controller",
		"--node-monitor-grace-period=" + nodeMonitorGrace.String(),
		"--leader-elect=false", "--secure-port=0",
	}
	w.startControllers(t, f)
	w.schedArgs = []string{"--config=" + f.schedulerConfig(t, spec, kubeconfig), "--secure-port=0"}
	w.startScheduler(t, f)

	w.register(t)
	w.heartbeat(t, f, systemNode)
	w.startKWOK(t, f)
	if !spec.agentByRelease {
		f.installAgent(t, w)
	}

	// The control plane reaches the cluster through a kubeconfig Secret,
	// as an Existing InferenceCluster's spec names it.
	cfg, _ := w.api.adminKubeconfig(t)
	apply(t, f.cp.c, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata":   map[string]any{"namespace": systemNamespace, "name": spec.name + "-kubeconfig"},
		"stringData": map[string]any{"kubeconfig": string(cfg)},
	}})
	pools := make([]any, 0, len(spec.pools))
	for _, p := range spec.pools {
		pools = append(pools, map[string]any{"name": p.name, "className": p.class, "nodeCount": int64(p.nodes)})
	}
	labels := map[string]any{clusterLabel: spec.name}
	for k, v := range spec.labels {
		labels[k] = v
	}
	meta := map[string]any{"name": spec.name, "labels": labels}
	if spec.steer != "" {
		meta["annotations"] = map[string]any{agentv1alpha1.AnnotationSteerPools: spec.steer}
	}
	apply(t, f.cp.c, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": "InferenceCluster",
		"metadata": meta,
		"spec": map[string]any{
			"cluster":   map[string]any{"source": "Existing", "existing": map[string]any{"secretRef": map[string]any{"name": spec.name + "-kubeconfig", "key": "kubeconfig"}}},
			"nodePools": pools,
		},
	}})
	return w
}

// schedulerConfig writes the cluster's KubeSchedulerConfiguration.
func (f *fleet) schedulerConfig(t *testing.T, spec workloadSpec, kubeconfig string) string {
	t.Helper()
	cfg := map[string]any{
		"apiVersion":       "kubescheduler.config.k8s.io/v1",
		"kind":             "KubeSchedulerConfiguration",
		"clientConnection": map[string]any{"kubeconfig": kubeconfig},
		"leaderElection":   map[string]any{"leaderElect": false},
	}
	if spec.mostAllocated {
		cfg["profiles"] = []any{map[string]any{
			"schedulerName": "default-scheduler",
			"pluginConfig": []any{map[string]any{"name": "NodeResourcesFit", "args": map[string]any{
				"scoringStrategy": map[string]any{"type": "MostAllocated", "resources": []any{
					map[string]any{"name": "cpu", "weight": 1}, map[string]any{"name": "memory", "weight": 1},
				}},
			}}},
		}}
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(f.logs, spec.name, "kube-scheduler.yaml")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// startScheduler starts the cluster's kube-scheduler.
func (w *workload) startScheduler(t *testing.T, f *fleet) {
	t.Helper()
	w.scheduler = harness.StartProcessOf(t, f.owner, f.logs, w.spec.name+"-kube-scheduler", filepath.Join(f.bin, "kube-scheduler"), nil, w.schedArgs...)
	w.scheduler.Running(t)
}

// startControllers starts the cluster's kube-controller-manager.
func (w *workload) startControllers(t *testing.T, f *fleet) {
	t.Helper()
	w.controllers = harness.StartProcessOf(t, f.owner, f.logs, w.spec.name+"-kube-controller-manager", filepath.Join(f.bin, "kube-controller-manager"), nil, w.controllersArgs...)
	w.controllers.Running(t)
}

// register writes, through the API, what the kubelets and the GPU DRA
// driver of a cluster would: a Node per pool node, labelled with its pool
// and tainted as v0.3's GPU node groups are, with its cpu, memory and pods
// capacity, for KWOK to keep (it marks it Ready and renews its Lease), and
// a ResourceSlice of its GPUs; the DeviceClass of the driver; and one Ready
// node outside the pools, for the endpoint pickers and the agent's Pods.
func (w *workload) register(t *testing.T) {
	t.Helper()
	c := w.api.c
	class := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: gpuDriver},
		Spec:       resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "` + gpuDriver + `"`}}}},
	}
	if err := c.Create(t.Context(), class); err != nil {
		t.Fatalf("cannot create DeviceClass %s in %s: %v", class.Name, w.spec.name, err)
	}
	w.node(t, systemNode, nil, nil, "8", "32Gi", "")
	for _, p := range w.spec.pools {
		cs := gpuClasses()[p.class]
		for i := range p.nodes {
			name := fmt.Sprintf("%s-%d", p.name, i)
			keeper := kwokManaged
			if p.mortal {
				keeper = name
			}
			w.node(t, name, map[string]string{poolLabel: p.name},
				[]corev1.Taint{{Key: "nvidia.com/gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}}, cs.cpu, cs.nodeMemory, keeper)
			slice := &resourcev1.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Name: name + "-" + gpuDriver},
				Spec: resourcev1.ResourceSliceSpec{
					Driver: gpuDriver, NodeName: new(name), Devices: gpuDevices(cs, cs.gpus),
					Pool: resourcev1.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1},
				},
			}
			if err := c.Create(t.Context(), slice); err != nil {
				t.Fatalf("cannot create ResourceSlice %s in %s: %v", slice.Name, w.spec.name, err)
			}
		}
	}
}

// gpuDevices are the first n GPUs of a node of class cs, as its
// ResourceSlice lists them.
func gpuDevices(cs classSpec, n int) []resourcev1.Device {
	devices := make([]resourcev1.Device, 0, n)
	for g := range n {
		devices = append(devices, resourcev1.Device{
			Name:       "gpu-" + strconv.Itoa(g),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"productName": {StringValue: new(cs.product)}},
			Capacity:   map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse(cs.memory)}},
		})
	}
	return devices
}

// setGPUs rewrites a pool node's ResourceSlice to list its first n GPUs,
// in a new generation, as a DRA driver does when devices go or come back,
// and returns when the API server took it.
func (w *workload) setGPUs(t *testing.T, node string, n int) time.Time {
	t.Helper()
	var cs classSpec
	for _, p := range w.spec.pools {
		if strings.HasPrefix(node, p.name+"-") {
			cs = gpuClasses()[p.class]
		}
	}
	if cs.gpus == 0 {
		t.Fatalf("node %s is of no pool of %s", node, w.spec.name)
	}
	slice := &resourcev1.ResourceSlice{}
	if err := w.api.c.Get(t.Context(), client.ObjectKey{Name: node + "-" + gpuDriver}, slice); err != nil {
		t.Fatalf("cannot read the ResourceSlice of %s in %s: %v", node, w.spec.name, err)
	}
	slice.Spec.Devices = gpuDevices(cs, n)
	slice.Spec.Pool.Generation++
	if err := w.api.c.Update(t.Context(), slice); err != nil {
		t.Fatalf("cannot write the ResourceSlice of %s in %s: %v", node, w.spec.name, err)
	}
	return time.Now()
}

// node creates a Node with its capacity and allocatable. A node with a
// KWOK keeper (the value of its kwokAnnotation) KWOK marks Ready, as a
// kubelet would; the test's own (no keeper) it marks Ready itself, once,
// and renews its Lease (heartbeat). The node-lifecycle controller then
// lifts the not-ready taint the API server put on the new Node.
func (w *workload) node(t *testing.T, name string, labels map[string]string, taints []corev1.Taint, cpu, memory, keeper string) {
	t.Helper()
	l := map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"}
	maps.Copy(l, labels)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}, Spec: corev1.NodeSpec{Taints: taints}}
	if keeper != "" {
		n.Annotations = map[string]string{kwokAnnotation: keeper}
	}
	if err := w.api.c.Create(t.Context(), n); err != nil {
		t.Fatalf("cannot create Node %s in %s: %v", name, w.spec.name, err)
	}
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory), corev1.ResourcePods: resource.MustParse("110")}
	n.Status = corev1.NodeStatus{Capacity: res, Allocatable: res}
	if keeper == "" {
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
	}
	if err := w.api.c.Status().Update(t.Context(), n); err != nil {
		t.Fatalf("cannot write the status of Node %s in %s: %v", name, w.spec.name, err)
	}
}

// installAgent installs the agent in the workload cluster, with helm
// install of the chart ./hack/release.sh pushed (installAgentByHelm), or
// applied from deploy/cluster-agent/ (applyAgent) where the spec says so,
// and runs it as its ServiceAccount with its Deployment's arguments and
// environment, with a Pod standing for it (startAgent). One replica: the
// Deployment runs two, the other waiting on the Lease.
func (f *fleet) installAgent(t *testing.T, w *workload) {
	t.Helper()
	if w.spec.agentApplied {
		w.manifests = f.applyAgent(t, w)
	} else {
		w.manifests = f.installAgentByHelm(t, w)
	}
	var d *appsv1.Deployment
	for _, u := range w.manifests {
		if u.GetKind() == "Deployment" {
			d = &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	if d == nil {
		t.Fatal("the agent's install has no Deployment")
	}
	f.runAgentOf(t, w, d)
}

// installAgentByHelm installs the agent as the README's quick start does,
//
//	helm install mp-cluster-agent oci://registry.example.com/acme/charts/cluster-agent --version 0.1.0 \
//	  -n modelplane-cluster-agent --create-namespace --set namespace.create=false
//
// from the chart ./hack/release.sh pushed to the loopback registry, with
// three flags of the fleet's own: --plain-http (the registry speaks plain
// HTTP), steering.enabled (the fleet steers pools,
// docs/cluster-agent.md#steering) and replicas 0 (no kubelet runs the
// agent's own pods: startAgent runs it as a process). It returns the
// release's objects, as helm get manifest prints them.
func (f *fleet) installAgentByHelm(t *testing.T, w *workload) []*unstructured.Unstructured {
	t.Helper()
	f.helm(t, w, "install", relay.AgentReleaseName, f.agentChart(), "--version", harness.ChartVersion,
		"-n", agentNamespace, "--create-namespace", "--set", "namespace.create=false",
		"--plain-http", "--set", "steering.enabled=true", "--set", "replicas=0")
	// kubectl label namespace modelplane-cluster-agent
	// pod-security.kubernetes.io/enforce=restricted, as the README says:
	// the agent's Pods (startAgent's) are then admitted only as restricted.
	if _, err := w.api.kube.CoreV1().Namespaces().Patch(t.Context(), agentNamespace, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("cannot label namespace %s in %s: %v", agentNamespace, w.spec.name, err)
	}
	dir := filepath.Join(f.logs, w.spec.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "cluster-agent-manifest.yaml")
	if err := os.WriteFile(manifest, []byte(f.helm(t, w, "get", "manifest", relay.AgentReleaseName, "-n", agentNamespace)), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := harness.ReadObjects(t, manifest)
	for _, u := range objs {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(u.GroupVersionKind())
		if err := w.api.c.Get(t.Context(), client.ObjectKeyFromObject(u), got); err != nil {
			t.Fatalf("cannot get %s %s of release %s in %s: %v", u.GetKind(), objectKey(u), relay.AgentReleaseName, w.spec.name, err)
		}
	}
	f.waitAgentCRDs(t, w)
	return objs
}

// agentChart is the agent's chart as the release pushed it.
func (f *fleet) agentChart() string {
	return "oci://" + f.repository + "/charts/cluster-agent"
}

// helm runs the Helm CLI that prepare built against the workload
// cluster, as its admin, with Helm's homes of the fleet's own and its
// release records in Secrets (whatever this machine's HELM_ variables say),
// and returns what it printed on its standard output.
func (f *fleet) helm(t *testing.T, w *workload, args ...string) string {
	t.Helper()
	_, kubeconfig := w.api.adminKubeconfig(t)
	home := filepath.Join(f.logs, "helm")
	cmd := exec.CommandContext(t.Context(), filepath.Join(f.artifacts, "bin", "helm"), append(args, "--kubeconfig="+kubeconfig)...)
	cmd.Dir = f.logs
	// The last value of a variable wins (os/exec).
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"), "HELM_REGISTRY_CONFIG="+filepath.Join(home, "registry.json"),
		"HELM_DRIVER=secret", "HELM_NAMESPACE=", "HELM_KUBECONTEXT=",
	)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s in %s: %v\n%s%s", strings.Join(args, " "), w.spec.name, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// applyAgent renders deploy/cluster-agent/ with its steering component,
// as an overlay opts in and `kubectl apply -k` renders it, and applies it
// server-side as kubectl apply --server-side would, the Deployment scaled
// to none. It returns the objects it applied.
func (f *fleet) applyAgent(t *testing.T, w *workload) []*unstructured.Unstructured {
	t.Helper()
	objs := harness.Kustomize(t, steeringOverlay(t, f.root, filepath.Join(f.logs, w.spec.name)))
	first := func(u *unstructured.Unstructured) bool {
		return u.GetKind() == "CustomResourceDefinition" || u.GetKind() == "Namespace"
	}
	for _, u := range objs {
		if first(u) {
			serverSideApply(t, w.api.c, u)
		}
	}
	f.waitAgentCRDs(t, w)
	for _, u := range objs {
		if first(u) {
			continue
		}
		if u.GetKind() == "Deployment" {
			// Its pods are the test's, one per agent process
			// (startAgent): none of the ReplicaSet's, which would never
			// run.
			u = u.DeepCopy()
			if err := unstructured.SetNestedField(u.Object, int64(0), "spec", "replicas"); err != nil {
				t.Fatal(err)
			}
		}
		serverSideApply(t, w.api.c, u)
	}
	return objs
}

// waitAgentCRDs waits until the workload cluster serves the agent's kinds.
func (f *fleet) waitAgentCRDs(t *testing.T, w *workload) {
	t.Helper()
	eventually(t, time.Minute, "the agent's CRDs served in "+w.spec.name, func() error {
		for _, kind := range []string{"PoolObservation", "ReplicaObservation"} {
			l := &unstructured.UnstructuredList{}
			l.SetAPIVersion(agentAPIVersion)
			l.SetKind(kind + "List")
			if err := w.api.c.List(t.Context(), l, client.Limit(1)); err != nil {
				return err
			}
		}
		return nil
	})
}

// runAgentOf runs the agent as the Deployment d says, as its
// ServiceAccount, unless the cluster runs none.
func (f *fleet) runAgentOf(t *testing.T, w *workload, d *appsv1.Deployment) {
	t.Helper()
	w.agentPod = d.Spec.Template
	w.agentPod.Namespace = d.Namespace
	_, kubeconfig := w.api.kubeconfig(t, "cluster-agent", w.api.token(t, d.Namespace, w.agentPod.Spec.ServiceAccountName))
	w.agentArgs = append([]string{"--kubeconfig=" + kubeconfig}, w.agentPod.Spec.Containers[0].Args...)
	if !w.spec.noAgent {
		w.startAgent(t, f)
	}
}

// steeringOverlay writes, in dir, an overlay that opts in to steering as
// deploy/cluster-agent/steering/kustomization.yaml says, and returns its
// directory.
func steeringOverlay(t *testing.T, root, dir string) string {
	t.Helper()
	dir = filepath.Join(dir, "cluster-agent-overlay")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// kustomize takes no absolute path of a base or a component.
	base, err := filepath.Rel(dir, filepath.Join(root, "deploy", "cluster-agent"))
	if err != nil {
		t.Fatal(err)
	}
	k := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
		"resources": []string{base}, "components": []string{filepath.Join(base, "steering")},
	}
	b, err := yaml.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// serverSideApply applies an object as kubectl apply --server-side does.
func serverSideApply(t *testing.T, c client.Client, u *unstructured.Unstructured) {
	t.Helper()
	if err := c.Patch(t.Context(), u.DeepCopy(), client.Apply, client.FieldOwner("kubectl"), client.ForceOwnership); err != nil { //nolint:staticcheck // Apply of an unstructured object, as kubectl does.
		t.Fatalf("the API server refused %s %s: %v", u.GetKind(), key(u), err)
	}
}
