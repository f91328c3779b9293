package agent

import "slices"

// group is the nodes that have the same free count of each pool device.
type group struct {
	free  []int64
	nodes int64
}

// compareFree orders free counts most first, device by device in pool
// order: the order buckets are published in.
func compareFree(a, b []int64) int {
	return -slices.Compare(a, b)
}

// merge returns the groups reduced to at most limit, never raising a free
// count: two groups become one whose free counts are the smaller of theirs,
// device by device (merging a group into one with as few free or fewer is
// the case where one side loses nothing). Each step merges the pair that
// loses the fewest devices over all their nodes, the earlier pair in
// compareFree order on a tie, so the result depends on the groups alone.
// The groups must be distinct and sorted by compareFree; so is the result.
//
// A group remembers its best partner, so a step costs a pass over the
// groups plus one for each group whose partner was merged: quadratic in
// the groups overall for the usual histograms, of a few hundred at most.
func merge(groups []group, limit int) []group {
	if len(groups) <= limit {
		return groups
	}
	g := make([]group, len(groups))
	for i := range groups {
		g[i] = group{free: slices.Clone(groups[i].free), nodes: groups[i].nodes}
	}
	alive := make([]bool, len(g))
	for i := range alive {
		alive[i] = true
	}
	best := make([]int, len(g))
	cost := make([]int64, len(g))
	partner := func(i int) {
		best[i], cost[i] = -1, 0
		for j := range g {
			if j == i || !alive[j] {
				continue
			}
			if c := loss(g[i], g[j]); best[i] < 0 || c < cost[i] {
				best[i], cost[i] = j, c
			}
		}
	}
	for i := range g {
		partner(i)
	}
	for n := len(g); n > limit; n-- {
		i := -1
		for k := range g {
			if alive[k] && (i < 0 || cost[k] < cost[i]) {
				i = k
			}
		}
		j := best[i]
		if j < i {
			i, j = j, i
		}
		for d := range g[i].free {
			g[i].free[d] = min(g[i].free[d], g[j].free[d])
		}
		g[i].nodes += g[j].nodes
		alive[j] = false
		partner(i)
		for k := range g {
			switch {
			case !alive[k] || k == i:
			case best[k] == i || best[k] == j:
				partner(k)
			default:
				if c := loss(g[k], g[i]); c < cost[k] || (c == cost[k] && i < best[k]) {
					best[k], cost[k] = i, c
				}
			}
		}
	}
	out := make([]group, 0, limit)
	for i := range g {
		if alive[i] {
			out = append(out, g[i])
		}
	}
	// A merged group may have moved in the order. It never comes to the
	// free counts of another group c: c would have as few free as both of
	// the pair, so merging either into c would have lost less.
	slices.SortStableFunc(out, func(a, b group) int { return compareFree(a.free, b.free) })
	return out
}

// loss is how many free devices merging the two groups hides, over all
// their nodes.
func loss(a, b group) int64 {
	var l int64
	for d := range a.free {
		m := min(a.free[d], b.free[d])
		l += a.nodes*(a.free[d]-m) + b.nodes*(b.free[d]-m)
	}
	return l
}
