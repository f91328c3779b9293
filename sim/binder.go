package sim

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/modelplaneai/fleet-scheduler/scheduling"
	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// Binder is how pods bind to nodes in the simulated clusters.
type Binder string

// The binders. Every one binds a pod only to a node of its pool that the
// filters of sim/kube admit (cpu and memory, taints, a gang's distinct
// nodes, and the structured allocator allocating its claim), and the pod
// takes what the allocator allocated; they differ in which of those nodes.
const (
	// KubeDefault scores as kube-scheduler v1.37's default profile: cpu and
	// memory LeastAllocated, BalancedAllocation, ImageLocality, spreading,
	// PreferNoSchedule taints. GPUs are not scored.
	KubeDefault Binder = "kube-default"
	// KubeMostAllocated is the default profile with NodeResourcesFit
	// scoring MostAllocated (cpu and memory), as bin-packing clusters
	// configure it.
	KubeMostAllocated Binder = "kube-most-allocated"
	// GPUMostFree prefers the node with the most GPUs free, which
	// kube-scheduler does not do (the simulator's binder before it bound
	// with Kubernetes' code, kept for comparison). Ties go to a random one
	// of the best.
	GPUMostFree Binder = "gpu-most-free"
	// GPULeastFree prefers the fitting node with the fewest GPUs free.
	GPULeastFree Binder = "gpu-least-free"
	// Random binds to any node the pod fits, uniformly.
	Random Binder = "random"
	// Steered is kube-default behind a steering cluster agent
	// (docs/spec.md#steering), deciding with the agent's own code
	// (agent.Steer). Each round is one of the agent's windows: per pool,
	// the claiming pods not bound and not yet released are held and
	// decided together, on the nodes' free devices as the agent counts
	// them (agent.Counter), in the ledger's charge order, a gang's pods on
	// distinct nodes. Each pod decided to a node is pinned there (a
	// required node affinity `matchFields metadata.name In [node]`) and
	// bound by sim/kube, whose filters and allocator must still admit it;
	// one they turn away is deleted and made again by its controller, a
	// gang's whole group with it (held, and decided again the next round).
	// A pod decided to no node is released unpinned, and from then on
	// binds as kube-default binds it, as do claimless pods. The agent
	// decides on the cluster as its informers hold it, which do not lag:
	// here, on the simulated cluster as it is. A lagging agent's reports
	// lag; its decisions do not. Without an agent (whole-node), or once
	// it is silent (Agent.StopAfter), nothing is held: kube-default binds.
	Steered Binder = "steered"
	// SteeredPreferred is Steered with a preferred node affinity (weight
	// 100) to the decided node instead of a pin: kube-default then binds
	// the pod where its scores say, which the other scores can outvote
	// (Steering.Outvoted). A pod is decided once, and kube-scheduler's from
	// then on.
	SteeredPreferred Binder = "steered-preferred"
)

// Binders are every binder, the default first.
func Binders() []Binder {
	return []Binder{KubeDefault, KubeMostAllocated, GPUMostFree, GPULeastFree, Random, Steered, SteeredPreferred}
}

// steers says whether a steering agent decides the binder's pods.
func (b Binder) steers() bool { return b == Steered || b == SteeredPreferred }

// Runs says whether a run of the binder in the mode measures anything. A
// steering agent needs an agent: without one (whole-node) nothing is
// steered. The function accounts a steered pool by best fit whatever
// assumedBinding says, once the pool's report says binding: Steered
// (reportSteered); until it reads that, the steering binders run in the
// modes whose ledger assumes LeastFree, the same rule.
func (b Binder) Runs(m Mode) bool {
	return !b.steers() || (m.Agent.Enabled && m.Binding == scheduling.LeastFree)
}

// ParseBinder reads a binder name.
func ParseBinder(s string) (Binder, error) {
	for _, b := range Binders() {
		if string(b) == s {
			return b, nil
		}
	}
	return "", fmt.Errorf("unknown binder %q: want one of %v", s, Binders())
}

// profile is the kube-scheduler profile whose filters (and, for the kube
// binders, scores) the binder uses.
func (b Binder) profile() kube.Profile {
	if b == KubeMostAllocated {
		return kube.MostAllocated
	}
	return kube.Default
}

// bind tries to bind one pod, and reports whether it did.
func (b Binder) bind(ctx context.Context, p *pod, rng *rand.Rand) (bool, error) {
	if p.pool == nil {
		return false, nil
	}
	c := p.replica.cluster
	if b == KubeDefault || b == KubeMostAllocated || b.steers() {
		// A steering binder's pods come here once released (or when they
		// claim nothing): kube-scheduler's from then on.
		node, _, err := c.kube.Schedule(ctx, p.kube, b.profile(), rng)
		return node != "", err
	}
	e, err := c.kube.Evaluate(ctx, p.kube, b.profile())
	if err != nil || e.Unschedulable() {
		return false, err
	}
	var best []string
	var bestScore int64
	for _, name := range e.Scored {
		// Random scores every node alike.
		var score int64
		if free := c.freeGPUs(c.kube.Node(name)); b == GPUMostFree {
			score = free
		} else if b == GPULeastFree {
			score = -free
		}
		switch {
		case len(best) == 0 || score > bestScore:
			best, bestScore = append(best[:0], name), score
		case score == bestScore:
			best = append(best, name)
		}
	}
	return true, c.kube.Bind(p.kube, best[rng.IntN(len(best))], e)
}

// AssumedBinding is the assumedBinding that matches a binder: LeastFree
// for the binders that pack (kube-most-allocated packs cpu and memory, not
// GPUs; whether that predicts where pods land is what the report measures).
func AssumedBinding(b Binder) scheduling.Binding {
	if b == GPULeastFree || b == KubeMostAllocated {
		return scheduling.LeastFree
	}
	return scheduling.MostFree
}
