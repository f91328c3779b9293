package scheduling

import (
	"strconv"
	"strings"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// buildLedger starts every pool of every candidate cluster from its capacity
// (free-device when its report is usable, whole-node otherwise) and charges
// the replicas that hold it: every other deployment's, and the ones of this
// deployment that are kept. Dropped and scaled-down replicas of this
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
	if _, short := reserveEngine(l, p, d, s.binding); short != nil {
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
	if _, short := reserveEngine(l, p, d, s.binding); short != nil {
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
			i := l.pick(c, s.binding)
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
