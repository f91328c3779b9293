package sim

import (
	"cmp"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/observation"
)

// Agent is the cluster agent of every simulated cluster.
type Agent struct {
	// Enabled is false for whole-node accounting: no pool is ever observed.
	Enabled bool
	// Heartbeat is how often the agent samples every pool.
	Heartbeat time.Duration
	// Lag is how long a sample takes to reach the InferenceCluster's status.
	Lag time.Duration
	// StopAfter, when positive, is when the agent goes silent: it samples
	// nothing from then on, and its last reports go stale.
	StopAfter time.Duration
}

// Event changes the demand at the start of a round: a deployment arrives
// (Deployment set) or an existing one scales to Replicas.
type Event struct {
	Round      int
	Name       string
	Replicas   int64
	Deployment *v1alpha1.ModelDeployment
}

// Config is one simulation run.
type Config struct {
	Clusters []ClusterSpec
	Events   []Event
	Rounds   int
	// Tick is the simulated time between rounds; zero means 10s.
	Tick       time.Duration
	Agent      Agent
	Binder     Binder
	Seed       uint64
	Reconciler Reconciler
}

// Point is the fleet at the end of one round.
type Point struct {
	Round   int
	GPUs    int64
	Placed  int
	Pending int
}

// Result is what a run measured.
type Result struct {
	// Wanted is how many replicas the deployments want at the end.
	Wanted int
	// Placed is how many ModelReplicas exist at the end; Running how many
	// of them have every pod bound.
	Placed, Running int
	// GPUs is how many GPUs bound pods hold at the end.
	GPUs      int64
	FleetGPUs int64
	// PendingMax and PendingEnd count pods the binder could not bind.
	PendingMax, PendingEnd int
	// Reconciles is how many times a deployment was reconciled.
	Reconciles int
	// LastDemand is the round of the last demand event; Settled the last
	// round in which a replica was created or deleted or a pod bound.
	LastDemand, Settled int
	Series              []Point
	// PlacedBy counts each deployment's ModelReplicas at the end.
	PlacedBy map[string]int
}

// RoundsToConverge counts the reconcile rounds from the last demand change
// through the last round that changed the fleet.
func (r Result) RoundsToConverge() int { return max(r.Settled-r.LastDemand, 0) + 1 }

// start is the simulated clock's origin.
func start() time.Time { return time.Date(2026, 10, 20, 20, 0, 0, 0, time.UTC) }

type state struct {
	cfg         Config
	clusters    []*simCluster
	deployments map[string]*v1alpha1.ModelDeployment
	replicas    []*replica
	seq         int
	rng         *rand.Rand
}

// Run simulates the configured rounds.
func Run(cfg Config) (*Result, error) {
	if cfg.Reconciler == nil {
		return nil, errors.New("cannot simulate without a reconciler")
	}
	if cfg.Tick == 0 {
		cfg.Tick = 10 * time.Second
	}
	if cfg.Binder == "" {
		cfg.Binder = LeastAllocated
	}
	s := newState(cfg)
	res := &Result{FleetGPUs: FleetGPUs(cfg.Clusters)}
	for _, e := range cfg.Events {
		res.LastDemand = max(res.LastDemand, e.Round)
	}
	for round := range cfg.Rounds {
		now := start().Add(time.Duration(round) * cfg.Tick)
		s.demand(round)
		s.publish(now)
		changed, n, err := s.reconcile(now)
		if err != nil {
			return nil, err
		}
		res.Reconciles += n
		changed = s.bind(now.Add(time.Second)) || changed
		s.sample(now, round)
		if changed {
			res.Settled = round
		}
		pt := s.point(round)
		res.PendingMax = max(res.PendingMax, pt.Pending)
		res.Series = append(res.Series, pt)
	}
	s.finish(res)
	return res, nil
}

func newState(cfg Config) *state {
	// The binder's ties are broken at random, reproducibly from the seed.
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed)) //nolint:gosec // Simulated tie-breaking, not security.
	s := &state{cfg: cfg, deployments: map[string]*v1alpha1.ModelDeployment{}, rng: rng}
	for _, c := range cfg.Clusters {
		sc := &simCluster{name: c.Name}
		for _, p := range c.Pools {
			sp := &simPool{spec: p}
			for range p.Nodes {
				sp.nodes = append(sp.nodes, &node{free: p.GPUsPerNode})
			}
			sc.pools = append(sc.pools, sp)
		}
		s.clusters = append(s.clusters, sc)
	}
	return s
}

// point measures the fleet at the end of a round.
func (s *state) point(round int) Point {
	pt := Point{Round: round, Placed: len(s.replicas)}
	for _, r := range s.replicas {
		for _, p := range r.pods {
			if p.node == nil {
				pt.Pending++
			} else {
				pt.GPUs += p.claim
			}
		}
	}
	return pt
}

// finish fills in what the run ended with.
func (s *state) finish(res *Result) {
	for _, d := range s.deployments {
		res.Wanted += int(d.Spec.Replicas)
	}
	res.Placed = len(s.replicas)
	res.PlacedBy = map[string]int{}
	for _, r := range s.replicas {
		res.PlacedBy[r.deployment]++
		if r.bound() {
			res.Running++
		}
	}
	if n := len(res.Series); n > 0 {
		res.GPUs, res.PendingEnd = res.Series[n-1].GPUs, res.Series[n-1].Pending
	}
}

func (s *state) demand(round int) {
	for _, e := range s.cfg.Events {
		if e.Round != round {
			continue
		}
		if e.Deployment != nil {
			d := *e.Deployment
			d.Metadata.Name = e.Name
			d.Spec.Replicas = e.Replicas
			s.deployments[e.Name] = &d
			continue
		}
		if d := s.deployments[e.Name]; d != nil {
			d.Spec.Replicas = e.Replicas
		}
	}
}

// publish puts each pool's newest sample whose lag has passed on its
// InferenceCluster.
func (s *state) publish(now time.Time) {
	for _, c := range s.clusters {
		for _, p := range c.pools {
			for len(p.samples) > 0 && !p.samples[0].visibleAt.After(now) {
				p.published = &p.samples[0]
				p.samples = p.samples[1:]
			}
		}
	}
}

// sample lets the agent report every pool, five seconds into the round.
func (s *state) sample(now time.Time, round int) {
	a := s.cfg.Agent
	if !a.Enabled {
		return
	}
	elapsed := time.Duration(round) * s.cfg.Tick
	if a.StopAfter > 0 && elapsed >= a.StopAfter {
		return
	}
	if hb := max(a.Heartbeat, s.cfg.Tick); elapsed%hb != 0 {
		return
	}
	at := now.Add(5 * time.Second)
	for _, c := range s.clusters {
		for _, p := range c.pools {
			p.samples = append(p.samples, p.sample(at, at.Add(a.Lag)))
		}
	}
}

// reconcile runs every deployment once, in name order, each seeing what the
// ones before it created.
func (s *state) reconcile(now time.Time) (bool, int, error) {
	clusters := make([]*v1alpha1.InferenceCluster, 0, len(s.clusters))
	for _, c := range s.clusters {
		clusters = append(clusters, c.object())
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range s.deployments {
			if !yield(n) {
				return
			}
		}
	})
	changed := false
	for _, name := range names {
		dep := s.deployments[name]
		objs := make([]*v1alpha1.ModelReplica, 0, len(s.replicas))
		for _, r := range s.replicas {
			objs = append(objs, r.obj)
		}
		desired, err := s.cfg.Reconciler.Reconcile(dep, clusters, objs, now)
		if err != nil {
			return false, 0, err
		}
		want := map[string]*v1alpha1.ModelReplica{}
		for _, d := range desired {
			want[d.Metadata.Name] = d
		}
		have := map[string]bool{}
		s.replicas = slices.DeleteFunc(s.replicas, func(r *replica) bool {
			if r.deployment != name {
				return false
			}
			have[r.obj.Metadata.Name] = true
			if want[r.obj.Metadata.Name] != nil {
				return false
			}
			r.release()
			changed = true
			return true
		})
		for _, d := range desired {
			if have[d.Metadata.Name] {
				continue
			}
			c := s.cluster(d.Spec.ClusterName)
			if c == nil {
				continue
			}
			s.seq++
			r := newReplica(c, d, name, s.seq)
			setPodsScheduled(r)
			s.replicas = append(s.replicas, r)
			changed = true
		}
	}
	return changed, len(names), nil
}

func (s *state) cluster(name string) *simCluster {
	for _, c := range s.clusters {
		if c.name == name {
			return c
		}
	}
	return nil
}

// bind offers every Pending pod to the binder, oldest replica first, and
// marks replicas whose pods are now all bound PodsScheduled at t.
func (s *state) bind(t time.Time) bool {
	queue := slices.Clone(s.replicas)
	slices.SortFunc(queue, func(a, b *replica) int { return cmp.Compare(a.seq, b.seq) })
	changed := false
	for _, r := range queue {
		for _, p := range r.pods {
			if p.node == nil && s.cfg.Binder.bind(p, s.rng) {
				changed = true
			}
		}
		if r.scheduledAt == nil && r.bound() {
			at := t
			r.scheduledAt = &at
			setPodsScheduled(r)
		}
	}
	return changed
}

// setPodsScheduled writes the replica's PodsScheduled condition as the
// agent relays it: True since the last pod bound, else False.
func setPodsScheduled(r *replica) {
	c := map[string]any{"type": observation.ConditionPodsScheduled, "status": "False", "reason": "PodsPending"}
	if r.scheduledAt != nil {
		c = map[string]any{"type": observation.ConditionPodsScheduled, "status": "True", "reason": "PodsBound", "lastTransitionTime": r.scheduledAt.UTC().Format(time.RFC3339)}
	}
	obj := *r.obj
	obj.Status = &v1alpha1.ModelReplicaStatus{Conditions: []any{c}}
	r.obj = &obj
}
