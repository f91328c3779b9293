package agent

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// steerPod is a held pod of replica ns/replica, engine 0, in no gang.
func steerPod(name, replica string, claim ...int64) SteerPod {
	return SteerPod{Name: name, Claim: claim, Charge: ChargeOrder{Known: true, Namespace: "ns", Replica: replica}}
}

func (p SteerPod) inGang(g string) SteerPod { p.Gang = g; return p }

func (p SteerPod) unknown() SteerPod { p.Charge = ChargeOrder{}; return p }

func steerNode(name string, free ...int64) SteerNode { return SteerNode{Name: name, Free: free} }

func pinned(pod, node string) Decision { return Decision{Pod: pod, Node: node} }

func unpinned(pod, reason string) Decision { return Decision{Pod: pod, Reason: reason} }

func TestSteer(t *testing.T) {
	type args struct {
		devices int
		nodes   []SteerNode
		pods    []SteerPod
	}
	type want struct {
		decisions []Decision
		after     []SteerNode
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"ChargeOrderNotArrivalOrder": {
			reason: "Free {2,3} and pods A=2, B=1, C=2 all fit in the ledger's order A, B, C (A on the node with 2, B and C on the one with 3), whatever order they arrive in; in arrival order B, A, C best fit would strand C.",
			args: args{devices: 1, nodes: []SteerNode{steerNode("n2", 2), steerNode("n3", 3)}, pods: []SteerPod{
				steerPod("b", "r-b", 1), steerPod("a", "r-a", 2), steerPod("c", "r-c", 2),
			}},
			want: want{
				decisions: []Decision{pinned("a", "n2"), pinned("b", "n3"), pinned("c", "n3")},
				after:     []SteerNode{steerNode("n2", 0), steerNode("n3", 0)},
			},
		},
		"TiesByNodeName": {
			reason: "Nodes with equal free vectors tie, and the tie goes to the name that sorts first, whatever order the nodes come in.",
			args:   args{devices: 1, nodes: []SteerNode{steerNode("z", 4), steerNode("a", 4)}, pods: []SteerPod{steerPod("p", "r", 1)}},
			want:   want{decisions: []Decision{pinned("p", "a")}, after: []SteerNode{steerNode("a", 3), steerNode("z", 4)}},
		},
		"BestFitByClaimedKindFirst": {
			reason: "The claimed kind decides first (nodeorder.Compare): the node with 1 gpu free wins over the one with 2, though it has more nics free.",
			args:   args{devices: 2, nodes: []SteerNode{steerNode("a", 2, 0), steerNode("b", 1, 8)}, pods: []SteerPod{steerPod("p", "r", 1, 0)}},
			want:   want{decisions: []Decision{pinned("p", "b")}, after: []SteerNode{steerNode("a", 2, 0), steerNode("b", 0, 8)}},
		},
		"GangOnDistinctNodes": {
			reason: "A gang's two pods take distinct nodes even where one node could hold both, the biggest claim first.",
			args: args{devices: 1, nodes: []SteerNode{steerNode("a", 8), steerNode("b", 2)}, pods: []SteerPod{
				steerPod("w", "r", 2).inGang("g"), steerPod("l", "r", 4).inGang("g"),
			}},
			want: want{
				decisions: []Decision{pinned("l", "a"), pinned("w", "b")},
				after:     []SteerNode{steerNode("a", 4), steerNode("b", 0)},
			},
		},
		"GangAllOrNone": {
			reason: "A gang whose pods do not fit on distinct nodes takes nothing, and a later pod still has the node.",
			args: args{devices: 1, nodes: []SteerNode{steerNode("a", 8)}, pods: []SteerPod{
				steerPod("l", "r-1", 1).inGang("g"), steerPod("w", "r-1", 1).inGang("g"), steerPod("s", "r-2", 8),
			}},
			want: want{
				decisions: []Decision{unpinned("l", UnpinnedGang), unpinned("w", UnpinnedGang), pinned("s", "a")},
				after:     []SteerNode{steerNode("a", 0)},
			},
		},
		"NoNode": {
			reason: "A pod no node has room for is released unpinned and takes nothing.",
			args:   args{devices: 1, nodes: []SteerNode{steerNode("a", 1)}, pods: []SteerPod{steerPod("p", "r", 2)}},
			want:   want{decisions: []Decision{unpinned("p", UnpinnedNoNode)}, after: []SteerNode{steerNode("a", 1)}},
		},
		"UnknownLast": {
			reason: "A pod whose replica the agent cannot name yet is decided after every known one, though its name sorts first.",
			args: args{devices: 1, nodes: []SteerNode{steerNode("a", 2), steerNode("b", 1)}, pods: []SteerPod{
				steerPod("a-stranger", "", 1).unknown(), steerPod("z-known", "r", 2),
			}},
			want: want{
				decisions: []Decision{pinned("z-known", "a"), pinned("a-stranger", "b")},
				after:     []SteerNode{steerNode("a", 0), steerNode("b", 0)},
			},
		},
		"BadClaims": {
			reason: "Claims of nothing, of a negative count or of another number of devices are released unpinned; a node of another number of devices is never chosen.",
			args: args{devices: 1, nodes: []SteerNode{steerNode("short"), steerNode("a", 4)}, pods: []SteerPod{
				steerPod("none", "r1", 0), steerPod("negative", "r2", -1), steerPod("long", "r3", 1, 1), steerPod("ok", "r4", 1),
			}},
			want: want{
				decisions: []Decision{unpinned("none", UnpinnedClaim), unpinned("negative", UnpinnedClaim), unpinned("long", UnpinnedClaim), pinned("ok", "a")},
				after:     []SteerNode{steerNode("a", 3)},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			nodes := slices.Clone(tc.args.nodes)
			got, after := Steer(tc.args.devices, tc.args.nodes, tc.args.pods)
			if diff := cmp.Diff(tc.want.decisions, got); diff != "" {
				t.Errorf("%s\nSteer(...): -want decisions, +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.after, after); diff != "" {
				t.Errorf("%s\nSteer(...): -want nodes after, +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(nodes, tc.args.nodes); diff != "" {
				t.Errorf("%s\nSteer(...) changed the nodes passed in: -before, +after:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestSteerPropertyOrderFree holds Steer to its promises for random pools
// and batches: the same decisions whatever order the pods and nodes come
// in, no node left with a negative count, a gang's pods on distinct nodes
// or all unpinned, and every pod decided once.
func TestSteerPropertyOrderFree(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 30))
	for run := range 500 {
		devices := 1 + rng.IntN(3)
		var nodes []SteerNode
		for i := range rng.IntN(12) {
			free := make([]int64, devices)
			for k := range free {
				free[k] = int64(rng.IntN(9))
			}
			nodes = append(nodes, SteerNode{Name: fmt.Sprintf("n%02d", i), Free: free})
		}
		var pods []SteerPod
		for r := range rng.IntN(8) {
			gang := ""
			if rng.IntN(3) == 0 {
				gang = fmt.Sprintf("g%d", r)
			}
			for i := range 1 + rng.IntN(3) {
				claim := make([]int64, devices)
				for k := range claim {
					claim[k] = int64(rng.IntN(5))
				}
				pods = append(pods, steerPod(fmt.Sprintf("p%d-%d", r, i), fmt.Sprintf("r%d", rng.IntN(4)), claim...).inGang(gang))
			}
		}
		want, wantAfter := Steer(devices, nodes, pods)

		shuffledPods, shuffledNodes := slices.Clone(pods), slices.Clone(nodes)
		rng.Shuffle(len(shuffledPods), func(i, j int) { shuffledPods[i], shuffledPods[j] = shuffledPods[j], shuffledPods[i] })
		rng.Shuffle(len(shuffledNodes), func(i, j int) { shuffledNodes[i], shuffledNodes[j] = shuffledNodes[j], shuffledNodes[i] })
		got, gotAfter := Steer(devices, shuffledNodes, shuffledPods)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("run %d: decisions depend on input order: -first, +shuffled:\n%s", run, diff)
		}
		if diff := cmp.Diff(wantAfter, gotAfter); diff != "" {
			t.Fatalf("run %d: nodes after depend on input order: -first, +shuffled:\n%s", run, diff)
		}
		if len(got) != len(pods) {
			t.Fatalf("run %d: %d decisions for %d pods", run, len(got), len(pods))
		}
		for _, n := range gotAfter {
			for _, c := range n.Free {
				if c < 0 {
					t.Fatalf("run %d: node %s overcommitted: %v", run, n.Name, n.Free)
				}
			}
		}
		byPod := map[string]Decision{}
		for _, d := range got {
			byPod[d.Pod] = d
		}
		gangNodes := map[string][]string{}
		for _, p := range pods {
			d := byPod[p.Name]
			if p.Gang == "" || d.Node == "" {
				continue
			}
			key := p.Charge.Replica + "/" + p.Gang
			if slices.Contains(gangNodes[key], d.Node) {
				t.Fatalf("run %d: gang %s has two pods on node %s", run, key, d.Node)
			}
			gangNodes[key] = append(gangNodes[key], d.Node)
		}
	}
}
