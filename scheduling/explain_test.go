package scheduling

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestShortfallString(t *testing.T) {
	full := Reason{Kind: ReasonCapacity, Engine: "main", Pools: []PoolShortage{{Pool: "l4", WholeNode: true, Pods: 1}}}
	many := func(n int) *Shortfall {
		var v []ClusterVerdict
		for i := range n {
			v = append(v, ClusterVerdict{Cluster: fmt.Sprintf("c%03d", i), Reason: full})
		}
		return newShortfall(v)
	}
	cases := map[string]struct {
		reason string
		s      *Shortfall
		want   string
	}{
		"Nil": {reason: "No shortfall renders as nothing.", want: ""},
		"SharedReason": {
			reason: "Clusters with the same reason share it; others keep their own.",
			s:      newShortfall([]ClusterVerdict{{Cluster: "b", Reason: full}, {Cluster: "c", Reason: Reason{Kind: ReasonNotReady}}, {Cluster: "a", Reason: full}}),
			want:   "0/3 clusters can host another replica: a, b: engine main: pool l4 needs 1 free node, has 0; c: not Ready",
		},
		"ManyClusters": {
			reason: "Past eight clusters of one reason, the rest are counted.",
			s:      many(100),
			want:   "0/100 clusters can host another replica: c000, c001, c002, c003, c004, c005, c006, c007 and 92 more: engine main: pool l4 needs 1 free node, has 0",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.s.String()); diff != "" {
				t.Errorf("%s\nString(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
	var v []ClusterVerdict
	for i := range 1000 {
		v = append(v, ClusterVerdict{Cluster: fmt.Sprintf("c%03d", i), Reason: Reason{Kind: ReasonCapacity, Engine: "main", Pools: []PoolShortage{{Pool: "l4", WholeNode: true, Pods: 1, Have: int64(i)}}}})
	}
	if got := newShortfall(v).String(); len(got) > maxShortfallBytes+len(" …") {
		t.Errorf("a thousand distinct reasons render to %d bytes, want at most %d", len(got), maxShortfallBytes)
	}
}
