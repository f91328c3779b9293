package scheduling

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// A pass's state, and its ledger of every candidate pool: what holds a pool
// is charged (docs/spec.md#whole-node-accounting), a new replica is reserved
// one pool per engine (docs/spec.md#filling), and what is left is read out
// for Plan.Capacity. The steps of schedule.go decide; the methods here keep
// the books, and no file below this one calls back into a step.

// identity is a replica's (cluster, index).
type identity struct {
	cluster string
	index   int
}

// pass is the state of one scheduling pass.
type pass struct {
	deployment  *v1alpha1.ModelDeployment
	engines     []engine
	clusters    map[string]*cluster
	clusterList []*cluster
	replicas    []Replica
	binding     Binding

	ledger   map[string][]*poolLedger
	programs programCache
	stamped  map[string][]int64

	// now and replaceAfter steer re-placing (schedule.go); exclude are the
	// pools a replica being re-placed may not go to.
	now          time.Time
	replaceAfter time.Duration
	exclude      map[PoolRef]bool
	podNodes     bool
}

func newPass(s Snapshot, engines []engine) *pass {
	p := &pass{
		deployment:   s.Deployment,
		engines:      engines,
		clusters:     map[string]*cluster{},
		binding:      s.Options.Binding,
		programs:     programCache{shared: s.Options.Selectors, programs: map[string]*program{}},
		now:          s.Now,
		replaceAfter: s.Options.ReplaceUnscheduledAfter,
		stamped:      map[string][]int64{},
		podNodes:     s.Options.PodNodes,
	}
	// Sort every input first: the plan must not depend on the order the
	// inputs arrived in.
	kinds := newDeviceKinds()
	clusters := slices.Clone(s.Clusters)
	slices.SortStableFunc(clusters, func(a, b Cluster) int { return cmp.Compare(a.Object.Metadata.Name, b.Object.Metadata.Name) })
	for _, c := range clusters {
		if _, dup := p.clusters[c.Object.Metadata.Name]; dup {
			continue
		}
		cl := newCluster(c, kinds)
		p.clusters[cl.name] = cl
		p.clusterList = append(p.clusterList, cl)
	}
	// Only this deployment's replicas and those that may charge a pool
	// matter; a fleet's other replicas are mostly counted by every report of
	// their cluster, and are left out before the sort.
	countedBefore := make(map[string]time.Time, len(p.clusterList))
	for _, cl := range p.clusterList {
		if before, ok := CountedBefore(Cluster{Object: cl.obj, Observed: cl.observed}); ok {
			countedBefore[cl.name] = before
		}
	}
	p.replicas = make([]Replica, 0, len(s.Replicas)+len(s.Assumed))
	for _, r := range s.Assumed {
		r.Assumed = true
		p.replicas = append(p.replicas, r)
	}
	for _, r := range s.Replicas {
		before, ok := countedBefore[r.Object.Spec.ClusterName]
		if p.ours(r) || !ok || !r.CountedBy(before) {
			p.replicas = append(p.replicas, r)
		}
	}
	slices.SortStableFunc(p.replicas, func(a, b Replica) int {
		return cmp.Or(cmp.Compare(a.Object.Metadata.Namespace, b.Object.Metadata.Namespace),
			cmp.Compare(a.Object.Metadata.Name, b.Object.Metadata.Name))
	})
	return p
}

// ours reports whether a replica is this deployment's.
func (s *pass) ours(r Replica) bool {
	return !r.Assumed && Ours(s.deployment, r.Object.Metadata.Namespace, r.Object.Metadata.Labels[v1alpha1.LabelDeployment], r.Deleting)
}

// Ours reports whether a replica in namespace, whose modelplane.ai/deployment
// label is deployment, is d's (docs/spec.md#whose-replica): every other replica is another
// deployment's, and only ever charged, and so is one being deleted, whose
// pods may still hold devices. It is the one test of the rule, for readers
// that have only a replica's metadata as much as for the scheduler.
func Ours(d *v1alpha1.ModelDeployment, namespace, deployment string, deleting bool) bool {
	return !deleting && deployment == d.Metadata.Name && namespace == d.Metadata.Namespace
}

// identityOf reads a replica's (cluster, index). A missing or malformed index
// label reads as 0, the single-replica-per-cluster case it came from.
func identityOf(r *v1alpha1.ModelReplica) identity {
	return identity{cluster: r.Spec.ClusterName, index: parseIndex(r.Metadata.Labels[v1alpha1.LabelReplicaIndex])}
}

// parseIndex reads an index label as Modelplane v0.3 (Python's int) does: a
// sign and underscores between digits are allowed; anything else, or a
// number past an int, reads as 0.
func parseIndex(s string) int {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "__") || strings.HasSuffix(s, "_") || strings.HasPrefix(strings.TrimLeft(s, "+-"), "_") {
		return 0
	}
	i, err := strconv.Atoi(strings.ReplaceAll(s, "_", ""))
	if err != nil {
		return 0
	}
	return i
}

// buildLedger starts every pool of every candidate cluster from its capacity
// (free-device when its report is usable, whole-node otherwise) and charges
// the replicas that hold it: every other deployment's, and the ones of this
// deployment that are kept, in the pass's replica order, the first step of
// docs/spec.md#charge-order. Dropped and scaled-down replicas of this
// deployment are freeing their nodes and are not charged.
func (s *pass) buildLedger(kept map[identity]bool) {
	s.ledger = map[string][]*poolLedger{}
	for _, cl := range s.clusterList {
		pl := make([]*poolLedger, len(cl.pools))
		for i, p := range cl.pools {
			if obs := cl.observed[p.name]; obs != nil {
				pl[i] = newFreeDeviceLedger(p, obs)
			} else {
				pl[i] = newWholeNodeLedger(p.nodes)
			}
		}
		s.ledger[cl.name] = pl
	}
	for _, r := range s.replicas {
		if s.ours(r) && !kept[identityOf(r.Object)] {
			continue
		}
		s.charge(r)
	}
}

// charge books an observed replica's claiming pods on the pools they are
// pinned to, skipping a pool whose histogram already counts them.
func (s *pass) charge(r Replica) {
	cl := s.clusters[r.Object.Spec.ClusterName]
	if cl == nil {
		return
	}
	if r.Unreadable != "" && len(r.Object.Spec.Engines) == 0 {
		// Its engines did not read: it may hold any pool of its cluster,
		// and is charged a whole node of each.
		for _, p := range cl.pools {
			s.chargeWholeNode(cl, p)
		}
		return
	}
	for _, e := range r.Object.Spec.Engines {
		// Members of one engine share a pool; a replica that says otherwise
		// is charged pool by pool, in member order.
		done := map[string]bool{}
		for _, m := range e.Members {
			if done[m.NodePoolName] {
				continue
			}
			done[m.NodePoolName] = true
			// A pin to a pool the cluster no longer publishes charges nothing:
			// its pods cannot schedule and hold no node.
			if p := cl.poolByID[m.NodePoolName]; p != nil && !counted(r, cl.observed[p.name]) {
				s.chargeEngineOnPool(cl, p, e)
			}
		}
	}
}

// bindingOf is the binding a pool's pods are accounted with: best fit on
// a steered pool, where the agent binds each claiming pod where the ledger
// assumes it (docs/spec.md#assumed-binding); the pass's assumption
// elsewhere.
func (s *pass) bindingOf(l *poolLedger) Binding {
	if l.steered {
		return LeastFree
	}
	return s.binding
}

// chargeEngineOnPool books the claiming pods of an observed engine's members
// pinned to one pool. Pods that do not fit saturate the pool.
func (s *pass) chargeEngineOnPool(cl *cluster, p *pool, e v1alpha1.ReplicaEngine) {
	l := s.ledger[cl.name][p.index]
	gang := false
	var groups []podGroup
	for _, m := range e.Members {
		gang = gang || roleOf(m.Role) != v1alpha1.RoleStandalone
		if m.NodePoolName != p.name {
			continue
		}
		g := podGroup{pods: memberPods(m.Role, m.Worker)}
		if len(m.DeviceRequests) > 0 {
			g.claim = s.stampedClaim(cl, p, l, m.DeviceRequests)
		}
		groups = append(groups, g)
	}
	d := demand{copies: countOr(e.Copies, 1), gang: gang, members: groups}
	if _, short := reserveEngine(l, p, d, s.bindingOf(l)); short != nil {
		s.chargeUnfit(l, d)
	}
}

// chargeWholeNode books one pod that takes a whole node of a pool: every
// DRA device of an empty node, or the node under whole-node accounting.
func (s *pass) chargeWholeNode(cl *cluster, p *pool) {
	l := s.ledger[cl.name][p.index]
	claim := []int64{1}
	if !l.whole {
		claim = emptyNode(p)
	}
	d := demand{copies: 1, members: []podGroup{{pods: 1, claim: claim}}}
	if _, short := reserveEngine(l, p, d, s.bindingOf(l)); short != nil {
		s.chargeUnfit(l, d)
	}
}

// chargeUnfit books pods already charged to a pool that do not all fit it.
// A whole-node pool then takes nothing new, as a Modelplane pool whose free
// node count went negative. A free-device pool stays open: the pods that fit
// take their claim, and each pod that fits no node (it is Pending, waiting
// for one to free up) holds the node with the most free, whole, so it is
// first in line for it.
func (s *pass) chargeUnfit(l *poolLedger, d demand) {
	if l.whole || d.pods() > maxEnginePods {
		l.saturated = true
		return
	}
	for _, g := range d.gangs() {
		held := make([][]int64, 0, len(g))
		for _, c := range g {
			claim := c
			i := l.pick(c, s.bindingOf(l))
			if i < 0 {
				if i = l.pick(make([]int64, len(c)), MostFree); i < 0 {
					break
				}
				claim = l.groups[i].free
			}
			held = append(held, l.take(i, claim).to)
		}
		for _, h := range held {
			l.add(1, h)
		}
	}
}

// stampedClaim is what each pod of an observed member claims on its pool:
// each stamped request charged to the pool device it resolves to (first DRA
// device of its class that satisfies its selectors and has count left). A
// request that resolves to no device is charged a whole node.
func (s *pass) stampedClaim(cl *cluster, p *pool, l *poolLedger, reqs []v1alpha1.DeviceRequest) []int64 {
	if l.whole {
		return []int64{1}
	}
	key := stampKey(cl.name, p.name, reqs)
	if c, ok := s.stamped[key]; ok {
		return c
	}
	claim := make([]int64, len(p.devices))
	for _, r := range reqs {
		var programs []*program
		for _, sel := range r.Selectors {
			if sel.CEL != "" {
				programs = append(programs, s.programs.get(sel.CEL))
			}
		}
		count := min(max(r.Count, 1), maxCount)
		found := -1
		for i := range p.devices {
			d := &p.devices[i]
			if !d.spec.IsDRA() || (r.DeviceClassName != "" && d.spec.DeviceClassName != r.DeviceClassName) {
				continue
			}
			if d.count-claim[i] >= count && d.satisfies(programs) {
				found = i
				break
			}
		}
		if found < 0 {
			claim = emptyNode(p)
			break
		}
		claim[found] += count
	}
	s.stamped[key] = claim
	return claim
}

// stampKey identifies a pool and a list of stamped requests; every string
// is quoted, so no two different lists share a key.
func stampKey(cluster, pool string, reqs []v1alpha1.DeviceRequest) string {
	var b strings.Builder
	b.WriteString(strconv.Quote(cluster))
	b.WriteString(strconv.Quote(pool))
	for _, r := range reqs {
		b.WriteByte('[')
		b.WriteString(strconv.Quote(r.DeviceClassName))
		b.WriteString(strconv.FormatInt(r.Count, 10))
		for _, sel := range r.Selectors {
			b.WriteString(strconv.Quote(sel.CEL))
		}
		b.WriteByte(']')
	}
	return b.String()
}

// reserveReplica places every engine of a new replica on one cluster, each on
// the first pool in published order that matches every member and has room.
// It returns the reservation, or why the cluster cannot host the replica.
func (s *pass) reserveReplica(cl *cluster) (*reservation, *Reason) {
	res := &reservation{moves: map[*poolLedger][]move{}}
	for ei := range s.engines {
		e := &s.engines[ei]
		ep, why := s.reserveEngineOn(cl, ei, res)
		if why != nil {
			res.undo()
			why.Engine = e.name
			return nil, why
		}
		res.engines = append(res.engines, *ep)
	}
	return res, nil
}

func (s *pass) reserveEngineOn(cl *cluster, ei int, res *reservation) (*EnginePlacement, *Reason) {
	e := &s.engines[ei]
	claimable := cl.claimable(s.engines, ei)
	if !slices.Contains(claimable, true) {
		return nil, &Reason{Kind: ReasonNoPoolMatches}
	}
	var shortages []PoolShortage
	for _, p := range cl.pools {
		if s.exclude[PoolRef{Cluster: cl.name, Pool: p.name}] {
			// A replica being re-placed never goes back where it was stuck.
			continue
		}
		matches := cl.matchOnPool(p, s.engines, ei, claimable)
		if matches == nil {
			continue
		}
		l := s.ledger[cl.name][p.index]
		groups := make([]podGroup, len(e.members))
		for mi, mm := range matches {
			groups[mi] = podGroup{pods: e.members[mi].pods, claim: claimOf(l, mm)}
		}
		moves, short := reserveEngine(l, p, demand{copies: e.copies, gang: e.gang, members: groups}, s.bindingOf(l))
		if short != nil {
			shortages = append(shortages, *short)
			continue
		}
		res.moves[l] = append(res.moves[l], moves...)
		ep := &EnginePlacement{Name: e.name, PodNodes: s.podNodesOf(l, moves)}
		for mi, mm := range matches {
			ep.Members = append(ep.Members, MemberPlacement{Role: e.members[mi].role, Pool: p.name, DeviceRequests: mm.requests})
		}
		return ep, nil
	}
	if len(shortages) == 0 {
		return nil, &Reason{Kind: ReasonNoPoolMatches}
	}
	return nil, &Reason{Kind: ReasonCapacity, Pools: shortages}
}

// capacity is what each pool had left when the pass ended, by cluster name
// and then pool order; nil when it built no ledger. A pool of a name taken
// by an earlier one is never pinned to, and left out. A server reads it on
// every call, so its slices are cut from one allocation of each kind.
func (s *pass) capacity(detail Capacity) []PoolCapacity {
	if s.ledger == nil || detail == CapacityNone {
		return nil
	}
	var pools, devices, groups int
	s.eachLedger(func(_ *cluster, p *pool, l *poolLedger) {
		pools, devices, groups = pools+1, devices+len(p.devices), groups+len(l.groups)
	})
	out := make([]PoolCapacity, 0, pools)
	names := make([]string, 0, devices)
	// A pool's largest counts, and a whole-node pool's taken node's.
	counts := make([]int64, 2*devices)
	var nodeGroups []NodeGroup
	if detail == CapacityGroups {
		nodeGroups = make([]NodeGroup, 0, groups)
	}
	s.eachLedger(func(cl *cluster, p *pool, l *poolLedger) {
		n := len(p.devices)
		c := PoolCapacity{Pool: PoolRef{Cluster: cl.name, Pool: p.name}, WholeNode: l.whole, Steered: l.steered, Saturated: l.saturated}
		for _, d := range p.devices {
			names = append(names, d.spec.Name)
		}
		c.Devices = names[len(names)-n : len(names) : len(names)]
		c.Largest, counts = counts[:n:n], counts[n:]
		var empty, taken []int64
		if l.whole {
			empty, taken = emptyNode(p), counts[:n:n]
			counts = counts[n:]
		}
		start := len(nodeGroups)
		for _, g := range l.groups {
			free := g.free
			if l.whole {
				// A whole-node ledger counts a node as 1 free or 0.
				free = taken
				if g.free[0] > 0 {
					free = empty
				}
			}
			if g.count > 0 {
				for j := range c.Largest {
					c.Largest[j] = max(c.Largest[j], free[j])
				}
			}
			if detail == CapacityGroups {
				nodeGroups = append(nodeGroups, NodeGroup{Nodes: g.count, Free: free})
			}
		}
		if detail == CapacityGroups {
			c.Groups = nodeGroups[start:len(nodeGroups):len(nodeGroups)]
			// The order groups were made in depends on the order of the
			// charges.
			slices.SortFunc(c.Groups, func(a, b NodeGroup) int { return cmp.Or(slices.Compare(b.Free, a.Free), cmp.Compare(b.Nodes, a.Nodes)) })
		}
		out = append(out, c)
	})
	return out
}

// eachLedger calls f with each pool's ledger, in capacity's order.
func (s *pass) eachLedger(f func(*cluster, *pool, *poolLedger)) {
	for _, cl := range s.clusterList {
		ledgers := s.ledger[cl.name]
		for i, p := range cl.pools {
			if cl.poolByID[p.name] != p || i >= len(ledgers) {
				continue
			}
			f(cl, p, ledgers[i])
		}
	}
}
