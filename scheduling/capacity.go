package scheduling

import (
	"cmp"
	"slices"
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
	// Devices are the pool's device names, in its order; a group's Free
	// counts each.
	Devices []string
	Groups  []NodeGroup
}

// NodeGroup is a number of nodes with the same free devices.
type NodeGroup struct {
	Nodes int64
	// Free is shared with the pass: read it, never change it.
	Free []int64
}

// capacity is what each pool had left when the pass ended, by cluster name
// and then pool order; nil when it built no ledger. A pool of a name taken
// by an earlier one is never pinned to, and left out.
func (s *pass) capacity() []PoolCapacity {
	if s.ledger == nil {
		return nil
	}
	var out []PoolCapacity
	for _, cl := range s.clusterList {
		ledgers := s.ledger[cl.name]
		for i, p := range cl.pools {
			if cl.poolByID[p.name] != p || i >= len(ledgers) {
				continue
			}
			l := ledgers[i]
			c := PoolCapacity{Pool: PoolRef{Cluster: cl.name, Pool: p.name}, WholeNode: l.whole, Saturated: l.saturated, Devices: make([]string, len(p.devices))}
			for j, d := range p.devices {
				c.Devices[j] = d.spec.Name
			}
			var empty, taken []int64
			if l.whole {
				empty, taken = emptyNode(p), make([]int64, len(p.devices))
			}
			c.Groups = make([]NodeGroup, 0, len(l.groups))
			for _, g := range l.groups {
				free := g.free
				if l.whole {
					free = taken
					if g.free[0] > 0 {
						free = empty
					}
				}
				c.Groups = append(c.Groups, NodeGroup{Nodes: g.count, Free: free})
			}
			// The most free first: the order groups were made in depends on
			// the order of the charges.
			slices.SortFunc(c.Groups, func(a, b NodeGroup) int { return cmp.Or(slices.Compare(b.Free, a.Free), cmp.Compare(b.Nodes, a.Nodes)) })
			out = append(out, c)
		}
	}
	return out
}
