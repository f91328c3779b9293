package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/modelplaneai/fleet-scheduler/agent"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
	"github.com/modelplaneai/fleet-scheduler/sim/composereplica"
	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// arrival is a replica of one engine on pool "p" to bind: a Standalone
// pod of gpus, or a gang of a Leader and workers Workers of gpus each.
// Replicas are named in the ledger's charge order (d-c-1, d-c-2, ...);
// they arrive, and kube-scheduler queues them, in the order listed.
type arrival struct {
	name          int
	gpus, workers int64
}

// TestSteeredBinder binds replicas on one pool of 8-GPU nodes, some GPUs
// of which fillers hold, with a steering agent in front of kube-default,
// one window (a round) or two, and wants each pod's node.
func TestSteeredBinder(t *testing.T) {
	type args struct {
		binder Binder
		// taken is each node's GPUs that fillers hold, and cpu each
		// node's cores a filler requests (none by default).
		taken, cpu []int64
		replicas   []arrival
		windows    int
		// silent is an agent gone silent before the first window.
		silent bool
	}
	type want struct {
		// nodes are each replica's pods' nodes by index, -1 for Pending.
		nodes    [][]int
		steering Steering
		// unpinned counts the claiming pods bound after a release
		// unpinned.
		unpinned int
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"ChargeOrderNotArrivalOrder": {
			reason: "Free {2,3} and pods A=2, B=1, C=2 arriving B, A, C: decided together in the ledger's charge order A, B, C, all bind (A on the node with 2, B and C on the one with 3).",
			args:   args{binder: Steered, taken: []int64{6, 5}, replicas: []arrival{{name: 2, gpus: 1}, {name: 1, gpus: 2}, {name: 3, gpus: 2}}, windows: 1},
			want:   want{nodes: [][]int{{1}, {0}, {1}}, steering: Steering{Decided: 3, Pinned: 3, UnpinnedBy: map[string]int{}}},
		},
		"ArrivalOrderStrandsC": {
			reason: "Best fit in arrival order (gpu-least-free, as kube-scheduler's queue offers them) binds B on the node with 2, A on the one with 3, and strands C.",
			args:   args{binder: GPULeastFree, taken: []int64{6, 5}, replicas: []arrival{{name: 2, gpus: 1}, {name: 1, gpus: 2}, {name: 3, gpus: 2}}, windows: 1},
			want:   want{nodes: [][]int{{0}, {1}, {-1}}},
		},
		"GangOnDistinctNodes": {
			reason: "Two replicas of one 4-GPU pod share a node, best fit; a gang's two 4-GPU pods, decided after them, take two distinct nodes.",
			args:   args{binder: Steered, taken: []int64{0, 0, 0}, replicas: []arrival{{name: 3, gpus: 4, workers: 1}, {name: 1, gpus: 4}, {name: 2, gpus: 4}}, windows: 1},
			want:   want{nodes: [][]int{{1, 2}, {0}, {0}}, steering: Steering{Decided: 4, Pinned: 4, UnpinnedBy: map[string]int{}}},
		},
		"UnfitStaysPending": {
			reason: "A pod of 4 fits no node of {2,3} free: released unpinned, and kube-default finds no node either: it stays Pending, decided once.",
			args:   args{binder: Steered, taken: []int64{6, 5}, replicas: []arrival{{name: 1, gpus: 4}}, windows: 2},
			want:   want{nodes: [][]int{{-1}}, steering: Steering{Decided: 1, Unpinned: 1, UnpinnedBy: map[string]int{agent.UnpinnedNoNode: 1}}},
		},
		"UnfitGangBindsAsKubeDefault": {
			reason: "A gang of two 4-GPU pods does not fit distinct nodes of {8,2} free: released unpinned, kube-default binds both pods on the node with 8, as it binds v0.3's gangs.",
			args:   args{binder: Steered, taken: []int64{0, 6}, replicas: []arrival{{name: 1, gpus: 4, workers: 1}}, windows: 1},
			want:   want{nodes: [][]int{{0, 0}}, steering: Steering{Decided: 2, Unpinned: 2, UnpinnedBy: map[string]int{agent.UnpinnedGang: 2}}, unpinned: 2},
		},
		"NotAdmittedDecidedAgain": {
			reason: "The agent counts devices, not cpu: pinned to the node with 1 GPU free whose cores a filler holds, the pod is turned away there, made again and decided again the next window, the same way.",
			args:   args{binder: Steered, taken: []int64{7, 0}, cpu: []int64{190, 0}, replicas: []arrival{{name: 1, gpus: 1}}, windows: 2},
			want:   want{nodes: [][]int{{-1}}, steering: Steering{Decided: 2, Pinned: 2, NotAdmitted: 2, UnpinnedBy: map[string]int{}}},
		},
		"BestFit": {
			reason: "One pod of 1 GPU on free {2,3} is pinned to the node with 2, best fit, though kube-default's scores favour the other (SilentAgent).",
			args:   args{binder: Steered, taken: []int64{6, 5}, cpu: []int64{12, 0}, replicas: []arrival{{name: 1, gpus: 1}}, windows: 1},
			want:   want{nodes: [][]int{{0}}, steering: Steering{Decided: 1, Pinned: 1, UnpinnedBy: map[string]int{}}},
		},
		"SilentAgent": {
			reason: "A silent agent holds nothing: kube-default binds the pod where less cpu is requested, the node with 3 free, not best fit's (the filler of the node with 2 requests 12 cores).",
			args:   args{binder: Steered, taken: []int64{6, 5}, cpu: []int64{12, 0}, replicas: []arrival{{name: 1, gpus: 1}}, windows: 1, silent: true},
			want:   want{nodes: [][]int{{1}}},
		},
		"Preferred": {
			reason: "Preferring the node instead of pinning it: with nothing else to score, kube-default follows the preference.",
			args:   args{binder: SteeredPreferred, taken: []int64{6, 5}, replicas: []arrival{{name: 2, gpus: 1}, {name: 1, gpus: 2}, {name: 3, gpus: 2}}, windows: 1},
			want:   want{nodes: [][]int{{1}, {0}, {1}}, steering: Steering{Decided: 3, Pinned: 3, UnpinnedBy: map[string]int{}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := testCluster(t, len(tc.args.taken))
			fill(t, c, tc.args.taken, tc.args.cpu)
			s := &state{cfg: Config{Binder: tc.args.binder, Agent: Fresh().Agent}, clusters: []*simCluster{c}, rng: rand.New(rand.NewPCG(1, 2))}
			if tc.args.silent {
				s.cfg.Agent.StopAfter = time.Nanosecond
			}
			for i, a := range tc.args.replicas {
				r := testReplica(t, c, a.name, a.gpus, a.workers)
				r.seq = i
				s.replicas = append(s.replicas, r)
			}
			for w := range tc.args.windows {
				if _, err := s.bind(context.Background(), start().Add(time.Duration(w+1)*DefaultTick)); err != nil {
					t.Fatal(err)
				}
			}
			var got want
			for _, r := range s.replicas {
				var nodes []int
				for _, p := range r.pods {
					nodes = append(nodes, nodeIndex(c, p.kube.Node()))
				}
				got.nodes = append(got.nodes, nodes)
			}
			got.steering, got.unpinned = s.steering, s.binds.Unpinned.Pods
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nbinding: -want, +got:\n%s", tc.reason, diff)
			}
			if err := checkFleet(s); err != nil {
				t.Error(err)
			}
		})
	}
}

// fill binds to each node of the pool a filler holding taken[i] GPUs and,
// when cpu says, cpu[i] cores.
func fill(t *testing.T, c *simCluster, taken, cpu []int64) {
	t.Helper()
	for i, n := range taken {
		if n == 0 {
			continue
		}
		opts := composereplica.Options{}
		if i < len(cpu) && cpu[i] > 0 {
			opts.Sizing = fixed(fmt.Sprint(cpu[i]), "8Gi")
		}
		r := fillerReplica(t, c, 100+i, n, opts)
		r.pods[0].kube.Obj.Spec.NodeSelector[corev1.LabelHostname] = c.pools[0].nodes[i].Obj.Name
		if ok, err := KubeDefault.bind(context.Background(), r.pods[0], nil); err != nil || !ok {
			t.Fatalf("filler did not bind: %v", err)
		}
	}
}

// nodeIndex is the index of a node of the pool "p", -1 for none.
func nodeIndex(c *simCluster, name string) int {
	for i, n := range c.pools[0].nodes {
		if n.Obj.Name == name {
			return i
		}
	}
	return -1
}

// fillerReplica is a replica of one pod of gpus on pool "p", sized by
// opts.
func fillerReplica(t *testing.T, c *simCluster, seq int, gpus int64, opts composereplica.Options) *replica {
	t.Helper()
	e := fixture.PinnedStandalone("main", "p", fixture.Stamped(gpus))
	e.Members[0].Template = Template()
	r, err := newReplica(c, fixture.Replica("filler", "c", seq).Engines(e).Obj(), "filler", seq, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestBucketAgreement runs a scenario with the ledger assuming LeastFree:
// steered binds every pod the ledger assumed groups for on a node of one
// of them; gpu-most-free, binding elsewhere, does not. The second
// deployment's five 1-GPU pods find nodes with 3 free and nodes with 4.
func TestBucketAgreement(t *testing.T) {
	sc := tinyScenario(Shape{1, 1, 1, false}, 1, 5)
	m := Fresh().Assuming(scheduling.LeastFree)
	cases := map[string]struct {
		reason string
		binder Binder
		agrees bool
	}{
		"Steered":     {reason: "The agent decides as the ledger charges: every pod in a group it assumed.", binder: Steered, agrees: true},
		"GPUMostFree": {reason: "Binding to the most free node, some pods land on nodes the ledger did not assume.", binder: GPUMostFree},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res, err := Run(sc.Config(m, tc.binder, Direct{Input: Input(m.Binding)}))
			if err != nil {
				t.Fatal(err)
			}
			g := res.Binds.Groups
			if g.Grouped == 0 {
				t.Fatalf("%s\nno pod had groups assumed: %+v", tc.reason, g)
			}
			if got := g.InGroup == g.Grouped; got != tc.agrees {
				t.Errorf("%s\n%d of %d pods in a group the ledger assumed", tc.reason, g.InGroup, g.Grouped)
			}
		})
	}
}

func TestMargin(t *testing.T) {
	// Two nodes scored: n1 leads by every score but NodeAffinity's, which
	// scores n2 100 (its preferred node), weighted 2.
	e := &kube.Evaluation{Scored: []string{"n1", "n2"}, Scores: []int64{300, 350}, Plugins: []kube.PluginScores{{"ImageLocality": 100}, {"NodeAffinity": 100}}}
	cases := map[string]struct {
		reason string
		node   string
		want   int64
	}{
		"Preferred": {reason: "Without NodeAffinity's 200, n2 scores 150, 150 below n1.", node: "n2", want: 150},
		"Leading":   {reason: "Nothing ranks above n1 by the other scores.", node: "n1", want: 0},
		"NotScored": {reason: "A node that was not scored has no margin.", node: "n3", want: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := margin(e, tc.node); got != tc.want {
				t.Errorf("%s\nmargin(..., %s) = %d, want %d", tc.reason, tc.node, got, tc.want)
			}
		})
	}
}
