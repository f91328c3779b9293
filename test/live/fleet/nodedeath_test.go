package fleet

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// nodeDies: a node of a placed replica dies (its KWOK killed, so its
// Lease is no longer renewed) and the scenario records what the fleet
// does, end to end (docs/live-fleet.md, scenario 11): the node NotReady,
// its pod evicted and left Terminating, the Deployment's new pod bound on
// the pool's other node, the pool's report without the dead node, the
// replica not re-placed; then what the operator does (the out-of-service
// taint), and the node back.
func nodeDies(t *testing.T, f *fleet) { //nolint:thelper // A scenario run by t.Run: its failures are its own lines.
	w := f.clusters["beta"]
	f.waitReport(t, "beta", "mortal", map[int64]int64{4: 2}, settle)
	apply(t, f.cp.c, deployment("doomed", "beta", "NVIDIA A100", 1, 4))
	rs := f.waitPlaced(t, "doomed", 1, "beta", "mortal", settle)
	dead := f.waitBound(t, "beta", rs, settle)[rs[0].GetName()]
	f.waitPodsScheduled(t, "True", rs, settle)
	f.waitReport(t, "beta", "mortal", map[int64]int64{0: 1, 4: 1}, settle)
	old := w.pods(t, rs[0].GetName())[0]
	alive := "mortal-0"
	if dead == alive {
		alive = "mortal-1"
	}

	killed := time.Now()
	w.mortal[dead].Kill(t)
	since := func() time.Duration { return time.Since(killed).Round(time.Second) }
	eventually(t, nodeMonitorGrace+time.Minute, "node "+dead+" NotReady (Unknown) and tainted unreachable", func() error {
		n := &corev1.Node{}
		if err := w.api.c.Get(t.Context(), client.ObjectKey{Name: dead}, n); err != nil {
			return err
		}
		if nodeReady(n) || !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == corev1.TaintNodeUnreachable && t.Effect == corev1.TaintEffectNoExecute
		}) {
			return fmt.Errorf("conditions %v, taints %v", n.Status.Conditions, n.Spec.Taints)
		}
		return nil
	})
	t.Logf("%s NotReady and tainted %s:NoExecute %s after its KWOK was killed (--node-monitor-grace-period %s)", dead, corev1.TaintNodeUnreachable, since(), nodeMonitorGrace)

	eventually(t, time.Duration(tolerationSeconds)*time.Second+settle, "replica "+rs[0].GetName()+"'s pod on "+dead+" evicted", func() error {
		p := &corev1.Pod{}
		if err := w.api.c.Get(t.Context(), client.ObjectKeyFromObject(&old), p); err != nil {
			return err
		}
		if p.DeletionTimestamp == nil {
			return fmt.Errorf("pod %s not being deleted", p.Name)
		}
		return nil
	})
	t.Logf("its pod %s evicted (Terminating) %s after the kill (tolerations of %ds)", old.Name, since(), tolerationSeconds)

	var moved corev1.Pod
	eventually(t, settle, "the Deployment's new pod bound on "+alive+", Running and Ready", func() error {
		pods := w.pods(t, rs[0].GetName())
		if len(pods) != 1 || pods[0].Spec.NodeName != alive || !podReady(pods[0]) {
			return fmt.Errorf("pods %v", nodeNames(pods))
		}
		moved = pods[0]
		return nil
	})
	t.Logf("the Deployment's new pod %s bound on %s and Ready %s after the kill", moved.Name, alive, since())
	// The dead node's pod stays Terminating: no kubelet confirms its
	// containers stopped, so nothing deletes it, and its claim stays
	// allocated, holding its GPUs on the dead node.
	if !podExists(t, w, old) {
		t.Errorf("pod %s on the dead node %s is gone before anything could confirm its containers stopped", old.Name, dead)
	}
	// The report: two nodes, the dead one left out of the histogram (its
	// unreachable NoSchedule taint is not the pool's to tolerate), and the
	// live one full.
	f.waitReport(t, "beta", "mortal", map[int64]int64{0: 1}, settle)
	if n := number(f.poolReport(t, "beta", "mortal")["observedNodes"]); n != 2 {
		t.Errorf("mortal's report observes %d nodes, want 2: a dead node is still the pool's", n)
	}
	t.Logf("mortal's report: %s left out, %s full, %s after the kill", dead, alive, since())
	f.waitPodsScheduled(t, "True", rs, settle)
	if got := f.replicas(t, "doomed"); len(got) != 1 || got[0].GetName() != rs[0].GetName() || where(got[0]).pool != "mortal" {
		t.Errorf("the replica moved: %v", got)
	}

	// What the operator does for a node that will not come back (or
	// whose state is unknown): taint it out-of-service; the pod garbage
	// collector then deletes its Terminating pods at once, and the
	// resourceclaim controller releases their claims.
	if len(old.Status.ResourceClaimStatuses) != 1 || old.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s has no claim made from its template: %+v", old.Name, old.Status.ResourceClaimStatuses)
	}
	claim := *old.Status.ResourceClaimStatuses[0].ResourceClaimName
	tainted := time.Now()
	n := &corev1.Node{}
	eventually(t, 30*time.Second, "node "+dead+" tainted out-of-service", func() error {
		if err := w.api.c.Get(t.Context(), client.ObjectKey{Name: dead}, n); err != nil {
			return err
		}
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		return w.api.c.Update(t.Context(), n)
	})
	eventually(t, settle, "pod "+old.Name+" and its claim gone", func() error {
		if podExists(t, w, old) {
			return fmt.Errorf("pod %s still exists", old.Name)
		}
		c := &resourcev1.ResourceClaim{}
		switch err := w.api.c.Get(t.Context(), types.NamespacedName{Namespace: old.Namespace, Name: claim}, c); {
		case kerrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return fmt.Errorf("claim %s still exists", claim)
	})
	t.Logf("out-of-service: pod %s and its claim deleted %s after the taint", old.Name, time.Since(tainted).Round(time.Second))

	// The node comes back: its KWOK started again, the operator's taint
	// removed; the node-lifecycle controller lifts the unreachable taints
	// and the report counts the node again.
	w.mortal[dead] = w.startKWOKFor(t, f, dead)
	eventually(t, 30*time.Second, "node "+dead+"'s out-of-service taint removed", func() error {
		if err := w.api.c.Get(t.Context(), client.ObjectKey{Name: dead}, n); err != nil {
			return err
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeOutOfService })
		return w.api.c.Update(t.Context(), n)
	})
	back := time.Now()
	up := w.waitNodeUp(t, dead, settle)
	f.waitReport(t, "beta", "mortal", map[int64]int64{0: 1, 4: 1}, settle)
	t.Logf("%s back: Ready and untainted %s after its KWOK restarted, in mortal's report %s after", dead, up.Sub(back).Round(time.Second), time.Since(up).Round(time.Second))

	if err := f.cp.c.Delete(t.Context(), harness.Object(apiVersion, "ModelDeployment", namespace, "doomed")); err != nil && !kerrors.IsNotFound(err) {
		t.Fatal(err)
	}
	f.waitReport(t, "beta", "mortal", map[int64]int64{4: 2}, settle)
}

// podExists is whether the pod, this very one (by uid), still exists,
// Terminating or not.
func podExists(t *testing.T, w *workload, pod corev1.Pod) bool {
	t.Helper()
	p := &corev1.Pod{}
	err := w.api.c.Get(t.Context(), client.ObjectKeyFromObject(&pod), p)
	if err != nil && !kerrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil && p.UID == pod.UID
}
