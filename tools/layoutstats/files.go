package main

import (
	"fmt"
	"math/bits"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"

	"github.com/modelplaneai/fleet-scheduler/tools/internal/repotool"
)

// maxCycle is the most files of one cycle whose best order is searched
// for exhaustively (2^n orders' prefixes); no package comes near it.
const maxCycle = 22

// fileGraph is how a package's non-test files use each other.
type fileGraph struct {
	order  []string            // top to bottom
	uses   map[string][]string // file -> the files it uses, by name
	arrows int
	cyclic int
	up     []string       // the arrows that run back up, as "a.go -> b.go"
	index  map[string]int // a file's place in order
}

// filesOf measures a package's files, as the command's doc comment says.
func filesOf(p *packages.Package) (fileGraph, error) {
	g := fileGraph{uses: map[string][]string{}, index: map[string]int{}}
	names := make([]string, 0, len(p.Syntax))
	for _, f := range p.Syntax {
		name := filepath.Base(p.Fset.Position(f.Pos()).Filename)
		names = append(names, name)
		g.uses[name] = repotool.FileUses(p, f, name)
		g.arrows += len(g.uses[name])
	}
	slices.Sort(names)
	comps := components(names, g.uses)
	for _, c := range comps {
		if len(c) > 1 {
			for _, f := range c {
				for _, u := range g.uses[f] {
					if slices.Contains(c, u) {
						g.cyclic++
					}
				}
			}
		}
		if len(c) > maxCycle {
			return g, fmt.Errorf("package %s: a cycle of %d files, more than %d", p.PkgPath, len(c), maxCycle)
		}
	}
	for _, c := range topological(comps, g.uses) {
		g.order = append(g.order, bestOrder(c, g.uses)...)
	}
	for i, f := range g.order {
		g.index[f] = i
	}
	for _, f := range g.order {
		for _, u := range g.uses[f] {
			if g.index[u] < g.index[f] {
				g.up = append(g.up, f+" -> "+u)
			}
		}
	}
	return g, nil
}

// components are the strongly connected components of the files (Tarjan),
// each sorted by name.
func components(names []string, uses map[string][]string) [][]string {
	index, low := map[string]int{}, map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var comps [][]string
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = len(index), len(index)
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range uses[v] {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var c []string
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				c = append(c, w)
				if w == v {
					break
				}
			}
			slices.Sort(c)
			comps = append(comps, c)
		}
	}
	for _, v := range names {
		if _, seen := index[v]; !seen {
			visit(v)
		}
	}
	return comps
}

// topological orders the components top to bottom: each above every
// component it uses; of those ready, the one whose first file sorts first.
func topological(comps [][]string, uses map[string][]string) [][]string {
	compOf := map[string]int{}
	for i, c := range comps {
		for _, f := range c {
			compOf[f] = i
		}
	}
	users := make([]map[int]bool, len(comps)) // the components that use each
	for i := range users {
		users[i] = map[int]bool{}
	}
	for f, us := range uses {
		for _, u := range us {
			if compOf[f] != compOf[u] {
				users[compOf[u]][compOf[f]] = true
			}
		}
	}
	placed := make([]bool, len(comps))
	var out [][]string
	for len(out) < len(comps) {
		next := -1
		for i, c := range comps {
			if placed[i] || (next >= 0 && strings.Compare(c[0], comps[next][0]) >= 0) {
				continue
			}
			ready := true
			for u := range users[i] {
				ready = ready && placed[u]
			}
			if ready {
				next = i
			}
		}
		placed[next] = true
		out = append(out, comps[next])
	}
	return out
}

// bestOrder orders a component's files top to bottom with the fewest
// arrows pointing up, the first such order by file name. cost[s] is the
// fewest arrows pointing up among the files not in s once the files in s
// stand above them.
func bestOrder(c []string, uses map[string][]string) []string {
	n := len(c)
	out := make([]uint32, n) // the files of c that each uses, as bits
	for i, f := range c {
		for _, u := range uses[f] {
			if j := slices.Index(c, u); j >= 0 {
				out[i] |= 1 << j
			}
		}
	}
	full := uint32(1)<<n - 1
	cost := make([]int, full+1)
	// up is how many arrows of file v point up with the files of s above.
	up := func(v int, s uint32) int { return bits.OnesCount32(out[v] & s) }
	for s := full; s > 0; {
		s--
		best := -1
		for v := range n {
			if s&(1<<v) == 0 {
				if k := up(v, s) + cost[s|1<<v]; best < 0 || k < best {
					best = k
				}
			}
		}
		cost[s] = best
	}
	order := make([]string, 0, n)
	for s := uint32(0); s != full; {
		for v := range n {
			if s&(1<<v) == 0 && up(v, s)+cost[s|1<<v] == cost[s] {
				order = append(order, c[v])
				s |= 1 << v
				break
			}
		}
	}
	return order
}
