package agent

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/modelplaneai/fleet-scheduler/poolreport"
)

func TestMerge(t *testing.T) {
	type args struct {
		groups []group
		limit  int
	}
	// oneD is n groups of one node each, with free n-1 down to 0.
	oneD := func(n int) []group {
		g := make([]group, 0, n)
		for v := n - 1; v >= 0; v-- {
			g = append(g, group{free: []int64{int64(v)}, nodes: 1})
		}
		return g
	}
	cases := map[string]struct {
		reason string
		args   args
		want   []group
	}{
		"UnderTheLimit": {
			reason: "Groups within the limit are left alone.",
			args:   args{groups: oneD(3), limit: 3},
			want:   oneD(3),
		},
		"TheCheapestPair": {
			reason: "65 one-node groups with 64 down to 0 free: every neighbouring pair loses one device; the first in order (64 and 63) becomes one of 63.",
			args:   args{groups: oneD(65), limit: 64},
			want:   append([]group{{free: []int64{63}, nodes: 2}}, oneD(63)...),
		},
		"IntoTheDominatedGroup": {
			reason: "Merging 10 nodes of {4,4} with one of {4,3} hides 10 devices; one {4,3} with one {0,8} hides 9, the least, so they become two nodes of {0,3}.",
			args: args{groups: []group{
				{free: []int64{4, 4}, nodes: 10},
				{free: []int64{4, 3}, nodes: 1},
				{free: []int64{0, 8}, nodes: 1},
			}, limit: 2},
			want: []group{{free: []int64{4, 4}, nodes: 10}, {free: []int64{0, 3}, nodes: 2}},
		},
		"IncomparableGroupsMeet": {
			reason: "Neither {3,0} nor {0,3} has as few free as the other: merged, they are two nodes of {0,0}, which hides 6 devices against 65 for merging either into the five {8,8}.",
			args: args{groups: []group{
				{free: []int64{8, 8}, nodes: 5},
				{free: []int64{3, 0}, nodes: 1},
				{free: []int64{0, 3}, nodes: 1},
			}, limit: 2},
			want: []group{{free: []int64{8, 8}, nodes: 5}, {free: []int64{0, 0}, nodes: 2}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := merge(tc.args.groups, tc.args.limit)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(group{})); diff != "" {
				t.Errorf("\n%s\nmerge(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestMergeNeverOverReports checks, over random histograms, that the merged
// one fits no pod shape on more nodes than the true one does, for every
// shape, and keeps every node within the limit.
func TestMergeNeverOverReports(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 17))
	runs := 300
	if testing.Short() {
		runs = 60
	}
	for run := range runs {
		kinds := 1 + rng.IntN(3)
		maxFree := 1 + rng.IntN(8)
		truth := randomGroups(rng, kinds, maxFree, 1+rng.IntN(250))
		limit := 1 + rng.IntN(poolreport.MaxBuckets)
		got := merge(truth, limit)

		where := fmt.Sprintf("run %d: %d groups of %d kinds, up to %d free, into %d", run, len(truth), kinds, maxFree, limit)
		if len(got) > limit {
			t.Fatalf("%s: %d groups", where, len(got))
		}
		if want, have := totalNodes(truth), totalNodes(got); have != want {
			t.Fatalf("%s: %d nodes, want %d", where, have, want)
		}
		if !slices.IsSortedFunc(got, func(a, b group) int { return compareFree(a.free, b.free) }) {
			t.Fatalf("%s: not sorted most free first", where)
		}
		for i := 1; i < len(got); i++ {
			if slices.Equal(got[i-1].free, got[i].free) {
				t.Fatalf("%s: two groups of %v", where, got[i].free)
			}
		}
		for shape := range shapes(kinds, maxFree) {
			if want, have := fitting(truth, shape), fitting(got, shape); have > want {
				t.Fatalf("%s: %d nodes fit a pod of %v, only %d do", where, have, shape, want)
			}
		}
	}
}

// randomGroups returns up to n distinct groups, sorted.
func randomGroups(rng *rand.Rand, kinds, maxFree, n int) []group {
	seen := map[string]bool{}
	var out []group
	for range n {
		free := make([]int64, kinds)
		for k := range free {
			free[k] = rng.Int64N(int64(maxFree) + 1)
		}
		if key := fmt.Sprint(free); !seen[key] {
			seen[key] = true
			out = append(out, group{free: free, nodes: 1 + rng.Int64N(20)})
		}
	}
	slices.SortFunc(out, func(a, b group) int { return compareFree(a.free, b.free) })
	return out
}

// shapes yields every claim of up to maxFree of each kind.
func shapes(kinds, maxFree int) func(func([]int64) bool) {
	return func(yield func([]int64) bool) {
		s := make([]int64, kinds)
		for {
			if !yield(slices.Clone(s)) {
				return
			}
			k := 0
			for k < kinds && s[k] == int64(maxFree) {
				s[k] = 0
				k++
			}
			if k == kinds {
				return
			}
			s[k]++
		}
	}
}

// fitting is how many nodes have at least the shape free.
func fitting(groups []group, shape []int64) int64 {
	var n int64
	for _, g := range groups {
		fits := true
		for k := range shape {
			fits = fits && g.free[k] >= shape[k]
		}
		if fits {
			n += g.nodes
		}
	}
	return n
}

func totalNodes(groups []group) int64 {
	var n int64
	for _, g := range groups {
		n += g.nodes
	}
	return n
}
