package steering

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/modelplaneai/fleet-scheduler/agent"
	"github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	fsv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/cluster"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/controller"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/metrics"
)

const (
	gpuClass  = "gpu.example.com"
	agentNS   = "modelplane-cluster-agent"
	agentName = "cluster-agent-0"
	pool      = "h100"
	ns        = "default"
)

// t0 is the fixtures' time.
var t0 = time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)

var agentLabels = map[string]string{"app.kubernetes.io/name": "cluster-agent"}

// cfg is the steering configuration of the tests: the flags' defaults.
func cfg() Config {
	return Config{
		Window: time.Second, MaxHold: 30 * time.Second, GangWait: 5 * time.Second, ReplicaWait: 5 * time.Second,
		PinTimeout: 30 * time.Second, ReportPeriod: 50 * time.Second, PodNamespace: agentNS, PodName: agentName, AdmissionPolicies: true,
	}
}

// env is a cluster view, an API server that records the agent's writes of
// pods, the pools' counts, and the clock.
type env struct {
	t       *testing.T
	cluster *cluster.Cluster
	client  *fake.Clientset
	clock   *clocktesting.FakeClock
	metrics *metrics.Metrics
	counts  *counts
	cfg     Config

	// updates are the pods the agent updated, deletes the pods it
	// deleted ("namespace/name"), in order.
	updates []*corev1.Pod
	deletes []string
	// conflict makes the API server refuse every update as a conflict.
	conflict bool
	// fail makes it refuse every update with this error.
	fail error
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1alpha1.PoolObservationResource:    "PoolObservationList",
		v1alpha1.ReplicaObservationResource: "ReplicaObservationList",
	})
	own := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: agentName, Labels: agentLabels}}
	e := &env{t: t, client: fake.NewClientset(own), clock: clocktesting.NewFakeClock(t0), counts: &counts{nodes: map[string][]controller.SteerNode{}}, cfg: cfg()}
	c, err := cluster.New(e.client, dyn, cluster.Options{Namespaces: []string{ns}, AdmissionPolicies: true})
	if err != nil {
		t.Fatal(err)
	}
	c.MarkSteeringSynced()
	e.cluster = c
	e.metrics = metrics.New(time.Now)
	e.client.PrependReactor("update", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.UpdateAction).GetObject().(*corev1.Pod).DeepCopy()
		switch {
		case e.fail != nil:
			return true, nil, e.fail
		case e.conflict:
			return true, nil, kerrors.NewConflict(schema.GroupResource{Resource: "pods"}, p.Name, fmt.Errorf("the object has been modified"))
		}
		e.updates = append(e.updates, p)
		return true, p, nil
	})
	e.client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteAction)
		e.deletes = append(e.deletes, d.GetNamespace()+"/"+d.GetName())
		return true, nil, nil
	})
	return e
}

func (e *env) add(objs ...any) {
	e.t.Helper()
	if err := e.cluster.Inject(objs...); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) steerer() *Steerer {
	return New(e.cfg, e.cluster, e.counts, e.client, e.clock, logr.Discard(), e.metrics, nil, nil)
}

// shipped adds the steering policy and binding as shipped.
func (e *env) shipped() {
	e.add(policy(), binding())
}

// applyUpdates puts the pods the agent updated into the cache, as the
// informer would, with a new resourceVersion.
func (e *env) applyUpdates() {
	for _, p := range e.updates {
		p = p.DeepCopy()
		rv, _ := strconv.Atoi(p.ResourceVersion)
		p.ResourceVersion = strconv.Itoa(rv + 1)
		e.add(p)
	}
}

// decided are the agent's updates: pod name to the node it was pinned to
// ("" unpinned), from the annotation.
func (e *env) decided() map[string]string {
	out := map[string]string{}
	for _, p := range e.updates {
		out[p.Name] = p.Annotations[v1alpha1.AnnotationSteeredTo]
	}
	return out
}

// counts are the pools' nodes, as controller.Pools counts them.
type counts struct {
	nodes map[string][]controller.SteerNode
	err   error
}

func (c *counts) SteerNodes(_ context.Context, u *unstructured.Unstructured) ([]controller.SteerNode, string, error) {
	if c.err != nil {
		return nil, v1alpha1.ReasonCannotCount, c.err
	}
	out := make([]controller.SteerNode, 0, len(c.nodes[u.GetName()]))
	for _, n := range c.nodes[u.GetName()] {
		n.Free = slices.Clone(n.Free)
		out = append(out, n)
	}
	return out, "", nil
}

// setNodes sets a pool's nodes: name and free GPUs, in pairs.
func (e *env) setNodes(pool string, free ...any) {
	var nodes []controller.SteerNode
	for i := 0; i+1 < len(free); i += 2 {
		nodes = append(nodes, controller.SteerNode{SteerNode: agent.SteerNode{Name: free[i].(string), Free: []int64{int64(free[i+1].(int))}}})
	}
	e.counts.nodes[pool] = nodes
}

// poolObservation is a PoolObservation of 8 GPUs a node, steering enabled
// and Synced True unless changed.
func poolObservation(name string, steering v1alpha1.Steering) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"steering": string(steering),
			"devices":  []any{map[string]any{"name": "gpu", "driver": gpuClass, "deviceClassName": gpuClass, "count": int64(8)}},
		},
		"status": map[string]any{"conditions": []any{map[string]any{"type": v1alpha1.ConditionSynced, "status": "True", "reason": v1alpha1.ReasonObserved, "message": "", "lastTransitionTime": t0.Format(time.RFC3339)}}},
	}}
	u.SetAPIVersion(v1alpha1.Group + "/" + v1alpha1.Version)
	u.SetKind(v1alpha1.KindPoolObservation)
	u.SetName(name)
	u.SetGeneration(1)
	u.SetResourceVersion("1")
	return u
}

// replicaObservation selects pods by the label modelplane.ai/workload, one
// selector per engine workload.
func replicaObservation(name, replicaNamespace string, workloads ...string) *unstructured.Unstructured {
	sels := make([]any, 0, len(workloads))
	for _, w := range workloads {
		sels = append(sels, map[string]any{"matchLabels": map[string]any{fsv1alpha1.LabelWorkload: w}})
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"selectors": sels, "pods": int64(1), "replicaNamespace": replicaNamespace}}}
	u.SetAPIVersion(v1alpha1.Group + "/" + v1alpha1.Version)
	u.SetKind(v1alpha1.KindReplicaObservation)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetResourceVersion("1")
	return u
}

// lwsObservation selects the pods of LeaderWorkerSet lws, as the relay's
// ReplicaObservation of a gang engine does.
func lwsObservation(name, replicaNamespace, lws string) *unstructured.Unstructured {
	u := replicaObservation(name, replicaNamespace)
	u.Object["spec"].(map[string]any)["selectors"] = []any{map[string]any{"matchLabels": map[string]any{fsv1alpha1.LabelLWSName: lws}}}
	return u
}

// podWrapper builds a held claiming pod of the pool.
type podWrapper struct{ corev1.Pod }

// held is a pod of workload w held by the gate, created at t0, claiming
// through claim "gpu" (the ResourceClaim <name>-gpu).
func held(name, workload string) *podWrapper {
	claim := name + "-gpu"
	return &podWrapper{corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "10",
			CreationTimestamp: metav1.NewTime(t0), Labels: map[string]string{fsv1alpha1.LabelWorkload: workload},
		},
		Spec: corev1.PodSpec{
			NodeSelector:    map[string]string{fsv1alpha1.LabelPool: pool},
			SchedulingGates: []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGate}},
			ResourceClaims:  []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: new("tmpl")}},
			Containers:      []corev1.Container{{Name: "engine", Image: "vllm"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: &claim}}},
	}}
}

func (w *podWrapper) created(at time.Time) *podWrapper {
	w.CreationTimestamp = metav1.NewTime(at)
	return w
}

func (w *podWrapper) noClaimYet() *podWrapper { w.Status.ResourceClaimStatuses = nil; return w }

// gang puts the pod in LeaderWorkerSet lws's group g of size n.
func (w *podWrapper) gang(lws, g string, n int) *podWrapper {
	w.Labels = map[string]string{fsv1alpha1.LabelLWSName: lws, LabelLWSGroupKey: g}
	w.Annotations = map[string]string{cluster.AnnotationLWSSize: strconv.Itoa(n)}
	return w
}

// released is the pod released pinned to node (not bound yet).
func (w *podWrapper) released(node string) *podWrapper {
	w.Spec.SchedulingGates = nil
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[v1alpha1.AnnotationSteeredTo] = node
	return w
}

// bound is the pod bound to node at.
func (w *podWrapper) bound(node string, at time.Time) *podWrapper {
	w.Spec.SchedulingGates = nil
	w.Spec.NodeName = node
	w.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}}
	return w
}

func (w *podWrapper) obj() *corev1.Pod { return w.DeepCopy() }

// claimOf is the pod's ResourceClaim for n GPUs.
func claimOf(pod string, n int64) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod + "-gpu", ResourceVersion: "1"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: gpuClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: n},
		}}}},
	}
}

// policy and binding are the steering policy and binding as shipped in
// what CheckSteeringPolicy checks.
func policy() *admissionregistrationv1.MutatingAdmissionPolicy {
	return &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SteeringPolicy},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			ParamKind: &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "Pod"},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{
				{Name: "ready", Expression: `params.status.conditions.exists(c, c.type == "Ready" && c.status == "True")`},
				{Name: "pool", Expression: `object.spec.nodeSelector[?"modelplane.ai/pool"].orValue("") in params.metadata.annotations[?"agent.modelplane.ai/steered-pools"].orValue("").split(",")`},
			},
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType: admissionregistrationv1.PatchTypeJSONPatch,
				JSONPatch: &admissionregistrationv1.JSONPatch{Expression: `[JSONPatch{op: "add", path: "/spec/schedulingGates/-", value: Object.spec.schedulingGates{name: "agent.modelplane.ai/steering"}}]`},
			}},
			FailurePolicy:      new(admissionregistrationv1.Ignore),
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		},
	}
}

func binding() *admissionregistrationv1.MutatingAdmissionPolicyBinding {
	return &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SteeringPolicy},
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName: v1alpha1.SteeringPolicy,
			ParamRef: &admissionregistrationv1.ParamRef{
				Namespace: agentNS, Selector: &metav1.LabelSelector{MatchLabels: agentLabels},
				ParameterNotFoundAction: new(admissionregistrationv1.AllowAction),
			},
		},
	}
}
