package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLoadTrace(t *testing.T) {
	sc, err := LoadTrace("testdata/trace/nodes.csv", "testdata/trace/pods.csv", TraceOptions{Clusters: 2, Speed: 1, Tick: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	type pool struct {
		Name         string
		Nodes        int
		GPUs         int64
		Model, CPU   string
		Memory, Node string
	}
	var pools [][]pool
	for _, c := range sc.Clusters {
		var ps []pool
		for _, p := range c.Pools {
			ps = append(ps, pool{p.Name, p.Nodes, p.GPUsPerNode, p.Model, p.CPU, p.Memory, p.NodeMemory})
		}
		pools = append(pools, ps)
	}
	// Three kinds of GPU node, in the order they first appear; each
	// kind's nodes dealt over the two clusters in turn.
	wantPools := [][]pool{
		{{"v100m32-8x", 2, 8, "V100M32", "96000m", "32Gi", "786432Mi"}, {"v100m32-8x-b", 1, 8, "V100M32", "64000m", "32Gi", "262144Mi"}, {"t4-2x", 1, 2, "T4", "104000m", "16Gi", "524288Mi"}},
		{{"v100m32-8x", 1, 8, "V100M32", "96000m", "32Gi", "786432Mi"}, {"t4-2x", 1, 2, "T4", "104000m", "16Gi", "524288Mi"}},
	}
	if diff := cmp.Diff(wantPools, pools); diff != "" {
		t.Errorf("pools by cluster: -want, +got:\n%s", diff)
	}
	type event struct {
		Round    int
		Name     string
		Replicas int64
		Delete   bool
		CEL      string
	}
	var events []event
	for _, e := range sc.Events {
		ev := event{Round: e.Round, Name: e.Name, Replicas: e.Replicas, Delete: e.Delete}
		if d := e.Deployment; d != nil {
			if sel := d.Spec.Template.Spec.Engines[0].Members[0].NodeSelector.Devices[0].Selectors; len(sel) > 0 {
				ev.CEL = sel[0].CEL
			}
		}
		events = append(events, ev)
	}
	// Time 1000 is round 0, 10 s a round. pod-01 shares a GPU and pod-04
	// claims none: both left out. pod-06 has no deletion_time: it stays.
	wantEvents := []event{
		{Round: 0, Name: "test-pod-00", Replicas: 1},
		{Round: 60, Name: "test-pod-00", Delete: true},
		{Round: 2, Name: "test-pod-02", Replicas: 1, CEL: `device.attributes["gpu.nvidia.com"].model in ["T4"]`},
		{Round: 20, Name: "test-pod-02", Delete: true},
		{Round: 3, Name: "test-pod-03", Replicas: 1, CEL: `device.attributes["gpu.nvidia.com"].model in ["V100M32"]`},
		{Round: 100, Name: "test-pod-03", Delete: true},
		{Round: 5, Name: "test-pod-05", Replicas: 1, CEL: `device.attributes["gpu.nvidia.com"].model in ["T4", "V100M16"]`},
		{Round: 30, Name: "test-pod-05", Delete: true},
		{Round: 6, Name: "test-pod-06", Replicas: 1, CEL: `device.attributes["gpu.nvidia.com"].model in ["V100M16", "V100M32"]`},
	}
	if diff := cmp.Diff(wantEvents, events); diff != "" {
		t.Errorf("events: -want, +got:\n%s", diff)
	}
	if sc.Rounds != 130 {
		t.Errorf("%d rounds, want 130 (the last deletion at round 100, and 30 more)", sc.Rounds)
	}
	for _, s := range []string{"6 nodes with 36 GPUs in 3 kinds of node", "1 CPU-only nodes left out", "7 in the file; 1 CPU-only left out; 1 GPU-sharing (gpu_milli < 1000) left out; 5 replayed"} {
		if !strings.Contains(sc.Skipped, s) {
			t.Errorf("the report's note %q does not say %q", sc.Skipped, s)
		}
	}
}

func TestLoadTraceOfFiveColumns(t *testing.T) {
	sc, err := LoadTrace("testdata/trace/nodes.csv", "testdata/trace/pods-short.csv", TraceOptions{Clusters: 1, Speed: 1, RoundUpSharing: true})
	if err != nil {
		t.Fatal(err)
	}
	// No times: every GPU pod arrives at the start and stays.
	var got []string
	for _, e := range sc.Events {
		got = append(got, e.Name)
		if e.Round != 0 || e.Delete {
			t.Errorf("event %+v, want an arrival at round 0", e)
		}
	}
	if diff := cmp.Diff([]string{"test-pod-00", "test-pod-01"}, got); diff != "" {
		t.Errorf("deployments: -want, +got:\n%s", diff)
	}
}

func TestTraceBadRows(t *testing.T) {
	const nodeHeader = "sn,cpu_milli,memory_mib,gpu,model\n"
	const podHeader = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
	const goodNodes = nodeHeader + "n0,8000,1024,2,T4\n"
	const goodPods = podHeader + "p0,1000,1024,1,1000,,LS,Running,0,10,0\n"
	cases := []struct {
		reason      string
		nodes, pods string
		want        string
	}{
		{reason: "A cpu that is not a number.", nodes: nodeHeader + "n0,8000,1024,2,T4\nn1,lots,1024,2,T4\n", pods: goodPods, want: `nodes.csv:3: cpu_milli: "lots" is not a whole number`},
		{reason: "A node row of four fields.", nodes: "n0,8000,1024,2\n", pods: goodPods, want: "nodes.csv:1: 4 fields, want 5"},
		{reason: "A GPU node without a model.", nodes: nodeHeader + "n0,8000,1024,2,nan\n", pods: goodPods, want: "nodes.csv:2: model: empty for a node of 2 GPUs"},
		{reason: "A negative GPU count.", nodes: goodNodes, pods: podHeader + "p0,1000,1024,-1,1000,,LS,Running,0,10,0\n", want: "pods.csv:2: num_gpu: -1 is out of range"},
		{reason: "More than a whole GPU's milli.", nodes: goodNodes, pods: "p0,1000,1024,1,1500\n", want: "pods.csv:1: gpu_milli: 1500 is more than a whole GPU (1000)"},
		{reason: "A pod row of seven fields.", nodes: goodNodes, pods: "p0,1000,1024,1,1000,,LS\n", want: "pods.csv:1: 7 fields, want 5"},
		{reason: "A deletion before the creation.", nodes: goodNodes, pods: podHeader + "p0,1000,1024,1,1000,,LS,Running,100,50,100\n", want: "pods.csv:2: deletion_time: 50 is before creation_time 100"},
		{reason: "An empty model in gpu_spec.", nodes: goodNodes, pods: podHeader + "p0,1000,1024,1,1000,T4||P100,LS,Running,0,10,0\n", want: `pods.csv:2: gpu_spec: "T4||P100" is not a list`},
		{reason: "No creation time.", nodes: goodNodes, pods: podHeader + "p0,1000,1024,1,1000,,LS,Running,,10,0\n", want: `pods.csv:2: creation_time: "" is not a whole number`},
		{reason: "A quote that never closes.", nodes: goodNodes, pods: podHeader + "p0,1000,1024,1,1000,\"T4,LS,Running,0,10,0\n", want: "pods.csv: parse error on line 2"},
		{reason: "No node with GPUs.", nodes: nodeHeader + "n0,8000,1024,0,\n", pods: goodPods, want: "the trace has no node with GPUs"},
		{reason: "Two nodes of one name.", nodes: goodNodes + "n0,8000,1024,2,T4\n", pods: goodPods, want: `nodes.csv:3: "n0" again: line 2 has it`},
		{reason: "Two pods whose names differ only in case: one deployment's name.", nodes: goodNodes, pods: goodPods + "P0,1000,1024,1,1000,,LS,Running,0,10,0\n", want: `pods.csv:3: "p0" again: line 2 has it`},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			dir := t.TempDir()
			nodes, pods := filepath.Join(dir, "nodes.csv"), filepath.Join(dir, "pods.csv")
			if err := os.WriteFile(nodes, []byte(tc.nodes), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(pods, []byte(tc.pods), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadTrace(nodes, pods, TraceOptions{Clusters: 1, Speed: 1})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("LoadTrace: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestReplayTrace(t *testing.T) {
	sc, err := LoadTrace("testdata/trace/nodes.csv", "testdata/trace/pods.csv", TraceOptions{Clusters: 2, Speed: 1})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(sc.Config(Fresh(), KubeDefault, Direct{Input: Input(Fresh().Binding)}))
	if err != nil {
		t.Fatal(err)
	}
	// At round 10 pods 00, 02, 03, 05 and 06 are all there, each on a
	// pool of a model it accepts: 1 + 1 + 8 + 2 + 4 GPUs.
	if p := res.Series[10]; p.Placed != 5 || p.Pending != 0 || p.GPUs != 16 || p.DemandGPUs != 16 {
		t.Errorf("round 10: %+v, want 5 replicas placed holding 16 GPUs, none Pending", p)
	}
	// At the end only pod-06 is left.
	if res.Placed != 1 || res.Wanted != 1 || res.GPUs != 4 {
		t.Errorf("at the end %d placed of %d wanted holding %d GPUs, want pod-06's 1 of 1 holding 4", res.Placed, res.Wanted, res.GPUs)
	}
}

// TestTraceAtATinySpeed: a speed so slow that a pod's round would
// overflow an int puts it past every run, never at a negative round.
func TestTraceAtATinySpeed(t *testing.T) {
	sc, err := LoadTrace("testdata/trace/nodes.csv", "testdata/trace/pods.csv", TraceOptions{Clusters: 2, Speed: 1e-300})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range sc.Events {
		if e.Round < 0 {
			t.Errorf("event %+v at a negative round", e)
		}
	}
}

// TestStuckPodSaysItLacksCPU: a pod whose cpu request no node of its pool
// has stays Pending though the GPUs are free (the function charges devices
// only), and the report says what turned it away.
func TestStuckPodSaysItLacksCPU(t *testing.T) {
	dir := t.TempDir()
	nodes, pods := filepath.Join(dir, "nodes.csv"), filepath.Join(dir, "pods.csv")
	if err := os.WriteFile(nodes, []byte("n0,16000,131072,2,P100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pods, []byte("p0,18000,1024,1,1000,,LS,Running,0,,0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sc, err := LoadTrace(nodes, pods, TraceOptions{Clusters: 1, Speed: 1, MaxRounds: 5})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(sc.Config(Fresh(), KubeDefault, Direct{Input: Input(Fresh().Binding)}))
	if err != nil {
		t.Fatal(err)
	}
	want := "needs 1 GPUs on one node; the pool's nodes have at most 2 free; Insufficient cpu on 1 of the nodes with them free"
	if len(res.StuckPods) != 1 || !strings.Contains(res.StuckPods[0], want) {
		t.Errorf("stuck pods %q, want one containing %q", res.StuckPods, want)
	}
	if got := res.StuckOn[StuckOnResources]; got != 1 {
		t.Errorf("%d pods held by cpu or memory, want 1 (%v)", got, res.StuckOn)
	}
}
