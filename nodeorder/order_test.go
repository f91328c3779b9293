package nodeorder

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCompare(t *testing.T) {
	type args struct{ a, b, claim []int64 }
	cases := map[string]struct {
		reason string
		args   args
		want   int
	}{
		"Equal":           {reason: "Equal vectors tie.", args: args{a: []int64{2, 1}, b: []int64{2, 1}, claim: []int64{1, 0}}, want: 0},
		"ClaimedFirst":    {reason: "The claimed device decides before the others, whatever they hold.", args: args{a: []int64{3, 0}, b: []int64{2, 8}, claim: []int64{1, 0}}, want: 1},
		"ClaimedInOrder":  {reason: "Claimed devices compare in the pool's device order.", args: args{a: []int64{1, 4}, b: []int64{2, 0}, claim: []int64{1, 1}}, want: -1},
		"UnclaimedBreaks": {reason: "Equal on the claimed device, all devices decide in order.", args: args{a: []int64{2, 0, 5}, b: []int64{2, 1, 0}, claim: []int64{0, 0, 1}}, want: 1},
		"NoClaim":         {reason: "A claim of nothing compares all devices in order.", args: args{a: []int64{1, 9}, b: []int64{2, 0}, claim: []int64{0, 0}}, want: -1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Compare(tc.args.a, tc.args.b, tc.args.claim)); diff != "" {
				t.Errorf("%s\nCompare(...): -want, +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(-tc.want, Compare(tc.args.b, tc.args.a, tc.args.claim)); diff != "" {
				t.Errorf("%s\nCompare(...) swapped: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestCovers(t *testing.T) {
	type args struct{ free, claim []int64 }
	cases := map[string]struct {
		reason string
		args   args
		want   bool
	}{
		"Exactly":    {reason: "A node with exactly the claim free covers it.", args: args{free: []int64{2, 1}, claim: []int64{2, 1}}, want: true},
		"OneShort":   {reason: "One device short of the claim does not.", args: args{free: []int64{2, 0}, claim: []int64{2, 1}}, want: false},
		"NoClaim":    {reason: "Every node covers a claim of nothing.", args: args{free: []int64{0, 0}, claim: []int64{0, 0}}, want: true},
		"MoreOfBoth": {reason: "More than the claim of every device covers it.", args: args{free: []int64{8, 3}, claim: []int64{4, 1}}, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Covers(tc.args.free, tc.args.claim)); diff != "" {
				t.Errorf("%s\nCovers(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
