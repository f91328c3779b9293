package kube

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const gib int64 = 1024 * 1024 * 1024

// state is a cluster, what is bound in it, and a pod to schedule.
type state struct {
	nodes   []*nodeWrapper
	owners  []metav1.Object
	bound   []*podWrapper
	pod     *podWrapper
	profile Profile
}

// evaluate builds the state's cluster and evaluates its pod.
func evaluate(t *testing.T, s state) *Evaluation {
	t.Helper()
	c := cluster(s.nodes...)
	for _, o := range s.owners {
		if err := c.AddOwner(o); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range s.bound {
		if err := c.AddPod(b.obj()); err != nil {
			t.Fatal(err)
		}
	}
	prof := s.profile
	if prof == "" {
		prof = Default
	}
	e, err := c.Evaluate(context.Background(), s.pod.obj(), prof)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEvaluate(t *testing.T) {
	type args = state
	type want struct {
		best     []string
		rejected int
	}
	cases := []struct {
		reason string
		args   args
		want   want
	}{
		{
			reason: "A claim of two kinds of devices fits only the node that has both.",
			args: args{
				nodes: []*nodeWrapper{makeNode("n1").gpus(4, "80Gi"), makeNode("n2").gpus(4, "80Gi").nics(1)},
				pod:   makePod("p").claim(Exactly("g", gpuClass, 2), Exactly("n", nicClass, 1)),
			},
			want: want{best: []string{"n2"}, rejected: 1},
		},
		{
			reason: "A selector rules out the nodes whose GPUs have too little memory.",
			args: args{
				nodes: []*nodeWrapper{makeNode("n1").gpus(8, "24Gi"), makeNode("n2").gpus(8, "80Gi"), makeNode("n3").gpus(8, "24Gi")},
				pod:   makePod("p").claim(Exactly("g", gpuClass, 1, atLeast80G)),
			},
			want: want{best: []string{"n2"}, rejected: 2},
		},
		{
			reason: "A node whose cpu is taken does not fit, although all its GPUs are free; the node with one GPU left does.",
			args: args{
				nodes: []*nodeWrapper{makeNode("n1").cpu("2").gpus(8, "80Gi"), makeNode("n2").gpus(8, "80Gi")},
				bound: []*podWrapper{makePod("b").requests("20", "8Gi").claim(Exactly("g", gpuClass, 7)).boundTo("n2", gpu("gpu-0"), gpu("gpu-1"), gpu("gpu-2"), gpu("gpu-3"), gpu("gpu-4"), gpu("gpu-5"), gpu("gpu-6"))},
				pod:   makePod("p").requests("4", "8Gi").claim(Exactly("g", gpuClass, 1)),
			},
			want: want{best: []string{"n2"}, rejected: 1},
		},
		{
			reason: "A node whose devices are allocated does not fit, although its cpu is free.",
			args: args{
				nodes: []*nodeWrapper{makeNode("n1").gpus(2, "80Gi"), makeNode("n2").gpus(2, "80Gi")},
				bound: []*podWrapper{makePod("b").claim(Exactly("g", gpuClass, 1)).boundTo("n1", gpu("gpu-1"))},
				pod:   makePod("p").claim(Exactly("g", gpuClass, 2)),
			},
			want: want{best: []string{"n2"}, rejected: 1},
		},
		{
			reason: "A gang's second pod avoids its first pod's node, though bin-packing scores it higher.",
			args: args{
				nodes:   []*nodeWrapper{makeNode("n1").gpus(8, "80Gi"), makeNode("n2").gpus(8, "80Gi")},
				bound:   []*podWrapper{makePod("g0").labels("gang", "g").antiAffinity("gang", "g").requests("8", "64Gi").claim(Exactly("g", gpuClass, 4)).boundTo("n1", gpu("gpu-0"), gpu("gpu-1"), gpu("gpu-2"), gpu("gpu-3"))},
				pod:     makePod("g1").labels("gang", "g").antiAffinity("gang", "g").requests("8", "64Gi").claim(Exactly("g", gpuClass, 4)),
				profile: MostAllocated,
			},
			want: want{best: []string{"n2"}, rejected: 1},
		},
		{
			reason: "A pod of another gang may share the node.",
			args: args{
				nodes:   []*nodeWrapper{makeNode("n1").gpus(8, "80Gi"), makeNode("n2").gpus(8, "80Gi")},
				bound:   []*podWrapper{makePod("g0").labels("gang", "g").antiAffinity("gang", "g").requests("8", "64Gi").claim(Exactly("g", gpuClass, 4)).boundTo("n1", gpu("gpu-0"), gpu("gpu-1"), gpu("gpu-2"), gpu("gpu-3"))},
				pod:     makePod("h0").labels("gang", "h").antiAffinity("gang", "h").requests("8", "64Gi").claim(Exactly("g", gpuClass, 4)),
				profile: MostAllocated,
			},
			want: want{best: []string{"n1"}},
		},
		{
			reason: "LeastAllocated prefers the node with less cpu and memory requested, whatever its free GPUs.",
			args: args{
				nodes: []*nodeWrapper{makeNode("n1").gpus(8, "80Gi"), makeNode("n2").gpus(2, "80Gi")},
				bound: []*podWrapper{makePod("b").requests("16", "128Gi").claim(Exactly("g", gpuClass, 1)).boundTo("n1", gpu("gpu-0"))},
				pod:   makePod("p").claim(Exactly("g", gpuClass, 1)),
			},
			want: want{best: []string{"n2"}},
		},
		{
			reason: "MostAllocated prefers the node with more cpu and memory requested.",
			args: args{
				nodes:   []*nodeWrapper{makeNode("n1").gpus(8, "80Gi"), makeNode("n2").gpus(2, "80Gi")},
				bound:   []*podWrapper{makePod("b").requests("16", "128Gi").claim(Exactly("g", gpuClass, 1)).boundTo("n1", gpu("gpu-0"))},
				pod:     makePod("p").claim(Exactly("g", gpuClass, 1)),
				profile: MostAllocated,
			},
			want: want{best: []string{"n1"}},
		},
		{
			reason: "Nodes that request alike tie, whatever their free GPUs: kube-scheduler does not score DRA devices.",
			args: args{
				nodes: []*nodeWrapper{makeNode("n1").gpus(8, "80Gi"), makeNode("n2").gpus(1, "80Gi")},
				pod:   makePod("p").claim(Exactly("g", gpuClass, 1)),
			},
			want: want{best: []string{"n1", "n2"}},
		},
		{
			reason: "ImageLocality prefers the node that holds the pod's image.",
			args: args{
				nodes: []*nodeWrapper{makeNode("n1").gpus(8, "80Gi"), makeNode("n2").gpus(8, "80Gi").image("serve:v1", 8*gib)},
				pod:   makePod("p").claim(Exactly("g", gpuClass, 1)),
			},
			want: want{best: []string{"n2"}},
		},
		{
			reason: "TaintToleration avoids a PreferNoSchedule taint the pod does not tolerate.",
			args: args{
				nodes: []*nodeWrapper{makeNode("n1").taint("spot", corev1.TaintEffectPreferNoSchedule), makeNode("n2")},
				pod:   makePod("p"),
			},
			want: want{best: []string{"n2"}},
		},
		{
			reason: "A tolerated PreferNoSchedule taint costs nothing.",
			args: args{
				nodes: []*nodeWrapper{makeNode("n1").taint("spot", corev1.TaintEffectPreferNoSchedule), makeNode("n2")},
				pod:   makePod("p").tolerate("spot"),
			},
			want: want{best: []string{"n1", "n2"}},
		},
		{
			reason: "A NoSchedule taint the pod does not tolerate rules the node out.",
			args: args{
				nodes: []*nodeWrapper{makeNode("n1").taint("maintenance", corev1.TaintEffectNoSchedule), makeNode("n2")},
				pod:   makePod("p"),
			},
			want: want{best: []string{"n2"}, rejected: 1},
		},
		{
			reason: "Spreading sends a ReplicaSet's second pod off its first pod's node, though bin-packing scores that node higher.",
			args: args{
				nodes:   []*nodeWrapper{makeNode("n1"), makeNode("n2")},
				owners:  []metav1.Object{replicaSet("rs", map[string]string{"app": "x"})},
				bound:   []*podWrapper{makePod("x0").labels("app", "x").owner("rs").boundTo("n1")},
				pod:     makePod("x1").labels("app", "x").owner("rs"),
				profile: MostAllocated,
			},
			want: want{best: []string{"n2"}},
		},
		{
			reason: "Without a controller the cluster knows, the same pod is not spread: bin-packing wins.",
			args: args{
				nodes:   []*nodeWrapper{makeNode("n1"), makeNode("n2")},
				bound:   []*podWrapper{makePod("x0").labels("app", "x").owner("rs").boundTo("n1")},
				pod:     makePod("x1").labels("app", "x").owner("rs"),
				profile: MostAllocated,
			},
			want: want{best: []string{"n1"}},
		},
		{
			reason: "A node outside the pod's pool does not fit.",
			args: args{
				nodes: []*nodeWrapper{makeNode("n1").label(poolLabel, "b"), makeNode("n2")},
				pod:   makePod("p"),
			},
			want: want{best: []string{"n2"}, rejected: 1},
		},
		{
			reason: "A pod no node fits is unschedulable.",
			args: args{
				nodes: []*nodeWrapper{makeNode("n1").gpus(2, "80Gi"), makeNode("n2").gpus(2, "80Gi")},
				pod:   makePod("p").claim(Exactly("g", gpuClass, 3)),
			},
			want: want{rejected: 2},
		},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			e := evaluate(t, tc.args)
			rejected := 0
			for _, n := range e.Rejected {
				rejected += n
			}
			got := want{best: e.Best, rejected: rejected}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("-want, +got:\n%s\nscores: %v %v %v", diff, e.Scored, e.Scores, e.Plugins)
			}
		})
	}
}

// TestPluginScores checks each plugin's normalised score against values
// worked out by hand from kube-scheduler's formulas.
func TestPluginScores(t *testing.T) {
	type args = state
	cases := []struct {
		reason string
		args   args
		want   []PluginScores
	}{
		{
			// n1: 32 cpu, 256Gi; 16 cpu/128Gi taken. Pod 1 cpu, 8Gi.
			// LeastAllocated: cpu (32-17)/32 = 46, memory (256-136)/256
			// = 46. Balanced: 17/32 = 0.53125 and 136/256 = 0.53125, no
			// deviation with or without the pod: 50 + (50+100-100)/2 =
			// 75. n2 empty: cpu 31/32 = 96, memory 248/256 = 96.
			reason: "LeastAllocated and BalancedAllocation over cpu and memory.",
			args: args{
				nodes: []*nodeWrapper{makeNode("n1"), makeNode("n2")},
				bound: []*podWrapper{makePod("b").requests("16", "128Gi").boundTo("n1")},
				pod:   makePod("p"),
			},
			want: []PluginScores{
				{"TaintToleration": 100, "NodeResourcesFit": 46, "NodeResourcesBalancedAllocation": 75, "ImageLocality": 0, "DynamicResources": 0},
				{"TaintToleration": 100, "NodeResourcesFit": 96, "NodeResourcesBalancedAllocation": 75, "ImageLocality": 0, "DynamicResources": 0},
			},
		},
		{
			// n1: 8 cpu and 0 memory taken (0 is a request, not a missing
			// one). Pod 4 cpu, 0 memory.
			reason: "BalancedAllocation rewards a pod that evens the node out and penalises one that skews it.",
			args: args{
				nodes: []*nodeWrapper{makeNode("n1"), makeNode("n2")},
				bound: []*podWrapper{makePod("b").requests("8", "0").boundTo("n1")},
				pod:   makePod("p").requests("4", "0"),
			},
			want: []PluginScores{
				// n1: LeastAllocated cpu (32-12)/32 = 62, memory 100: 81.
				// Balanced with the pod 12/32 = 0.375 vs 0, std 0.1875:
				// 81; without 0.25 vs 0: 87; 50 + (50+81-87)/2 = 72.
				// n2: cpu 28/32 = 87, memory 100: 93. Balanced with
				// 0.125 vs 0: 93; without: 100; 50 + (50+93-100)/2 = 71.
				{"TaintToleration": 100, "NodeResourcesFit": 81, "NodeResourcesBalancedAllocation": 72, "ImageLocality": 0, "DynamicResources": 0},
				{"TaintToleration": 100, "NodeResourcesFit": 93, "NodeResourcesBalancedAllocation": 71, "ImageLocality": 0, "DynamicResources": 0},
			},
		},
		{
			// A container without requests counts 100m and 200Mi for
			// NodeResourcesFit: cpu (32000-100)/32000 = 99, memory
			// (256Gi-200Mi)/256Gi = 99. BalancedAllocation skips a pod
			// that requests nothing.
			reason: "A pod without requests is scored with the scheduler's defaults and skipped by BalancedAllocation.",
			args: args{
				nodes: []*nodeWrapper{makeNode("n1")},
				pod:   makePod("p").noRequests(),
			},
			want: []PluginScores{{"TaintToleration": 100, "NodeResourcesFit": 99, "ImageLocality": 0, "DynamicResources": 0}},
		},
		{
			// Two of four nodes hold the pod's 8Gi image: 8192Mi * 2/4 =
			// 4096Mi, above the 1000Mi that scores full.
			reason: "ImageLocality scales an image's size by its spread over the cluster's nodes.",
			args: args{
				nodes: []*nodeWrapper{
					makeNode("n1").image("serve:v1", 8*gib), makeNode("n2").image("serve:v1", 8*gib),
					makeNode("n3").image("other:v1", gib).label(poolLabel, "b"), makeNode("n4").label(poolLabel, "b"),
				},
				pod: makePod("p").labels().requests("1", "8Gi"),
			},
			want: []PluginScores{
				{"TaintToleration": 100, "NodeResourcesFit": 96, "NodeResourcesBalancedAllocation": 75, "ImageLocality": 100, "DynamicResources": 0},
				{"TaintToleration": 100, "NodeResourcesFit": 96, "NodeResourcesBalancedAllocation": 75, "ImageLocality": 100, "DynamicResources": 0},
			},
		},
		{
			// Hostname: ln(2+2) = 1.386 per matching pod plus maxSkew-1 =
			// 2: n1 has one, round(3.386) = 3, n2 none, 2. Zone (both in
			// zone a, one domain): ln(1+2) = 1.0986 per pod in the zone
			// (1) plus 4: round(5.0986) = 5 on both. Totals 8 and 7:
			// normalised 100*(8+7-8)/8 = 87 and 100*(8+7-7)/8 = 100.
			reason: "PodTopologySpread's system defaults over hostname and zone.",
			args: args{
				nodes:  []*nodeWrapper{makeNode("n1").label(corev1.LabelTopologyZone, "a"), makeNode("n2").label(corev1.LabelTopologyZone, "a")},
				owners: []metav1.Object{replicaSet("rs", map[string]string{"app": "x"})},
				bound:  []*podWrapper{makePod("x0").labels("app", "x").owner("rs").noRequests().boundTo("n1")},
				pod:    makePod("x1").labels("app", "x").owner("rs").noRequests(),
			},
			want: []PluginScores{
				{"TaintToleration": 100, "NodeResourcesFit": 99, "PodTopologySpread": 87, "ImageLocality": 0, "DynamicResources": 0},
				{"TaintToleration": 100, "NodeResourcesFit": 99, "PodTopologySpread": 100, "ImageLocality": 0, "DynamicResources": 0},
			},
		},
		{
			// Two untolerated PreferNoSchedule taints on n1, one on n2:
			// reversed, 100 - 100*2/2 = 0 and 100 - 100*1/2 = 50.
			reason: "TaintToleration counts untolerated PreferNoSchedule taints, reversed.",
			args: args{
				nodes: []*nodeWrapper{
					makeNode("n1").taint("a", corev1.TaintEffectPreferNoSchedule).taint("b", corev1.TaintEffectPreferNoSchedule),
					makeNode("n2").taint("a", corev1.TaintEffectPreferNoSchedule).taint("c", corev1.TaintEffectNoExecute),
					makeNode("n3"),
				},
				pod: makePod("p").tolerate("c"),
			},
			want: []PluginScores{
				{"TaintToleration": 0, "NodeResourcesFit": 96, "NodeResourcesBalancedAllocation": 75, "ImageLocality": 0, "DynamicResources": 0},
				{"TaintToleration": 50, "NodeResourcesFit": 96, "NodeResourcesBalancedAllocation": 75, "ImageLocality": 0, "DynamicResources": 0},
				{"TaintToleration": 100, "NodeResourcesFit": 96, "NodeResourcesBalancedAllocation": 75, "ImageLocality": 0, "DynamicResources": 0},
			},
		},
		{
			// MostAllocated: n1 with 16 cpu/128Gi taken plus the pod's
			// 1/8Gi: 17/32 = 53, 136/256 = 53.
			reason: "MostAllocated over cpu and memory.",
			args: args{
				nodes:   []*nodeWrapper{makeNode("n1"), makeNode("n2")},
				bound:   []*podWrapper{makePod("b").requests("16", "128Gi").boundTo("n1")},
				pod:     makePod("p"),
				profile: MostAllocated,
			},
			want: []PluginScores{
				{"TaintToleration": 100, "NodeResourcesFit": 53, "NodeResourcesBalancedAllocation": 75, "ImageLocality": 0, "DynamicResources": 0},
				{"TaintToleration": 100, "NodeResourcesFit": 3, "NodeResourcesBalancedAllocation": 75, "ImageLocality": 0, "DynamicResources": 0},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			e := evaluate(t, tc.args)
			if diff := cmp.Diff(tc.want, e.Plugins); diff != "" {
				t.Errorf("plugin scores: -want, +got:\n%s", diff)
			}
		})
	}
}

func TestNumFeasibleNodesToFind(t *testing.T) {
	// percentage = max(50 - n/125, 5); at least 100 nodes; all of a
	// cluster under 100.
	want := map[int]int{0: 0, 50: 50, 99: 99, 100: 100, 150: 100, 256: 122, 1000: 420, 5000: 500, 6000: 300}
	got := map[int]int{}
	for n := range want {
		got[n] = NumFeasibleNodesToFind(n)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NumFeasibleNodesToFind: -want, +got:\n%s", diff)
	}
}

func TestLargeClusterScoresPartOfItsNodes(t *testing.T) {
	var nodes []*nodeWrapper
	for i := range 150 {
		nodes = append(nodes, makeNode(fmt.Sprintf("n%03d", i)))
	}
	c := cluster(nodes...)
	// 150 nodes: 100 feasible nodes are scored, the next search starts
	// where this one stopped.
	e, err := c.Evaluate(context.Background(), makePod("p").obj(), Default)
	if err != nil {
		t.Fatal(err)
	}
	e2, err := c.Evaluate(context.Background(), makePod("q").obj(), Default)
	if err != nil {
		t.Fatal(err)
	}
	got := []any{len(e.Scored), e.Scored[0], len(e2.Scored), e2.Scored[0], e2.Scored[49], e2.Scored[50]}
	want := []any{100, "n000", 100, "n100", "n149", "n000"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scored nodes (count, first; count, first, 50th, 51st): -want, +got:\n%s", diff)
	}
}

func TestBindTakesTheAllocatedDevices(t *testing.T) {
	c := cluster(makeNode("n1").gpus(8, "80Gi"))
	rng := rand.New(rand.NewPCG(1, 1))
	var got []string
	for i, count := range []int64{3, 6, 5, 1} {
		p := makePod(fmt.Sprintf("p%d", i)).claim(Exactly("g", gpuClass, count)).obj()
		node, _, err := c.Schedule(context.Background(), p, Default, rng)
		if err != nil {
			t.Fatal(err)
		}
		var devices []string
		if node != "" {
			for _, r := range p.Claims[0].Status.Allocation.Devices.Results {
				devices = append(devices, r.Device)
			}
		}
		got = append(got, fmt.Sprintf("%d GPUs: %q %v", count, node, devices))
	}
	want := []string{
		`3 GPUs: "n1" [gpu-0 gpu-1 gpu-2]`,
		`6 GPUs: "" []`,
		`5 GPUs: "n1" [gpu-3 gpu-4 gpu-5 gpu-6 gpu-7]`,
		`1 GPUs: "" []`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("-want, +got:\n%s", diff)
	}
}
