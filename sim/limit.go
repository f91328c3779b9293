package sim

import (
	"cmp"
	"slices"
)

// Bounds are what no scheduler can beat on a scenario's final demand.
type Bounds struct {
	// Replicas is the most replicas of the demand the fleet can hold at
	// once; GPUs the most GPUs they can claim. Each bounds on its own:
	// the placement with the most replicas need not be the one with the
	// most GPUs.
	Replicas int
	GPUs     int64
	// Exact is true when some placement reaches each bound.
	Exact bool
	// Fit is, for a scenario of one shape, the most replicas of it the
	// fleet holds whatever the demand; 0 for several shapes.
	Fit int
	// PerReplica is that shape's GPUs per replica.
	PerReplica int64
}

// Instant is the bound on GPUs allocated at a moment when the demand wants
// wanted replicas claiming demandGPUs: the exact limit for one shape,
// min(demand, capacity) otherwise.
func (b Bounds) Instant(wanted int, demandGPUs, fleetGPUs int64) int64 {
	if b.Fit > 0 {
		return int64(min(wanted, b.Fit)) * b.PerReplica
	}
	return min(demandGPUs, fleetGPUs)
}

// Limit computes the bounds of a scenario's final demand.
//
// One shape: exact. An engine's pods go to one pool, and a replica's
// engines to one cluster; a node of g GPUs takes floor(g/c) pods of c GPUs.
// A pool of n such nodes holds n*floor(g/c) single-pod engines, or, for a
// gang engine of P pods on distinct nodes, floor(n*floor(g/c)/P) gangs when
// n >= P (and none otherwise). A cluster holds floor(engines/E) replicas of
// E identical engines; the fleet the sum, capped by the demand.
//
// Several shapes (single-pod replicas only). Replicas: if any k replicas
// fit, the k smallest do, and their GPUs are at most the fleet's; so the
// largest k whose smallest replicas' GPUs the fleet's GPUs cover bounds
// the count. GPUs: the lesser of the demand's and the fleet's. A replica no
// node can hold counts toward neither. Each is exact when first-fit
// decreasing packs that many onto the fleet's nodes.
func Limit(sc Scenario) Bounds {
	demand := sc.FinalDemand()
	shapes := map[Shape]bool{}
	var wanted int
	for name, n := range demand {
		shapes[sc.Shapes[name]] = true
		wanted += int(n)
	}
	if len(shapes) == 1 {
		var s Shape
		for name := range demand {
			s = sc.Shapes[name]
		}
		fit := 0
		for _, c := range sc.Clusters {
			engines := 0
			for _, p := range c.Pools {
				per := int(p.GPUsPerNode / s.GPUs)
				if !s.Gang || p.Nodes >= s.Pods {
					engines += p.Nodes * per / s.Pods
				}
			}
			fit += engines / s.Engines
		}
		n := min(fit, wanted)
		return Bounds{Replicas: n, GPUs: int64(n) * s.PerReplica(), Exact: true, Fit: fit, PerReplica: s.PerReplica()}
	}
	var bins []int64
	for _, c := range sc.Clusters {
		for _, p := range c.Pools {
			for range p.Nodes {
				bins = append(bins, p.GPUsPerNode)
			}
		}
	}
	largest := slices.Max(bins)
	var items []int64
	var demandGPUs int64
	for name, n := range demand {
		s := sc.Shapes[name]
		if s.PerReplica() > largest {
			continue
		}
		for range n {
			items = append(items, s.PerReplica())
		}
		demandGPUs += n * s.PerReplica()
	}
	slices.Sort(items)
	fleet := FleetGPUs(sc.Clusters)
	var b Bounds
	var sum int64
	for _, it := range items {
		if sum+it > fleet {
			break
		}
		sum += it
		b.Replicas++
	}
	b.GPUs = min(demandGPUs, fleet)
	packed, _ := firstFitDecreasing(items[:b.Replicas], bins)
	_, gpus := firstFitDecreasing(items, bins)
	b.Exact = packed == b.Replicas && gpus == b.GPUs
	return b
}

// firstFitDecreasing packs items, largest first, each onto the first bin
// with room, and says how many it packed and their total.
func firstFitDecreasing(items, bins []int64) (int, int64) {
	items = slices.SortedFunc(slices.Values(items), func(a, b int64) int { return cmp.Compare(b, a) })
	bins = slices.Clone(bins)
	n, total := 0, int64(0)
	for _, it := range items {
		for i := range bins {
			if bins[i] >= it {
				bins[i] -= it
				n++
				total += it
				break
			}
		}
	}
	return n, total
}
