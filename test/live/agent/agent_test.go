package agent

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// within is how soon a change must show in the agent's status.
const within = 15 * time.Second

// agentProc is a replica of the agent, run as a process.
type agentProc struct {
	*harness.Process

	id, health, metrics string
}

// scenario is the cluster, its changes, and how the agent is run.
type scenario struct {
	cp         *controlPlane
	changes    changes
	rec        *recorder
	args       []string // the shipped Deployment's
	kubeconfig string
	// defaults runs the agent with the default timings.
	defaults bool
}

// startAgent starts a replica of the agent with the shipped Deployment's
// args, as the shipped ServiceAccount, and waits until it is ready.
func (s *scenario) startAgent(t *testing.T, id string, extra ...string) *agentProc {
	t.Helper()
	a := &agentProc{id: id, health: testenv.FreeLoopbackAddr(t), metrics: testenv.FreeLoopbackAddr(t)}
	var args []string
	for _, arg := range s.args {
		// Each replica serves on loopback ports of its own here.
		if !strings.HasPrefix(arg, "--health-address=") && !strings.HasPrefix(arg, "--metrics-address=") {
			args = append(args, arg)
		}
	}
	args = append(args, "--kubeconfig="+s.kubeconfig, "--health-address="+a.health, "--metrics-address="+a.metrics, "--verbosity=2")
	if !s.defaults {
		// Faster than the defaults, for a shorter test: proofs every 2s,
		// a crashed leader's Lease taken over after 6s.
		args = append(args, "--sync-interval=2s", "--lease-duration=6s", "--renew-deadline=4s", "--retry-period=1s")
	}
	args = append(args, extra...)
	a.Process = harness.StartProcessOf(t, s.cp.top, s.cp.logs, id, os.Getenv(envBin), []string{"POD_NAME=" + id, "POD_NAMESPACE=" + agentNS}, args...)
	eventually(t, time.Minute, id+" ready", func() error {
		a.Running(t)
		return a.get(t, "/readyz", a.health)
	})
	return a
}

func (a *agentProc) get(t *testing.T, path, addr string) error {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return nil
}

// holder is the Lease's holder.
func (s *scenario) holder(t *testing.T) string {
	t.Helper()
	l, err := s.cp.kube.CoordinationV1().Leases(agentNS).Get(t.Context(), "cluster-agent", metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return leaseHolder(l)
}

func leaseHolder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// reflected waits until every pool's status holds the report of the last
// change; with proven, also, for each pool whose report the change
// changed, an observedAt after the change (an unchanged report's advances
// with the heartbeat). It returns how long that took from the change.
func (s *scenario) reflected(t *testing.T, proven bool, timeout time.Duration) time.Duration {
	t.Helper()
	ch := s.changes.last()
	var before map[string]string
	if n := len(s.changes.list); n > 1 {
		before = s.changes.list[n-2].want
	}
	eventually(t, timeout, "every pool's status after "+ch.what, func() error {
		for pool, want := range ch.want {
			if want == "" {
				continue
			}
			got, err := s.cp.poolStatus(t.Context(), pool)
			if err != nil {
				return err
			}
			if got.synced != "True" || got.report != want {
				return fmt.Errorf("PoolObservation %s: Synced %q, report %s; want %s", pool, got.synced, got.report, want)
			}
			if proven && before[pool] != want && !got.observedAt.After(ch.done) {
				return fmt.Errorf("PoolObservation %s: observedAt %s, not after the change at %s", pool, got.observedAt.Format(time.RFC3339), ch.done.Format(time.RFC3339Nano))
			}
		}
		return nil
	})
	return time.Since(ch.done)
}

func TestAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: the control plane takes a while to start")
	}
	cp := startControlPlane(t)
	objs := cp.install(t)
	cp.fixtures(t)
	cp.allocate(t, "train-0", "l4-0", "gpu-0", "gpu-1")
	cp.allocate(t, "train-1", "h100-0", "gpu-0")
	s := &scenario{cp: cp, rec: cp.record(t), args: deploymentArgs(t, objs)}
	s.changes.make(t, cp, "the fixtures", func() {})

	px := cp.startProxy(t)
	token := cp.token(t, agentNS, agentSA)
	s.kubeconfig = cp.kubeconfig(t, agentSA, "https://"+px.addr, token)
	a1 := s.startAgent(t, "agent-1")

	t.Run("its ServiceAccount may do what the agent does, and nothing else", func(t *testing.T) {
		kube, err := kubernetes.NewForConfig(cp.as(token))
		if err != nil {
			t.Fatal(err)
		}
		dyn, err := dynamic.NewForConfig(cp.as(token))
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		for what, err := range map[string]error{
			"list Nodes": func() error { _, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err }(),
			"list ResourceClaims": func() error {
				_, err := kube.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
				return err
			}(),
			"list Pods in default": func() error { _, err := kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); return err }(),
			"get its Lease": func() error {
				_, err := kube.CoordinationV1().Leases(agentNS).Get(ctx, "cluster-agent", metav1.GetOptions{})
				return err
			}(),
			"list PoolObservations": func() error { _, err := dyn.Resource(poolObservations).List(ctx, metav1.ListOptions{}); return err }(),
		} {
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
		}
		po, err := dyn.Resource(poolObservations).Get(ctx, "l4", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		spec := po.DeepCopy()
		spec.Object["spec"].(map[string]any)["nodeSelector"] = map[string]any{"x": "y"}
		_, err = dyn.Resource(poolObservations).Update(ctx, spec, metav1.UpdateOptions{})
		forbidden(t, "update a PoolObservation's spec", err)
		_, err = dyn.Resource(poolObservations).Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "agent.modelplane.ai/v1alpha1", "kind": "PoolObservation", "metadata": map[string]any{"name": "x"}, "spec": map[string]any{}}}, metav1.CreateOptions{})
		forbidden(t, "create a PoolObservation", err)
		forbidden(t, "delete a PoolObservation", dyn.Resource(poolObservations).Delete(ctx, "l4", metav1.DeleteOptions{}))
		_, err = kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
		forbidden(t, "create a Node", err)
		_, err = kube.CoreV1().Nodes().Patch(ctx, "l4-0", "application/merge-patch+json", []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
		forbidden(t, "cordon a Node", err)
		c, err := kube.ResourceV1().ResourceClaims("default").Get(ctx, "train-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.Status.Allocation = nil
		_, err = kube.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, c, metav1.UpdateOptions{})
		forbidden(t, "deallocate a ResourceClaim", err)
		_, err = kube.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
		forbidden(t, "list Secrets", err)
		_, err = kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
		forbidden(t, "list Pods outside default", err)
		err = kube.CoreV1().Pods("default").Delete(ctx, "x", metav1.DeleteOptions{})
		forbidden(t, "delete a Pod", err)
		_, err = kube.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
		forbidden(t, "create a Lease outside its namespace", err)
		_, err = kube.CoordinationV1().Leases(agentNS).Get(ctx, "someone-elses", metav1.GetOptions{})
		forbidden(t, "read another Lease of its namespace", err)
	})

	t.Run("each pool's status is agent.PoolReport of the cluster's objects", func(t *testing.T) {
		// By hand: l4's nodes have 4 GPUs, l4-0 2 of them held; h100's 8,
		// h100-0 1 held.
		want := map[string]string{
			"l4":   `{"nodesByFreeDevices":[{"free":[{"count":4,"name":"gpu"}],"nodes":2},{"free":[{"count":2,"name":"gpu"}],"nodes":1}],"observedNodes":3}`,
			"h100": `{"nodesByFreeDevices":[{"free":[{"count":8,"name":"gpu"}],"nodes":1},{"free":[{"count":7,"name":"gpu"}],"nodes":1}],"observedNodes":2}`,
		}
		if diff := cmp.Diff(want, s.changes.last().want); diff != "" {
			t.Fatalf("agent.PoolReport of the fixtures: -by hand, +PoolReport:\n%s", diff)
		}
		took := s.reflected(t, true, time.Minute)
		t.Logf("first reports, observedAt after the fixtures: %s after the agent started", took.Round(time.Millisecond))
	})

	t.Run("a change shows within seconds", func(t *testing.T) {
		for _, c := range []struct {
			what string
			do   func()
		}{
			{"a claim allocated", func() { cp.allocate(t, "serve-0", "l4-1", "gpu-0", "gpu-1", "gpu-2") }},
			{"a claim deleted", func() { cp.deleteClaim(t, "train-0") }},
			{"a node cordoned", func() { cp.cordon(t, "h100-1", true) }},
			{"a node uncordoned", func() { cp.cordon(t, "h100-1", false) }},
			{"a slice removed", func() {
				if err := cp.kube.ResourceV1().ResourceSlices().Delete(t.Context(), "l4-2-gpus", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}},
			{"a slice published", func() { cp.createSlice(t, "l4-2-gpus", driver, "l4-2", 4) }},
			{"a device tainted by a DeviceTaintRule", func() {
				r := &resourcev1.DeviceTaintRule{
					ObjectMeta: metav1.ObjectMeta{Name: "xid-79"},
					Spec: resourcev1.DeviceTaintRuleSpec{
						DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: new(driver), Pool: new("h100-1"), Device: new("gpu-3")},
						Taint:          resourcev1.DeviceTaint{Key: "example.com/xid", Value: "79", Effect: resourcev1.DeviceTaintEffectNoSchedule},
					},
				}
				if _, err := cp.kube.ResourceV1().DeviceTaintRules().Create(t.Context(), r, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}},
		} {
			s.changes.make(t, cp, c.what, c.do)
			shown := s.reflected(t, false, within)
			proven := s.reflected(t, true, within)
			t.Logf("%s: in the status %s after, with an observedAt after it %s after", c.what, shown.Round(time.Millisecond), proven.Round(time.Millisecond))
		}
	})

	t.Run("PodsScheduled", func(t *testing.T) {
		ro := func(ns, name string, pods int64, selectors ...any) {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "agent.modelplane.ai/v1alpha1", "kind": "ReplicaObservation",
				"metadata": map[string]any{"namespace": ns, "name": name},
				"spec":     map[string]any{"selectors": selectors, "pods": pods},
			}}
			if _, err := cp.dyn.Resource(replicaObservations).Namespace(ns).Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		wait := func(ns, name, status, msg string) map[string]any {
			var cond map[string]any
			eventually(t, within, fmt.Sprintf("ReplicaObservation %s/%s PodsScheduled %s", ns, name, status), func() error {
				u, err := cp.dyn.Resource(replicaObservations).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
				for _, c := range conds {
					if m := c.(map[string]any); m["type"] == "PodsScheduled" && m["status"] == status && strings.Contains(fmt.Sprint(m["message"]), msg) {
						cond = m
						return nil
					}
				}
				return fmt.Errorf("status %v", u.Object["status"])
			})
			return cond
		}
		w := map[string]string{"modelplane.ai/workload": "qwen-0"}
		if _, err := cp.kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cp.pod(t, "default", "qwen-0-leader", "l4-1", w)
		cp.pod(t, "default", "qwen-0-worker", "", w)
		cp.pod(t, "ml", "qwen-0-elsewhere", "l4-0", w)
		ro("default", "qwen-0", 2, map[string]any{"matchLabels": map[string]any{"modelplane.ai/workload": "qwen-0"}})
		wait("default", "qwen-0", "False", "1 of 2 pods are bound to a node; 1 are not")

		bindStart := time.Now()
		cp.bind(t, "default", "qwen-0-worker", "l4-1")
		cond := wait("default", "qwen-0", "True", "2 of 2 pods are bound to a node")
		since, err := time.Parse(time.RFC3339, cond["lastTransitionTime"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if since.Before(bindStart.Truncate(time.Second)) {
			t.Errorf("PodsScheduled True since %s, before the pod was bound (%s)", since, bindStart.Format(time.RFC3339Nano))
		}
		t.Logf("PodsScheduled True %s after the bind, since %s", time.Since(bindStart).Round(time.Millisecond), since.Format(time.RFC3339))

		if err := cp.kube.CoreV1().Pods("default").Delete(t.Context(), "qwen-0-leader", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		wait("default", "qwen-0", "False", "1 of 2 pods are bound to a node")

		ro("ml", "qwen-1", 1, map[string]any{"matchLabels": map[string]any{"modelplane.ai/workload": "qwen-0"}})
		wait("ml", "qwen-1", "Unknown", "the agent does not read the pods of namespace ml")
		ro("default", "everything", 1, map[string]any{})
		wait("default", "everything", "Unknown", "spec.selectors[0]: empty")
	})

	t.Run("bad objects make their pool Synced False and stop no other", func(t *testing.T) {
		waitSynced := func(pool, status, reason, msg string) {
			eventually(t, within, fmt.Sprintf("PoolObservation %s Synced %s %s", pool, status, reason), func() error {
				u, err := cp.dyn.Resource(poolObservations).Get(t.Context(), pool, metav1.GetOptions{})
				if err != nil {
					return err
				}
				conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
				for _, c := range conds {
					m := c.(map[string]any)
					if m["type"] == "Synced" && m["status"] == status && m["reason"] == reason && strings.Contains(fmt.Sprint(m["message"]), msg) {
						if status == "False" {
							if _, has := u.Object["status"].(map[string]any)["observedAt"]; has {
								return fmt.Errorf("Synced False, but the status still has observedAt: %v", u.Object["status"])
							}
						}
						return nil
					}
				}
				return fmt.Errorf("status %v", u.Object["status"])
			})
		}
		s.changes.never = append(s.changes.never, "a100")
		s.changes.make(t, cp, "a PoolObservation of a DeviceClass the cluster lacks", func() { cp.createPoolObservation(t, "a100", "missing.example.com", 8) })
		waitSynced("a100", "False", "DeviceClassNotFound", `spec.devices[0].deviceClassName: the cluster has no DeviceClass "missing.example.com"`)
		s.reflected(t, true, within)

		s.changes.make(t, cp, "a claim holding a device its pool does not have", func() { cp.allocate(t, "garbage", "h100-1", "gpu-99") }, "h100")
		waitSynced("h100", "False", "InvalidObject", `ResourceClaim default/garbage: status.allocation.devices.results[0].device: "gpu-99" is not a device of resource pool gpu.example.com/h100-1`)
		s.reflected(t, true, within)

		s.changes.make(t, cp, "a slice of a driver no pool knows, on a pool's node", func() { cp.createSlice(t, "l4-1-other", "other.example.com", "l4-1", 2) }, "h100")
		s.reflected(t, true, within)

		s.changes.make(t, cp, "the garbage claim deleted", func() { cp.deleteClaim(t, "garbage") })
		waitSynced("h100", "True", "Observed", "")
		s.reflected(t, true, within)
	})

	t.Run("leadership hands over, and observedAt never goes back", func(t *testing.T) {
		if h := s.holder(t); h != a1.id {
			t.Fatalf("the Lease is held by %q, want %s", h, a1.id)
		}
		a2 := s.startAgent(t, "agent-2")
		if h := s.holder(t); h != a1.id {
			t.Fatalf("a second replica took the Lease from a leading one: held by %q", h)
		}
		// A clean stop releases the Lease: the other replica leads at once.
		stopped := time.Now()
		if err := a1.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		exited, how := a1.Exited()
		select {
		case <-exited:
			if err := how(); err != nil {
				t.Errorf("agent-1 exited with %v after SIGTERM; want 0", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("agent-1 did not exit within 20s of SIGTERM")
		}
		t.Logf("agent-1 exited %s after SIGTERM", time.Since(stopped).Round(time.Millisecond))
		eventually(t, 30*time.Second, "agent-2 leading", func() error {
			if h := s.holder(t); h != a2.id {
				return fmt.Errorf("the Lease is held by %q", h)
			}
			return nil
		})
		t.Logf("agent-2 led %s after agent-1 was asked to stop", time.Since(stopped).Round(time.Millisecond))
		s.changes.make(t, cp, "a claim allocated under agent-2", func() { cp.allocate(t, "serve-1", "h100-0", "gpu-1", "gpu-2") })
		s.reflected(t, true, within)

		// A crash leaves the Lease held until it expires.
		a1 = s.startAgent(t, "agent-1")
		crashed := time.Now()
		a2.Kill(t)
		eventually(t, time.Minute, "agent-1 leading again", func() error {
			if h := s.holder(t); h != a1.id {
				return fmt.Errorf("the Lease is held by %q", h)
			}
			return nil
		})
		t.Logf("agent-1 led %s after agent-2 was killed", time.Since(crashed).Round(time.Millisecond))
		s.changes.make(t, cp, "a claim deleted under agent-1", func() { cp.deleteClaim(t, "serve-1") })
		s.reflected(t, true, within)
	})

	t.Run("the API server killed and started again", func(t *testing.T) {
		before, err := cp.poolStatus(t.Context(), "l4")
		if err != nil {
			t.Fatal(err)
		}
		cp.api.Kill(t)
		down := time.Now()
		time.Sleep(10 * time.Second)
		cp.startAPIServer(t)
		t.Logf("the API server was down %s", time.Since(down).Round(time.Millisecond))
		s.changes.make(t, cp, "a claim allocated after the API server came back", func() { cp.allocate(t, "serve-2", "l4-0", "gpu-3") })
		took := s.reflected(t, true, time.Minute)
		after, err := cp.poolStatus(t.Context(), "l4")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("reports resumed %s after the change; observedAt %s before the outage, %s after", took.Round(time.Millisecond), before.observedAt.Format(time.RFC3339), after.observedAt.Format(time.RFC3339))
	})

	t.Run("a watch that stalls holds observedAt back", func(t *testing.T) {
		px.stall()
		time.Sleep(2 * time.Second)
		stalled, err := cp.poolStatus(t.Context(), "h100")
		if err != nil {
			t.Fatal(err)
		}
		ch := s.changes.make(t, cp, "a claim allocated while the agent's watches stall", func() { cp.allocate(t, "serve-3", "h100-1", "gpu-4", "gpu-5") })
		// Lists and the Lease still work: the agent leads on, but can
		// prove nothing newer.
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			got, err := cp.poolStatus(t.Context(), "h100")
			if err != nil {
				t.Fatal(err)
			}
			if got.observedAt.After(ch.done) {
				t.Fatalf("while its watches stall, the agent published observedAt %s, after the change at %s it cannot have seen (report %s)", got.observedAt.Format(time.RFC3339), ch.done.Format(time.RFC3339Nano), got.report)
			}
			time.Sleep(time.Second)
		}
		frozen, err := cp.poolStatus(t.Context(), "h100")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("stalled 12s: observedAt %s before, %s after", stalled.observedAt.Format(time.RFC3339), frozen.observedAt.Format(time.RFC3339))
		px.unstall()
		took := s.reflected(t, true, time.Minute)
		t.Logf("the watches flowed again: the change showed, proven, %s after it (10s of it stalled)", took.Round(time.Millisecond))
	})

	t.Run("without DeviceTaintRules the agent runs without them", func(t *testing.T) {
		a1.Stop(t)
		cp.api.Kill(t)
		// As a cluster older than Kubernetes 1.37, which has none in
		// resource.k8s.io/v1.
		cp.startAPIServer(t, "--runtime-config=resource.k8s.io/v1/devicetaintrules=false")
		if _, err := cp.kube.ResourceV1().DeviceTaintRules().List(t.Context(), metav1.ListOptions{}); err == nil {
			t.Fatal("the API server still serves DeviceTaintRules")
		}
		s.changes.make(t, cp, "DeviceTaintRules no longer served", func() {})
		a3 := s.startAgent(t, "agent-3")
		s.reflected(t, true, time.Minute)
		a3.Stop(t)
	})

	s.changes.check(t, s.rec.all())
}
