package sim

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/input/v1beta1"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
	"github.com/modelplaneai/fleet-scheduler/sim/composereplica"
)

// testCluster is one cluster of a pool "p" of nodes with 8 GPUs each.
func testCluster(t *testing.T, nodes int) *simCluster {
	t.Helper()
	c, err := newCluster(ClusterSpec{Name: "c", Pools: []PoolSpec{{Name: "p", Nodes: nodes, GPUsPerNode: 8, Memory: "80Gi"}}}, DefaultImage, DefaultImageSize)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testReplica is a replica on pool "p" of one engine of the member
// shape: a Standalone of gpus, or a gang of a Leader and workers Workers.
func testReplica(t *testing.T, c *simCluster, seq int, gpus int64, workers int64) *replica {
	t.Helper()
	e := fixture.PinnedStandalone("main", "p", fixture.Stamped(gpus))
	if workers > 0 {
		e = fixture.PinnedGang("main", "p", workers, fixture.Stamped(gpus))
	}
	for i := range e.Members {
		e.Members[i].Template = Template()
	}
	obj := fixture.Replica("d", "c", seq).Engines(e).Obj()
	r, err := newReplica(c, obj, "d", seq, composereplica.Options{Sizing: PerGPU()})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestGPURankedBinders(t *testing.T) {
	cases := []struct {
		reason string
		binder Binder
		// taken is each node's GPUs held by a pod already bound there.
		taken []int64
		gpus  int64
		// want is each node's free GPUs after binding.
		want []int64
	}{
		{reason: "gpu-most-free binds to the node with the most GPUs free.", binder: GPUMostFree, taken: []int64{6, 0, 4}, gpus: 2, want: []int64{2, 6, 4}},
		{reason: "gpu-least-free binds to the fitting node with the fewest GPUs free.", binder: GPULeastFree, taken: []int64{7, 0, 4}, gpus: 2, want: []int64{1, 8, 2}},
		{reason: "A pod no node fits stays Pending.", binder: GPUMostFree, taken: []int64{6, 5}, gpus: 4, want: []int64{2, 3}},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			c := testCluster(t, len(tc.taken))
			rng := rand.New(rand.NewPCG(1, 2))
			for i, n := range tc.taken {
				if n == 0 {
					continue
				}
				r := testReplica(t, c, 100+i, n, 0)
				// Pin the filler to its node, then bind it there.
				r.pods[0].kube.Obj.Spec.NodeSelector[corev1.LabelHostname] = c.pools[0].nodes[i].Obj.Name
				if ok, err := GPUMostFree.bind(context.Background(), r.pods[0], rng); err != nil || !ok {
					t.Fatalf("filler did not bind: %v", err)
				}
			}
			r := testReplica(t, c, 1, tc.gpus, 0)
			if _, err := tc.binder.bind(context.Background(), r.pods[0], rng); err != nil {
				t.Fatal(err)
			}
			var free []int64
			for _, n := range c.pools[0].nodes {
				free = append(free, c.freeGPUs(n))
			}
			if diff := cmp.Diff(tc.want, free); diff != "" {
				t.Errorf("free GPUs after binding: -want, +got:\n%s", diff)
			}
		})
	}
}

// TestGangPodsShareNodes: Modelplane v0.3's LeaderWorkerSet keeps no gang
// to distinct nodes (no anti-affinity, no exclusive topology), so every
// binder may put two of a gang's pods on one node: a gang of three 4-GPU
// pods binds on two 8-GPU nodes, where the function's accounting
// (docs/spec.md#gangs) wants three nodes.
func TestGangPodsShareNodes(t *testing.T) {
	for _, b := range Binders() {
		if b.steers() {
			// A steering agent decides a gang's pods together, on
			// distinct nodes (TestSteeredBinder); bind is what binds them
			// once released unpinned, kube-default.
			continue
		}
		t.Run(string(b), func(t *testing.T) {
			c := testCluster(t, 2)
			r := testReplica(t, c, 1, 4, 2)
			rng := rand.New(rand.NewPCG(3, 4))
			nodes := map[string]int{}
			for _, p := range r.pods {
				if _, err := b.bind(context.Background(), p, rng); err != nil {
					t.Fatal(err)
				}
				nodes[p.kube.Node()]++
			}
			if nodes[""] > 0 || len(nodes) != 2 {
				t.Errorf("gang of 3 on 2 nodes bound as %v, want all three bound, two on one node", nodes)
			}
		})
	}
}

func tinyScenario(shape Shape, tmplGPUs int64, replicas int64) Scenario {
	pools := []PoolSpec{{Name: "a", Nodes: 3, GPUsPerNode: 4, Memory: "80Gi"}, {Name: "b", Nodes: 2, GPUsPerNode: 4, Memory: "80Gi"}}
	d := withTemplates(fixture.Deployment("x").Engines(fixture.Standalone("main", fixture.GPURequest(tmplGPUs))).Obj())
	return Scenario{
		Name: "tiny", Clusters: Fleet(2, pools...), Rounds: 20, Shapes: map[string]Shape{"d0": shape, "d1": shape},
		Events: []Event{{Round: 0, Name: "d0", Replicas: replicas, Deployment: d}, {Round: 2, Name: "d1", Replicas: replicas, Deployment: d}},
	}
}

func TestRunReachesTheLimitWithAFreshAgent(t *testing.T) {
	sc := tinyScenario(Shape{1, 1, 1, false}, 1, 30)
	b := Limit(sc)
	if b.Replicas != 40 || b.GPUs != 40 || !b.Exact {
		t.Fatalf("Limit(...) = %+v, want 40 replicas and 40 GPUs, exact", b)
	}
	cases := map[string]struct {
		mode   Mode
		placed int
	}{
		"Whole-node accounting places one 1-GPU replica per 4-GPU node.": {mode: WholeNode(), placed: 10},
		"A fresh agent lets the fleet fill every GPU.":                   {mode: Fresh(), placed: 40},
		"A lagging agent also fills every GPU, and overcommits nothing.": {mode: Lagging().Assuming(scheduling.LeastFree), placed: 40},
	}
	for reason, tc := range cases {
		t.Run(reason, func(t *testing.T) {
			res, err := Run(sc.Config(tc.mode, KubeDefault, Direct{Input: Input(tc.mode.Binding)}))
			if err != nil {
				t.Fatal(err)
			}
			if res.Placed != tc.placed || res.Running != tc.placed || res.GPUs != int64(tc.placed) {
				t.Errorf("placed %d, running %d, %d GPUs; want %d of each", res.Placed, res.Running, res.GPUs, tc.placed)
			}
			if res.PendingMax != 0 || res.PendingSeconds != 0 {
				t.Errorf("%d pods were left Pending (%.0f pod-seconds), want none", res.PendingMax, res.PendingSeconds)
			}
			if res.Wanted != 60 || len(res.Series) != sc.Rounds {
				t.Errorf("wanted %d over %d rounds, want 60 over %d", res.Wanted, len(res.Series), sc.Rounds)
			}
		})
	}
}

// TestSkippingSettledDeploymentsChangesNothing runs scenarios with the
// deployments that placed all they want and changed nothing left out of
// later rounds, and with every deployment reconciled every round, and
// wants the same fleet round by round.
func TestSkippingSettledDeploymentsChangesNothing(t *testing.T) {
	sc := tinyScenario(Shape{1, 1, 2, false}, 2, 12)
	sc.Events = append(sc.Events, Event{Round: 8, Name: "d0", Replicas: 4}, Event{Round: 12, Name: "d1", Delete: true})
	for _, m := range []Mode{WholeNode(), Fresh(), Lagging()} {
		cfg := sc.Config(m, KubeDefault, Direct{Input: Input(m.Binding)})
		skip, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ReconcileAll = true
		all, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		fleet := func(ps []Point) []Point {
			out := slices.Clone(ps)
			for i := range out {
				out[i].Reconciles = 0
			}
			return out
		}
		if diff := cmp.Diff(fleet(all.Series), fleet(skip.Series)); diff != "" {
			t.Errorf("%s: the fleet differs when settled deployments are skipped: -all, +skipping:\n%s", m.Name, diff)
		}
		if skip.Reconciles >= all.Reconciles {
			t.Errorf("%s: %d reconciles skipping settled deployments, %d without: nothing was skipped", m.Name, skip.Reconciles, all.Reconciles)
		}
	}
}

// TestRunNeverOvercommits steps a random scenario of gangs and single pods
// under every binder, v0.3's pods and pods sized per GPU in turn, and
// checks after every round that no node holds more GPUs, cpu or memory
// than it has. (v0.3's LeaderWorkerSets keep no gang to distinct nodes:
// kube-scheduler may put two of a gang's pods on one node.)
func TestRunNeverOvercommits(t *testing.T) {
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 1))
		pools := []PoolSpec{{Name: "a", Nodes: 4, GPUsPerNode: 8, Memory: "80Gi", CPU: "40", NodeMemory: "300Gi"}, {Name: "b", Nodes: 3, GPUsPerNode: 4, Memory: "80Gi"}}
		sc := Scenario{Name: "random", Clusters: Fleet(2, pools...), Rounds: 25, Shapes: map[string]Shape{}}
		for i := range 8 {
			g := []int64{1, 2, 4, 8}[rng.IntN(4)]
			e := fixture.Standalone("main", fixture.GPURequest(g))
			if rng.IntN(3) == 0 {
				e = fixture.Gang("main", int64(1+rng.IntN(3)), fixture.GPURequest(min(g, 4)))
			}
			d := withTemplates(fixture.Deployment("x").Engines(e).Obj())
			sc.Events = append(sc.Events, Event{Round: rng.IntN(10), Name: fmt.Sprintf("d%d", i), Replicas: int64(1 + rng.IntN(6)), Deployment: d})
		}
		b := Binders()[seed%uint64(len(Binders()))]
		m := Modes()[seed%uint64(len(Modes()))]
		cfg := sc.Config(m, b, Direct{Input: Input(m.Binding)})
		cfg.Tick, cfg.Image, cfg.ImageSize = 10*time.Second, DefaultImage, DefaultImageSize
		if seed%2 == 1 {
			cfg.Sizing = PerGPU()
		}
		s, err := newState(cfg)
		if err != nil {
			t.Fatal(err)
		}
		res := &Result{}
		for round := range cfg.Rounds {
			if err := s.round(context.Background(), round, res); err != nil {
				t.Fatal(err)
			}
			if err := checkFleet(s); err != nil {
				t.Fatalf("seed %d (%s, %s), round %d: %v", seed, b, m.Name, round, err)
			}
		}
		if res.Series[len(res.Series)-1].GPUs == 0 {
			t.Errorf("seed %d: nothing bound", seed)
		}
	}
}

func checkFleet(s *state) error {
	for _, c := range s.clusters {
		for _, n := range c.kube.Nodes() {
			var gpus, cpu, mem int64
			for _, p := range n.Pods {
				for _, rc := range p.Claims {
					gpus += int64(len(rc.Status.Allocation.Devices.Results))
				}
				for _, ctr := range p.Obj.Spec.Containers {
					cpu += ctr.Resources.Requests.Cpu().MilliValue()
					mem += ctr.Resources.Requests.Memory().Value()
				}
			}
			devices := 0
			for _, sl := range n.Slices {
				devices += len(sl.Spec.Devices)
			}
			if gpus > int64(devices) || gpus+c.freeGPUs(n) != int64(devices) {
				return fmt.Errorf("node %s: %d GPUs held and %d free of %d", n.Obj.Name, gpus, c.freeGPUs(n), devices)
			}
			if cpu > n.Obj.Status.Allocatable.Cpu().MilliValue() || mem > n.Obj.Status.Allocatable.Memory().Value() {
				return fmt.Errorf("node %s: %dm cpu and %d memory requested, more than allocatable", n.Obj.Name, cpu, mem)
			}
		}
	}
	return nil
}

func TestAgent(t *testing.T) {
	sc := tinyScenario(Shape{1, 1, 1, false}, 1, 1)
	cfg := sc.Config(Mode{Agent: Agent{Enabled: true, Heartbeat: 20 * time.Second, Lag: 30 * time.Second, StopAfter: 40 * time.Second}}, KubeDefault, Direct{})
	cfg.Tick = 10 * time.Second
	s := &state{cfg: cfg, clusters: []*simCluster{testCluster(t, 2)}}
	p := s.clusters[0].pools[0]
	var publishedAt []string
	for round := range 10 {
		now := start().Add(time.Duration(round) * s.cfg.Tick)
		s.publish(now)
		at := "-"
		if p.published != nil {
			at = p.published.report.ObservedAt.Sub(start()).String()
		}
		publishedAt = append(publishedAt, at)
		if err := s.sample(context.Background(), now, round); err != nil {
			t.Fatal(err)
		}
	}
	// Samples at 5s and 25s (every 20s, until the agent stops at 40s),
	// each visible 30s later.
	want := []string{"-", "-", "-", "-", "5s", "5s", "25s", "25s", "25s", "25s"}
	if diff := cmp.Diff(want, publishedAt); diff != "" {
		t.Errorf("observedAt of the published report by round: -want, +got:\n%s", diff)
	}
	obj := s.clusters[0].object()
	want2 := []any{map[string]any{"nodes": 2.0, "free": []any{map[string]any{"name": "gpu", "count": 8.0}}}}
	if diff := cmp.Diff(want2, obj.Status.GPUPools[0].NodesByFreeDevices); diff != "" {
		t.Errorf("nodesByFreeDevices: -want, +got:\n%s", diff)
	}
}

func TestLimitOfTheScenarios(t *testing.T) {
	want := map[string]Bounds{
		"l4-1gpu":   {Replicas: 256, GPUs: 256, Exact: true, Fit: 256, PerReplica: 1},
		"h100-4gpu": {Replicas: 128, GPUs: 512, Exact: true, Fit: 128, PerReplica: 4},
		"h100-pd":   {Replicas: 64, GPUs: 512, Exact: true, Fit: 64, PerReplica: 8},
		"h100-gang": {Replicas: 32, GPUs: 512, Exact: true, Fit: 32, PerReplica: 16},
		// 112 1-GPU, 50 2-GPU, 50 4-GPU and 12 of the 25 8-GPU replicas
		// claim 508 of the 512 GPUs; all 612 GPUs wanted do not fit.
		"h100-mixed":      {Replicas: 224, GPUs: 512, Exact: true},
		"l4-agent-silent": {Replicas: 256, GPUs: 256, Exact: true, Fit: 256, PerReplica: 1},
	}
	got := map[string]Bounds{}
	for _, sc := range Scenarios() {
		got[sc.Name] = Limit(sc)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Limit: -want, +got:\n%s", diff)
	}
}

func TestReport(t *testing.T) {
	sc := tinyScenario(Shape{1, 1, 4, false}, 4, 3)
	var rows []Row
	for _, m := range Modes() {
		res, err := Run(sc.Config(m, KubeDefault, Direct{Input: Input(m.Binding)}))
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, Row{Scenario: sc, Mode: m, Binder: KubeDefault, Result: res, Bounds: Limit(sc)})
	}
	var table, svg bytes.Buffer
	if err := WriteTable(&table, rows); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(table.String(), "\n"); lines != 2+len(rows) {
		t.Errorf("table has %d lines, want a header, a rule and %d rows:\n%s", lines, len(rows), table.String())
	}
	if err := WriteChart(&svg, rows); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(&svg)
	polylines := 0
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("chart is not well-formed XML: %v", err)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			polylines++
		}
	}
	if polylines != len(rows)+1 {
		t.Errorf("chart has %d lines, want one per mode (%d) and the bound", polylines, len(rows))
	}
}

func TestStatsAtThePeak(t *testing.T) {
	// Demand of 10 GPUs from round 1 to 2, then 4; the fleet holds 8.
	res := &Result{FleetGPUs: 8, Series: []Point{
		{Round: 0, GPUs: 0, DemandGPUs: 4, Wanted: 4},
		{Round: 1, GPUs: 4, DemandGPUs: 10, Wanted: 10},
		{Round: 2, GPUs: 6, DemandGPUs: 10, Wanted: 10},
		{Round: 3, GPUs: 4, DemandGPUs: 4, Wanted: 4},
	}}
	got := Row{Result: res, Bounds: Bounds{}}.Stats()
	// Bounds min(demand, 8): 4, 8, 8, 4 -> mean 24/32; allocated 14/32.
	want := Stats{Mean: 14.0 / 32, MeanBound: 24.0 / 32, Peak: 6.0 / 8, PeakBound: 1, PeakRound: 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Stats: -want, +got:\n%s", diff)
	}
}

func TestReplicaGPUs(t *testing.T) {
	cases := []struct {
		reason string
		engine []v1alpha1.Engine
		want   int64
	}{
		{reason: "A Standalone claims its requests.", engine: []v1alpha1.Engine{fixture.Standalone("m", fixture.GPURequest(3))}, want: 3},
		{reason: "A gang claims its Leader's and every Worker's.", engine: []v1alpha1.Engine{fixture.Gang("m", 3, fixture.GPURequest(8))}, want: 32},
		{reason: "Copies multiply; engines add.", engine: []v1alpha1.Engine{fixture.Copies(fixture.Standalone("a", fixture.GPURequest(2)), 3), fixture.Standalone("b", fixture.GPURequest(1))}, want: 7},
		{reason: "A member without a nodeSelector claims nothing.", engine: []v1alpha1.Engine{fixture.Standalone("m")}, want: 0},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			if got := ReplicaGPUs(fixture.Deployment("d").Engines(tc.engine...).Obj()); got != tc.want {
				t.Errorf("ReplicaGPUs = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestBinderNames(t *testing.T) {
	var got []string
	for _, b := range Binders() {
		p, err := ParseBinder(string(b))
		if err != nil || p != b {
			t.Errorf("ParseBinder(%q) = %q, %v", b, p, err)
		}
		got = append(got, string(b))
	}
	if !slices.Contains(got, "kube-default") || got[0] != "kube-default" {
		t.Errorf("binders %v, want kube-default first", got)
	}
	if _, err := ParseBinder("least-allocated"); err == nil {
		t.Error("ParseBinder accepted the old GPU-ranked name least-allocated")
	}
}

// TestDirectCacheChangesNothing runs scenarios with and without Direct's
// cache and wants the same fleet round by round.
func TestDirectCacheChangesNothing(t *testing.T) {
	sc := tinyScenario(Shape{1, 1, 2, false}, 2, 12)
	sc.Events = append(sc.Events, Event{Round: 8, Name: "d0", Replicas: 4}, Event{Round: 12, Name: "d1", Delete: true})
	for _, m := range []Mode{WholeNode(), Fresh(), Lagging().Assuming(scheduling.LeastFree)} {
		plain, err := Run(sc.Config(m, KubeDefault, Direct{Input: Input(m.Binding)}))
		if err != nil {
			t.Fatal(err)
		}
		cached, err := Run(sc.Config(m, KubeDefault, Direct{Input: Input(m.Binding), Cache: NewCache()}))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(plain.Series, cached.Series); diff != "" {
			t.Errorf("%s: the fleet differs with the cache: -without, +with:\n%s", m.Name, diff)
		}
	}
}

// TestStuckReplicaIsReplaced places a replica whose pod the cluster cannot
// bind: the pool the function picks first has GPUs free but too little cpu
// for the pod. After replaceUnscheduledAfter the function re-places it on
// the other pool of the cluster, where it binds.
func TestStuckReplicaIsReplaced(t *testing.T) {
	pools := []PoolSpec{
		{Name: "small-cpu", Nodes: 1, GPUsPerNode: 8, Memory: "80Gi", CPU: "2", NodeMemory: "64Gi"},
		{Name: "big-cpu", Nodes: 1, GPUsPerNode: 8, Memory: "80Gi"},
	}
	d := withTemplates(fixture.Deployment("x").Engines(fixture.Standalone("main", fixture.GPURequest(1))).Obj())
	sc := Scenario{
		Name: "stuck", Clusters: Fleet(1, pools...), Rounds: 30, Shapes: map[string]Shape{"d": {1, 1, 1, false}},
		Events: []Event{{Round: 0, Name: "d", Replicas: 1, Deployment: d}},
	}
	cfg := sc.Config(Fresh(), KubeDefault, Direct{Input: v1beta1.Input{ReplaceUnscheduledAfter: new("1m")}})
	cfg.Sizing = PerGPU() // the pod's cpu: v0.3's request none
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var pending []int
	for _, p := range res.Series {
		pending = append(pending, p.Pending)
	}
	// Pending from round 0; stuck once False for more than a minute (round
	// 7), re-placed, and bound the same round.
	want := append(slices.Repeat([]int{1}, 7), slices.Repeat([]int{0}, 23)...)
	if diff := cmp.Diff(want, pending); diff != "" {
		t.Errorf("pods Pending by round: -want, +got:\n%s", diff)
	}
	if res.Running != 1 || res.Placed != 1 {
		t.Errorf("%d of %d replicas running at the end, want 1 of 1", res.Running, res.Placed)
	}
}

func TestPredictions(t *testing.T) {
	sc := tinyScenario(Shape{1, 1, 1, false}, 1, 30)
	cases := []struct {
		reason string
		binder Binder
		// most and least say whether every claiming pod bound where
		// MostFree, and LeastFree, predicts.
		most, least bool
	}{
		{reason: "gpu-most-free binds where MostFree predicts.", binder: GPUMostFree, most: true},
		{reason: "gpu-least-free binds where LeastFree predicts.", binder: GPULeastFree, least: true},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			res, err := Run(sc.Config(Fresh(), tc.binder, Direct{}))
			if err != nil {
				t.Fatal(err)
			}
			b := res.Binds
			if b.Claiming() != 40 {
				t.Fatalf("%d claiming pods bound, want 40", b.Claiming())
			}
			if got := b.MostFree() == b.Claiming(); got != tc.most {
				t.Errorf("MostFree predicted %d of %d binds", b.MostFree(), b.Claiming())
			}
			if got := b.LeastFree() == b.Claiming(); got != tc.least {
				t.Errorf("LeastFree predicted %d of %d binds", b.LeastFree(), b.Claiming())
			}
		})
	}
}

// TestNodesHoldImagesAfterThePull binds a replica and wants its node to
// hold the serving image only once the pull is done.
func TestNodesHoldImagesAfterThePull(t *testing.T) {
	sc := tinyScenario(Shape{1, 1, 1, false}, 1, 1)
	sc.ImagePull = 30 * time.Second
	cfg := sc.Config(Fresh(), KubeDefault, Direct{})
	cfg.Tick = 10 * time.Second
	s, err := newState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res := &Result{}
	var held []int
	for round := range 6 {
		if err := s.round(context.Background(), round, res); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range s.clusters {
			for _, node := range c.kube.Nodes() {
				n += len(node.Obj.Status.Images)
			}
		}
		held = append(held, n)
	}
	// Bound 1 s into round 0; held from 31 s, seen at the start of round
	// 4 (40 s).
	if diff := cmp.Diff([]int{0, 0, 0, 0, 1, 1}, held); diff != "" {
		t.Errorf("nodes holding the image by round: -want, +got:\n%s", diff)
	}
}

// TestReplacingClearsMisguessedPods runs Misguessed under kube-default
// with re-placing off and on: off, the replicas the ledger misguessed stay
// Pending to the end; on, each moves once, to the spare pool, and binds.
func TestReplacingClearsMisguessedPods(t *testing.T) {
	type want struct {
		Placed, Wanted, PendingEnd     int
		Moves, MovedReplicas, MaxMoves int
	}
	cases := map[string]struct {
		reason string
		after  time.Duration
		want   want
	}{
		"Off": {
			reason: "With re-placing off, the misguessed 4-GPU replica of every cluster stays Pending to the end.",
			after:  0,
			want:   want{Placed: 20, Wanted: 20, PendingEnd: 4},
		},
		"On": {
			reason: "With re-placing on (15m), each misguessed replica moves once, to its cluster's spare pool, and no pod is Pending at the end.",
			after:  15 * time.Minute,
			want:   want{Placed: 20, Wanted: 20, Moves: 4, MovedReplicas: 4, MaxMoves: 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sc := Misguessed()
			res, err := Run(sc.Config(Fresh(), KubeDefault, Direct{Input: v1beta1.Input{ReplaceUnscheduledAfter: new(tc.after.String())}}))
			if err != nil {
				t.Fatal(err)
			}
			got := want{Placed: res.Placed, Wanted: res.Wanted, PendingEnd: res.PendingEnd, Moves: res.Moves, MovedReplicas: res.MovedReplicas, MaxMoves: res.MaxMoves}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nRun(Misguessed): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestMovesCountAgainstTheReplicaReplaced(t *testing.T) {
	now := start().Add(time.Hour)
	onPool := func(cluster, pool string, index int, memory *scheduling.Replacement) *v1alpha1.ModelReplica {
		r := fixture.Replica("d", cluster, index).Engines(fixture.PinnedStandalone("main", pool, fixture.Stamped(1))).Obj()
		if memory != nil {
			r.Metadata.Annotations = map[string]string{v1alpha1.AnnotationReplacement: memory.String()}
		}
		return r
	}
	moved := &scheduling.Replacement{Moves: 1, MovedAt: now, StuckOn: []scheduling.PoolRef{{Cluster: "a", Pool: "p1"}}}
	earlier := &scheduling.Replacement{Moves: 1, MovedAt: now.Add(-time.Minute), StuckOn: moved.StuckOn}
	type args struct {
		desired *v1alpha1.ModelReplica
		dropped []*v1alpha1.ModelReplica
	}
	type want struct {
		// from is the index of the dropped replica counted, -1 for none.
		from  int
		moves map[int]int
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"NotMoved": {
			reason: "A replica without the annotation did not move.",
			args:   args{desired: onPool("a", "p2", 0, nil), dropped: []*v1alpha1.ModelReplica{onPool("a", "p1", 0, nil)}},
			want:   want{from: -1},
		},
		"MovedBefore": {
			reason: "An annotation of an earlier move is no move now.",
			args:   args{desired: onPool("a", "p2", 0, earlier), dropped: []*v1alpha1.ModelReplica{onPool("a", "p1", 0, nil)}},
			want:   want{from: -1},
		},
		"SameCluster": {
			reason: "A replica moved to another pool of its cluster keeps its name: it replaces the dropped one of that name.",
			args:   args{desired: onPool("a", "p2", 1, moved), dropped: []*v1alpha1.ModelReplica{onPool("a", "p1", 0, nil), onPool("a", "p1", 1, nil)}},
			want:   want{from: 1, moves: map[int]int{101: 1}},
		},
		"AnotherCluster": {
			reason: "A replica moved to another cluster has a new name: it replaces the dropped one on a pool it was stuck on.",
			args:   args{desired: onPool("b", "p1", 0, moved), dropped: []*v1alpha1.ModelReplica{onPool("b", "p2", 3, nil), onPool("a", "p1", 2, nil)}},
			want:   want{from: 1, moves: map[int]int{101: 1}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := &state{seq: 7}
			var dropped []*replica
			for i, o := range tc.args.dropped {
				dropped = append(dropped, &replica{obj: o, origin: 100 + i})
			}
			got := want{from: -1}
			if from := s.moved(tc.args.desired, dropped, now); from != nil {
				got.from = slices.Index(dropped, from)
			}
			got.moves = s.moves
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nmoved: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestConcurrentReconciles runs ScaleAtOnce with 16 deployments
// reconciled at once: without assumed placements they place onto the same
// free GPUs and pods stay Pending; with one server's ledger no pod is
// Pending in any round, for any number of calls at once, and they place
// what reconciling one after another places.
func TestConcurrentReconciles(t *testing.T) {
	sc := ScaleAtOnce()
	run := func(t *testing.T, concurrent, servers int) *Result {
		t.Helper()
		d := Direct{Cache: NewCache()}
		if servers > 0 {
			d.Servers = NewServers(servers)
		}
		cfg := sc.Config(Fresh(), KubeDefault, d)
		cfg.Concurrent = concurrent
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	serial := run(t, 1, 0)
	type args struct {
		concurrent, servers int
	}
	type want struct {
		// pending is whether some round ends with a pod Pending, and
		// overcommit whether some pod was placed onto a fully claimed
		// pool.
		pending, overcommit bool
		// placed is how many replicas are placed at the end; -1 for any.
		placed int
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"SixteenWithoutLedger": {
			reason: "16 calls reading the same fleet, with nothing assumed, place onto the same free GPUs: pods stay Pending.",
			args:   args{concurrent: 16},
			want:   want{pending: true, overcommit: true, placed: -1},
		},
		"OneWithLedger": {
			reason: "One call at a time with one server's ledger places as one after another.",
			args:   args{concurrent: 1, servers: 1},
			want:   want{placed: serial.Placed},
		},
		"FourWithLedger": {
			reason: "4 calls at once through one server's ledger see each other's placements: no pod Pending, what one after another places.",
			args:   args{concurrent: 4, servers: 1},
			want:   want{placed: serial.Placed},
		},
		"SixteenWithLedger": {
			reason: "16 calls at once through one server's ledger see each other's placements: no pod Pending, what one after another places.",
			args:   args{concurrent: 16, servers: 1},
			want:   want{placed: serial.Placed},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res := run(t, tc.args.concurrent, tc.args.servers)
			got := want{pending: res.PendingMax > 0, overcommit: res.Overcommit > 0, placed: res.Placed}
			if tc.want.placed < 0 {
				got.placed = -1
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nRun(ScaleAtOnce, %d at once, %d servers): -want, +got:\n%s", tc.reason, tc.args.concurrent, tc.args.servers, diff)
			}
		})
	}
	if serial.PendingMax > 0 || serial.Placed <= 64 {
		t.Errorf("one after another without a ledger: %d pods Pending at most, %d replicas placed; want none Pending and more than the 64 before the scale", serial.PendingMax, serial.Placed)
	}
}
