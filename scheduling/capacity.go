package scheduling

import (
	"cmp"
	"slices"
)

// Capacity is how much a plan says of what each pool had left
// (Plan.Capacity).
type Capacity int

// How much a plan says of what each pool had left.
const (
	// CapacityNone says nothing.
	CapacityNone Capacity = iota
	// CapacityLargest says the most of each device free on one node, as a
	// server's metrics read it on every call.
	CapacityLargest
	// CapacityGroups says that, and every group of nodes by free devices,
	// as a debug log reads it: a copy of each pool's ledger.
	CapacityGroups
)

// PoolCapacity is what one pool had left once a pass had charged the fleet
// and placed the deployment's replicas: the ledger it planned on, read
// only. A whole-node pool's empty nodes have every DRA device free, its
// taken ones none.
type PoolCapacity struct {
	Pool PoolRef
	// WholeNode is whether the pool was accounted in whole nodes, and
	// Saturated whether pods charged to it did not fit, so that it took
	// nothing new.
	WholeNode, Saturated bool
	// Devices are the pool's device names, in its order; Largest and a
	// group's Free count each.
	Devices []string
	// Largest is the most of each device free on one node.
	Largest []int64
	// Groups are the pool's nodes by free devices, the most free first;
	// only with CapacityGroups.
	Groups []NodeGroup
}

// NodeGroup is a number of nodes with the same free devices.
type NodeGroup struct {
	Nodes int64
	// Free is shared with the pass: read it, never change it.
	Free []int64
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
		c := PoolCapacity{Pool: PoolRef{Cluster: cl.name, Pool: p.name}, WholeNode: l.whole, Saturated: l.saturated}
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
