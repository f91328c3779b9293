package sim

import (
	"bytes"
	"encoding/xml"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/modelplaneai/fleet-scheduler/internal/fixture"
)

func testPool(free ...int64) *simPool {
	p := &simPool{spec: PoolSpec{Name: "p", Nodes: len(free), GPUsPerNode: 8}}
	for _, f := range free {
		p.nodes = append(p.nodes, &node{free: f})
	}
	return p
}

func TestBinder(t *testing.T) {
	cases := []struct {
		reason string
		binder Binder
		free   []int64
		pods   []pod
		// want is each node's free GPUs after binding, and bound whether
		// each pod bound.
		want  []int64
		bound []bool
	}{
		{
			reason: "Least-allocated binds to the node with the most free.",
			binder: LeastAllocated, free: []int64{2, 8, 4},
			pods: []pod{{claim: 2}}, want: []int64{2, 6, 4}, bound: []bool{true},
		},
		{
			reason: "Most-allocated binds to the fitting node with the fewest free.",
			binder: MostAllocated, free: []int64{1, 8, 4},
			pods: []pod{{claim: 2}}, want: []int64{1, 8, 2}, bound: []bool{true},
		},
		{
			reason: "A pod no node fits stays Pending.",
			binder: LeastAllocated, free: []int64{2, 3},
			pods: []pod{{claim: 4}}, want: []int64{2, 3}, bound: []bool{false},
		},
		{
			reason: "The claiming pods of one gang take distinct nodes, even when one node could hold both.",
			binder: MostAllocated, free: []int64{8, 4},
			pods: []pod{{claim: 4, gang: "g"}, {claim: 4, gang: "g"}}, want: []int64{4, 0}, bound: []bool{true, true},
		},
		{
			reason: "A gang's second pod stays Pending when only the node its first took fits it.",
			binder: LeastAllocated, free: []int64{8, 2},
			pods: []pod{{claim: 4, gang: "g"}, {claim: 4, gang: "g"}}, want: []int64{4, 2}, bound: []bool{true, false},
		},
		{
			reason: "A claimless pod binds without taking a device.",
			binder: LeastAllocated, free: []int64{0},
			pods: []pod{{claim: 0}}, want: []int64{0}, bound: []bool{true},
		},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			p := testPool(tc.free...)
			rng := rand.New(rand.NewPCG(1, 2))
			var bound []bool
			for i := range tc.pods {
				pd := tc.pods[i]
				pd.pool = p
				bound = append(bound, tc.binder.bind(&pd, rng))
			}
			var free []int64
			for _, n := range p.nodes {
				free = append(free, n.free)
			}
			if diff := cmp.Diff(tc.want, free); diff != "" {
				t.Errorf("free GPUs after binding: -want, +got:\n%s", diff)
			}
			if diff := cmp.Diff(tc.bound, bound); diff != "" {
				t.Errorf("bound: -want, +got:\n%s", diff)
			}
		})
	}
}

func TestRandomBinderOnlyBindsWhereThePodFits(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 100 {
		p := testPool(1, 8, 3, 0)
		pd := &pod{pool: p, claim: 3}
		if !Random.bind(pd, rng) {
			t.Fatal("a 3-GPU pod did not bind where two nodes fit it")
		}
		if pd.node != p.nodes[1] && pd.node != p.nodes[2] {
			t.Fatalf("bound to a node with %d free, want one with 3 or more", pd.node.free+3)
		}
	}
}

func tinyScenario(shape Shape, tmplGPUs int64, replicas int64) Scenario {
	pools := []PoolSpec{{Name: "a", Nodes: 3, GPUsPerNode: 4, Memory: "80Gi"}, {Name: "b", Nodes: 2, GPUsPerNode: 4, Memory: "80Gi"}}
	d := fixture.Deployment("x").Engines(fixture.Standalone("main", fixture.GPURequest(tmplGPUs))).Obj()
	return Scenario{
		Name: "tiny", Clusters: Fleet(2, pools...), Rounds: 20, Shapes: map[string]Shape{"d0": shape, "d1": shape},
		Events: []Event{{Round: 0, Name: "d0", Replicas: replicas, Deployment: d}, {Round: 2, Name: "d1", Replicas: replicas, Deployment: d}},
	}
}

func TestRunReachesTheLimitWithAFreshAgent(t *testing.T) {
	sc := tinyScenario(Shape{1, 1, 1, false}, 1, 30)
	limit := PhysicalLimit(sc)
	if limit.Replicas != 40 || limit.GPUs != 40 || !limit.Exact {
		t.Fatalf("PhysicalLimit(...) = %+v, want 40 replicas and 40 GPUs, exact", limit)
	}
	cases := map[string]struct {
		mode    Mode
		placed  int
		pending int
	}{
		"Whole-node accounting places one 1-GPU replica per 4-GPU node.": {mode: WholeNode(), placed: 10},
		"A fresh agent lets the fleet fill every GPU.":                   {mode: Fresh(), placed: 40},
		"A lagging agent also fills every GPU, and overcommits nothing.": {mode: Lagging(), placed: 40},
	}
	for reason, tc := range cases {
		t.Run(reason, func(t *testing.T) {
			res, err := Run(sc.Config(tc.mode, LeastAllocated, Direct{}))
			if err != nil {
				t.Fatal(err)
			}
			if res.Placed != tc.placed || res.Running != tc.placed || res.GPUs != int64(tc.placed) {
				t.Errorf("placed %d, running %d, %d GPUs; want %d of each", res.Placed, res.Running, res.GPUs, tc.placed)
			}
			if res.PendingMax != 0 {
				t.Errorf("%d pods were left Pending, want none", res.PendingMax)
			}
			if res.Wanted != 60 || len(res.Series) != sc.Rounds {
				t.Errorf("wanted %d over %d rounds, want 60 over %d", res.Wanted, len(res.Series), sc.Rounds)
			}
		})
	}
}

func TestAgent(t *testing.T) {
	sc := tinyScenario(Shape{1, 1, 1, false}, 1, 1)
	s := &state{cfg: sc.Config(Mode{Agent: Agent{Enabled: true, Heartbeat: 20 * time.Second, Lag: 30 * time.Second, StopAfter: 40 * time.Second}}, LeastAllocated, Direct{})}
	s.cfg.Tick = 10 * time.Second
	s.clusters = []*simCluster{{name: "c", pools: []*simPool{testPool(8, 8)}}}
	p := s.clusters[0].pools[0]
	var publishedAt []string
	for round := range 10 {
		now := start().Add(time.Duration(round) * s.cfg.Tick)
		s.publish(now)
		at := "-"
		if p.published != nil {
			at = p.published.observedAt.Sub(start()).String()
		}
		publishedAt = append(publishedAt, at)
		s.sample(now, round)
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

func TestPhysicalLimitOfTheScenarios(t *testing.T) {
	want := map[string]Limit{
		"l4-1gpu":         {Replicas: 256, GPUs: 256, Exact: true},
		"h100-4gpu":       {Replicas: 128, GPUs: 512, Exact: true},
		"h100-pd":         {Replicas: 64, GPUs: 512, Exact: true},
		"h100-gang":       {Replicas: 32, GPUs: 512, Exact: true},
		"h100-mixed":      {Replicas: 137, GPUs: 512, Exact: true},
		"l4-agent-silent": {Replicas: 256, GPUs: 256, Exact: true},
	}
	got := map[string]Limit{}
	for _, sc := range Scenarios() {
		got[sc.Name] = PhysicalLimit(sc)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PhysicalLimit: -want, +got:\n%s", diff)
	}
}

func TestReport(t *testing.T) {
	sc := tinyScenario(Shape{1, 1, 4, false}, 4, 3)
	var rows []Row
	for _, m := range Modes() {
		res, err := Run(sc.Config(m, LeastAllocated, Direct{}))
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, Row{Scenario: sc, Mode: m, Binder: LeastAllocated, Result: res, Limit: PhysicalLimit(sc)})
	}
	var table, svg bytes.Buffer
	if err := WriteTable(&table, rows); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(table.String(), "\n"); lines != 2+len(rows) {
		t.Errorf("table has %d lines, want a header, a rule and %d rows:\n%s", lines, len(rows), table.String())
	}
	if err := WriteChart(&svg, rows, 10*time.Second); err != nil {
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
	if polylines != len(rows) {
		t.Errorf("chart has %d lines, want one per mode (%d)", polylines, len(rows))
	}
}
