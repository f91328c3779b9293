package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// ungatePatch removes the steering gate, and only it, from a pod: a
// strategic merge patch's delete directive on the list map of gates.
const ungatePatch = `{"spec":{"schedulingGates":[{"$patch":"delete","name":"agent.modelplane.ai/steering"}]}}`

// ungateCommand is docs/operations.md#steering's command that releases
// every held pod when no agent returns, word for word.
const ungateCommand = `kubectl get pods --all-namespaces -o go-template='{{range .items}}{{$p := .}}{{range .spec.schedulingGates}}{{if eq .name "agent.modelplane.ai/steering"}}{{$p.metadata.namespace}} {{$p.metadata.name}}{{"\n"}}{{end}}{{end}}{{end}}' | while read -r ns name; do kubectl patch pod -n "$ns" "$name" -p '` + ungatePatch + `'; done`

// uninstallCommand is docs/operations.md#steering's first step of an
// uninstall: the policy's binding and the policy, before the agent.
const uninstallCommand = `kubectl delete mutatingadmissionpolicybinding,mutatingadmissionpolicy modelplane-cluster-agent-steering`

// steeringEnv is a control plane with the agent installed with its
// steering component, and no agent running: the test makes the agent's
// Pods (the policy's params) by hand.
type steeringEnv struct {
	cp *controlPlane
	// agent is a client as the agent's ServiceAccount.
	agent kubernetes.Interface
	// template is the shipped Deployment's pod template.
	template corev1.PodTemplateSpec
}

// podOption changes a replica's pod.
type podOption func(*corev1.Pod)

// replicaPod is a claiming pod of a Modelplane v0.3 replica on pool l4, as
// its engine's Deployment creates it: labelled with its workload, a pool
// nodeSelector, a claim from a template, kube-scheduler's.
func replicaPod(opts ...podOption) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: v1alpha1.WorkloadNamespace, GenerateName: "qwen-0-",
			Labels: map[string]string{v1alpha1.LabelWorkload: "qwen-0"},
		},
		Spec: corev1.PodSpec{
			NodeSelector:   map[string]string{v1alpha1.LabelPool: "l4"},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: new("qwen-0-gpus")}},
			Containers: []corev1.Container{{
				Name: "engine", Image: "registry.example.com/engine:v1",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}},
			}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func inPool(pool string) podOption {
	return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{v1alpha1.LabelPool: pool} }
}

func withoutPool() podOption { return func(p *corev1.Pod) { p.Spec.NodeSelector = nil } }

func labelled(labels map[string]string) podOption {
	return func(p *corev1.Pod) { p.Labels = labels }
}

func claimless() podOption {
	return func(p *corev1.Pod) {
		p.Spec.ResourceClaims = nil
		p.Spec.Containers[0].Resources.Claims = nil
	}
}

func scheduledBy(scheduler string) podOption {
	return func(p *corev1.Pod) { p.Spec.SchedulerName = scheduler }
}

func createdOn(node string) podOption { return func(p *corev1.Pod) { p.Spec.NodeName = node } }

func inNamespace(ns string) podOption { return func(p *corev1.Pod) { p.Namespace = ns } }

func gatedBy(gate string) podOption {
	return func(p *corev1.Pod) {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: gate})
	}
}

// held is whether the pod carries the steering gate. More than one copy of
// it fails the test (the API server would refuse such a pod).
func held(t *testing.T, p *corev1.Pod) bool {
	t.Helper()
	n := 0
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == agentv1alpha1.SchedulingGate {
			n++
		}
	}
	if n > 1 {
		t.Errorf("pod %s/%s carries the gate %s %d times: %v", p.Namespace, p.Name, agentv1alpha1.SchedulingGate, n, p.Spec.SchedulingGates)
	}
	return n > 0
}

// expect creates the pod and checks, in what the API server returned,
// whether the policy held it.
func (e *steeringEnv) expect(t *testing.T, what string, want bool, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := e.cp.kube.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("%s: the API server refused the pod: %v", what, err)
	}
	if h := held(t, got); h != want {
		t.Errorf("%s: held %t, want %t (gates %v)", what, h, want, got.Spec.SchedulingGates)
	}
	return got
}

// becomes waits until a new pod of opts is held (want) or not, as the
// API server's informers of the policy and its params catch up with a
// change; then three more in a row must be the same. It deletes the pods,
// logs how long it waited and how many pods it took, and returns how long
// it waited.
func (e *steeringEnv) becomes(t *testing.T, what string, want bool, opts ...podOption) time.Duration {
	t.Helper()
	tries := 0
	took := eventually(t, time.Minute, what, func() error {
		tries++
		p, err := e.cp.kube.CoreV1().Pods(v1alpha1.WorkloadNamespace).Create(t.Context(), replicaPod(opts...), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		e.deletePod(t, p)
		if h := held(t, p); h != want {
			return fmt.Errorf("pod %s held %t", p.Name, h)
		}
		return nil
	})
	for range 3 {
		e.deletePod(t, e.expect(t, what+", and after", want, replicaPod(opts...)))
	}
	t.Logf("%s: %s after the change, at the %s pod created", what, took.Round(time.Millisecond), ordinal(tries))
	return took
}

func ordinal(n int) string {
	if n == 1 {
		return "first"
	}
	return fmt.Sprintf("%dth", n)
}

func (e *steeringEnv) deletePod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if err := e.cp.kube.CoreV1().Pods(p.Namespace).Delete(t.Context(), p.Name, metav1.DeleteOptions{}); err != nil && !kerrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// agentPod creates an agent's Pod of the shipped Deployment's template, as
// its ReplicaSet would, Ready or not, and annotates it with the pools it
// steers (none if empty) as the agent's ServiceAccount does.
func (e *steeringEnv) agentPod(t *testing.T, name string, ready bool, pools string, finalizers ...string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: name, Labels: e.template.Labels, Finalizers: finalizers},
		Spec:       *e.template.Spec.DeepCopy(),
	}
	if _, err := e.cp.kube.CoreV1().Pods(agentNS).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("cannot create the agent's Pod %s: %v", name, err)
	}
	e.setReady(t, name, ready)
	if pools != "" {
		e.annotate(t, name, pools)
	}
}

// setReady sets the agent Pod's Ready condition, as its kubelet does from
// its readiness probe.
func (e *steeringEnv) setReady(t *testing.T, name string, ready bool) {
	t.Helper()
	p, err := e.cp.kube.CoreV1().Pods(agentNS).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	if _, err := e.cp.kube.CoreV1().Pods(agentNS).UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("cannot set the agent's Pod %s Ready %t: %v", name, ready, err)
	}
}

// annotate sets the pools the agent's Pod steers, as the agent does, with
// the agent's ServiceAccount: a patch of its own Pod.
func (e *steeringEnv) annotate(t *testing.T, name, pools string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, agentv1alpha1.AnnotationSteeredPools, pools)
	if _, err := e.agent.CoreV1().Pods(agentNS).Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the agent's ServiceAccount cannot annotate its Pod %s: %v", name, err)
	}
}

func (e *steeringEnv) deleteAgentPod(t *testing.T, name string) {
	t.Helper()
	if err := e.cp.kube.CoreV1().Pods(agentNS).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// steeringOverlay writes an overlay that opts in to steering, as the
// component's kustomization.yaml says, and returns its directory.
func steeringOverlay(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	// kustomize takes no absolute path of a base or a component.
	rel, err := filepath.Rel(dir, filepath.Join(root, "deploy", "cluster-agent"))
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\ncomponents:\n- %s\n", rel, filepath.Join(rel, "steering"))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// objectKey is an object's kind, namespace and name.
func objectKey(u *unstructured.Unstructured) string {
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

// TestSteeringPolicy installs the agent with its steering component, as an
// overlay opts in, and proves the shipped admission policy's cases on a
// real kube-apiserver, with no agent running: the agent's Pods (the
// policy's params) are made by hand, Ready or not, annotated or not, and
// the pods it holds stay Pending (no kube-scheduler, no kubelet). Also the
// steering roles, as the agent's ServiceAccount, and on-call's command
// that releases every held pod.
func TestSteeringPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: the control plane takes a while to start")
	}
	cp := startControlPlane(t)
	base := harness.Kustomize(t, filepath.Join(cp.root, "deploy", "cluster-agent"))
	overlay := steeringOverlay(t, cp.root)
	objs := harness.Kustomize(t, overlay)
	component := harness.Kustomize(t, filepath.Join(cp.root, "deploy", "cluster-agent", "steering"))

	t.Run("the default install has no steering; the component adds it and changes nothing else", func(t *testing.T) {
		baseKeys := map[string]*unstructured.Unstructured{}
		for _, u := range base {
			baseKeys[objectKey(u)] = u
			switch u.GetKind() {
			case "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding":
				t.Errorf("deploy/cluster-agent/ installs %s without steering", objectKey(u))
			}
		}
		var want []string
		for _, u := range base {
			want = append(want, objectKey(u))
		}
		for _, u := range component {
			want = append(want, objectKey(u))
		}
		var got []string
		for _, u := range objs {
			got = append(got, objectKey(u))
			if b, ok := baseKeys[objectKey(u)]; ok {
				if diff := cmp.Diff(b.Object, u.Object); diff != "" {
					t.Errorf("the steering component changes %s: -base, +with steering:\n%s", objectKey(u), diff)
				}
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("objects with steering: -base and component, +overlay:\n%s", diff)
		}
	})

	cp.installFrom(t, overlay)
	installed := time.Now()
	e := &steeringEnv{cp: cp, template: deployment(t, objs).Spec.Template}
	env := map[string]string{}
	for _, v := range e.template.Spec.Containers[0].Env {
		if v.ValueFrom != nil && v.ValueFrom.FieldRef != nil {
			env[v.Name] = v.ValueFrom.FieldRef.FieldPath
		}
	}
	if diff := cmp.Diff(map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}, env); diff != "" {
		t.Errorf("the Deployment's downward API env, which the leader needs to annotate its own Pod: -want, +got:\n%s", diff)
	}
	token := cp.token(t, agentNS, agentSA)
	var err error
	if e.agent, err = kubernetes.NewForConfig(cp.as(token)); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("a Ready agent Pod annotated with the pool holds the pool's claiming pods at once", func(t *testing.T) {
		e.agentPod(t, "agent-0", true, "l4")
		took := e.becomes(t, "the first agent Pod Ready and annotated: a claiming pod of l4 held", true)
		t.Logf("in force %s after the policy was applied (%s after the agent's Pod was Ready and annotated)", time.Since(installed).Round(time.Millisecond), took.Round(time.Millisecond))
		e.expect(t, "a pod of a LeaderWorkerSet", true, replicaPod(labelled(map[string]string{v1alpha1.LabelLWSName: "qwen-1", v1alpha1.LabelLWSRole: "worker"})))
		p := e.expect(t, "a pod with a gate of another's", true, replicaPod(gatedBy("example.com/other")))
		if !slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == "example.com/other" }) {
			t.Errorf("the policy dropped another's gate: %v", p.Spec.SchedulingGates)
		}
	})

	t.Run("pods that are not a steered pool's claiming replica pods are not held", func(t *testing.T) {
		for _, c := range []struct {
			what string
			opts []podOption
		}{
			{"a claimless pod", []podOption{claimless()}},
			{"a pod of another scheduler", []podOption{scheduledBy("kai-scheduler")}},
			{"a pod without v0.3's labels", []podOption{labelled(map[string]string{"app": "qwen-0"})}},
			{"a pod of a pool the agent does not steer", []podOption{inPool("h100")}},
			{"a pod without a pool nodeSelector", []podOption{withoutPool()}},
			{"a pod created bound to a node", []podOption{createdOn("l4-0")}},
			{"a pod in a namespace the agent does not read", []podOption{inNamespace("ml")}},
		} {
			e.expect(t, c.what, false, replicaPod(c.opts...))
		}
		e.expect(t, "a claiming pod of l4, after them", true, replicaPod())
	})

	var released *corev1.Pod
	t.Run("two Ready annotated agent Pods hold a pod once, without error", func(t *testing.T) {
		e.agentPod(t, "agent-1", true, "l4,h100")
		// agent-0 steers l4 only: an h100 pod held is agent-1's param seen.
		e.becomes(t, "the second agent Pod annotated: a claiming pod of h100 held", true, inPool("h100"))
		released = e.expect(t, "a claiming pod of l4, both agent Pods' pool", true, replicaPod())
	})

	t.Run("the release is one update, conditioned on the resourceVersion, and final", func(t *testing.T) {
		if released == nil {
			t.Skip("SKIP: no held pod")
		}
		pods := e.agent.CoreV1().Pods(v1alpha1.WorkloadNamespace)
		p, err := pods.Get(t.Context(), released.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pin := func(p *corev1.Pod, node string) *corev1.Pod {
			p = p.DeepCopy()
			p.Spec.SchedulingGates = slices.DeleteFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == agentv1alpha1.SchedulingGate })
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}},
			}}}
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations[agentv1alpha1.AnnotationSteeredTo] = node
			return p
		}
		stale := pin(p, "l4-2")
		got, err := pods.Update(t.Context(), pin(p, "l4-1"), metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("the release (the gate removed, a required matchFields pin added, in one update) as the agent's ServiceAccount: %v", err)
		}
		if held(t, got) || got.Spec.Affinity == nil || got.Annotations[agentv1alpha1.AnnotationSteeredTo] != "l4-1" {
			t.Errorf("after the release: gates %v, affinity %v, annotations %v", got.Spec.SchedulingGates, got.Spec.Affinity, got.Annotations)
		}
		_, staleErr := pods.Update(t.Context(), stale, metav1.UpdateOptions{})
		if !kerrors.IsConflict(staleErr) {
			t.Errorf("the same release with the resourceVersion it was read at, after another's: want 409 Conflict, got %v", staleErr)
		}
		repin := got.DeepCopy()
		repin.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values = []string{"l4-2"}
		_, repinErr := pods.Update(t.Context(), repin, metav1.UpdateOptions{})
		if !kerrors.IsInvalid(repinErr) {
			t.Errorf("a re-pin after the release: want 422 Invalid, got %v", repinErr)
		}
		t.Logf("release accepted; the stale release: %v; a re-pin: %v", staleErr, repinErr)
	})

	t.Run("an agent Pod annotated with another pool does not hold", func(t *testing.T) {
		e.deleteAgentPod(t, "agent-1")
		e.annotate(t, "agent-0", "h100")
		e.becomes(t, "the agent's Pod annotated with h100 only: a claiming pod of l4 not held", false)
		e.expect(t, "a claiming pod of h100, the pool it names now", true, replicaPod(inPool("h100")))
		e.annotate(t, "agent-0", "l4")
		e.becomes(t, "the agent's Pod annotated with l4 again: a claiming pod of l4 held", true)
	})

	t.Run("an agent Pod not Ready does not hold", func(t *testing.T) {
		e.setReady(t, "agent-0", false)
		e.becomes(t, "the agent's Pod unready: a claiming pod of l4 not held", false)
		e.setReady(t, "agent-0", true)
		e.becomes(t, "the agent's Pod Ready again: a claiming pod of l4 held", true)
	})

	t.Run("no agent Pod: nothing is held", func(t *testing.T) {
		e.deleteAgentPod(t, "agent-0")
		e.becomes(t, "the agent's only Pod deleted: a claiming pod of l4 not held", false)
	})

	t.Run("an agent Pod being deleted does not hold", func(t *testing.T) {
		const finalizer = "example.com/keep"
		e.agentPod(t, "agent-2", true, "l4", finalizer)
		e.becomes(t, "a new agent Pod with a finalizer, Ready and annotated: a claiming pod of l4 held", true)
		e.deleteAgentPod(t, "agent-2")
		e.becomes(t, "the agent's Pod marked for deletion, still Ready: a claiming pod of l4 not held", false)
		if _, err := cp.kube.CoreV1().Pods(agentNS).Patch(t.Context(), "agent-2", types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("its ServiceAccount may steer pods in default, and nothing more", func(t *testing.T) {
		e.agentPod(t, "agent-3", true, "l4")
		e.becomes(t, "a new agent Pod Ready and annotated: a claiming pod of l4 held", true)
		ctx := t.Context()
		kube := e.agent
		p := e.expect(t, "a claiming pod of l4", true, replicaPod())
		ml := e.expect(t, "a pod in ml", false, replicaPod(inNamespace("ml")))
		for what, err := range map[string]error{
			"get its own Pod": errOf(kube.CoreV1().Pods(agentNS).Get(ctx, "agent-3", metav1.GetOptions{})),
			"patch a Pod in default": errOf(kube.CoreV1().Pods("default").Patch(ctx, p.Name, types.MergePatchType,
				fmt.Appendf(nil, `{"metadata":{"annotations":{%q:""}}}`, agentv1alpha1.AnnotationSteeredTo), metav1.PatchOptions{})),
			"get the policy":           errOf(kube.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(ctx, agentv1alpha1.SteeringPolicy, metav1.GetOptions{})),
			"list policies":            errOf(kube.AdmissionregistrationV1().MutatingAdmissionPolicies().List(ctx, metav1.ListOptions{})),
			"get the policy's binding": errOf(kube.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Get(ctx, agentv1alpha1.SteeringPolicy, metav1.GetOptions{})),
			"list bindings":            errOf(kube.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})),
			"watch policies": func() error {
				w, err := kube.AdmissionregistrationV1().MutatingAdmissionPolicies().Watch(ctx, metav1.ListOptions{})
				if err == nil {
					w.Stop()
				}
				return err
			}(),
			"watch bindings": func() error {
				w, err := kube.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Watch(ctx, metav1.ListOptions{})
				if err == nil {
					w.Stop()
				}
				return err
			}(),
		} {
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
		}
		// Update is the release, proved above as this ServiceAccount.
		if err := kube.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete a Pod in default: %v", err)
		}

		_, err := kube.CoreV1().Pods("default").Create(ctx, replicaPod(), metav1.CreateOptions{})
		forbidden(t, "create a Pod in default", err)
		q := e.expect(t, "a claiming pod of l4", true, replicaPod())
		forbidden(t, "bind a Pod", kube.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: q.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: "l4-0"}}, metav1.CreateOptions{}))
		_, err = kube.CoreV1().Pods("default").UpdateStatus(ctx, q, metav1.UpdateOptions{})
		forbidden(t, "update a Pod's status in default", err)
		_, err = kube.CoreV1().Pods("ml").Update(ctx, ml, metav1.UpdateOptions{})
		forbidden(t, "update a Pod in another namespace", err)
		_, err = kube.CoreV1().Pods("ml").Patch(ctx, ml.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"x":"y"}}}`), metav1.PatchOptions{})
		forbidden(t, "patch a Pod in another namespace", err)
		forbidden(t, "delete a Pod in another namespace", kube.CoreV1().Pods("ml").Delete(ctx, ml.Name, metav1.DeleteOptions{}))
		_, err = kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		forbidden(t, "list Pods cluster-wide", err)
		_, err = kube.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
		forbidden(t, "watch Pods cluster-wide", err)
		forbidden(t, "delete Pods of another namespace by collection", kube.CoreV1().Pods("ml").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
		forbidden(t, "delete a Pod in its own namespace", kube.CoreV1().Pods(agentNS).Delete(ctx, "agent-3", metav1.DeleteOptions{}))

		policy, err := cp.kube.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(ctx, agentv1alpha1.SteeringPolicy, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		policy.Spec.FailurePolicy = new(admissionregistrationv1.Fail)
		_, err = kube.AdmissionregistrationV1().MutatingAdmissionPolicies().Update(ctx, policy, metav1.UpdateOptions{})
		forbidden(t, "update the policy", err)
		forbidden(t, "delete the policy", kube.AdmissionregistrationV1().MutatingAdmissionPolicies().Delete(ctx, agentv1alpha1.SteeringPolicy, metav1.DeleteOptions{}))
		_, err = kube.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Patch(ctx, agentv1alpha1.SteeringPolicy, types.MergePatchType, []byte(`{"spec":{"paramRef":{"parameterNotFoundAction":"Deny"}}}`), metav1.PatchOptions{})
		forbidden(t, "patch the policy's binding", err)
		_, err = kube.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: agentv1alpha1.SteeringPolicy},
		}, metav1.CreateOptions{})
		forbidden(t, "create a binding", err)
	})

	t.Run("on-call's command releases every held pod, and only them", func(t *testing.T) {
		docs, err := os.ReadFile(filepath.Join(cp.root, "docs", "operations.md"))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []string{ungateCommand, uninstallCommand} {
			if !strings.Contains(string(docs), c) {
				t.Errorf("docs/operations.md does not give the command this test runs:\n%s", c)
			}
		}
		e.expect(t, "a claiming pod of l4", true, replicaPod())
		b := e.expect(t, "a claiming pod of l4 with another's gate", true, replicaPod(gatedBy("example.com/other")))
		free := e.expect(t, "a claimless pod", false, replicaPod(claimless()))
		// No agent returns.
		e.deleteAgentPod(t, "agent-3")
		if kubectl, err := exec.LookPath("kubectl"); err == nil {
			out, err := e.onCall(t, ungateCommand)
			if err != nil {
				t.Fatalf("the command: %v\n%s", err, out)
			}
			t.Logf("ran the command with %s:\n%s", kubectl, out)
		} else {
			t.Logf("no kubectl on PATH: the command's patch, through the client, to each pod it would select")
			all, err := cp.kube.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range all.Items {
				if p := &all.Items[i]; held(t, p) {
					if _, err := cp.kube.CoreV1().Pods(p.Namespace).Patch(t.Context(), p.Name, types.StrategicMergePatchType, []byte(ungatePatch), metav1.PatchOptions{}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		all, err := cp.kube.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range all.Items {
			p := &all.Items[i]
			if held(t, p) {
				t.Errorf("pod %s/%s is still held", p.Namespace, p.Name)
			}
			switch p.Name {
			case b.Name:
				if diff := cmp.Diff([]corev1.PodSchedulingGate{{Name: "example.com/other"}}, p.Spec.SchedulingGates); diff != "" {
					t.Errorf("the command removed another's gate: -want, +got:\n%s", diff)
				}
			case free.Name:
				if p.ResourceVersion != free.ResourceVersion {
					t.Errorf("the command wrote pod %s, which was not held", p.Name)
				}
			}
		}
	})

	t.Run("the policy or its binding deleted: nothing is held", func(t *testing.T) {
		ctx := t.Context()
		admission := cp.kube.AdmissionregistrationV1()
		e.agentPod(t, "agent-4", true, "l4")
		e.becomes(t, "a new agent Pod Ready and annotated: a claiming pod of l4 held", true)
		if err := admission.MutatingAdmissionPolicyBindings().Delete(ctx, agentv1alpha1.SteeringPolicy, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.becomes(t, "the binding deleted: a claiming pod of l4 not held", false)
		cp.installFrom(t, overlay)
		e.becomes(t, "the binding applied again: a claiming pod of l4 held", true)
		if err := admission.MutatingAdmissionPolicies().Delete(ctx, agentv1alpha1.SteeringPolicy, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.becomes(t, "the policy deleted: a claiming pod of l4 not held", false)

		cp.installFrom(t, overlay)
		e.becomes(t, "the overlay applied again: a claiming pod of l4 held", true)
		if _, err := exec.LookPath("kubectl"); err == nil {
			out, err := e.onCall(t, uninstallCommand)
			if err != nil {
				t.Fatalf("the uninstall's first step: %v\n%s", err, out)
			}
			t.Logf("ran the uninstall's first step:\n%s", out)
		} else {
			t.Logf("no kubectl on PATH: the uninstall's deletes through the client")
			if err := admission.MutatingAdmissionPolicyBindings().Delete(ctx, agentv1alpha1.SteeringPolicy, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := admission.MutatingAdmissionPolicies().Delete(ctx, agentv1alpha1.SteeringPolicy, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := admission.MutatingAdmissionPolicyBindings().Get(ctx, agentv1alpha1.SteeringPolicy, metav1.GetOptions{}); !kerrors.IsNotFound(err) {
			t.Errorf("the binding after the uninstall's first step: want NotFound, got %v", err)
		}
		if _, err := admission.MutatingAdmissionPolicies().Get(ctx, agentv1alpha1.SteeringPolicy, metav1.GetOptions{}); !kerrors.IsNotFound(err) {
			t.Errorf("the policy after the uninstall's first step: want NotFound, got %v", err)
		}
		e.becomes(t, "the uninstall's first step: a claiming pod of l4 not held", false)
	})
}

// onCall runs a shell command of docs/operations.md, with kubectl as an
// admin of the control plane.
func (e *steeringEnv) onCall(t *testing.T, command string) (string, error) {
	t.Helper()
	kubeconfig := e.cp.kubeconfig(t, "on-call", "https://"+e.cp.addr, e.cp.adminToken)
	return testenv.Run(t.Context(), e.cp.logs, []string{"KUBECONFIG=" + kubeconfig}, "sh", "-c", command)
}

// errOf is the error of a call's two results.
func errOf[T any](_ T, err error) error { return err }
