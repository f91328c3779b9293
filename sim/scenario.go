package sim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
	"github.com/modelplaneai/fleet-scheduler/sim/composereplica"
)

// Mode is how the fleet's capacity is observed, and which binding the
// function's ledger assumes.
type Mode struct {
	Name    string
	Agent   Agent
	Binding scheduling.Binding
}

// WholeNode is a fleet without an agent: every pool on whole-node
// accounting.
func WholeNode() Mode { return Mode{Name: "whole-node", Binding: scheduling.MostFree} }

// Fresh is an agent that reports every 10s, visible from the next round,
// the ledger assuming MostFree.
func Fresh() Mode {
	return Mode{Name: "fresh agent, MostFree", Agent: Agent{Enabled: true, Heartbeat: 10 * time.Second}, Binding: scheduling.MostFree}
}

// Lagging is an agent that reports every 30s, each report visible 60s
// later, the ledger assuming MostFree.
func Lagging() Mode {
	return Mode{Name: "lagging agent, MostFree", Agent: Agent{Enabled: true, Heartbeat: 30 * time.Second, Lag: 60 * time.Second}, Binding: scheduling.MostFree}
}

// Assuming is the mode with the ledger assuming another binding.
func (m Mode) Assuming(b scheduling.Binding) Mode {
	if m.Agent.Enabled {
		m.Name = m.Name[:len(m.Name)-len(m.Binding)] + string(b)
	}
	m.Binding = b
	return m
}

// Key is a mode's short name, for command lines: whole-node,
// fresh-mostfree, fresh-leastfree, lagging-mostfree, lagging-leastfree.
func (m Mode) Key() string {
	if !m.Agent.Enabled {
		return "whole-node"
	}
	agent := "fresh"
	if m.Agent.Lag > 0 {
		agent = "lagging"
	}
	return agent + "-" + strings.ToLower(string(m.Binding))
}

// Modes are the modes every scenario runs in.
func Modes() []Mode {
	return []Mode{WholeNode(), Fresh(), Fresh().Assuming(scheduling.LeastFree), Lagging(), Lagging().Assuming(scheduling.LeastFree)}
}

// Shape is a replica of identical engines, each of Pods pods claiming GPUs
// apiece; a Gang engine's pods need distinct nodes of one pool.
type Shape struct {
	Engines int
	Pods    int
	GPUs    int64
	Gang    bool
}

// PerReplica is how many GPUs one replica claims.
func (s Shape) PerReplica() int64 { return int64(s.Engines*s.Pods) * s.GPUs }

// Scenario is a named fleet and the demand on it.
type Scenario struct {
	Name     string
	Summary  string
	Clusters []ClusterSpec
	Events   []Event
	// Shapes is each deployment's replica shape, for the bounds.
	Shapes map[string]Shape
	Rounds int
	// Tick is the simulated time between rounds; zero means 10s.
	Tick time.Duration
	// AgentStopsAfter, when positive, silences the agent mid-run.
	AgentStopsAfter time.Duration
	// Skipped says what a trace left out, for the report.
	Skipped string
	// ImageSize is the size of the serving image nodes pull: zero means
	// DefaultImageSize, negative an image too small to score (0 bytes).
	ImageSize int64
	// ImagePull is how long a node takes to hold a bound pod's image:
	// zero means DefaultImagePull, negative at once.
	ImagePull time.Duration
	// Sizing, when set, is what the scenario's pods request whatever the
	// run's: a scenario about cpu and memory.
	Sizing *composereplica.Sizing
}

// FinalDemand is each deployment's wanted replicas after the last event.
func (sc Scenario) FinalDemand() map[string]int64 {
	out := map[string]int64{}
	for _, e := range sc.Events {
		if e.Delete {
			delete(out, e.Name)
			continue
		}
		out[e.Name] = e.Replicas
	}
	return out
}

// Config is the run of the scenario in a mode, its pods v0.3's (no cpu or
// memory requested) unless it has a Sizing of its own; set the Config's
// Sizing to size them otherwise.
func (sc Scenario) Config(m Mode, b Binder, rec Reconciler) Config {
	a := m.Agent
	if a.Enabled && sc.AgentStopsAfter > 0 {
		a.StopAfter = sc.AgentStopsAfter
	}
	return Config{
		Clusters: sc.Clusters, Events: sc.Events, Rounds: sc.Rounds, Tick: sc.Tick, Agent: a, Binder: b, Seed: 1, Reconciler: rec,
		Image: DefaultImage, ImageSize: orDefault(sc.ImageSize, DefaultImageSize), ImagePull: orDefault(sc.ImagePull, DefaultImagePull),
		Sizing: sc.Sizing,
	}
}

// orDefault reads a scenario's setting where zero means the default and a
// negative value means none: the default, zero, or the value.
func orDefault[T int64 | time.Duration](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// Pools of the scenarios: 8 nodes each, two per cluster, four clusters.
// The nodes are AWS's g6.12xlarge (4 L4, 48 vCPU, 192 GiB) and
// p5.48xlarge (8 H100, 192 vCPU, 2 TiB), less what the kubelet reserves.
func l4Pools() []PoolSpec {
	return []PoolSpec{
		{Name: "l4-a", Nodes: 8, GPUsPerNode: 4, Memory: "24Gi", Model: "L4", CPU: "47", NodeMemory: "180Gi"},
		{Name: "l4-b", Nodes: 8, GPUsPerNode: 4, Memory: "24Gi", Model: "L4", CPU: "47", NodeMemory: "180Gi"},
	}
}

func h100Pools() []PoolSpec {
	return []PoolSpec{h100Pool("h100-a", 8), h100Pool("h100-b", 8)}
}

// h100Pool is a pool of p5.48xlarge nodes.
func h100Pool(name string, nodes int) PoolSpec {
	return PoolSpec{Name: name, Nodes: nodes, GPUsPerNode: 8, Memory: "80Gi", Model: "H100", CPU: "190", NodeMemory: "1980Gi"}
}

// AtLeast20Gi selects a GPU with 20Gi of memory or more (an L4 has 24Gi).
const AtLeast20Gi = `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20Gi")) >= 0`

// Template is a serving pod template of DefaultImage: what a
// ModelDeployment's curated template holds, the engine container. What
// the pods request is the run's Sizing (Config.Sizing) or the
// deployment's own (Event.Sizing): the ModelDeployment XRD has no
// resources field, so an API server prunes any a template holds.
func Template() json.RawMessage {
	t := map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "engine", "image": DefaultImage}}}}
	b, err := json.Marshal(t)
	if err != nil {
		panic(err) // A map of strings marshals.
	}
	return b
}

// PerGPU is the sizing of Modelplane's open proposal to size a replica's
// pods in proportion to their GPUs, as the simulator assumes it: 2 cores
// and 8Gi, plus 2 cores and 24Gi per GPU (vLLM needs host memory for the
// weights it loads and some cores per GPU worker; clusters size it their
// way). v0.3's pods request neither.
func PerGPU() *composereplica.Sizing {
	return &composereplica.Sizing{
		BaseCPU: resource.MustParse("2"), BaseMemory: resource.MustParse("8Gi"),
		PerDeviceCPU: resource.MustParse("2"), PerDeviceMemory: resource.MustParse("24Gi"),
	}
}

// fixed is a sizing of cpu and memory whatever the GPUs.
func fixed(cpu, memory string) *composereplica.Sizing {
	return &composereplica.Sizing{BaseCPU: resource.MustParse(cpu), BaseMemory: resource.MustParse(memory)}
}

// withTemplates gives every member of a deployment Template.
func withTemplates(d *v1alpha1.ModelDeployment) *v1alpha1.ModelDeployment {
	for ei := range d.Spec.Template.Spec.Engines {
		e := &d.Spec.Template.Spec.Engines[ei]
		for mi := range e.Members {
			e.Members[mi].Template = Template()
		}
	}
	return d
}

func standalone(gpus int64, cel string) *v1alpha1.ModelDeployment {
	return withTemplates(fixture.Deployment("x").Engines(fixture.Standalone("main", fixture.Request(DeviceName, gpus, cel))).Obj())
}

// uniform is six deployments of one shape arriving 30s apart, the first
// halving at round 24, on a fleet they oversubscribe.
func uniform(name, summary string, pools []PoolSpec, tmpl *v1alpha1.ModelDeployment, shape Shape, each int64) Scenario {
	sc := Scenario{Name: name, Summary: summary, Clusters: Fleet(4, pools...), Shapes: map[string]Shape{}, Rounds: 90}
	for i := range 6 {
		n := fmt.Sprintf("%s-%d", name, i)
		sc.Events = append(sc.Events, Event{Round: 3 * i, Name: n, Replicas: each, Deployment: tmpl})
		sc.Shapes[n] = shape
	}
	sc.Events = append(sc.Events, Event{Round: 24, Name: name + "-0", Replicas: each / 2})
	return sc
}

// Scenarios are the named workloads, in report order. The large fleet
// (Large) is apart: it takes minutes.
func Scenarios() []Scenario {
	gpu1 := standalone(1, AtLeast20Gi)
	gpu4 := standalone(4, fixture.MemAtLeast80Gi)
	pd := withTemplates(fixture.Deployment("x").Engines(
		fixture.Phase(fixture.Standalone("prefill", fixture.GPURequest(4)), "Prefill"),
		fixture.Phase(fixture.Standalone("decode", fixture.GPURequest(4)), "Decode"),
	).Obj())
	gang := withTemplates(fixture.Deployment("x").Engines(fixture.Gang("main", 1, fixture.GPURequest(8))).Obj())

	return []Scenario{
		uniform("l4-1gpu", "1-GPU replicas on pools of 4xL4 nodes", l4Pools(), gpu1, Shape{1, 1, 1, false}, 56),
		uniform("h100-4gpu", "4-GPU replicas on 8xH100 nodes", h100Pools(), gpu4, Shape{1, 1, 4, false}, 28),
		uniform("h100-pd", "prefill+decode replicas of 4+4 GPUs (two Standalone engines) on 8xH100", h100Pools(), pd, Shape{2, 1, 4, false}, 14),
		uniform("h100-gang", "multi-node gangs of two 8-GPU pods (Leader + 1 Worker) on 8xH100", h100Pools(), gang, Shape{1, 2, 8, true}, 7),
		mixed(),
		silent(gpu1),
	}
}

// mixed is ten deployments of 25 replicas, five of 1 GPU, two of 2, two of
// 4 and one of 8 (50/20/20/10% of replicas), arriving 30s apart, small and
// large interleaved; the first halves at round 33. The shares are assumed,
// not measured from a trace: single-GPU requests are the majority in the
// public GPU-cluster traces (Microsoft Philly, ATC'19; Alibaba PAI, NSDI'22;
// SenseTime Helios, SC'21), but the exact split here is ours.
func mixed() Scenario {
	sc := Scenario{Name: "h100-mixed", Summary: "1/2/4/8-GPU replicas (50/20/20/10% of replicas, assumed) on 8xH100", Clusters: Fleet(4, h100Pools()...), Shapes: map[string]Shape{}, Rounds: 90}
	for i, g := range []int64{1, 2, 4, 1, 8, 1, 2, 4, 1, 1} {
		n := fmt.Sprintf("h100-mixed-%d-%dgpu", i, g)
		sc.Events = append(sc.Events, Event{Round: 3 * i, Name: n, Replicas: 25, Deployment: standalone(g, fixture.MemAtLeast80Gi)})
		sc.Shapes[n] = Shape{1, 1, g, false}
	}
	sc.Events = append(sc.Events, Event{Round: 33, Name: "h100-mixed-0-1gpu", Replicas: 12})
	return sc
}

// silent is 1-GPU replicas on 4xL4 whose agent stops at 200s: deployments
// arrive before, while the last reports are still fresh (round 25), and
// after they went stale (round 60).
func silent(tmpl *v1alpha1.ModelDeployment) Scenario {
	sc := Scenario{Name: "l4-agent-silent", Summary: "1-GPU replicas on 4xL4; the agent goes silent at 200s, its reports stale 5m later", Clusters: Fleet(4, l4Pools()...), Shapes: map[string]Shape{}, Rounds: 90, AgentStopsAfter: 200 * time.Second}
	for i, round := range []int{0, 10, 25, 60} {
		n := fmt.Sprintf("l4-agent-silent-%d", i)
		sc.Events = append(sc.Events, Event{Round: round, Name: n, Replicas: 80, Deployment: tmpl})
		sc.Shapes[n] = Shape{1, 1, 1, false}
	}
	return sc
}

// Large is the fleet of 100 clusters of 8 pools of 32 8-GPU nodes (204,800
// GPUs) with churn: 360 deployments of 1, 2, 4 and 8 GPUs per replica (50,
// 20, 20 and 10% of them, as mixed), twelve arriving every round for the
// first 30 rounds, each wanting 20 to 700 replicas and leaving after 15 to
// 45 rounds (a third halving on the way). Demand peaks at about 1.3 times
// the fleet.
func Large() Scenario {
	pools := make([]PoolSpec, 0, 8)
	for i := range 8 {
		pools = append(pools, h100Pool(fmt.Sprintf("h100-%d", i), 32))
	}
	sc := Scenario{Name: "large-churn", Summary: "100 clusters x 8 pools x 32 8xH100 nodes; deployments of 1-8 GPUs per replica arrive and leave", Clusters: Fleet(100, pools...), Shapes: map[string]Shape{}, Rounds: 60}
	rng := rand.New(rand.NewPCG(11, 11)) //nolint:gosec // A reproducible workload, not security.
	sizes := []int64{1, 1, 1, 1, 1, 2, 2, 4, 4, 8}
	for i := range 360 {
		round := i / 12
		g := sizes[rng.IntN(len(sizes))]
		n := fmt.Sprintf("large-%03d-%dgpu", i, g)
		replicas := int64(20 + rng.IntN(681))
		sc.Events = append(sc.Events, Event{Round: round, Name: n, Replicas: replicas, Deployment: standalone(g, fixture.MemAtLeast80Gi)})
		sc.Shapes[n] = Shape{1, 1, g, false}
		life := 15 + rng.IntN(31)
		if rng.IntN(3) == 0 {
			sc.Events = append(sc.Events, Event{Round: round + life/2, Name: n, Replicas: replicas / 2})
		}
		if end := round + life; end < sc.Rounds {
			sc.Events = append(sc.Events, Event{Round: end, Name: n, Delete: true})
		}
	}
	return sc
}

// Misguessed is a fleet where the ledger's guess of where pods bind is
// wrong under kube-default, and the wrong guess leaves pods Pending: the
// workload re-placing (docs/spec.md#re-placing) is for.
//
// Each of 4 clusters has a pool "tight" of two 8xH100 nodes, listed first,
// and a pool "spare" of two more. At round 0 a cpu-heavy 2-GPU replica
// (150 of a node's 190 cores) and a 4-GPU one land on the tight pool of
// every cluster, on different nodes (kube-scheduler spreads cpu): one node
// has 6 GPUs free and little cpu, the other 4 GPUs free and much cpu. At
// round 3 a 2-GPU replica and two 4-GPU ones arrive per cluster. The
// ledger (MostFree) puts the 2-GPU pod on the node with 6 free and both
// 4-GPU pods fit exactly, so the tight pool fits all three and the spare
// pool gets nothing. kube-default scores cpu and memory, not GPUs: it
// binds the 2-GPU pod to the node whose cpu is free, the one with 4 GPUs
// free, and after the first 4-GPU pod takes the other node, the second
// finds 2 GPUs free on each node and stays Pending. Nothing the agent
// reports afterwards moves it: a placed replica is retained (4.1, 4.4)
// until re-placing moves it to the spare pool.
func Misguessed() Scenario {
	pools := []PoolSpec{h100Pool("tight", 2), h100Pool("spare", 2)}
	const clusters = 4
	sc := Scenario{
		Name:    "h100-misguessed",
		Summary: "replicas the ledger fits exactly on a pool where kube-default, scoring cpu and not GPUs, fragments the GPUs: one 4-GPU replica per cluster stays Pending (pods sized per GPU, one cpu-heavy: the open proposal's, whatever the run's)",
		// 25 minutes: past the default 15m wait, with time to bind after.
		Clusters: Fleet(clusters, pools...), Shapes: map[string]Shape{}, Rounds: 150,
		// Its story is cpu: v0.3's pods request none.
		Sizing: PerGPU(),
	}
	for _, e := range []struct {
		name   string
		round  int
		count  int64
		gpus   int64
		sizing *composereplica.Sizing
	}{
		{name: "a-cpu-heavy", round: 0, count: clusters, gpus: 2, sizing: fixed("150", "64Gi")},
		{name: "b-filler", round: 0, count: clusters, gpus: 4},
		{name: "c-2gpu", round: 3, count: clusters, gpus: 2},
		{name: "d-4gpu", round: 3, count: 2 * clusters, gpus: 4},
	} {
		sc.Events = append(sc.Events, Event{Round: e.round, Name: e.name, Replicas: e.count, Deployment: standalone(e.gpus, fixture.MemAtLeast80Gi), Sizing: e.sizing})
		sc.Shapes[e.name] = Shape{1, 1, e.gpus, false}
	}
	return sc
}

// ScaleAtOnce is 32 deployments that scale at the same moment on a nearly
// full fleet, the workload of concurrent calls (docs/spec.md#assumed-placements): 16 of
// 1-GPU and 16 of 4-GPU replicas, alternating, arriving one a round with 2
// replicas each (160 of the fleet's 192 GPUs), then all scaling to 6 in
// round 40, when they would want 480. The fleet is 4 clusters of two
// pools of three 8xH100 nodes. Reconciled one after another, each call
// sees what the last one placed and the fleet fills to what it holds;
// reconciled K at a time, K calls read the same free GPUs.
func ScaleAtOnce() Scenario {
	sc := Scenario{
		Name:     "h100-scale-at-once",
		Summary:  "32 deployments of 1- and 4-GPU replicas, each scaling 2 -> 6 in the same round, on a fleet they fill to 83% before",
		Clusters: Fleet(4, h100Pool("h100-a", 3), h100Pool("h100-b", 3)), Shapes: map[string]Shape{},
		// 20 minutes after the scale: past the default 15m after which
		// re-placing would move a replica left Pending, where anything
		// else fits.
		Rounds: 160,
	}
	for i := range 32 {
		g := int64(1)
		if i%2 == 1 {
			g = 4
		}
		n := fmt.Sprintf("scale-%02d-%dgpu", i, g)
		sc.Events = append(sc.Events,
			Event{Round: i, Name: n, Replicas: 2, Deployment: standalone(g, fixture.MemAtLeast80Gi)},
			Event{Round: 40, Name: n, Replicas: 6})
		sc.Shapes[n] = Shape{1, 1, g, false}
	}
	return sc
}

// ManyCopies is deployments whose replicas run many copies of one engine
// (one Deployment of several pods each): 8 copies of 1 GPU, 4 of 2 or 2
// of 4, 8 GPUs a replica, twelve deployments of 10 replicas arriving 30s
// apart on 4 clusters of two pools of eight 8xH100 nodes (demand about 94%
// of the fleet), the first two halving at round 40. kube-scheduler's
// default spreading scores the copies of one Deployment apart, against
// best fit: the workload a preferred node affinity (SteeredPreferred) is
// measured on, against a pin (Steered).
func ManyCopies() Scenario {
	sc := Scenario{Name: "h100-many-copies", Summary: "replicas of 8 copies of 1 GPU, 4 of 2 or 2 of 4 (one Deployment each) on 8xH100", Clusters: Fleet(4, h100Pools()...), Shapes: map[string]Shape{}, Rounds: 90}
	for i := range 12 {
		copies := []int64{8, 4, 2}[i%3]
		n := fmt.Sprintf("h100-copies-%02d-%dx%dgpu", i, copies, 8/copies)
		d := withTemplates(fixture.Deployment("x").Engines(fixture.Copies(fixture.Standalone("main", fixture.Request(DeviceName, 8/copies, fixture.MemAtLeast80Gi)), copies)).Obj())
		sc.Events = append(sc.Events, Event{Round: 3 * i, Name: n, Replicas: 10, Deployment: d})
		sc.Shapes[n] = Shape{Engines: 1, Pods: int(copies), GPUs: 8 / copies}
		if i < 2 {
			sc.Events = append(sc.Events, Event{Round: 40, Name: n, Replicas: 5})
		}
	}
	return sc
}
