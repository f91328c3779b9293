package scheduling

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/modelplaneai/fleet-scheduler/agent"
)

// TestSteeringAgreesWithTheLedger is the promise steering rests on
// (docs/spec.md#steering): for any pool and any batch of held pods, the
// nodes the cluster agent steers the batch to (agent.Steer) leave the pool
// with exactly the free devices the ledger assumes once it has charged the
// same pods by best fit, in its charge order. Node names, the order the
// pods arrive in and how equal nodes are told apart do not matter to the
// ledger, which keeps groups; they must not matter to the histogram.
func TestSteeringAgreesWithTheLedger(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 43))
	for run := range 2000 {
		devices := 1 + rng.IntN(3)
		l := &poolLedger{}
		var nodes []agent.SteerNode
		for g := range rng.IntN(6) {
			free := make([]int64, devices)
			for k := range free {
				free[k] = int64(rng.IntN(9))
			}
			count := 1 + rng.IntN(4)
			l.add(int64(count), free)
			for i := range count {
				nodes = append(nodes, agent.SteerNode{Name: fmt.Sprintf("node-%d-%d", g, i), Free: slices.Clone(free)})
			}
		}
		var pods []agent.SteerPod
		for r := range rng.IntN(10) {
			charge := agent.ChargeOrder{Known: true, Namespace: fmt.Sprintf("ns-%d", rng.IntN(2)), Replica: fmt.Sprintf("r-%d", r), Engine: rng.IntN(2)}
			gang := ""
			if rng.IntN(3) == 0 {
				gang = "lws-0"
			}
			for i := range 1 + rng.IntN(3) {
				claim := make([]int64, devices)
				for k := range claim {
					claim[k] = int64(rng.IntN(4))
				}
				claim[rng.IntN(devices)]++
				pods = append(pods, agent.SteerPod{Name: fmt.Sprintf("pod-%d-%d", r, i), Claim: claim, Charge: charge, Gang: gang})
			}
		}

		// The ledger charges the pods in charge order, a gang at a time.
		ordered := slices.Clone(pods)
		agent.SortSteerPods(ordered)
		for i := 0; i < len(ordered); {
			n := 1
			for ordered[i].Gang != "" && i+n < len(ordered) && ordered[i+n].Gang == ordered[i].Gang && ordered[i+n].Charge == ordered[i].Charge {
				n++
			}
			claims := make([][]int64, 0, n)
			for _, p := range ordered[i : i+n] {
				claims = append(claims, p.Claim)
			}
			// The ledger lays a gang out by its own sort, whatever order
			// its members come in: the agent's order must be that one.
			ledgerOrder := slices.Clone(claims)
			rng.Shuffle(len(ledgerOrder), func(i, j int) { ledgerOrder[i], ledgerOrder[j] = ledgerOrder[j], ledgerOrder[i] })
			sortGang(ledgerOrder)
			if diff := cmp.Diff(ledgerOrder, claims); diff != "" {
				t.Fatalf("run %d: the agent orders a gang's claims otherwise than the ledger: -ledger, +agent:\n%s", run, diff)
			}
			l.reserveGang(claims, LeastFree)
			i += n
		}

		rng.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
		_, after := agent.Steer(devices, nodes, pods)
		got := &poolLedger{}
		for _, n := range after {
			got.add(1, n.Free)
		}
		if diff := cmp.Diff(histogram(l), histogram(got)); diff != "" {
			t.Fatalf("run %d: the steered pool's free devices differ from the ledger's: -ledger, +steered:\n%s", run, diff)
		}
	}
}

// histogram is a ledger's groups in a canonical order, as text.
func histogram(l *poolLedger) []string {
	out := make([]string, 0, len(l.groups))
	for _, g := range l.groups {
		out = append(out, fmt.Sprintf("%d x %v", g.count, g.free))
	}
	slices.SortFunc(out, strings.Compare)
	return out
}
