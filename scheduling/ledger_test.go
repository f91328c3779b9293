package scheduling

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

// The ledger's rules (docs/spec.md#free-device-accounting) at the unit level: what nodes a pool
// starts with, which node a pod is assumed to take, and what undo restores.
// Ledgers are compared as node multisets, "[free...]" -> count, since group
// order carries no meaning.

var ledgerAt = time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)

// ledgerNodes is a ledger's nodes by free devices, empty groups left out.
func ledgerNodes(l *poolLedger) map[string]int64 {
	out := map[string]int64{}
	for _, g := range l.groups {
		if g.count > 0 {
			out[fmt.Sprint(g.free)] += g.count
		}
	}
	return out
}

// testPool is pool i of a fixture cluster, prepared as a pass prepares it.
func testPool(p v1alpha1.GPUPool) *pool {
	return newCluster(Cluster{Object: fx.Cluster("a").Pools(p).Obj()}, newDeviceKinds()).pools[0]
}

// ledgerOf builds the ledger a pass starts a pool with: free-device when the
// pool carries an agent report, whole-node otherwise.
func ledgerOf(p v1alpha1.GPUPool) *poolLedger {
	c := fx.Cluster("a").Pools(p).Obj()
	pl := newCluster(Cluster{Object: c}, newDeviceKinds()).pools[0]
	if obs := observedPools(c)[p.Name]; obs != nil {
		return newFreeDeviceLedger(pl, obs)
	}
	return newWholeNodeLedger(pl.nodes)
}

func gpus(nodes int64, perNode int64) *fx.PoolWrapper {
	return fx.Pool("p", nodes).Devices(fx.GPU("gpu", perNode, "80Gi"))
}

func TestNewLedger(t *testing.T) {
	cases := map[string]struct {
		reason string
		pool   v1alpha1.GPUPool
		want   map[string]int64
	}{
		"WholeNode": {
			reason: "Without a report a pool is nodes empty nodes of one dimension.",
			pool:   gpus(5, 4).Obj(),
			want:   map[string]int64{"[1]": 5},
		},
		"HistogramOnly": {
			reason: "A pool at its maximum size is exactly its histogram.",
			pool:   gpus(3, 4).Observed(ledgerAt, 3, fx.NodesFree(2, "gpu", 4), fx.NodesFree(1, "gpu", 1)).Obj(),
			want:   map[string]int64{"[4]": 2, "[1]": 1},
		},
		"GrowsByNodesMinusObserved": {
			reason: "A pool that can still grow has nodes - observedNodes empty nodes beyond its histogram.",
			pool:   gpus(5, 4).Observed(ledgerAt, 2, fx.NodesFree(2, "gpu", 1)).Obj(),
			want:   map[string]int64{"[1]": 2, "[4]": 3},
		},
		"GrowthMergesWithIdleNodes": {
			reason: "Growable nodes are empty, the same as idle observed nodes.",
			pool:   gpus(5, 4).Observed(ledgerAt, 2, fx.NodesFree(2, "gpu", 4)).Obj(),
			want:   map[string]int64{"[4]": 5},
		},
		"SurgeClampsGrowthAtZero": {
			reason: "During a surge upgrade observedNodes > nodes; the pool grows by nothing, and loses nothing it observed.",
			pool:   gpus(3, 4).Observed(ledgerAt, 5, fx.NodesFree(5, "gpu", 0)).Obj(),
			want:   map[string]int64{"[0]": 5},
		},
		"BootingNodesAreNeither": {
			reason: "Nodes in observedNodes but not in the histogram (booting, unready, cordoned) are neither free nor growable.",
			pool:   gpus(3, 4).Observed(ledgerAt, 3, fx.NodesFree(1, "gpu", 4)).Obj(),
			want:   map[string]int64{"[4]": 1},
		},
		"UnlistedDeviceIsZero": {
			reason: "A device kind a bucket does not list has none free; a growable node has every DRA device free and no Synthetic one.",
			pool: fx.Pool("p", 2).Devices(fx.GPU("gpu", 8, "80Gi"), fx.NIC(4), fx.GPU("mig", 2, "10Gi")).
				Observed(ledgerAt, 1, fx.NodesFree(1, "mig", 1)).Obj(),
			want: map[string]int64{"[0 0 1]": 1, "[8 0 2]": 1},
		},
		"EqualBucketsMerge": {
			reason: "Two buckets with the same free devices are one group of nodes.",
			pool:   gpus(4, 4).Observed(ledgerAt, 4, fx.NodesFree(1, "gpu", 2), fx.NodesFree(3, "gpu", 2)).Obj(),
			want:   map[string]int64{"[2]": 4},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ledgerNodes(ledgerOf(tc.pool))); diff != "" {
				t.Errorf("\n%s\nledger: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestPick(t *testing.T) {
	twoKinds := func() *poolLedger {
		l := &poolLedger{}
		l.add(1, []int64{4, 0})
		l.add(1, []int64{2, 8})
		l.add(1, []int64{1, 8})
		return l
	}
	cases := map[string]struct {
		reason  string
		ledger  *poolLedger
		claim   []int64
		binding Binding
		want    string // the free devices of the picked node, or "none"
	}{
		"MostFree": {
			reason: "MostFree assumes the node with the most of the claimed device free.",
			ledger: twoKinds(), claim: []int64{1, 0}, binding: MostFree, want: "[4 0]",
		},
		"DefaultIsMostFree": {
			reason: "An empty binding is MostFree.",
			ledger: twoKinds(), claim: []int64{1, 0}, binding: "", want: "[4 0]",
		},
		"LeastFree": {
			reason: "LeastFree assumes the fitting node with the fewest of the claimed device free.",
			ledger: twoKinds(), claim: []int64{1, 0}, binding: LeastFree, want: "[1 8]",
		},
		"ClaimedKindsFirst": {
			reason: "Nodes compare by the claimed kinds first: claiming the second kind, the first kind only breaks the tie.",
			ledger: twoKinds(), claim: []int64{0, 1}, binding: MostFree, want: "[2 8]",
		},
		"ClaimedKindsFirstLeastFree": {
			reason: "LeastFree over the second kind ties at 8, broken by the fewest of all kinds.",
			ledger: twoKinds(), claim: []int64{0, 1}, binding: LeastFree, want: "[1 8]",
		},
		"OnlyFittingNodes": {
			reason: "LeastFree never picks a node the claim does not fit.",
			ledger: twoKinds(), claim: []int64{3, 0}, binding: LeastFree, want: "[4 0]",
		},
		"EveryKindMustFit": {
			reason: "A claim of two kinds needs both on one node.",
			ledger: twoKinds(), claim: []int64{2, 8}, binding: MostFree, want: "[2 8]",
		},
		"NoFit": {
			reason: "No node has the claim free.",
			ledger: twoKinds(), claim: []int64{5, 0}, binding: MostFree, want: "none",
		},
		"EmptyWholeNodePool": {
			reason: "A whole-node pool of zero nodes has nothing to pick.",
			ledger: newWholeNodeLedger(0), claim: []int64{1}, binding: MostFree, want: "none",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := "none"
			if i := tc.ledger.pick(tc.claim, tc.binding); i >= 0 {
				got = fmt.Sprint(tc.ledger.groups[i].free)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("\n%s\npick(%v, %s): -want, +got:\n%s", tc.reason, tc.claim, tc.binding, diff)
			}
		})
	}
}

func TestPickIgnoresGroupOrder(t *testing.T) {
	// Distinct groups never have the same free devices, so whichever order
	// the groups are in, the same node is picked.
	frees := [][]int64{{4, 0}, {2, 8}, {1, 8}, {3, 3}, {0, 8}, {4, 8}}
	claims := [][]int64{{1, 0}, {0, 1}, {1, 1}, {2, 2}, {0, 8}}
	for _, b := range []Binding{MostFree, LeastFree} {
		for _, c := range claims {
			var want string
			for perm := range 20 {
				l := &poolLedger{}
				order := slices.Clone(frees)
				for i := range order {
					j := (i*7 + perm*3) % len(order)
					order[i], order[j] = order[j], order[i]
				}
				for _, f := range order {
					l.add(1, f)
				}
				got := "none"
				if i := l.pick(c, b); i >= 0 {
					got = fmt.Sprint(l.groups[i].free)
				}
				if perm == 0 {
					want = got
				} else if got != want {
					t.Errorf("pick(%v, %s) over groups %v: %s, over another order %s", c, b, order, got, want)
				}
			}
		}
	}
}

func TestReserveGang(t *testing.T) {
	four := []int64{4}
	cases := map[string]struct {
		reason string
		ledger *poolLedger
		claims [][]int64
		ok     bool
		want   map[string]int64
	}{
		"GangDoesNotShareANode": {
			reason: "A gang of two 4-GPU pods does not fit one node with 8 free, and leaves it untouched.",
			ledger: ledgerOf(gpus(1, 8).Observed(ledgerAt, 1, fx.NodesFree(1, "gpu", 8)).Obj()),
			claims: [][]int64{four, four},
			ok:     false,
			want:   map[string]int64{"[8]": 1},
		},
		"GangFitsTwoNodes": {
			reason: "The same gang fits two nodes with 4 free, one pod on each.",
			ledger: ledgerOf(gpus(2, 8).Observed(ledgerAt, 2, fx.NodesFree(2, "gpu", 4)).Obj()),
			claims: [][]int64{four, four},
			ok:     true,
			want:   map[string]int64{"[0]": 2},
		},
		"GangOfThreeOnTwoNodes": {
			reason: "Three pods of one GPU do not fit two nodes of 8, however much is free.",
			ledger: ledgerOf(gpus(2, 8).Observed(ledgerAt, 2, fx.NodesFree(2, "gpu", 8)).Obj()),
			claims: [][]int64{{1}, {1}, {1}},
			ok:     false,
			want:   map[string]int64{"[8]": 2},
		},
		"GangTakesDistinctNodesOfOneGroup": {
			reason: "A gang of k pods on a group of n identical nodes moves exactly k of them.",
			ledger: ledgerOf(gpus(5, 8).Observed(ledgerAt, 5, fx.NodesFree(5, "gpu", 8)).Obj()),
			claims: [][]int64{{2}, {2}, {2}},
			ok:     true,
			want:   map[string]int64{"[8]": 2, "[6]": 3},
		},
		"WholeNodeGang": {
			reason: "Under whole-node accounting a gang takes one node per claiming pod.",
			ledger: newWholeNodeLedger(3),
			claims: [][]int64{{1}, {1}},
			ok:     true,
			want:   map[string]int64{"[1]": 1, "[0]": 2},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			moves, ok := tc.ledger.reserveGang(tc.claims, MostFree)
			if ok != tc.ok {
				t.Errorf("\n%s\nreserveGang(...): ok %t, want %t", tc.reason, ok, tc.ok)
			}
			if ok && len(moves) != len(tc.claims) {
				t.Errorf("\n%s\nreserveGang(...): %d moves, want one per pod (%d)", tc.reason, len(moves), len(tc.claims))
			}
			if !ok && moves != nil {
				t.Errorf("\n%s\nreserveGang(...): moves %v on failure, want none", tc.reason, moves)
			}
			if diff := cmp.Diff(tc.want, ledgerNodes(tc.ledger)); diff != "" {
				t.Errorf("\n%s\nreserveGang(...): -want ledger, +got ledger:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestReserveEngineThenUndo(t *testing.T) {
	// Reserving and undoing, in any mix, leaves the ledger exactly as it was.
	pools := map[string]v1alpha1.GPUPool{
		"FreeDevice": fx.Pool("p", 6).Devices(fx.GPU("gpu", 8, "80Gi"), fx.GPU("mig", 2, "10Gi")).
			Observed(ledgerAt, 5, fx.NodesFree(2, "gpu", 8), fx.NodesFree(1, "gpu", 3),
				agentv1alpha1.Bucket{Nodes: 1, Free: []agentv1alpha1.Free{{Name: "gpu", Count: 4}, {Name: "mig", Count: 1}}}).Obj(),
		"WholeNode": fx.Pool("p", 6).Devices(fx.GPU("gpu", 8, "80Gi")).Obj(),
	}
	engines := [][][][]int64{
		{{{1, 0}}, {{1, 0}}, {{1, 0}}},           // three independent one-GPU pods
		{{{4, 0}, {4, 0}, {2, 1}}},               // a gang of three
		{{{8, 0}}, {{3, 0}}, {{1, 1}}, {{0, 2}}}, // pods of every shape
		{{{8, 0}, {8, 0}}, {{8, 0}, {8, 0}}},     // two gangs of two full nodes
		{{{4, 0}}, {{4, 0}, {4, 0}}, {{5, 0}}},   // independent pods and a gang
		{{{9, 0}}},                               // never fits
		{{{2, 2}}, {{2, 2}}, {{2, 2}}, {{2, 2}}}, // runs out of mig
	}
	for name, p := range pools {
		for _, b := range []Binding{MostFree, LeastFree} {
			t.Run(fmt.Sprintf("%s/%s", name, b), func(t *testing.T) {
				l := ledgerOf(p)
				pl := testPool(p)
				before := ledgerNodes(l)
				var logs [][]move
				for _, e := range engines {
					gangs := e
					if l.whole {
						gangs = wholeNodeClaims(e)
					}
					moves, short := reserveGangs(l, pl, gangs, b)
					if short != nil {
						if moves != nil {
							t.Fatalf("reserveEngine(%v): moves %v with a shortage", e, moves)
						}
						continue
					}
					logs = append(logs, moves)
				}
				if len(logs) == 0 {
					t.Fatalf("no engine fit; the test reserves nothing")
				}
				if diff := cmp.Diff(before, ledgerNodes(l)); diff == "" {
					t.Fatalf("reserving changed nothing; the test undoes nothing")
				}
				for _, log := range slices.Backward(logs) {
					l.undo(log)
				}
				if diff := cmp.Diff(before, ledgerNodes(l)); diff != "" {
					t.Errorf("reserve then undo: -before, +after:\n%s", diff)
				}
				for _, g := range l.groups {
					if g.count <= 0 && !l.whole {
						t.Errorf("undo left an empty group %+v", g)
					}
				}
			})
		}
	}
}

// wholeNodeClaims is what engines' pods claim on a whole-node pool.
func wholeNodeClaims(gangs [][][]int64) [][][]int64 {
	out := make([][][]int64, len(gangs))
	for i, g := range gangs {
		for range g {
			out[i] = append(out[i], []int64{1})
		}
	}
	return out
}

func TestReservationUndo(t *testing.T) {
	// A replica tried on a cluster and backed out, as fill does for every
	// cluster before it picks one, leaves every pool as it was.
	c := fx.Cluster("a").Pools(
		fx.Pool("small", 1).Devices(fx.GPU("gpu", 1, "80Gi")).Obj(),
		fx.Pool("h100", 8).Devices(fx.GPU("gpu", 8, "80Gi")).Observed(ledgerAt, 6, fx.NodesFree(3, "gpu", 8), fx.NodesFree(3, "gpu", 2)).Obj(),
		fx.Pool("a100", 4).Devices(fx.GPU("gpu", 8, "80Gi")).Obj(),
	).Obj()
	dep := fx.Deployment("m").Engines(
		fx.Standalone("prefill", fx.GPURequest(4)),
		fx.Copies(fx.Gang("decode", 2, fx.GPURequest(2)), 2),
	).Replicas(0).Obj()
	_, p, err := schedule(snapshot(dep, []*v1alpha1.InferenceCluster{c}))
	if err != nil {
		t.Fatal(err)
	}
	// Replicas(0) places nothing and builds no ledger; build it as fill would.
	p.buildLedger(map[identity]bool{})
	before := map[int]map[string]int64{}
	for i, l := range p.ledger["a"] {
		before[i] = ledgerNodes(l)
	}
	for range 3 {
		res, why := p.reserveReplica(p.clusters["a"])
		if why != nil {
			t.Fatalf("reserveReplica: %s", why)
		}
		changed := false
		for i, l := range p.ledger["a"] {
			changed = changed || cmp.Diff(before[i], ledgerNodes(l)) != ""
		}
		if !changed {
			t.Fatalf("reserveReplica changed no pool; the test undoes nothing")
		}
		res.undo()
		for i, l := range p.ledger["a"] {
			if diff := cmp.Diff(before[i], ledgerNodes(l)); diff != "" {
				t.Errorf("pool %d after reserve and undo: -before, +after:\n%s", i, diff)
			}
		}
	}
}

// TestLedgerAfterPass checks the ledger a whole pass ends with, for the
// shapes docs/spec.md#free-device-accounting names.
func TestLedgerAfterPass(t *testing.T) {
	anyGPU := func(n int64) v1alpha1.DeviceSelector {
		return fx.Request("gpu", n, `device.driver == "gpu.nvidia.com"`)
	}
	cases := map[string]struct {
		reason  string
		d       *v1alpha1.ModelDeployment
		pools   []v1alpha1.GPUPool
		binding Binding
		placed  int
		want    map[string]map[string]int64 // pool -> ledger nodes
	}{
		"OneGPUReplicasFourToANode": {
			reason: "Eight one-GPU replicas fill two four-GPU nodes, four to a node; a ninth finds no room.",
			d:      fx.Deployment("m").Engines(fx.Standalone("main", anyGPU(1))).Replicas(9).Obj(),
			pools:  []v1alpha1.GPUPool{gpus(2, 4).Observed(ledgerAt, 2, fx.NodesFree(2, "gpu", 4)).Obj()},
			placed: 8,
			want:   map[string]map[string]int64{"p": {"[0]": 2}},
		},
		"OneGPUReplicasWholeNode": {
			reason: "Without a report the same pool takes one replica per node.",
			d:      fx.Deployment("m").Engines(fx.Standalone("main", anyGPU(1))).Replicas(9).Obj(),
			pools:  []v1alpha1.GPUPool{gpus(2, 4).Obj()},
			placed: 2,
			want:   map[string]map[string]int64{"p": {"[0]": 2}},
		},
		"PrefillAndDecodeShareANode": {
			reason: "Two Standalone engines of 4 GPUs share one 8-GPU node.",
			d: fx.Deployment("m").Engines(fx.Phase(fx.Standalone("prefill", anyGPU(4)), "Prefill"),
				fx.Phase(fx.Standalone("decode", anyGPU(4)), "Decode")).Obj(),
			pools:  []v1alpha1.GPUPool{gpus(1, 8).Observed(ledgerAt, 1, fx.NodesFree(1, "gpu", 8)).Obj()},
			placed: 1,
			want:   map[string]map[string]int64{"p": {"[0]": 1}},
		},
		"GangOnTwoHalfFreeNodes": {
			reason: "A gang of two 4-GPU pods takes one pod on each of two nodes with 4 free.",
			d:      fx.Deployment("m").Engines(fx.Gang("main", 1, anyGPU(4))).Obj(),
			pools:  []v1alpha1.GPUPool{gpus(3, 8).Observed(ledgerAt, 3, fx.NodesFree(2, "gpu", 4), fx.NodesFree(1, "gpu", 0)).Obj()},
			placed: 1,
			want:   map[string]map[string]int64{"p": {"[0]": 3}},
		},
		"GangNotOnOneNode": {
			reason: "The same gang does not fit one node with 8 free, and the pool is left as it was.",
			d:      fx.Deployment("m").Engines(fx.Gang("main", 1, anyGPU(4))).Obj(),
			pools:  []v1alpha1.GPUPool{gpus(1, 8).Observed(ledgerAt, 1, fx.NodesFree(1, "gpu", 8)).Obj()},
			placed: 0,
			want:   map[string]map[string]int64{"p": {"[8]": 1}},
		},
		"MostFreeAndLeastFreeDifferMostFree": {
			reason: "MostFree puts a 1-GPU engine on the emptiest node, so the 4-GPU engine no longer fits the first pool and goes to the second.",
			d:      fx.Deployment("m").Engines(fx.Standalone("small", anyGPU(1)), fx.Standalone("big", anyGPU(4))).Obj(),
			pools: []v1alpha1.GPUPool{
				fx.Pool("first", 2).Devices(fx.GPU("gpu", 4, "80Gi")).Observed(ledgerAt, 2, fx.NodesFree(1, "gpu", 4), fx.NodesFree(1, "gpu", 1)).Obj(),
				fx.Pool("second", 1).Devices(fx.GPU("gpu", 4, "80Gi")).Observed(ledgerAt, 1, fx.NodesFree(1, "gpu", 4)).Obj(),
			},
			binding: MostFree,
			placed:  1,
			want: map[string]map[string]int64{
				"first":  {"[3]": 1, "[1]": 1},
				"second": {"[0]": 1},
			},
		},
		"MostFreeAndLeastFreeDifferLeastFree": {
			reason: "LeastFree puts the 1-GPU engine on the fullest node that fits, so both engines fit the first pool.",
			d:      fx.Deployment("m").Engines(fx.Standalone("small", anyGPU(1)), fx.Standalone("big", anyGPU(4))).Obj(),
			pools: []v1alpha1.GPUPool{
				fx.Pool("first", 2).Devices(fx.GPU("gpu", 4, "80Gi")).Observed(ledgerAt, 2, fx.NodesFree(1, "gpu", 4), fx.NodesFree(1, "gpu", 1)).Obj(),
				fx.Pool("second", 1).Devices(fx.GPU("gpu", 4, "80Gi")).Observed(ledgerAt, 1, fx.NodesFree(1, "gpu", 4)).Obj(),
			},
			binding: LeastFree,
			placed:  1,
			want: map[string]map[string]int64{
				"first":  {"[0]": 2},
				"second": {"[4]": 1},
			},
		},
		"MembersClaimingDifferentKindsShareANode": {
			reason: "Two Standalone members of one engine, one claiming a GPU and one an NVMe drive, are independent pods that share the one node with both free.",
			d: fx.Deployment("m").Engines(v1alpha1.Engine{Name: "main", Copies: new(int64(2)), Members: []v1alpha1.Member{
				fx.Member(v1alpha1.RoleStandalone, 0, anyGPU(1)),
				fx.Member(v1alpha1.RoleStandalone, 0, fx.Request("nvme", 1, `device.driver == "nvme.example.com"`)),
			}}).Obj(),
			pools: []v1alpha1.GPUPool{fx.Pool("p", 1).Devices(fx.GPU("gpu", 8, "80Gi"), nvme(4)).
				Observed(ledgerAt, 1, agentv1alpha1.Bucket{Nodes: 1, Free: []agentv1alpha1.Free{{Name: "gpu", Count: 8}, {Name: "nvme", Count: 4}}}).Obj()},
			placed: 1,
			want:   map[string]map[string]int64{"p": {"[6 2]": 1}},
		},
		"SurgeAddsNoEmptyNodes": {
			reason: "A pool of 2 observed at 3 during a surge, all full, offers no room and no growth.",
			d:      fx.Deployment("m").Engines(fx.Standalone("main", anyGPU(1))).Obj(),
			pools:  []v1alpha1.GPUPool{gpus(2, 4).Observed(ledgerAt, 3, fx.NodesFree(3, "gpu", 0)).Obj()},
			placed: 0,
			want:   map[string]map[string]int64{"p": {"[0]": 3}},
		},
		"GrowthIsEmptyNodes": {
			reason: "A full pool of 1 observed node that can grow to 3 takes two 4-GPU replicas on its growable nodes.",
			d:      fx.Deployment("m").Engines(fx.Standalone("main", anyGPU(4))).Replicas(3).Obj(),
			pools:  []v1alpha1.GPUPool{gpus(3, 4).Observed(ledgerAt, 1, fx.NodesFree(1, "gpu", 0)).Obj()},
			placed: 2,
			want:   map[string]map[string]int64{"p": {"[0]": 3}},
		},
		"BootingNodesOfferNothing": {
			reason: "Two of three nodes are booting: the pool takes one 4-GPU replica, on the one ready node.",
			d:      fx.Deployment("m").Engines(fx.Standalone("main", anyGPU(4))).Replicas(3).Obj(),
			pools:  []v1alpha1.GPUPool{gpus(3, 4).Observed(ledgerAt, 3, fx.NodesFree(1, "gpu", 4)).Obj()},
			placed: 1,
			want:   map[string]map[string]int64{"p": {"[0]": 1}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := snapshot(tc.d, []*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(tc.pools...).Obj()})
			s.Options.Binding = tc.binding
			plan, p, err := schedule(s)
			if err != nil {
				t.Fatal(err)
			}
			if len(plan.Replicas) != tc.placed {
				t.Errorf("\n%s\nplaced %d replicas %v, want %d", tc.reason, len(plan.Replicas), summary(plan), tc.placed)
			}
			got := map[string]map[string]int64{}
			for i, l := range p.ledger["a"] {
				got[tc.pools[i].Name] = ledgerNodes(l)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("\n%s\nledger after the pass: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestChargeAgainstObservation checks which observed replicas a free-device
// pool is charged for: only those its histogram cannot count yet.
func TestChargeAgainstObservation(t *testing.T) {
	pool := gpus(1, 8).Observed(ledgerAt, 1, fx.NodesFree(1, "gpu", 8)).Obj()
	other := func() *fx.ReplicaWrapper {
		return fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "p", fx.Stamped(3)))
	}
	cases := map[string]struct {
		reason  string
		replica *v1alpha1.ModelReplica
		want    map[string]int64
	}{
		"ScheduledBefore": {
			reason:  "Scheduled strictly before observedAt: already in the histogram, not charged.",
			replica: other().PodsScheduled("True", ledgerAt.Add(-time.Second)).Obj(),
			want:    map[string]int64{"[8]": 1},
		},
		"ScheduledAt": {
			reason:  "Scheduled at observedAt itself: not strictly older, charged.",
			replica: other().PodsScheduled("True", ledgerAt).Obj(),
			want:    map[string]int64{"[5]": 1},
		},
		"ScheduledAfter": {
			reason:  "Scheduled after observedAt: charged.",
			replica: other().PodsScheduled("True", ledgerAt.Add(time.Second)).Obj(),
			want:    map[string]int64{"[5]": 1},
		},
		"NotScheduled": {
			reason:  "PodsScheduled False: charged.",
			replica: other().PodsScheduled("False", ledgerAt.Add(-time.Hour)).Obj(),
			want:    map[string]int64{"[5]": 1},
		},
		"NoCondition": {
			reason:  "No PodsScheduled: charged.",
			replica: other().Obj(),
			want:    map[string]int64{"[5]": 1},
		},
		"ClaimlessCostsNothing": {
			reason:  "A member with no deviceRequests costs nothing.",
			replica: fx.Replica("other", "a", 0).Engines(fx.PinnedStandalone("main", "p")).Obj(),
			want:    map[string]int64{"[8]": 1},
		},
		"GangChargedOnDistinctNodes": {
			reason:  "A charged gang cannot share one node, even one with room for both: its first pod takes its claim there, the second finds no other node to hold.",
			replica: fx.Replica("other", "a", 0).Engines(fx.PinnedGang("main", "p", 1, fx.Stamped(2))).Obj(),
			want:    map[string]int64{"[6]": 1},
		},
	}
	d := fx.Deployment("m").Engines(fx.Standalone("main", fx.GPURequest(1))).Replicas(0).Obj()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, p, err := schedule(snapshot(d, []*v1alpha1.InferenceCluster{fx.Cluster("a").Pools(pool).Obj()}, tc.replica))
			if err != nil {
				t.Fatal(err)
			}
			p.buildLedger(map[identity]bool{})
			if diff := cmp.Diff(tc.want, ledgerNodes(p.ledger["a"][0])); diff != "" {
				t.Errorf("\n%s\nledger: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestChargeHugeCountsStayCheap: a replica whose copies and worker.nodes
// are far past the schema's bounds (64 and 63; nothing but the API server
// enforces them, and crossplane render does not) must not make the pass
// materialise every pod: docs/spec.md#bad-input says huge counts never crash the
// function. 2048 x 2048 pods is small enough to finish; 2^20 x 2^20, which
// the code's maxCount clamp allows, exhausts memory.
func TestChargeHugeCountsStayCheap(t *testing.T) {
	const n = 1 << 11
	e := fx.PinnedGang("main", "default", n, fx.Stamped(1))
	e.Copies = new(int64(n))
	s := snapshot(fx.Deployment("m").Obj(), []*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()},
		fx.Replica("other", "a", 0).Engines(e).Obj())
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	plan, err := Schedule(s)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Replicas) != 0 {
		t.Errorf("placed %v on a pool the other replica already overfills", summary(plan))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Errorf("charging one replica of %d copies x %d workers allocated %d MiB; want it bounded (under 64 MiB), not proportional to copies x pods", n, n, alloc>>20)
	}
}

// nvme is a DRA NVMe drive device, count per node.
func nvme(count int64) v1alpha1.Device {
	return v1alpha1.Device{Name: "nvme", Claim: v1alpha1.ClaimDRA, Driver: "nvme.example.com", DeviceClassName: "nvme.example.com", Count: new(count)}
}
