package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/modelplaneai/fleet-scheduler/agent"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
	"github.com/modelplaneai/fleet-scheduler/sim/composereplica"
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
// (Deployment set), an existing one scales to Replicas, or one is deleted
// with its replicas (Delete).
type Event struct {
	Round      int
	Name       string
	Replicas   int64
	Deployment *v1alpha1.ModelDeployment
	Delete     bool
	// Sizing, with Deployment, is the cpu and memory the deployment's pods
	// request (a trace's pods' own); nil requests the run's Sizing.
	Sizing *composereplica.Sizing
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
	// Image is the serving image every node pulls when it runs a replica,
	// and ImageSize its size; empty means DefaultImage of
	// DefaultImageSize.
	Image     string
	ImageSize int64
	// ImagePull is how long after a pod binds its node holds its image
	// (pulled and reported in the node's status); zero means at once.
	ImagePull time.Duration
	// Sizing is the cpu and memory the pods of a deployment without its
	// own request (PerGPU: Modelplane's open proposal); nil composes
	// Modelplane v0.3's pods, which request neither.
	Sizing *composereplica.Sizing
	// ReconcileAll reconciles every deployment every round, settled or
	// not (the equivalence test of the skip).
	ReconcileAll bool
	// Concurrent is how many deployments are reconciled at once: each
	// round, the deployments to reconcile go in batches of Concurrent,
	// in name order, every call of a batch reading the same fleet (as
	// that many calls in flight would) and the replicas they compose
	// created once all of them answered. Zero or one reconciles one
	// after another, each seeing the last one's replicas: the best case.
	Concurrent int
}

// DefaultTick is the simulated time between rounds, unless a run says.
const DefaultTick = 10 * time.Second

// The serving image of the scenarios' pod templates, and its size (the
// vLLM OpenAI server image is about 8 GiB).
const (
	DefaultImage           = "vllm/vllm-openai:v0.11.0"
	DefaultImageSize int64 = 8 << 30
	// DefaultImagePull is how long a node takes to pull that image and
	// report it: about a minute to pull 8 GiB at 1 Gbit/s, then the
	// kubelet's next status update. An assumption.
	DefaultImagePull = 2 * time.Minute
)

// Point is the fleet at the end of one round.
type Point struct {
	Round int
	// GPUs are held by bound pods; DemandGPUs are what every wanted
	// replica would claim.
	GPUs, DemandGPUs int64
	Placed, Wanted   int
	Pending          int
	// Reconciles is how many deployments were reconciled in the round.
	Reconciles int
	// OvercommitGPUs sums, over the pools, the GPUs the pods pinned there
	// (bound or Pending) claim beyond the pool's GPUs.
	OvercommitGPUs int64
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
	// PendingMax and PendingEnd count pods no node took; PendingSeconds
	// sums, over the rounds, the pods Pending times the round's length.
	PendingMax, PendingEnd int
	PendingSeconds         float64
	// Reconciles is how many times a deployment was reconciled, and
	// ReconcilesToConverge how many of those came in the rounds from the
	// last demand change through the last round that changed the fleet.
	Reconciles, ReconcilesToConverge int
	// LastDemand is the round of the last demand event; Settled the last
	// round in which a replica was created or deleted or a pod bound.
	LastDemand, Settled int
	Series              []Point
	// PlacedBy counts each deployment's ModelReplicas at the end.
	PlacedBy map[string]int
	// Stuck counts, by deployment, replicas left with pods Pending at the
	// end, and StuckPods says for each such pod what it needs and what its
	// pool has. StuckOn counts those pods by what held them: no node of
	// the pool with their GPUs free (StuckOnGPUs), or only nodes without
	// their cpu or memory (StuckOnResources).
	Stuck     map[string]int
	StuckPods []string
	StuckOn   map[string]int
	// Binds says where claiming pods landed against each assumedBinding's
	// prediction, and against the groups the ledger assumed for them.
	Binds Binds
	// Steering counts a steering binder's decisions.
	Steering Steering
	// Overcommit counts the pods of replicas created onto a pool whose
	// pods (bound or Pending, the new replica's included) then claim more
	// GPUs than the pool has: not all of them can bind, whatever node
	// each takes. It is what placing twice onto the same free GPUs makes
	// (docs/spec.md#invariants: never overcommit), and nothing else here: a
	// misguessed binding or a fragmented pool leaves pods Pending without
	// it. OvercommitGPUsMax is the most GPUs claimed beyond the pools'
	// GPUs at the end of any round.
	Overcommit        int
	OvercommitGPUsMax int64
	// Moves counts the function's re-placements of replicas whose pods
	// stayed unscheduled (docs/spec.md#re-placing), MovedReplicas the replicas that
	// moved at least once, and MaxMoves the most one of them moved. A
	// replica moved to another cluster is a new ModelReplica under another
	// name; it counts as the one it replaces.
	Moves, MovedReplicas, MaxMoves int
	// Wall is how long the simulation took to run.
	Wall time.Duration
}

// RoundsToConverge counts the reconcile rounds from the last demand change
// through the last round that changed the fleet.
func (r Result) RoundsToConverge() int { return max(r.Settled-r.LastDemand, 0) + 1 }

// start is the simulated clock's origin.
func start() time.Time { return time.Date(2026, 10, 20, 20, 0, 0, 0, time.UTC) }

type state struct {
	cfg Config
	// sizes are the deployments' own Sizing, by name.
	sizes       map[string]*composereplica.Sizing
	clusters    []*simCluster
	deployments map[string]*v1alpha1.ModelDeployment
	// settled are the deployments whose last reconcile changed nothing
	// and placed all they want, every pod bound. Reconciling one again
	// changes nothing until its demand does: it retains every replica (its
	// clusters and pools never go away here), has none to re-place and
	// fills nothing. Crossplane would still
	// call the function on its poll interval; the simulator skips the
	// no-op, which large fleets cannot afford.
	settled  map[string]bool
	replicas []*replica
	seq      int
	rng      *rand.Rand
	binds    Binds
	// pulls are the images nodes are pulling, oldest first.
	pulls []pull
	// moves counts the function's re-placements of each replica, by the
	// replica's origin.
	moves map[int]int
	// overcommit counts the pods created onto a pool already fully
	// claimed (Result.Overcommit).
	overcommit int
	// uids number the deployments that arrived, so that one deleted and
	// created again under its name has another uid, as an API object.
	uids int
	// steering counts a steering binder's decisions.
	steering Steering
}

// pull is a node's pull of a pod's images, done at done.
type pull struct {
	cluster *simCluster
	node    string
	images  []string
	done    time.Time
}

// Binds counts the claiming pods bound, and how many of them took a node
// with as many GPUs free as the node each assumedBinding predicts.
type Binds struct {
	claiming, mostFree, leastFree int
	// Groups are the claiming pods bound against the groups the ledger
	// assumed for them. Under a steering binder, Groups counts those the
	// agent decided to a node, Unpinned those it released unpinned, and
	// Unheld those kube-default bound while no live agent held them.
	Groups, Unpinned, Unheld Agreement
}

// Claiming is how many claiming pods bound.
func (b Binds) Claiming() int { return b.claiming }

// MostFree is how many of them took a node with as many GPUs free as the
// one MostFree predicts.
func (b Binds) MostFree() int { return b.mostFree }

// LeastFree is how many took a node with as many GPUs free as the one
// LeastFree predicts. Where every fitting node has the same free, a pod
// counts toward both.
func (b Binds) LeastFree() int { return b.leastFree }

// Run simulates the configured rounds.
func Run(cfg Config) (*Result, error) {
	began := time.Now()
	if cfg.Reconciler == nil {
		return nil, errors.New("cannot simulate without a reconciler")
	}
	if cfg.Tick == 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.Binder == "" {
		cfg.Binder = KubeDefault
	}
	if cfg.Image == "" {
		cfg.Image, cfg.ImageSize = DefaultImage, DefaultImageSize
	}
	s, err := newState(cfg)
	if err != nil {
		return nil, err
	}
	res := &Result{FleetGPUs: FleetGPUs(cfg.Clusters)}
	for _, e := range cfg.Events {
		res.LastDemand = max(res.LastDemand, e.Round)
	}
	for round := range cfg.Rounds {
		if err := s.round(context.Background(), round, res); err != nil {
			return nil, err
		}
	}
	s.finish(res)
	res.Wall = time.Since(began)
	return res, nil
}

// round runs one round and records it.
func (s *state) round(ctx context.Context, round int, res *Result) error {
	now := start().Add(time.Duration(round) * s.cfg.Tick)
	s.demand(round)
	s.pulled(now)
	s.publish(now)
	changed, n, err := s.reconcile(now)
	if err != nil {
		return err
	}
	res.Reconciles += n
	bound, err := s.bind(ctx, now.Add(time.Second))
	if err != nil {
		return err
	}
	if err := s.sample(ctx, now, round); err != nil {
		return err
	}
	if changed || bound {
		res.Settled = round
	}
	pt := s.point(round)
	pt.Reconciles = n
	res.PendingMax = max(res.PendingMax, pt.Pending)
	res.OvercommitGPUsMax = max(res.OvercommitGPUsMax, pt.OvercommitGPUs)
	res.PendingSeconds += float64(pt.Pending) * s.cfg.Tick.Seconds()
	res.Series = append(res.Series, pt)
	return nil
}

func newState(cfg Config) (*state, error) {
	// The binder's ties are broken at random, reproducibly from the seed.
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed)) //nolint:gosec // Simulated tie-breaking, not security.
	s := &state{cfg: cfg, deployments: map[string]*v1alpha1.ModelDeployment{}, settled: map[string]bool{}, rng: rng, sizes: map[string]*composereplica.Sizing{}}
	for _, e := range cfg.Events {
		if e.Deployment != nil && e.Sizing != nil {
			s.sizes[e.Name] = e.Sizing
		}
	}
	for _, spec := range cfg.Clusters {
		c, err := newCluster(spec, cfg.Image, cfg.ImageSize)
		if err != nil {
			return nil, err
		}
		c.steered = cfg.Binder.steers()
		s.clusters = append(s.clusters, c)
	}
	return s, nil
}

// point measures the fleet at the end of a round.
func (s *state) point(round int) Point {
	pt := Point{Round: round, Placed: len(s.replicas)}
	for _, r := range s.replicas {
		for _, p := range r.pods {
			if p.bound() {
				pt.GPUs += p.claim
			} else {
				pt.Pending++
			}
		}
	}
	for _, d := range s.deployments {
		pt.Wanted += int(d.Spec.Replicas)
		pt.DemandGPUs += d.Spec.Replicas * ReplicaGPUs(d)
	}
	for _, c := range s.clusters {
		for _, p := range c.pools {
			pt.OvercommitGPUs += max(p.claimed-p.gpus(), 0)
		}
	}
	return pt
}

// ReplicaGPUs is how many GPUs one replica of a deployment claims: per
// engine, its copies times its members' pods times their requests.
func ReplicaGPUs(d *v1alpha1.ModelDeployment) int64 {
	var n int64
	for _, e := range d.Spec.Template.Spec.Engines {
		copies := e.CopyCount()
		for _, m := range e.Members {
			pods := int64(1)
			if m.Role == v1alpha1.RoleWorker && m.Worker != nil {
				pods = m.Worker.Nodes
			}
			if m.NodeSelector == nil {
				continue
			}
			for _, r := range m.NodeSelector.Devices {
				count := int64(1)
				if r.Count != nil {
					count = *r.Count
				}
				n += copies * pods * count
			}
		}
	}
	return n
}

// finish fills in what the run ended with.
func (s *state) finish(res *Result) {
	for _, d := range s.deployments {
		res.Wanted += int(d.Spec.Replicas)
	}
	res.Placed = len(s.replicas)
	res.Binds = s.binds
	res.Steering = s.steering
	res.Overcommit = s.overcommit
	for _, n := range s.moves {
		res.Moves += n
		res.MovedReplicas++
		res.MaxMoves = max(res.MaxMoves, n)
	}
	res.PlacedBy = map[string]int{}
	res.Stuck = map[string]int{}
	res.StuckOn = map[string]int{}
	for _, r := range s.replicas {
		res.PlacedBy[r.deployment]++
		if r.bound() {
			res.Running++
			continue
		}
		res.Stuck[r.deployment]++
		for _, p := range r.pods {
			if !p.bound() {
				msg, on := p.stuck()
				res.StuckPods = append(res.StuckPods, msg)
				res.StuckOn[on]++
			}
		}
	}
	if n := len(res.Series); n > 0 {
		res.GPUs, res.PendingEnd = res.Series[n-1].GPUs, res.Series[n-1].Pending
	}
	for _, p := range res.Series {
		if p.Round >= res.LastDemand && p.Round <= res.Settled {
			res.ReconcilesToConverge += p.Reconciles
		}
	}
}

// sizing is what a deployment's pods request: its event's Sizing, else
// the run's.
func (s *state) sizing(deployment string) *composereplica.Sizing {
	if z, ok := s.sizes[deployment]; ok {
		return z
	}
	return s.cfg.Sizing
}

func (s *state) demand(round int) {
	for _, e := range s.cfg.Events {
		if e.Round != round {
			continue
		}
		delete(s.settled, e.Name)
		switch {
		case e.Delete:
			delete(s.deployments, e.Name)
		case e.Deployment != nil:
			d := *e.Deployment
			d.Metadata.Name = e.Name
			// A uid, as the API server gives every XR: the function's
			// assumed placements take part only for XRs that carry one.
			s.uids++
			d.Metadata.UID = fmt.Sprintf("uid-%s-%d", e.Name, s.uids)
			d.Spec.Replicas = e.Replicas
			s.deployments[e.Name] = &d
		default:
			if d := s.deployments[e.Name]; d != nil {
				d.Spec.Replicas = e.Replicas
			}
		}
	}
}

// pulled records on their nodes the images whose pulls are done by now.
func (s *state) pulled(now time.Time) {
	i := 0
	for ; i < len(s.pulls) && !s.pulls[i].done.After(now); i++ {
		p := s.pulls[i]
		p.cluster.kube.Pulled(p.node, p.images...)
	}
	s.pulls = s.pulls[i:]
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
func (s *state) sample(ctx context.Context, now time.Time, round int) error {
	a := s.cfg.Agent
	if !a.Enabled {
		return nil
	}
	elapsed := time.Duration(round) * s.cfg.Tick
	if a.StopAfter > 0 && elapsed >= a.StopAfter {
		return nil
	}
	if hb := max(a.Heartbeat, s.cfg.Tick); elapsed%hb != 0 {
		return nil
	}
	at := now.Add(5 * time.Second)
	for _, c := range s.clusters {
		var view *agent.View
		viewOf := func() agent.View {
			if view == nil {
				v := c.view(at)
				view = &v
			}
			return *view
		}
		for _, p := range c.pools {
			smp, err := p.sample(ctx, viewOf, at, at.Add(a.Lag))
			if err != nil {
				return err
			}
			p.samples = append(p.samples, smp)
		}
	}
	return nil
}

// reconcile runs every deployment that may change once, in name order,
// in batches of Config.Concurrent (one by default), each seeing what the
// batches before it created, and deletes the replicas of deployments that
// are gone.
func (s *state) reconcile(now time.Time) (bool, int, error) {
	changed, err := s.collect()
	if err != nil {
		return false, 0, err
	}
	clusters := make([]*v1alpha1.InferenceCluster, 0, len(s.clusters))
	for _, c := range s.clusters {
		clusters = append(clusters, c.object())
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range s.deployments {
			if (s.cfg.ReconcileAll || !s.settled[n]) && !yield(n) {
				return
			}
		}
	})
	for batch := range slices.Chunk(names, max(s.cfg.Concurrent, 1)) {
		// The calls of a batch are in flight at once: each reads the
		// fleet as it was before any of them answered.
		objs := make([]*v1alpha1.ModelReplica, 0, len(s.replicas))
		for _, r := range s.replicas {
			objs = append(objs, r.obj)
		}
		desired := make([][]*v1alpha1.ModelReplica, len(batch))
		podNodes := make([]replicaPodNodes, len(batch))
		for i, name := range batch {
			var err error
			if pr, ok := s.cfg.Reconciler.(podNodesReconciler); ok {
				desired[i], podNodes[i], err = pr.reconcilePodNodes(s.deployments[name], clusters, objs, now)
			} else {
				desired[i], err = s.cfg.Reconciler.Reconcile(s.deployments[name], clusters, objs, now)
			}
			if err != nil {
				return false, 0, err
			}
		}
		for i, name := range batch {
			c, err := s.apply(name, desired[i], podNodes[i], now)
			if err != nil {
				return false, 0, err
			}
			changed = changed || c
			s.settled[name] = !c && len(desired[i]) == int(s.deployments[name].Spec.Replicas) && s.bound(name)
		}
	}
	return changed, len(names), nil
}

// collect deletes the replicas of deployments that no longer exist, as
// Crossplane garbage-collects what a deleted XR composed.
func (s *state) collect() (bool, error) {
	var err error
	changed := false
	s.replicas = slices.DeleteFunc(s.replicas, func(r *replica) bool {
		if s.deployments[r.deployment] != nil {
			return false
		}
		err = errors.Join(err, r.release())
		changed = true
		return true
	})
	return changed, err
}

// apply makes a deployment's replicas the desired ones: deletes the rest,
// creates the new with their pods, re-creates the pods of one the function
// re-placed onto another pool (same name, new pins), and keeps the
// annotations it writes. The new pods take the groups the call's ledger
// assumed for them (podNodes).
func (s *state) apply(name string, desired []*v1alpha1.ModelReplica, podNodes replicaPodNodes, now time.Time) (bool, error) {
	want := map[string]*v1alpha1.ModelReplica{}
	for _, d := range desired {
		want[d.Metadata.Name] = d
	}
	have := map[string]*replica{}
	var dropped []*replica
	changed := false
	var err error
	s.replicas = slices.DeleteFunc(s.replicas, func(r *replica) bool {
		if r.deployment != name {
			return false
		}
		d := want[r.obj.Metadata.Name]
		if d != nil && samePins(r.obj, d) {
			have[r.obj.Metadata.Name] = r
			return false
		}
		err = errors.Join(err, r.release())
		dropped = append(dropped, r)
		changed = true
		return true
	})
	if err != nil {
		return false, err
	}
	calls := map[string]groups{}
	for _, d := range desired {
		if r := have[d.Metadata.Name]; r != nil {
			if !maps.Equal(r.obj.Metadata.Annotations, d.Metadata.Annotations) {
				obj := *r.obj
				obj.Metadata.Annotations = d.Metadata.Annotations
				r.obj = &obj
				changed = true
			}
			if !maps.Equal(r.obj.Metadata.Labels, d.Metadata.Labels) {
				// Applied as Crossplane applies them, and read by no binder:
				// a label the function recomputes (whether a report counts
				// the replica) changes nothing the run measures.
				obj := *r.obj
				obj.Metadata.Labels = d.Metadata.Labels
				r.obj = &obj
			}
			continue
		}
		c := s.cluster(d.Spec.ClusterName)
		if c == nil {
			continue
		}
		s.seq++
		r, err := newReplica(c, d, name, s.seq, composereplica.Options{Sizing: s.sizing(name)})
		if err != nil {
			return false, err
		}
		r.origin = s.seq
		r.assume(podNodes[d.Metadata.Name], calls)
		if from := s.moved(d, dropped, now); from != nil {
			r.origin = from.origin
		}
		r.pendingSince = now
		setPodsScheduled(r)
		s.overcommit += r.claim()
		s.replicas = append(s.replicas, r)
		changed = true
	}
	return changed, nil
}

// moved reports whether the function re-placed a replica in this
// reconcile, by the annotation it writes (docs/spec.md#re-placing: the move's time),
// counts the move against the replica it replaces, and returns that
// replica: the one dropped in the same response, by name on its own
// cluster, else one whose pool the annotation says it was stuck on. A
// replica's moves are counted across its waits and its names.
func (s *state) moved(d *v1alpha1.ModelReplica, dropped []*replica, now time.Time) *replica {
	memory, ok := scheduling.ParseReplacement(d.Metadata.Annotations[v1alpha1.AnnotationReplacement])
	if !ok || memory.Moves == 0 || !memory.MovedAt.Equal(now.UTC().Truncate(time.Second)) {
		return nil
	}
	var from *replica
	for _, r := range dropped {
		if r.obj.Metadata.Name == d.Metadata.Name {
			from = r
			break
		}
	}
	for _, r := range dropped {
		if from != nil {
			break
		}
		if r.paired {
			continue
		}
		for _, p := range r.obj.Pools() {
			if slices.Contains(memory.StuckOn, scheduling.PoolRef{Cluster: r.obj.Spec.ClusterName, Pool: p}) {
				from = r
				break
			}
		}
	}
	origin := s.seq
	if from != nil {
		from.paired = true
		origin = from.origin
	}
	if s.moves == nil {
		s.moves = map[int]int{}
	}
	s.moves[origin]++
	return from
}

// samePins reports whether two ModelReplicas pin the same members to the
// same pools of the same cluster.
func samePins(a, b *v1alpha1.ModelReplica) bool {
	if a.Spec.ClusterName != b.Spec.ClusterName || len(a.Spec.Engines) != len(b.Spec.Engines) {
		return false
	}
	for i, e := range a.Spec.Engines {
		f := b.Spec.Engines[i]
		if e.Name != f.Name || len(e.Members) != len(f.Members) {
			return false
		}
		for j, m := range e.Members {
			if m.NodePoolName != f.Members[j].NodePoolName {
				return false
			}
		}
	}
	return true
}

// bound reports whether every replica of a deployment has its pods bound.
func (s *state) bound(deployment string) bool {
	for _, r := range s.replicas {
		if r.deployment == deployment && !r.bound() {
			return false
		}
	}
	return true
}

func (s *state) cluster(name string) *simCluster {
	for _, c := range s.clusters {
		if c.name == name {
			return c
		}
	}
	return nil
}

// bind offers every Pending pod to the binder, oldest replica first (as
// kube-scheduler's queue orders pods of one priority), and marks replicas
// whose pods are now all bound PodsScheduled at t.
func (s *state) bind(ctx context.Context, t time.Time) (bool, error) {
	changed := false
	steering := s.agentSteers(t)
	if steering {
		var err error
		if changed, err = s.steer(ctx, t); err != nil {
			return false, err
		}
	}
	queue := slices.Clone(s.replicas)
	slices.SortFunc(queue, func(a, b *replica) int { return cmp.Compare(a.seq, b.seq) })
	for _, r := range queue {
		for _, p := range r.pods {
			if p.bound() || steering && p.held() {
				// A held pod waits for the agent's next window.
				continue
			}
			predict := s.predict(p)
			ok, err := s.cfg.Binder.bind(ctx, p, s.rng)
			if err != nil {
				return false, fmt.Errorf("cannot bind a pod of replica %s: %w", r.obj.Metadata.Name, err)
			}
			if ok {
				predict()
				s.pulling(p, t)
			}
			changed = changed || ok
		}
		if r.scheduledAt == nil && r.bound() {
			at := t
			r.scheduledAt = &at
			setPodsScheduled(r)
		}
	}
	return changed, nil
}

// pulling starts the pull of a pod's images on the node it bound to at t.
func (s *state) pulling(p *pod, t time.Time) {
	s.pulls = append(s.pulls, pull{cluster: p.replica.cluster, node: p.kube.Node(), images: p.kube.Images(), done: t.Add(s.cfg.ImagePull)})
	if s.cfg.ImagePull == 0 {
		s.pulled(t)
	}
}

// predict notes, before a claiming pod binds, the free GPUs of the node
// each assumedBinding would have it take (MostFree: the most free of the
// nodes whose free GPUs cover its claim; LeastFree: the fewest), and
// returns what records, once it bound, whether its node had that many,
// and whether it had the free devices of a group the ledger assumed for
// the pod (Agreement). Nodes are compared by free count, as the ledger
// groups them.
func (s *state) predict(p *pod) func() {
	if p.claim == 0 || p.pool == nil {
		return func() {}
	}
	c := p.pool.cluster
	free := make(map[string]int64, len(p.pool.nodes))
	most, least := int64(-1), int64(-1)
	for _, n := range p.pool.nodes {
		f := c.freeGPUs(n)
		free[n.Obj.Name] = f
		if f < p.claim {
			continue
		}
		most = max(most, f)
		if least < 0 || f < least {
			least = f
		}
	}
	return func() {
		f := free[p.kube.Node()]
		s.binds.claiming++
		if f == most {
			s.binds.mostFree++
		}
		if f == least {
			s.binds.leastFree++
		}
		agreement := &s.binds.Groups
		switch {
		case p.steer == unpinned:
			agreement = &s.binds.Unpinned
		case p.steer == undecided && s.cfg.Binder.steers():
			agreement = &s.binds.Unheld
		}
		agreement.record(p, []int64{f})
	}
}

// setPodsScheduled writes the replica's PodsScheduled condition as the
// agent relays it: True since the last pod bound, else False since the
// replica's pods were created.
func setPodsScheduled(r *replica) {
	c := map[string]any{"type": observation.ConditionPodsScheduled, "status": "False", "reason": "PodsPending", "lastTransitionTime": r.pendingSince.UTC().Format(time.RFC3339)}
	if r.scheduledAt != nil {
		c = map[string]any{"type": observation.ConditionPodsScheduled, "status": "True", "reason": "PodsBound", "lastTransitionTime": r.scheduledAt.UTC().Format(time.RFC3339)}
	}
	obj := *r.obj
	obj.Status = &v1alpha1.ModelReplicaStatus{Conditions: []any{c}}
	r.obj = &obj
}
