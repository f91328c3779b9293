package scheduling

import "slices"

// PodNode is one claiming pod of a placed engine as the ledger charged it
// (Options.PodNodes): what it claims, and the free devices of the group of
// nodes the ledger assumed it binds to, before it took its claim. Both
// have one count per pool device, in the pool's order
// (PoolCapacity.Devices). A binder agrees with the ledger about the pod
// when the node it binds the pod to has exactly Free free just before.
type PodNode struct {
	Claim, Free []int64
}

// podNodesOf are an engine's claiming pods as reserved on a pool's ledger,
// in the order reserveEngine laid them out (copies, then members, a gang's
// biggest claims first); nil unless the plan asks, and for a whole-node
// pool, whose ledger assumes no node's free devices.
func (s *pass) podNodesOf(l *poolLedger, moves []move) []PodNode {
	if !s.podNodes || l.whole {
		return nil
	}
	out := make([]PodNode, len(moves))
	for i, m := range moves {
		claim := make([]int64, len(m.from))
		for k := range claim {
			claim[k] = m.from[k] - m.to[k]
		}
		out[i] = PodNode{Claim: claim, Free: slices.Clone(m.from)}
	}
	return out
}
