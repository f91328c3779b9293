package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/modelplaneai/fleet-scheduler/agent"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// The steering binders (Steered, SteeredPreferred): a steering cluster
// agent's window, each round, in front of kube-default.

// steerState is what a steering agent did with a pod.
type steerState int

const (
	// undecided: held and not decided yet, or no agent steers the pod.
	undecided steerState = iota
	// pinned: decided to a node and pinned there (Steered).
	pinned
	// preferred: decided to a node and released preferring it
	// (SteeredPreferred).
	preferred
	// unpinned: decided to no node and released as it was.
	unpinned
)

// Steering counts a steering binder's decisions over a run.
type Steering struct {
	// Decided counts the decisions, Pinned those of a node and Unpinned
	// those of none, by reason in UnpinnedBy (agent.UnpinnedNoNode, ...).
	Decided, Pinned, Unpinned int
	UnpinnedBy                map[string]int
	// NotAdmitted counts the pods pinned to a node that sim/kube's
	// filters turned away there (the agent counts devices, not cpu or
	// memory): deleted and made again by their controller, a gang's whole
	// group with them, and decided again the next round.
	NotAdmitted int
	// Outvoted counts the pods released preferring their node
	// (SteeredPreferred) that kube-scheduler bound to another node, and
	// Unbound those it bound to none in the round they were released.
	// Contested counts those where its scores but NodeAffinity's rank
	// another node above theirs: where the preference had to win; Margin
	// is the most, over them, that those scores put another node above
	// theirs (NodeAffinity's preference weighs 2 x 100).
	Outvoted, Unbound, Contested int
	Margin                       int64
}

// agentSteers says whether a steering agent holds pods at t: the binder
// steers, and the agent runs. A silent agent (Agent.StopAfter) is one
// whose Pod is gone or unready, so the admission policy gates nothing, and
// the pods it held are released as they were (docs/spec.md#steering: it
// fails safe); kube-default binds them all from then on.
func (s *state) agentSteers(t time.Time) bool {
	a := s.cfg.Agent
	return s.cfg.Binder.steers() && a.Enabled && (a.StopAfter <= 0 || t.Sub(start()) < a.StopAfter)
}

// held says whether a steering agent holds the pod: a claiming pod of a
// pool, neither bound nor released. The admission policy gates exactly
// the claiming pods.
func (p *pod) held() bool {
	return p.claim > 0 && p.pool != nil && !p.bound() && p.steer == undecided
}

// steer is a steering agent's window in every cluster, before
// kube-scheduler's pass: per pool, the held pods decided together, on the
// cluster as it is now. It reports whether a pod bound.
func (s *state) steer(ctx context.Context, t time.Time) (bool, error) {
	held := map[*simPool][]*pod{}
	for _, r := range s.replicas {
		for _, p := range r.pods {
			if p.held() {
				held[p.pool] = append(held[p.pool], p)
			}
		}
	}
	changed := false
	for _, c := range s.clusters {
		for _, pool := range c.pools {
			if len(held[pool]) == 0 {
				continue
			}
			bound, err := s.steerPool(ctx, pool, held[pool], t)
			if err != nil {
				return false, fmt.Errorf("cannot steer the pods of pool %s/%s: %w", c.name, pool.spec.Name, err)
			}
			changed = changed || bound
		}
	}
	return changed, nil
}

// steerPool decides a pool's held pods with agent.Steer, in the ledger's
// charge order (the replica's namespace and name, the engine), and
// releases them, a gang at a time.
func (s *state) steerPool(ctx context.Context, pool *simPool, pods []*pod, t time.Time) (bool, error) {
	nodes, devices, err := pool.steerNodes(ctx)
	if err != nil {
		return false, err
	}
	byName := make(map[string]*pod, len(pods))
	in := make([]agent.SteerPod, 0, len(pods))
	for _, p := range pods {
		name := p.kube.Obj.Namespace + "/" + p.kube.Obj.Name
		byName[name] = p
		in = append(in, agent.SteerPod{
			Name:   name,
			Claim:  []int64{p.claim},
			Charge: agent.ChargeOrder{Known: true, Namespace: p.replica.obj.Metadata.Namespace, Replica: p.replica.obj.Metadata.Name, Engine: p.engine},
			Gang:   p.gang,
		})
	}
	decisions, _ := agent.Steer(devices, nodes, in)
	if s.steering.UnpinnedBy == nil {
		s.steering.UnpinnedBy = map[string]int{}
	}
	changed := false
	for len(decisions) > 0 {
		// Steer decides a gang's pods together, one after another.
		first, n := byName[decisions[0].Pod], 1
		for ; first.gang != "" && n < len(decisions); n++ {
			if q := byName[decisions[n].Pod]; q.gang != first.gang || q.replica != first.replica || q.engine != first.engine {
				break
			}
		}
		gang := make([]*pod, n)
		for i, d := range decisions[:n] {
			gang[i] = byName[d.Pod]
		}
		bound, err := s.release(ctx, pool.cluster, gang, decisions[:n], t)
		if err != nil {
			return false, err
		}
		changed = changed || bound
		decisions = decisions[n:]
	}
	return changed, nil
}

// release releases one gang's pods (or one pod) as decided: unpinned, all
// of them, or each narrowed to its node and bound there through sim/kube
// (Steered), all or none; or each preferring its node and bound where
// kube-default's scores say (SteeredPreferred).
func (s *state) release(ctx context.Context, c *simCluster, gang []*pod, ds []agent.Decision, t time.Time) (bool, error) {
	s.steering.Decided += len(gang)
	if ds[0].Node == "" {
		// Steer pins a gang all or none.
		for i, p := range gang {
			p.steer = unpinned
			s.steering.Unpinned++
			s.steering.UnpinnedBy[ds[i].Reason]++
		}
		return false, nil
	}
	s.steering.Pinned += len(gang)
	if s.cfg.Binder == SteeredPreferred {
		return s.releasePreferring(ctx, c, gang, ds, t)
	}
	evals := make([]*kube.Evaluation, len(gang))
	made := make([]*corev1.Affinity, len(gang))
	for i, p := range gang {
		made[i] = p.kube.Obj.Spec.Affinity
		if err := p.kube.SetAffinity(kube.PinAffinity(made[i], ds[i].Node)); err != nil {
			return false, err
		}
		// The gang's pods are on distinct nodes, so one's binding does
		// not change what another's node admits: each is evaluated before
		// any binds, so that the group binds all or none.
		e, err := c.kube.Evaluate(ctx, p.kube, kube.Default)
		if err != nil {
			return false, err
		}
		if e.Unschedulable() {
			// Deleted, and made again with its group: held again.
			for j := range i + 1 {
				if err := gang[j].kube.SetAffinity(made[j]); err != nil {
					return false, err
				}
			}
			s.steering.NotAdmitted += len(gang)
			return false, nil
		}
		if len(e.Scored) != 1 || e.Scored[0] != ds[i].Node {
			return false, fmt.Errorf("pod %s pinned to %s was searched on %v", p.kube.Obj.Name, ds[i].Node, e.Scored)
		}
		evals[i] = e
	}
	for i, p := range gang {
		record := s.predict(p)
		p.steer = pinned
		if err := c.kube.Bind(p.kube, ds[i].Node, evals[i]); err != nil {
			return false, err
		}
		record()
		s.pulling(p, t)
	}
	return true, nil
}

// releasePreferring releases each pod of a gang with a preferred node
// affinity for its node, and lets kube-default bind it.
func (s *state) releasePreferring(ctx context.Context, c *simCluster, gang []*pod, ds []agent.Decision, t time.Time) (bool, error) {
	changed := false
	for i, p := range gang {
		if err := p.kube.SetAffinity(kube.PreferAffinity(p.kube.Obj.Spec.Affinity, ds[i].Node)); err != nil {
			return false, err
		}
		p.steer = preferred
		record := s.predict(p)
		node, e, err := c.kube.Schedule(ctx, p.kube, kube.Default, s.rng)
		if err != nil {
			return false, err
		}
		if node == "" {
			s.steering.Unbound++
			continue
		}
		if m := margin(e, ds[i].Node); m > 0 {
			s.steering.Contested++
			s.steering.Margin = max(s.steering.Margin, m)
		}
		record()
		s.pulling(p, t)
		changed = true
		if node != ds[i].Node {
			s.steering.Outvoted++
		}
	}
	return changed, nil
}

// margin is by how much, of the scored nodes, the best ranks above node
// by every score but NodeAffinity's: what a preference for node has to
// outweigh (0 when none ranks above it, or node was not scored).
func margin(e *kube.Evaluation, node string) int64 {
	w := kube.Weights()["NodeAffinity"]
	at := slices.Index(e.Scored, node)
	if at < 0 {
		return 0
	}
	var m int64
	mine := e.Scores[at] - w*e.Plugins[at]["NodeAffinity"]
	for i := range e.Scored {
		m = max(m, e.Scores[i]-w*e.Plugins[i]["NodeAffinity"]-mine)
	}
	return m
}

// countedNode is a node's free devices as the agent counted them, at the
// node's generation.
type countedNode struct {
	generation uint64
	free       agent.NodeFree
}

// steerNodes are the pool's nodes a held pod may be steered to, with their
// free devices as the agent counts them (agent.Counter over the node, its
// slices and the claims of its pods), and how many devices the pool has:
// its schedulable nodes, a node counted again only once its pods changed.
func (p *simPool) steerNodes(ctx context.Context) ([]agent.SteerNode, int, error) {
	if p.counter == nil {
		k, err := agent.NewCounter(agent.Pool{Name: p.spec.Name, Devices: []v1alpha1.Device{p.device()}}, []*resourceapi.DeviceClass{p.cluster.kube.Class(fixture.GPUClass)})
		if err != nil {
			return nil, 0, err
		}
		p.counter, p.counted = k, map[*kube.Node]countedNode{}
	}
	out := make([]agent.SteerNode, 0, len(p.nodes))
	for _, n := range p.nodes {
		cn, ok := p.counted[n]
		if !ok || cn.generation != n.Generation() {
			var claims []*resourceapi.ResourceClaim
			for _, q := range n.Pods {
				claims = append(claims, q.Claims...)
			}
			free, err := p.counter.Node(ctx, agent.NodeView{Node: n.Obj, ResourceSlices: n.Slices, ResourceClaims: claims})
			if err != nil {
				return nil, 0, err
			}
			cn = countedNode{generation: n.Generation(), free: free}
			p.counted[n] = cn
		}
		if cn.free.LeftOut != "" {
			continue
		}
		counts := make([]int64, len(cn.free.Free))
		for k, f := range cn.free.Free {
			counts[k] = f.Count
		}
		out = append(out, agent.SteerNode{Name: n.Obj.Name, Free: counts})
	}
	return out, len(p.counter.Devices()), nil
}
