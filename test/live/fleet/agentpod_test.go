package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// systemNode is the node outside the GPU pools; the agent's Pods are bound
// to it.
const systemNode = "system-0"

// agentProcess is one process of the cluster agent and the Pod that
// stands for it. The agent runs as a process, not in a Pod, so the test
// plays the ReplicaSet and the kubelet for it: it creates the Pod the
// process is told it runs in (POD_NAME) from the shipped Deployment's pod
// template, bound to systemNode so that kube-scheduler leaves it alone;
// mirrors the process's /readyz into the Pod's Ready condition, probing
// as the template's readinessProbe says, as the kubelet would; and deletes
// the Pod once the process has ended. The steering policy's param is that
// Pod: a pod is held only while it is Ready and lists the pod's pool.
type agentProcess struct {
	pod             string
	proc            *harness.Process
	health, metrics string // loopback addresses
	// mirrored is closed once the mirror has stopped: the process ended
	// and its Pod was marked unready, or the test ended.
	mirrored chan struct{}
}

// startAgent creates a new Pod for an agent process, starts the process,
// and mirrors its readiness into the Pod. It becomes w.agent.
func (w *workload) startAgent(t *testing.T, f *fleet) *agentProcess {
	t.Helper()
	a := &agentProcess{
		pod:    fmt.Sprintf("cluster-agent-%s-%d", w.spec.name, w.agents),
		health: testenv.FreeLoopbackAddr(t), metrics: testenv.FreeLoopbackAddr(t),
		mirrored: make(chan struct{}),
	}
	w.agents++
	ns := w.agentPod.Namespace
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: a.pod, Labels: w.agentPod.Labels, Annotations: w.agentPod.Annotations},
		Spec:       *w.agentPod.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = systemNode
	// The namespace enforces the restricted Pod Security Standard: the
	// template's Pod passes it.
	if _, err := w.api.kube.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("cannot create the agent's Pod %s/%s of the Deployment's template in %s: %v", ns, a.pod, w.spec.name, err)
	}
	log, err := os.OpenFile(filepath.Join(f.logs, w.spec.name+"-"+a.pod+"-kubelet.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.owner.Cleanup(func() { _ = log.Close() })
	// The kubelet's first status of a Pod whose containers start: not
	// Ready.
	if err := w.setAgentReady(t.Context(), a, false); err != nil {
		t.Fatal(err)
	}

	args := make([]string, 0, len(w.agentArgs))
	for _, arg := range w.agentArgs {
		// The test's processes share one network namespace; pods do not.
		switch {
		case strings.HasPrefix(arg, "--health-address="):
			arg = "--health-address=" + a.health
		case strings.HasPrefix(arg, "--metrics-address="):
			arg = "--metrics-address=" + a.metrics
		}
		args = append(args, arg)
	}
	// The downward API's values of the Deployment's env.
	env := []string{"POD_NAME=" + a.pod, "POD_NAMESPACE=" + ns}
	a.proc = harness.StartProcessOf(t, f.owner, f.logs, w.spec.name+"-"+a.pod, filepath.Join(f.artifacts, "bin", "cluster-agent"), env, args...)
	a.proc.Running(t)
	go w.mirror(f.owner.Context(), a, *w.agentPod.Spec.Containers[0].ReadinessProbe, log)
	w.agent = a
	return a
}

// mirror probes the process's /readyz as the kubelet probes a container
// (every periodSeconds, each probe failing after timeoutSeconds, Ready
// after successThreshold successes in a row and unready after
// failureThreshold failures) and writes the Pod's Ready condition when it
// changes; the process ended, it marks the Pod unready at once, as the
// kubelet does when a container exits.
func (w *workload) mirror(ctx context.Context, a *agentProcess, probe corev1.Probe, log io.Writer) {
	defer close(a.mirrored)
	period, timeout := seconds(probe.PeriodSeconds, 10), seconds(probe.TimeoutSeconds, 1)
	successes, failures := max(probe.SuccessThreshold, 1), probe.FailureThreshold
	if failures == 0 {
		failures = 3
	}
	hc := &http.Client{Timeout: timeout}
	exited, _ := a.proc.Exited()
	tick := time.NewTicker(period)
	defer tick.Stop()
	set := func(ready bool, why string) {
		_, _ = fmt.Fprintf(log, "%s Pod %s Ready %t: %s\n", time.Now().Format(time.RFC3339Nano), a.pod, ready, why)
		for ctx.Err() == nil {
			err := w.setAgentReady(ctx, a, ready)
			if err == nil {
				return
			}
			_, _ = fmt.Fprintf(log, "%s cannot write Pod %s's status: %v\n", time.Now().Format(time.RFC3339Nano), a.pod, err)
			time.Sleep(200 * time.Millisecond)
		}
	}
	ready := false
	var ok, failed int32
	for {
		err := getOK(ctx, hc, "http://"+a.health+"/readyz", "")
		if err == nil {
			ok, failed = ok+1, 0
		} else {
			ok, failed = 0, failed+1
		}
		switch {
		case !ready && ok >= successes:
			ready = true
			set(true, "/readyz answered 200")
		case ready && failed >= failures:
			ready = false
			set(false, fmt.Sprintf("/readyz failed %d times: %v", failed, err))
		}
		select {
		case <-ctx.Done():
			return
		case <-exited:
			set(false, "the process ended")
			return
		case <-tick.C:
		}
	}
}

func seconds(n, unset int32) time.Duration {
	if n == 0 {
		n = unset
	}
	return time.Duration(n) * time.Second
}

// getOK is whether a GET of url, with the bearer token if one is given,
// answers 200 OK.
func getOK(ctx context.Context, hc *http.Client, url, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// setAgentReady writes the Ready and ContainersReady conditions of the
// agent's Pod, as the kubelet does, with a patch of its status.
func (w *workload) setAgentReady(ctx context.Context, a *agentProcess, ready bool) error {
	status, reason := corev1.ConditionTrue, ""
	if !ready {
		status, reason = corev1.ConditionFalse, "ContainersNotReady"
	}
	now := metav1.Now()
	conditions := []corev1.PodCondition{
		{Type: corev1.PodReady, Status: status, Reason: reason, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: status, Reason: reason, LastTransitionTime: now},
	}
	patch := map[string]any{"status": map[string]any{"conditions": conditions}}
	b, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = w.api.kube.CoreV1().Pods(w.agentPod.Namespace).Patch(ctx, a.pod, types.StrategicMergePatchType, b, metav1.PatchOptions{}, "status")
	return err
}

// stopAgent ends an agent process, with SIGTERM (as a Pod's deletion
// does) or SIGKILL (a crash, or a hung process the kubelet kills), and
// deletes its Pod once the mirror has marked it unready.
func (w *workload) stopAgent(t *testing.T, a *agentProcess, kill bool) {
	t.Helper()
	if kill {
		a.proc.Kill(t)
	} else {
		a.proc.Stop(t)
	}
	select {
	case <-a.mirrored:
	case <-time.After(time.Minute):
		t.Fatalf("the mirror of the agent's Pod %s did not stop within a minute of the process's end", a.pod)
	}
	// No kubelet confirms the deletion: at once.
	err := w.api.kube.CoreV1().Pods(w.agentPod.Namespace).Delete(t.Context(), a.pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	if err != nil && !kerrors.IsNotFound(err) {
		t.Fatalf("cannot delete the agent's Pod %s: %v", a.pod, err)
	}
}

// agentPodReady reads whether the agent's Pod is Ready, and the pools it
// lists for the steering policy.
func (w *workload) agentPodReady(t *testing.T, a *agentProcess) (bool, string) {
	t.Helper()
	p, err := w.api.kube.CoreV1().Pods(w.agentPod.Namespace).Get(t.Context(), a.pod, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("cannot read the agent's Pod %s: %v", a.pod, err)
	}
	ready := false
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	return ready, p.Annotations[agentv1alpha1.AnnotationSteeredPools]
}

// metric reads a sample of the agent's /metrics: the value of the series
// named with every label given (name{k="v",...}); 0 when it has none.
func (a *agentProcess) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return metricAt(t, a.metrics, "the agent "+a.pod, name, labels...)
}

// metricAt reads a sample of who's /metrics at addr: the value of the
// series named with every label given (name{k="v",...}, or name alone for
// a series without labels); 0 when it has none.
func metricAt(t *testing.T, addr, who, name string, labels ...string) float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("cannot read the metrics of %s: %v", who, err)
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		series, value, _ := strings.Cut(line, " ")
		all := true
		for _, l := range labels {
			all = all && strings.Contains(series, l)
		}
		if all {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", line, err)
			}
			return v
		}
	}
	return 0
}
