package sim

import (
	"fmt"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/fixture"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// Mode is how the fleet's capacity is observed.
type Mode struct {
	Name  string
	Agent Agent
}

// WholeNode is a fleet without an agent: every pool on whole-node
// accounting.
func WholeNode() Mode { return Mode{Name: "whole-node"} }

// Fresh is an agent that reports every 10s, visible from the next round.
func Fresh() Mode {
	return Mode{Name: "free-device, fresh agent", Agent: Agent{Enabled: true, Heartbeat: 10 * time.Second}}
}

// Lagging is an agent that reports every 30s, each report visible 60s
// later.
func Lagging() Mode {
	return Mode{Name: "free-device, lagging agent", Agent: Agent{Enabled: true, Heartbeat: 30 * time.Second, Lag: 60 * time.Second}}
}

// Modes are the modes every scenario runs in.
func Modes() []Mode { return []Mode{WholeNode(), Fresh(), Lagging()} }

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
	// Shapes is each deployment's replica shape, for the physical limit.
	Shapes map[string]Shape
	Rounds int
	// AgentStopsAfter, when positive, silences the agent mid-run.
	AgentStopsAfter time.Duration
}

// FinalDemand is each deployment's wanted replicas after the last event.
func (sc Scenario) FinalDemand() map[string]int64 {
	out := map[string]int64{}
	for _, e := range sc.Events {
		out[e.Name] = e.Replicas
	}
	return out
}

// Config is the run of the scenario in a mode.
func (sc Scenario) Config(m Mode, b Binder, rec Reconciler) Config {
	a := m.Agent
	if a.Enabled && sc.AgentStopsAfter > 0 {
		a.StopAfter = sc.AgentStopsAfter
	}
	return Config{Clusters: sc.Clusters, Events: sc.Events, Rounds: sc.Rounds, Agent: a, Binder: b, Seed: 1, Reconciler: rec}
}

// AssumedBinding is the assumedBinding that matches a binder.
func AssumedBinding(b Binder) scheduling.Binding {
	if b == MostAllocated {
		return scheduling.LeastFree
	}
	return scheduling.MostFree
}

// Pools of the scenarios: 8 nodes each, two per cluster, four clusters.
func l4Pools() []PoolSpec {
	return []PoolSpec{{Name: "l4-a", Nodes: 8, GPUsPerNode: 4, Memory: "24Gi"}, {Name: "l4-b", Nodes: 8, GPUsPerNode: 4, Memory: "24Gi"}}
}

func h100Pools() []PoolSpec {
	return []PoolSpec{{Name: "h100-a", Nodes: 8, GPUsPerNode: 8, Memory: "80Gi"}, {Name: "h100-b", Nodes: 8, GPUsPerNode: 8, Memory: "80Gi"}}
}

// AtLeast20Gi selects a GPU with 20Gi of memory or more (an L4 has 24Gi).
const AtLeast20Gi = `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20Gi")) >= 0`

func standalone(gpus int64, cel string) *v1alpha1.ModelDeployment {
	return fixture.Deployment("x").Engines(fixture.Standalone("main", fixture.Request(DeviceName, gpus, cel))).Obj()
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

// Scenarios are the named workloads, in report order.
func Scenarios() []Scenario {
	gpu1 := standalone(1, AtLeast20Gi)
	gpu4 := standalone(4, fixture.MemAtLeast80Gi)
	pd := fixture.Deployment("x").Engines(
		fixture.Phase(fixture.Standalone("prefill", fixture.GPURequest(4)), "Prefill"),
		fixture.Phase(fixture.Standalone("decode", fixture.GPURequest(4)), "Decode"),
	).Obj()
	gang := fixture.Deployment("x").Engines(fixture.Gang("main", 1, fixture.GPURequest(8))).Obj()

	out := []Scenario{
		uniform("l4-1gpu", "1-GPU replicas on pools of 4xL4 nodes", l4Pools(), gpu1, Shape{1, 1, 1, false}, 56),
		uniform("h100-4gpu", "4-GPU replicas on 8xH100 nodes", h100Pools(), gpu4, Shape{1, 1, 4, false}, 28),
		uniform("h100-pd", "prefill+decode replicas of 4+4 GPUs (two Standalone engines) on 8xH100", h100Pools(), pd, Shape{2, 1, 4, false}, 14),
		uniform("h100-gang", "multi-node gangs of two 8-GPU pods (Leader + 1 Worker) on 8xH100", h100Pools(), gang, Shape{1, 2, 8, true}, 7),
		mixed(),
		silent(gpu1),
	}
	return out
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
		sel := fixture.MemAtLeast80Gi
		sc.Events = append(sc.Events, Event{Round: 3 * i, Name: n, Replicas: 25, Deployment: standalone(g, sel)})
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
