package fleet

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// KWOK (sigs.k8s.io/kwok's kwok, test/live/controlplane/kwok) is the
// kubelet of every GPU pool node: it marks a node Ready and renews its
// Lease, runs each pod bound to it (Running, then Ready), and finishes a
// pod's deletion. The node outside the pools is not KWOK's: the agent's
// Pods run there, and the test plays their kubelet (agentProcess).
const (
	// kwokAnnotation selects the nodes KWOK keeps
	// (--manage-nodes-with-annotation-selector).
	kwokAnnotation = "kwok.x-k8s.io/node"
	kwokManaged    = "fake"

	// kwokPodDelay is how long each of a pod's stages takes: created,
	// init containers run and done, Ready; and a deletion finished. No
	// jitter, so that the scenarios' timings do not vary with it.
	kwokPodDelay = 500 * time.Millisecond

	// kwokLeaseSeconds is the nodes' Lease duration; KWOK renews each
	// Lease every quarter of it (10 s), as a kubelet does.
	kwokLeaseSeconds = 40

	// nodeMonitorGrace is how long the node-lifecycle controller waits for
	// a node's Lease to be renewed before it marks the node NotReady
	// (--node-monitor-grace-period; 50 s by default): four renewals, so
	// that a loaded machine does not kill a live node.
	nodeMonitorGrace = 40 * time.Second

	// tolerationSeconds is how long a pod tolerates a NotReady or
	// unreachable node before it is evicted (the API servers'
	// --default-*-toleration-seconds; 300 s by default).
	tolerationSeconds = 10
)

// kwokStages are the stages KWOK runs, from its module's kustomize/stage/:
// a node's initialization and heartbeat with a Lease, and the general pod
// stages but pod-complete (a model server does not complete).
var kwokStages = []string{
	"node/fast/node-initialize.yaml",
	"node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"pod/general/pod-create.yaml",
	"pod/general/pod-init-container-running.yaml",
	"pod/general/pod-init-container-completed.yaml",
	"pod/general/pod-ready.yaml",
	"pod/general/pod-delete.yaml",
}

// writeKWOKConfig writes KWOK's --config, its stages as the module ships them
// but for the pod stages' delays (kwokPodDelay, no jitter), and returns
// its path.
//
// pod-delete's shipped jitter runs to the pod's deletionTimestamp, the end
// of its grace period: a kubelet whose containers stop at once finishes
// sooner, and this one does, after kwokPodDelay.
func (f *fleet) writeKWOKConfig(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(envKWOK)
	if dir == "" {
		t.Fatalf("%s is not set: TestMain sets it to KWOK's module directory", envKWOK)
	}
	var out bytes.Buffer
	for _, s := range kwokStages {
		b, err := os.ReadFile(filepath.Join(dir, "kustomize", "stage", s))
		if err != nil {
			t.Fatalf("cannot read KWOK's stage %s: %v", s, err)
		}
		stage := map[string]any{}
		if err := yaml.Unmarshal(b, &stage); err != nil {
			t.Fatalf("cannot read KWOK's stage %s: %v", s, err)
		}
		if filepath.Dir(s) == "pod/general" {
			spec, _ := stage["spec"].(map[string]any)
			if spec == nil {
				t.Fatalf("KWOK's stage %s has no spec", s)
			}
			spec["delay"] = map[string]any{"durationMilliseconds": kwokPodDelay.Milliseconds()}
		}
		b, err = yaml.Marshal(stage)
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString("---\n")
		out.Write(b)
	}
	file := filepath.Join(f.logs, "kwok-stages.yaml")
	if err := os.WriteFile(file, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// startKWOK starts the cluster's KWOK, and one for each node of a mortal
// pool, and waits until every pool node is Ready, with a Lease, and no
// longer tainted not-ready.
func (w *workload) startKWOK(t *testing.T, f *fleet) {
	t.Helper()
	w.kwok = w.startKWOKFor(t, f, kwokManaged)
	w.mortal = map[string]*harness.Process{}
	for _, p := range w.spec.pools {
		if !p.mortal {
			continue
		}
		for i := range p.nodes {
			name := fmt.Sprintf("%s-%d", p.name, i)
			w.mortal[name] = w.startKWOKFor(t, f, name)
		}
	}
	for _, name := range append(w.poolNodes(), systemNode) {
		w.waitNodeUp(t, name, time.Minute)
	}
}

// startKWOKFor starts a KWOK for the nodes whose kwokAnnotation is keeper.
func (w *workload) startKWOKFor(t *testing.T, f *fleet, keeper string) *harness.Process {
	t.Helper()
	_, kubeconfig := w.api.adminKubeconfig(t)
	name := w.spec.name + "-kwok"
	if keeper != kwokManaged {
		name += "-" + keeper
	}
	p := harness.StartProcessOf(t, f.owner, f.logs, name, filepath.Join(f.bin, "kwok"), nil,
		"--kubeconfig="+kubeconfig, "--config="+f.kwokConfig,
		"--manage-nodes-with-annotation-selector="+kwokAnnotation+"="+keeper,
		"--node-lease-duration-seconds="+strconv.Itoa(kwokLeaseSeconds))
	p.Running(t)
	return p
}

// waitNodeUp waits until a node is Ready, has a Lease, and is no longer
// tainted not-ready or unreachable, and returns when it was.
func (w *workload) waitNodeUp(t *testing.T, name string, timeout time.Duration) time.Time {
	t.Helper()
	eventually(t, timeout, "node "+name+" Ready and untainted in "+w.spec.name, func() error {
		n := &corev1.Node{}
		if err := w.api.c.Get(t.Context(), client.ObjectKey{Name: name}, n); err != nil {
			return err
		}
		if !nodeReady(n) {
			return fmt.Errorf("not Ready: %v", n.Status.Conditions)
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == corev1.TaintNodeNotReady || taint.Key == corev1.TaintNodeUnreachable {
				return fmt.Errorf("tainted %s:%s", taint.Key, taint.Effect)
			}
		}
		l := &coordinationv1.Lease{}
		if err := w.api.c.Get(t.Context(), client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: name}, l); err != nil {
			return fmt.Errorf("no Lease: %w", err)
		}
		return nil
	})
	return time.Now()
}

// heartbeat renews a node's Lease every 10 s until the test ends, as its
// kubelet would: the test plays the kubelet of the node outside the pools,
// whose only pods are the agent's (agentProcess).
func (w *workload) heartbeat(t *testing.T, f *fleet, node string) {
	t.Helper()
	renew := func() error {
		ctx := f.owner.Context()
		now := metav1.NewMicroTime(time.Now())
		l := &coordinationv1.Lease{}
		err := w.api.c.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: node}, l)
		if kerrors.IsNotFound(err) {
			l = &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: node},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: new(node), LeaseDurationSeconds: new(int32(kwokLeaseSeconds)), RenewTime: &now},
			}
			return w.api.c.Create(ctx, l)
		}
		if err != nil {
			return err
		}
		l.Spec.RenewTime = &now
		return w.api.c.Update(ctx, l)
	}
	eventually(t, time.Minute, "node "+node+"'s first Lease in "+w.spec.name, renew)
	go func() {
		tick := time.NewTicker(kwokLeaseSeconds * time.Second / 4)
		defer tick.Stop()
		for {
			select {
			case <-f.owner.Context().Done():
				return
			case <-tick.C:
				_ = renew() // The API server restarting, or the test ending: the next tick tries again.
			}
		}
	}()
}

// poolNodes are the names of the cluster's GPU pool nodes, KWOK's.
func (w *workload) poolNodes() []string {
	var out []string
	for _, p := range w.spec.pools {
		for i := range p.nodes {
			out = append(out, fmt.Sprintf("%s-%d", p.name, i))
		}
	}
	return out
}

// nodeReady is whether the node's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
