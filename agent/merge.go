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
	m := newMerger(groups)
	for n := len(groups); n > limit; n-- {
		m.step()
	}
	out := make([]group, 0, limit)
	for i := range m.g {
		if m.alive[i] {
			out = append(out, m.g[i])
		}
	}
	// A merged group may have moved in the order. It never comes to the
	// free counts of another group c: c would have as few free as both of
	// the pair, so merging either into c would have lost less.
	slices.SortStableFunc(out, func(a, b group) int { return compareFree(a.free, b.free) })
	return out
}

// merger is merge's state: the groups, which are left, and each one's best
// partner and what merging with it loses.
type merger struct {
	g     []group
	alive []bool
	best  []int
	cost  []int64
}

func newMerger(groups []group) *merger {
	m := &merger{g: make([]group, len(groups)), alive: make([]bool, len(groups)), best: make([]int, len(groups)), cost: make([]int64, len(groups))}
	for i := range groups {
		m.g[i] = group{free: slices.Clone(groups[i].free), nodes: groups[i].nodes}
		m.alive[i] = true
	}
	for i := range m.g {
		m.partner(i)
	}
	return m
}

// partner finds group i's best partner: the one merging with loses least,
// the first on a tie.
func (m *merger) partner(i int) {
	m.best[i], m.cost[i] = -1, 0
	for j := range m.g {
		if j == i || !m.alive[j] {
			continue
		}
		if c := loss(m.g[i], m.g[j]); m.best[i] < 0 || c < m.cost[i] {
			m.best[i], m.cost[i] = j, c
		}
	}
}

// step merges the pair that loses least, into the earlier of the two.
func (m *merger) step() {
	i := -1
	for k := range m.g {
		if m.alive[k] && (i < 0 || m.cost[k] < m.cost[i]) {
			i = k
		}
	}
	j := m.best[i]
	if j < i {
		i, j = j, i
	}
	for d := range m.g[i].free {
		m.g[i].free[d] = min(m.g[i].free[d], m.g[j].free[d])
	}
	m.g[i].nodes += m.g[j].nodes
	m.alive[j] = false

	// Only pairs with i or j changed: those whose best partner was one of
	// them look again; the others compare theirs with the new i.
	m.partner(i)
	for k := range m.g {
		switch {
		case !m.alive[k] || k == i:
		case m.best[k] == i || m.best[k] == j:
			m.partner(k)
		default:
			if c := loss(m.g[k], m.g[i]); c < m.cost[k] || (c == m.cost[k] && i < m.best[k]) {
				m.best[k], m.cost[k] = i, c
			}
		}
	}
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
