package sim

import (
	"fmt"
	"math/rand/v2"
)

// Binder is how the simulated kube-scheduler scores the nodes a pod fits.
type Binder string

// The binders. Each binds a pod to a node of its pinned pool with at least
// its claim free and no other claiming pod of its gang (engine copy), or
// leaves it Pending.
const (
	// LeastAllocated, kube-scheduler's default NodeResourcesFit scoring,
	// prefers the node with the most GPUs free. Ties go to a random one of
	// the best, as kube-scheduler's selectHost does.
	LeastAllocated Binder = "least-allocated"
	// MostAllocated (bin-packing) prefers the node with the fewest GPUs
	// free that still fits.
	MostAllocated Binder = "most-allocated"
	// Random binds to any node the pod fits, uniformly.
	Random Binder = "random"
)

// ParseBinder reads a binder name.
func ParseBinder(s string) (Binder, error) {
	switch b := Binder(s); b {
	case LeastAllocated, MostAllocated, Random:
		return b, nil
	}
	return "", fmt.Errorf("unknown binder %q: want %s, %s or %s", s, LeastAllocated, MostAllocated, Random)
}

// bind tries to bind one pod, and reports whether it did. A pod that claims
// nothing binds to any node of its pool without taking a device.
func (b Binder) bind(p *pod, rng *rand.Rand) bool {
	if p.pool == nil {
		return false
	}
	var best []*node
	var bestScore int64
	for _, n := range p.pool.nodes {
		if n.free < p.claim || (p.claim > 0 && n.hostsGang(p.gang)) {
			continue
		}
		var score int64
		switch b {
		case LeastAllocated:
			score = n.free
		case MostAllocated:
			score = -n.free
		case Random:
			score = 0
		}
		switch {
		case len(best) == 0 || score > bestScore:
			best, bestScore = append(best[:0], n), score
		case score == bestScore:
			best = append(best, n)
		}
	}
	if len(best) == 0 {
		return false
	}
	n := best[rng.IntN(len(best))]
	n.free -= p.claim
	n.pods = append(n.pods, p)
	p.node = n
	return true
}
