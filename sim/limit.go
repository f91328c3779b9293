package sim

import (
	"cmp"
	"slices"
)

// Limit is the most a fleet can hold of a demand, whatever the scheduler.
type Limit struct {
	// Replicas is the most replicas that fit (uniform shapes), or the
	// replicas of one packing that reaches GPUs (mixed shapes).
	Replicas int
	// GPUs is the most GPUs the demand can hold.
	GPUs int64
	// Exact is false when GPUs is only an upper bound.
	Exact bool
}

// PhysicalLimit computes the limit of a scenario's final demand.
//
// One shape: exact. An engine's pods go to one pool, and a replica's
// engines to one cluster; a node of g GPUs takes floor(g/c) pods of c GPUs.
// A pool of n such nodes holds n*floor(g/c) single-pod engines, or, for a
// gang engine of P pods on distinct nodes, floor(n*floor(g/c)/P) gangs when
// n >= P (and none otherwise). A cluster holds floor(engines/E) replicas of
// E identical engines; the fleet the sum, capped by the demand.
//
// Several shapes (single-pod replicas only): first-fit decreasing over every
// node of the fleet. Its GPUs are achievable, and the upper bound is the
// lesser of the demand's GPUs and the fleet's; when FFD reaches the bound it
// is exact.
func PhysicalLimit(sc Scenario) Limit {
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
		fit = min(fit, wanted)
		return Limit{Replicas: fit, GPUs: int64(fit) * s.PerReplica(), Exact: true}
	}
	var items []int64
	var demandGPUs int64
	for name, n := range demand {
		s := sc.Shapes[name]
		for range n {
			items = append(items, s.PerReplica())
		}
		demandGPUs += n * s.PerReplica()
	}
	slices.SortFunc(items, func(a, b int64) int { return cmp.Compare(b, a) })
	var bins []int64
	for _, c := range sc.Clusters {
		for _, p := range c.Pools {
			for range p.Nodes {
				bins = append(bins, p.GPUsPerNode)
			}
		}
	}
	l := Limit{}
	for _, it := range items {
		for i := range bins {
			if bins[i] >= it {
				bins[i] -= it
				l.Replicas++
				l.GPUs += it
				break
			}
		}
	}
	l.Exact = l.GPUs == min(demandGPUs, FleetGPUs(sc.Clusters))
	if !l.Exact {
		l.GPUs = min(demandGPUs, FleetGPUs(sc.Clusters))
	}
	return l
}
