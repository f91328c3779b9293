package cluster

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	fsv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// steeringPod is a claiming pod of pool h100 with a container, an
// annotation and a label nobody reads, and the fields steering reads.
func steeringPod(name string, gated bool) *corev1.Pod {
	claim := name + "-gpu"
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "3",
			Labels:        map[string]string{"app": "x"},
			Annotations:   map[string]string{"other": "x", AnnotationLWSSize: "2"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Spec: corev1.PodSpec{
			NodeSelector:   map[string]string{fsv1alpha1.LabelPool: "h100", "zone": "a"},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: new("t")}},
			Containers:     []corev1.Container{{Name: "engine", Image: "vllm"}},
		},
		Status: corev1.PodStatus{
			Phase:                 corev1.PodPending,
			ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: &claim}},
			Conditions:            []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse}, {Type: corev1.ContainersReady, Status: corev1.ConditionFalse}},
		},
	}
	if gated {
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGate}}
	}
	return p
}

// TestSlimPod checks what the cache keeps of a pod: a held one whole (but
// its managed fields), for the one update that releases it; of the
// others, what counting bound pods and steering read.
func TestSlimPod(t *testing.T) {
	held := steeringPod("held", true)
	got, err := slimPod(held.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	want := held.DeepCopy()
	want.ManagedFields = nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a held pod: -want, +got:\n%s", diff)
	}

	free := steeringPod("free", false)
	got, err = slimPod(free.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	want = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "free", UID: free.UID, ResourceVersion: "3", Labels: free.Labels, Annotations: map[string]string{AnnotationLWSSize: "2"}},
		Spec:       corev1.PodSpec{NodeSelector: map[string]string{fsv1alpha1.LabelPool: "h100"}, ResourceClaims: free.Spec.ResourceClaims},
		Status:     corev1.PodStatus{Phase: corev1.PodPending, ResourceClaimStatuses: free.Status.ResourceClaimStatuses, Conditions: free.Status.Conditions[:1]},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a pod not held: -want, +got:\n%s", diff)
	}
}

// TestSteeringIndexes checks the pods steering finds: held ones, claiming
// ones of a pool, and pinned ones not bound yet, by pool.
func TestSteeringIndexes(t *testing.T) {
	c := newCluster(t, "default")
	pinned := steeringPod("pinned", false)
	pinned.Annotations[v1alpha1.AnnotationSteeredTo] = "n1"
	bound := pinned.DeepCopy()
	bound.Name, bound.Spec.NodeName = "bound", "n1"
	unpinned := steeringPod("unpinned", false)
	unpinned.Annotations[v1alpha1.AnnotationSteeredTo] = ""
	other := steeringPod("other", true)
	other.Spec.NodeSelector[fsv1alpha1.LabelPool] = "l4"
	claimless := steeringPod("claimless", false)
	claimless.Spec.ResourceClaims = nil
	if err := c.Inject(steeringPod("held", true), pinned, bound, unpinned, other, claimless); err != nil {
		t.Fatal(err)
	}
	names := func(pods []*corev1.Pod) []string {
		var out []string
		for _, p := range pods {
			out = append(out, p.Name)
		}
		return out
	}
	if diff := cmp.Diff([]string{"held", "other"}, names(c.HeldPods())); diff != "" {
		t.Errorf("HeldPods: -want, +got:\n%s", diff)
	}
	if diff := cmp.Diff([]string{"bound", "held", "pinned", "unpinned"}, names(c.ClaimingPods("h100"))); diff != "" {
		t.Errorf("ClaimingPods(h100): -want, +got:\n%s", diff)
	}
	if diff := cmp.Diff(map[string][]string{"h100": {"pinned"}}, func() map[string][]string {
		out := map[string][]string{}
		for pool, pods := range c.PinnedPods() {
			out[pool] = names(pods)
		}
		return out
	}()); diff != "" {
		t.Errorf("PinnedPods: -want, +got:\n%s", diff)
	}
}
