package agent

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// nodeViews splits a view into each of the pool's nodes' NodeView, the
// way an agent's indexes do: the slices of each resource pool with a slice
// on the node, and the claims holding devices of those pools.
func nodeViews(c *Counter, v View) []NodeView {
	byPool := map[string][]*resourcev1.ResourceSlice{}
	onNode := map[string]map[string]bool{}
	for _, s := range v.ResourceSlices {
		key := ResourcePoolKey(s.Spec.Driver, s.Spec.Pool.Name)
		byPool[key] = append(byPool[key], s)
		for _, n := range SliceNodes(s) {
			if onNode[n] == nil {
				onNode[n] = map[string]bool{}
			}
			onNode[n][key] = true
		}
	}
	claimsOf := map[string][]*resourcev1.ResourceClaim{}
	for _, cl := range v.ResourceClaims {
		for _, key := range ClaimPools(cl) {
			claimsOf[key] = append(claimsOf[key], cl)
		}
	}
	var out []NodeView
	for _, n := range v.Nodes {
		if !c.Selects(n) {
			continue
		}
		nv := NodeView{Node: n}
		seen := map[*resourcev1.ResourceClaim]bool{}
		for key := range onNode[n.Name] {
			nv.ResourceSlices = append(nv.ResourceSlices, byPool[key]...)
			for _, cl := range claimsOf[key] {
				if !seen[cl] {
					seen[cl] = true
					nv.ResourceClaims = append(nv.ResourceClaims, cl)
				}
			}
		}
		out = append(out, nv)
	}
	return out
}

// countByNode is PoolReport computed node by node with a Counter.
func countByNode(t *testing.T, pool Pool, v View) Report {
	t.Helper()
	c, err := NewCounter(pool, v.DeviceClasses)
	if err != nil {
		t.Fatalf("NewCounter: %v", err)
	}
	var counted []NodeFree
	for _, nv := range nodeViews(c, v) {
		nf, err := c.Node(t.Context(), nv)
		if err != nil {
			t.Fatalf("Node %s: %v", nv.Node.Name, err)
		}
		counted = append(counted, nf)
	}
	r, err := c.Report(counted, v.SyncedAt)
	if err != nil {
		t.Fatalf("Report: %v", err)
	}
	return r
}

// TestCountingNodeByNodeIsPoolReport checks, over random pools of whole,
// partitionable and shared GPUs, some tainted, some nodes cordoned or not
// Ready, that counting each node from its own objects alone reports what
// PoolReport reports from the whole view.
func TestCountingNodeByNodeIsPoolReport(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 13))
	runs := 20
	if testing.Short() {
		runs = 5
	}
	pool := gpuPool(poolDev("gpu", gpuDriver, gpuClass, 4), poolDev("mig", gpuDriver, migClass, 28))
	for run := range runs {
		v := View{DeviceClasses: classes(), SyncedAt: syncedAt.Add(time.Duration(run) * time.Second)}
		for i := range 12 {
			name := fmt.Sprintf("r%d-n%d", run, i)
			rn := newRandomNode(rng, name, false)
			n := node(name)
			switch rng.IntN(6) {
			case 0:
				n.cordoned()
			case 1:
				n.ready(corev1.ConditionFalse)
			case 2:
				n.pool("other")
			}
			v.Nodes = append(v.Nodes, n.obj())
			v.ResourceSlices = append(v.ResourceSlices, rn.slices...)
			v.ResourceClaims = append(v.ResourceClaims, rn.claims...)
		}
		// A slice of another pool's node, and one of a node with no
		// Node: neither is any of this pool's nodes' business.
		v.ResourceSlices = append(v.ResourceSlices, gpuSlice("gone", 2).obj())
		want := fullReport(t, pool, v)
		if diff := cmp.Diff(want, countByNode(t, pool, v)); diff != "" {
			t.Fatalf("run %d: counted node by node: -PoolReport, +Counter:\n%s", run, diff)
		}
	}
}

// TestNodeFree checks one node's count as an agent keeps it: every DRA
// device of the pool in order, zeros included; a node left out has none.
func TestNodeFree(t *testing.T) {
	pool := gpuPool(poolDev("gpu", gpuDriver, gpuClass, 8), v1alphaSynthetic("cpu"), poolDev("nic", nicDriver, nicClass, 2))
	c, err := NewCounter(pool, classes())
	if err != nil {
		t.Fatal(err)
	}
	type args struct {
		view NodeView
	}
	cases := map[string]struct {
		reason string
		args   args
		want   NodeFree
	}{
		"Counted": {
			reason: "A node of 8 GPUs, 3 held, and no NIC slice has 5 GPUs and 0 NICs free; the Synthetic device is not counted.",
			args: args{view: NodeView{
				Node:           node("n1").obj(),
				ResourceSlices: resourceSlices(gpuSlice("n1", 8)),
				ResourceClaims: claims(claim("a").allocated(gpuDriver, "n1", "gpu-0", "gpu-1", "gpu-2")),
			}},
			want: NodeFree{Node: "n1", Free: []agentv1alpha1.Free{{Name: "gpu", Count: 5}, {Name: "nic", Count: 0}}},
		},
		"OtherClaimsIgnored": {
			reason: "A claim holding devices of another node's resource pool holds none of this one's.",
			args: args{view: NodeView{
				Node:           node("n1").obj(),
				ResourceSlices: resourceSlices(gpuSlice("n1", 8)),
				ResourceClaims: claims(claim("a").allocated(gpuDriver, "n2", "gpu-0")),
			}},
			want: NodeFree{Node: "n1", Free: []agentv1alpha1.Free{{Name: "gpu", Count: 8}, {Name: "nic", Count: 0}}},
		},
		"Cordoned": {
			reason: "A cordoned node is left out, with no counts.",
			args:   args{view: NodeView{Node: node("n1").cordoned().obj(), ResourceSlices: resourceSlices(gpuSlice("n1", 8))}},
			want:   NodeFree{Node: "n1", LeftOut: "cordoned"},
		},
		"IncompletePool": {
			reason: "A node with a resource pool missing a slice is left out.",
			args:   args{view: NodeView{Node: node("n1").obj(), ResourceSlices: resourceSlices(gpuSlice("n1", 8).pool("n1", 1, 2))}},
			want:   NodeFree{Node: "n1", LeftOut: "resource pool gpu.example.com/n1 is incomplete"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := c.Node(t.Context(), tc.args.view)
			if err != nil {
				t.Fatalf("\n%s\nNode(...): %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("\n%s\nNode(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
	if diff := cmp.Diff([]string{"gpu", "nic"}, c.Devices()); diff != "" {
		t.Errorf("Devices(): -want, +got:\n%s", diff)
	}
}

// v1alphaSynthetic is a Synthetic pool device, which no report counts.
func v1alphaSynthetic(name string) v1alpha1.Device {
	return v1alpha1.Device{Name: name, Claim: v1alpha1.ClaimSynthetic, Driver: "cpu.example.com"}
}

// TestCounterErrors checks that what a Counter cannot read is an error
// naming the object and the field, never a report.
func TestCounterErrors(t *testing.T) {
	c, err := NewCounter(gpuPool(), classes())
	if err != nil {
		t.Fatal(err)
	}
	n1 := node("n1").obj()
	counted := NodeFree{Node: "n1", Free: []agentv1alpha1.Free{{Name: "gpu", Count: 8}}}
	cases := map[string]struct {
		reason string
		run    func() error
		want   string
	}{
		"NoClass": {
			reason: "A pool device whose DeviceClass does not exist cannot be counted.",
			run: func() error {
				_, err := NewCounter(gpuPool(poolDev("gpu", gpuDriver, "missing.example.com", 8)), classes())
				return err
			},
			want: `pool h100: devices[gpu].deviceClassName: no DeviceClass "missing.example.com"`,
		},
		"NoNode": {
			reason: "A NodeView without a Node names the pool.",
			run:    func() error { _, err := c.Node(t.Context(), NodeView{}); return err },
			want:   "pool h100: no Node to count",
		},
		"BadSlice": {
			reason: "A slice of an invalid driver name is named, with the node.",
			run: func() error {
				_, err := c.Node(t.Context(), NodeView{Node: n1, ResourceSlices: resourceSlices(slice("n1-bad", "Not_A_Driver", "n1"))})
				return err
			},
			want: `pool h100: Node n1: view.ResourceSlices[0]: ResourceSlice n1-bad: spec.driver: "Not_A_Driver" is not a DRA driver name`,
		},
		"BadAllocation": {
			reason: "An allocation result without a device is named.",
			run: func() error {
				_, err := c.Node(t.Context(), NodeView{Node: n1, ResourceSlices: resourceSlices(gpuSlice("n1", 8)), ResourceClaims: claims(claim("x").allocated(gpuDriver, "n1", ""))})
				return err
			},
			want: "ResourceClaim ml-team/x: status.allocation.devices.results[0]: driver, pool and device must all be set",
		},
		"Twice": {
			reason: "A node counted twice is refused.",
			run:    func() error { _, err := c.Report([]NodeFree{counted, counted}, syncedAt); return err },
			want:   "pool h100: nodes[1]: Node n1 is listed twice",
		},
		"WrongDevices": {
			reason: "Counts of other devices than the pool's are refused.",
			run: func() error {
				_, err := c.Report([]NodeFree{{Node: "n1", Free: []agentv1alpha1.Free{{Name: "nic", Count: 1}}}}, syncedAt)
				return err
			},
			want: `pool h100: Node n1: free[0] is of "nic", want "gpu"`,
		},
		"TooMany": {
			reason: "A count above the pool's per-node count is refused.",
			run: func() error {
				_, err := c.Report([]NodeFree{{Node: "n1", Free: []agentv1alpha1.Free{{Name: "gpu", Count: 9}}}}, syncedAt)
				return err
			},
			want: "pool h100: Node n1: free[gpu]: 9 is not between 0 and the per-node count 8",
		},
		"NoTime": {
			reason: "A report needs its sync time.",
			run:    func() error { _, err := c.Report([]NodeFree{counted}, time.Time{}); return err },
			want:   "syncedAt is not set",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.run()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("\n%s\nwant an error containing %q, got %v", tc.reason, tc.want, err)
			}
		})
	}
}

// TestSliceNodesAndClaimPools checks the keys an agent indexes by.
func TestSliceNodesAndClaimPools(t *testing.T) {
	perDevice := slice("pd", gpuDriver, "").obj()
	perDevice.Spec.NodeName = nil
	perDevice.Spec.Devices = []resourcev1.Device{{Name: "a", NodeName: new("n2")}, {Name: "b", NodeName: new("n1")}, {Name: "c", NodeName: new("n2")}}
	cases := map[string]struct {
		reason string
		got    []string
		want   []string
	}{
		"OwnNode":   {reason: "A slice of one node names it.", got: SliceNodes(gpuSlice("n1", 1).obj()), want: []string{"n1"}},
		"PerDevice": {reason: "Devices naming their nodes name each once, sorted.", got: SliceNodes(perDevice), want: []string{"n1", "n2"}},
		"AllNodes":  {reason: "A slice of all nodes names none.", got: SliceNodes(gpuSlice("n1", 1).allNodes().obj()), want: nil},
		"Claim": {
			reason: "A claim names each resource pool it holds devices of once, sorted.",
			got:    ClaimPools(claim("a").allocated(nicDriver, "n1", "nic-0").allocated(gpuDriver, "n1", "gpu-0", "gpu-1").obj()),
			want:   []string{"gpu.example.com/n1", "nic.example.com/n1"},
		},
		"Unallocated": {reason: "A claim not allocated holds nothing.", got: ClaimPools(claim("a").obj()), want: nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.got); diff != "" {
				t.Errorf("\n%s\n-want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// BenchmarkCounterNode counts one node of 8 GPUs and 8 NICs, some in use:
// what an agent pays to recount a node whose objects changed.
func BenchmarkCounterNode(b *testing.B) {
	pool, v, _ := busyPool(rand.New(rand.NewPCG(1, 1)), 1)
	c, err := NewCounter(pool, v.DeviceClasses)
	if err != nil {
		b.Fatal(err)
	}
	nv := NodeView{Node: v.Nodes[0], ResourceSlices: v.ResourceSlices, ResourceClaims: v.ResourceClaims}
	for b.Loop() {
		if _, err := c.Node(b.Context(), nv); err != nil {
			b.Fatal(err)
		}
	}
}
