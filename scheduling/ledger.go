package scheduling

import (
	"slices"

	"github.com/modelplaneai/fleet-scheduler/nodeorder"
)

// nodeGroup is a number of nodes with exactly the same free devices, one
// count per pool device. Under whole-node accounting a node has one
// dimension: 1 while empty, 0 once a claiming pod took it.
type nodeGroup struct {
	count int64
	free  []int64
}

// poolLedger is the capacity left on one pool. Nodes are kept in groups, never
// one by one, so a pool of a million nodes costs what a pool of one does.
// Distinct groups never have the same free devices, so the binding rule
// never meets a tie and the result does not depend on group order.
type poolLedger struct {
	whole bool
	// steered is set for a pool whose usable report says binding Steered:
	// its pods bind where best fit puts them, whatever the pass assumes of
	// other pools (docs/spec.md#assumed-binding).
	steered bool
	groups  []nodeGroup
	// saturated is set when pods already charged to the pool did not fit it:
	// the pool takes nothing new until they do, as a whole-node pool whose
	// free count went negative takes nothing.
	saturated bool
}

func newWholeNodeLedger(nodes int64) *poolLedger {
	return &poolLedger{whole: true, groups: []nodeGroup{{count: nodes, free: []int64{1}}}}
}

// newFreeDeviceLedger starts from the agent's histogram plus the nodes the
// pool can still grow by. A node that is in observedNodes but not in the
// histogram (booting, unready or cordoned) counts as neither.
func newFreeDeviceLedger(p *pool, obs *PoolObservation) *poolLedger {
	l := &poolLedger{steered: obs.Steered}
	index := map[string]int{}
	for i, d := range p.devices {
		if _, dup := index[d.spec.Name]; !dup {
			index[d.spec.Name] = i
		}
	}
	for _, b := range obs.Buckets {
		free := make([]int64, len(p.devices))
		for name, n := range b.Free {
			if i, ok := index[name]; ok && p.devices[i].spec.IsDRA() {
				free[i] = min(max(n, 0), p.devices[i].count)
			}
		}
		l.add(min(max(b.Nodes, 0), maxCount), free)
	}
	if grow := p.nodes - obs.ObservedNodes; grow > 0 {
		l.add(grow, emptyNode(p))
	}
	return l
}

// emptyNode is the free devices of a node nothing runs on: every DRA device
// at its per-node count. Synthetic devices are never claimed.
func emptyNode(p *pool) []int64 {
	free := make([]int64, len(p.devices))
	for i, d := range p.devices {
		if d.spec.IsDRA() {
			free[i] = d.count
		}
	}
	return free
}

// add returns count nodes with the given free devices to the pool.
func (l *poolLedger) add(count int64, free []int64) {
	if count <= 0 {
		return
	}
	for i := range l.groups {
		if slices.Equal(l.groups[i].free, free) {
			l.groups[i].count = min(l.groups[i].count+count, maxCount)
			return
		}
	}
	l.groups = append(l.groups, nodeGroup{count: count, free: free})
}

// pick is the group of the node a pod claiming c is assumed to bind to, or
// -1 when no node has c free.
func (l *poolLedger) pick(c []int64, b Binding) int {
	best := -1
	for i := range l.groups {
		g := &l.groups[i]
		if g.count == 0 || !nodeorder.Covers(g.free, c) {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		cmp := nodeorder.Compare(g.free, l.groups[best].free, c)
		if (b == LeastFree && cmp < 0) || (b != LeastFree && cmp > 0) {
			best = i
		}
	}
	return best
}

// move is one node of a pool going from one set of free devices to another.
// A list of moves is the undo log of a reservation.
type move struct {
	from, to []int64
}

// take moves one node of group i to the free devices left once c is claimed.
func (l *poolLedger) take(i int, c []int64) move {
	g := &l.groups[i]
	from := g.free
	to := slices.Clone(from)
	for k := range c {
		to[k] -= c[k]
	}
	g.count--
	if g.count == 0 {
		l.groups = slices.Delete(l.groups, i, i+1)
	}
	return move{from: from, to: to}
}

// undo reverses moves, newest first, leaving the pool as it was before them.
func (l *poolLedger) undo(moves []move) {
	for _, m := range slices.Backward(moves) {
		for j := range l.groups {
			if slices.Equal(l.groups[j].free, m.to) {
				l.groups[j].count--
				if l.groups[j].count == 0 {
					l.groups = slices.Delete(l.groups, j, j+1)
				}
				break
			}
		}
		l.add(1, m.from)
	}
}

// reserveGang takes one node for each claim, all of them distinct nodes. The
// nodes a gang takes are held apart until the gang is done, so no two of its
// pods share one. It returns the moves made, or false and no change when a
// claim finds no node.
func (l *poolLedger) reserveGang(claims [][]int64, b Binding) ([]move, bool) {
	moves := make([]move, 0, len(claims))
	for _, c := range claims {
		i := l.pick(c, b)
		if i < 0 {
			for _, m := range moves {
				l.add(1, m.from)
			}
			return nil, false
		}
		moves = append(moves, l.take(i, c))
	}
	for _, m := range moves {
		l.add(1, m.to)
	}
	return moves, true
}

// nodesWith counts the nodes with at least c free.
func (l *poolLedger) nodesWith(c []int64) int64 {
	var n int64
	for _, g := range l.groups {
		if nodeorder.Covers(g.free, c) {
			n += g.count
		}
	}
	return n
}

// room counts the pods claiming c that fit the pool, several to a node.
func (l *poolLedger) room(c []int64) int64 {
	var n int64
	for _, g := range l.groups {
		per := int64(-1)
		for k := range c {
			if c[k] > 0 {
				fit := g.free[k] / c[k]
				if per < 0 || fit < per {
					per = fit
				}
			}
		}
		if per < 0 {
			per = 1
		}
		n += g.count * per
	}
	return n
}
