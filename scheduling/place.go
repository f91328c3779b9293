package scheduling

import (
	"cmp"
	"slices"
)

// An engine's claiming pods on one pool (docs/spec.md#gangs): its demand,
// laid out in gangs, reserved on the pool's ledger or refused with what the
// pool lacks.

// podGroup is one member's pods in one copy of an engine, all claiming the
// same devices.
type podGroup struct {
	pods  int64
	claim []int64
}

// demand is the claiming pods of an engine's copies on one pool.
type demand struct {
	copies  int64
	gang    bool
	members []podGroup
}

// maxEnginePods bounds the claiming pods of one engine on one pool. The XRD
// allows at most 64 copies of 64 pods; more is a malformed replica, and it
// does not fit rather than being laid out pod by pod.
const maxEnginePods = 1 << 16

// pods counts the claiming pods, capped just past maxEnginePods.
func (d demand) pods() int64 {
	var per int64
	for _, m := range d.members {
		if m.claim != nil {
			per = min(per+m.pods, maxEnginePods+1)
		}
	}
	return min(per*d.copies, maxEnginePods+1)
}

// smallest is the least any one claiming pod claims, device by device: no
// pod fits where that does not.
func (d demand) smallest() []int64 {
	var low []int64
	for _, m := range d.members {
		if m.claim == nil {
			continue
		}
		if low == nil {
			low = slices.Clone(m.claim)
		}
		for k := range low {
			low[k] = min(low[k], m.claim[k])
		}
	}
	return low
}

// gangs lays out the claiming pods, in the order the ledger charges them
// (docs/spec.md#charge-order): one gang per copy when the engine is a
// Leader with Workers, whose pods take distinct nodes; otherwise one gang
// per pod, free to share a node with any other, copy by copy and member by
// member. Claimless members cost nothing and are left out.
func (d demand) gangs() [][][]int64 {
	var gangs [][][]int64
	for range d.copies {
		var g [][]int64
		for _, m := range d.members {
			if m.claim == nil {
				continue
			}
			for range m.pods {
				if d.gang {
					g = append(g, m.claim)
				} else {
					gangs = append(gangs, [][]int64{m.claim})
				}
			}
		}
		if d.gang && len(g) > 0 {
			sortGang(g)
			gangs = append(gangs, g)
		}
	}
	return gangs
}

// sortGang orders a gang's claims biggest first, so that its large pods
// are not crowded out of the nodes that can take them by its small ones:
// by the sum of the claim, then by the claim, device by device in the
// pool's order, both descending. The order is total, so it does not depend
// on the order of the members: an agent that sees only the pods' claims
// can follow it exactly.
func sortGang(g [][]int64) {
	slices.SortFunc(g, func(a, b []int64) int { return cmp.Or(cmp.Compare(sum(b), sum(a)), slices.Compare(b, a)) })
}

func sum(c []int64) int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// reserveEngine reserves every gang of an engine on a pool. It returns the
// undo log, or a shortage and no change.
func reserveEngine(l *poolLedger, p *pool, d demand, b Binding) ([]move, *PoolShortage) {
	if l.saturated {
		return nil, &PoolShortage{Pool: p.name, WholeNode: l.whole, Saturated: true}
	}
	pods := d.pods()
	if pods == 0 {
		return nil, nil
	}
	// More pods than the pool could hold even at the smallest claim: a
	// shortage, found without laying the pods out one by one. The bound
	// holds only where every pod claims some of one device kind; members
	// claiming different kinds leave the smallest claim empty.
	if low := d.smallest(); pods > maxEnginePods || (sum(low) > 0 && pods > l.room(low)) {
		return nil, &PoolShortage{Pool: p.name, WholeNode: l.whole, Pods: pods, Claim: deviceCounts(p, low, l.whole), Have: l.room(low)}
	}
	return reserveGangs(l, p, d.gangs(), b)
}

// reserveGangs reserves gangs of pods on a pool, each gang on distinct nodes.
// It returns the undo log, or a shortage and no change.
func reserveGangs(l *poolLedger, p *pool, gangs [][][]int64, b Binding) ([]move, *PoolShortage) {
	var moves []move
	for gi, g := range gangs {
		m, ok := l.reserveGang(g, b)
		if !ok {
			short := shortage(l, p, gangs, gi)
			l.undo(moves)
			if short.WholeNode {
				short.Have = l.nodesWith(g[0])
			} else if !short.Gang {
				short.Have = l.room(g[0])
			}
			return nil, short
		}
		moves = append(moves, m...)
	}
	return moves, nil
}

// shortage says what a pool lacked when gang gi of an engine found no room.
// The ledger is as it was just before gang gi.
func shortage(l *poolLedger, p *pool, gangs [][][]int64, gi int) *PoolShortage {
	g := gangs[gi]
	s := &PoolShortage{Pool: p.name, WholeNode: l.whole}
	switch {
	case l.whole:
		for _, g := range gangs {
			s.Pods += int64(len(g))
		}
	case len(g) > 1:
		widest := make([]int64, len(g[0]))
		for _, c := range g {
			for k := range c {
				widest[k] = max(widest[k], c[k])
			}
		}
		s.Gang, s.Pods, s.Claim, s.Have = true, int64(len(g)), deviceCounts(p, widest, false), l.nodesWith(widest)
	default:
		for _, other := range gangs {
			if slices.Equal(other[0], g[0]) {
				s.Pods++
			}
		}
		s.Claim = deviceCounts(p, g[0], false)
	}
	return s
}

// deviceCounts names a claim's devices; whole-node claims name none.
func deviceCounts(p *pool, c []int64, whole bool) []DeviceCount {
	if whole {
		return nil
	}
	var out []DeviceCount
	for k, n := range c {
		if n > 0 {
			out = append(out, DeviceCount{Name: p.devices[k].spec.Name, Count: n})
		}
	}
	return out
}

// claimOf is what each pod of a matched member claims on a pool under the
// pool's accounting, or nil when it claims nothing.
func claimOf(l *poolLedger, mm *memberMatch) []int64 {
	if !mm.claims() {
		return nil
	}
	if l.whole {
		return []int64{1}
	}
	return mm.claim
}

// reservation is a tentative placement of one replica on one cluster.
type reservation struct {
	engines []EnginePlacement
	moves   map[*poolLedger][]move
}

// undo returns everything the reservation took.
func (r *reservation) undo() {
	for l, m := range r.moves {
		l.undo(m)
	}
}
