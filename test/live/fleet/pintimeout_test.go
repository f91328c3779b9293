package fleet

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// pinTimeout: a pod steered and pinned to a node that loses its devices
// before the pod binds would wait for ever, so the agent deletes it once
// --steering-pin-timeout (30s) has passed since its release
// (docs/cluster-agent.md#steering), and its controller makes it again,
// held and steered to a node that has its claim free. With alpha's
// kube-scheduler stopped a 4-GPU replica is placed on pair and its pod
// pinned to one of pair's two nodes; the test then takes two of that
// node's four GPUs out of its ResourceSlice, as a driver would for a
// device gone bad. The agent deletes the pod no sooner than the pin
// timeout, the ReplicaSet's new pod is pinned to the other node, and,
// kube-scheduler started again, binds there; nothing is re-placed.
func pinTimeout(t *testing.T, f *fleet) { //nolint:thelper // A scenario run by t.Run: its failures are its own lines.
	const pinTimeout = 30 * time.Second // the agent's default, which the chart keeps
	w := f.clusters["alpha"]
	f.waitSteering(t, "alpha", "pair", steered, settle)
	// pair empty as the function sees it, so that pinned goes there and
	// not to spare: the earlier replicas gone (a replica being deleted is
	// charged where it was placed) and pair's report in the
	// InferenceCluster showing both nodes free.
	gone := []string{"unheld", "held", "handover"}
	f.deleteDeployments(t, "alpha", gone...)
	eventually(t, settle, fmt.Sprintf("the ModelReplicas of %v gone", gone), func() error {
		for _, d := range gone {
			if n := len(f.replicas(t, d)); n > 0 {
				return fmt.Errorf("%d of %s left", n, d)
			}
		}
		return nil
	})
	w.waitPoolObservation(t, "pair", map[int64]int64{4: 2}, settle)
	f.waitReport(t, "alpha", "pair", map[int64]int64{4: 2}, settle)
	deletedBefore := w.agent.metric(t, "cluster_agent_steering_decisions_total", `pool="pair"`, `outcome="deleted"`)

	pw := w.watchPods(t, "pair")
	w.scheduler.Stop(t)
	apply(t, f.cp.c, deployment("pinned", "alpha", "NVIDIA A10G", 1, 4))
	replicas := f.waitPlaced(t, "pinned", 1, "alpha", "pair", settle)
	var first string
	eventually(t, settle, "pinned's pod released, pinned to a node", func() error {
		pods := w.pods(t, replicas[0].GetName())
		if len(pods) != 1 || pods[0].Spec.NodeSelector[poolLabel] != "pair" {
			return fmt.Errorf("%d pods, on pools %v", len(pods), poolsOf(pods))
		}
		r := pw.of(t, pods[0].Name)[0]
		if r.released.IsZero() || len(r.steeredTo) == 0 || r.steeredTo[0] == "" {
			return fmt.Errorf("pod %s: held %t, released at %s, steered to %q", r.name, r.gated, r.released, r.steeredTo)
		}
		first = r.name
		return nil
	})
	rec := pw.of(t, first)[0]
	node := rec.steeredTo[0]
	other := "pair-0"
	if node == other {
		other = "pair-1"
	}
	shrink := w.setGPUs(t, node, 2)
	t.Logf("pod %s pinned to %s; %d of its GPUs left in its ResourceSlice, %s after the release", first, node, 2, shrink.Sub(rec.released).Round(100*time.Millisecond))

	deleted := time.Now()
	eventually(t, pinTimeout+settle, "pod "+first+" deleted by the agent", func() error {
		_, err := w.api.kube.CoreV1().Pods(v1alpha1.WorkloadNamespace).Get(t.Context(), first, metav1.GetOptions{})
		switch {
		case kerrors.IsNotFound(err):
			deleted = time.Now()
			return nil
		case err != nil:
			return fmt.Errorf("cannot read it: %w", err)
		}
		return errors.New("still there")
	})
	// The watch saw the release a little after the agent made it, so
	// the deletion can be seen up to a second early against it.
	if after := deleted.Sub(rec.released); after < pinTimeout-time.Second {
		t.Errorf("pod %s was deleted %s after its release, before the pin timeout of %s", first, after.Round(100*time.Millisecond), pinTimeout)
	} else {
		t.Logf("pod %s deleted %s after its release (pin timeout %s)", first, after.Round(100*time.Millisecond), pinTimeout)
	}
	if got := w.agent.metric(t, "cluster_agent_steering_decisions_total", `pool="pair"`, `outcome="deleted"`); got != deletedBefore+1 {
		t.Errorf("cluster_agent_steering_decisions_total{pool=pair,outcome=deleted} went from %v to %v, want one more", deletedBefore, got)
	}
	if b, err := os.ReadFile(w.agent.proc.Log); err != nil || !strings.Contains(string(b), "Deleted a pinned pod whose node no longer has its claim free") {
		t.Errorf("the agent's log %s has no line of the deletion (%v)", w.agent.proc.Log, err)
	}

	var second string
	eventually(t, settle, "pinned's new pod released, pinned to "+other, func() error {
		for _, p := range w.pods(t, replicas[0].GetName()) {
			if p.Name == first || p.Spec.NodeSelector[poolLabel] != "pair" {
				continue
			}
			n := p.Name
			r := pw.of(t, n)[0]
			if r.released.IsZero() {
				return fmt.Errorf("pod %s not released yet", n)
			}
			second = n
			return nil
		}
		return errors.New("no new pod yet")
	})
	w.startScheduler(t, f)
	f.waitBound(t, "alpha", replicas, settle)
	r := pw.bound(t, second)[0]
	if !r.gated || r.writes != 1 || len(r.steeredTo) != 1 || r.steeredTo[0] != other || r.node != other {
		t.Errorf("pinned's new pod %s: held %t, %d writes, steered to %q, bound to %q; want held, released once pinned to %s and bound there", r.name, r.gated, r.writes, r.steeredTo, r.node, other)
	}
	f.waitPodsScheduled(t, "True", replicas, settle)
	if got := f.replicas(t, "pinned"); len(got) != 1 || got[0].GetName() != replicas[0].GetName() || where(got[0]) != where(replicas[0]) {
		t.Errorf("pinned's replica moved: %v", got)
	}

	w.setGPUs(t, node, 4)
	f.deleteDeployments(t, "alpha", "pinned")
	w.waitPoolObservation(t, "pair", map[int64]int64{4: 2}, settle)
}

// poolsOf are the pools the pods' nodeSelectors name.
func poolsOf(pods []corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Spec.NodeSelector[poolLabel])
	}
	return out
}
