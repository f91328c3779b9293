package agent

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/poolreport"
)

// NodeFree is one node's part of a pool's report: whether a new pod of the
// pool could land on it and, if so, how many of each pool device it has
// free. A pool's report is its nodes' NodeFree, grouped (Counter.Report).
type NodeFree struct {
	// Node is the Node's name.
	Node string
	// LeftOut says why a new pod of the pool could not land on the node
	// (not Ready, cordoned, an untolerated taint, an incomplete resource
	// pool), as Report.LeftOut does; empty when it could.
	LeftOut string
	// Free is the node's free count of each DRA device of the pool, in
	// the pool's published order, zeros included (Counter.Devices names
	// them). Nil when the node is left out.
	Free []agentv1alpha1.Free
}

// NodeView is what one node's count depends on: the Node, and the
// ResourceSlices and ResourceClaims of the resource pools on it.
type NodeView struct {
	// Node is the node to count.
	Node *corev1.Node
	// ResourceSlices are every slice, of every generation, of each
	// resource pool that has a slice or a device on the node (SliceNodes
	// names a slice's nodes), with the taints of DeviceTaintRules applied,
	// as View.ResourceSlices. Slices of other resource pools may be
	// passed; they are ignored.
	ResourceSlices []*resourcev1.ResourceSlice
	// ResourceClaims are the claims holding devices of those resource
	// pools (their status.allocation names them). Other claims may be
	// passed; what they hold is ignored.
	ResourceClaims []*resourcev1.ResourceClaim
}

// Counter counts one pool's free devices node by node, for an agent that
// keeps each node's count and recounts only the nodes whose objects
// changed. PoolReport is a Counter run over every node of a view.
//
// A Counter holds the pool and the DeviceClasses it was made with: make a
// new one when either changes. It changes nothing it is given, and may
// count several nodes at once.
type Counter struct {
	pool    Pool
	sel     labels.Selector
	devices []poolDevice
	classes classLister
}

// NewCounter checks the pool's description and the DeviceClasses its
// devices request, as PoolReport does, and returns their Counter. classes
// are the cluster's DeviceClasses (others than the pool's are ignored).
func NewCounter(pool Pool, classes []*resourcev1.DeviceClass) (*Counter, error) {
	devices, err := pool.devices()
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", pool.Name, err)
	}
	idx, err := indexClasses(classes, devices)
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", pool.Name, err)
	}
	return &Counter{pool: pool, sel: pool.selector(), devices: devices, classes: idx}, nil
}

// Devices names the pool devices a NodeFree counts, in order: the DRA
// devices of Pool.Devices, as published.
func (c *Counter) Devices() []string {
	out := make([]string, 0, len(c.devices))
	for _, d := range c.devices {
		out = append(out, d.name)
	}
	return out
}

// Selects reports whether the node is one of the pool's: whether its
// labels match Pool.Nodes (by default, v1alpha1.LabelPool=Pool.Name).
func (c *Counter) Selects(n *corev1.Node) bool {
	return n != nil && c.sel.Matches(labels.Set(n.Labels))
}

// Node counts the node's free devices from what it depends on. It returns
// an error, naming the object and the field, for a view it cannot read (a
// slice of an invalid driver name, an allocation result without a device)
// and when the allocator fails.
func (c *Counter) Node(ctx context.Context, v NodeView) (NodeFree, error) {
	switch {
	case v.Node == nil:
		return NodeFree{}, fmt.Errorf("pool %s: no Node to count", c.pool.Name)
	case v.Node.Name == "":
		return NodeFree{}, fmt.Errorf("pool %s: Node: metadata.name: empty", c.pool.Name)
	}
	idx, err := indexSlices(v.ResourceSlices)
	if err != nil {
		return NodeFree{}, fmt.Errorf("pool %s: Node %s: %w", c.pool.Name, v.Node.Name, err)
	}
	held, err := allocated(v.ResourceClaims)
	if err != nil {
		return NodeFree{}, fmt.Errorf("pool %s: Node %s: %w", c.pool.Name, v.Node.Name, err)
	}
	k := &counter{devices: c.devices, classes: c.classes, slices: idx, holdings: held}
	nf, err := k.node(ctx, v.Node, c.pool.Tolerations)
	if err != nil {
		return NodeFree{}, fmt.Errorf("pool %s: %w", c.pool.Name, err)
	}
	return nf, nil
}

// Report groups the nodes' counts into the pool's report, as of syncedAt
// (View.SyncedAt): nodes are every Node of the pool, left out or not, each
// once, as Node counted them. Their order does not matter.
func (c *Counter) Report(nodes []NodeFree, syncedAt time.Time) (Report, error) {
	if syncedAt.IsZero() {
		return Report{}, fmt.Errorf("pool %s: syncedAt is not set: a report needs the time its view is complete as of", c.pool.Name)
	}
	seen := make(map[string]bool, len(nodes))
	for i, n := range nodes {
		if n.Node == "" {
			return Report{}, fmt.Errorf("pool %s: nodes[%d]: no Node name", c.pool.Name, i)
		}
		if seen[n.Node] {
			return Report{}, fmt.Errorf("pool %s: nodes[%d]: Node %s is listed twice", c.pool.Name, i, n.Node)
		}
		seen[n.Node] = true
		if n.LeftOut != "" {
			continue
		}
		if len(n.Free) != len(c.devices) {
			return Report{}, fmt.Errorf("pool %s: Node %s: %d free counts for the pool's %d DRA devices", c.pool.Name, n.Node, len(n.Free), len(c.devices))
		}
		for k, f := range n.Free {
			d := c.devices[k]
			if f.Name != d.name {
				return Report{}, fmt.Errorf("pool %s: Node %s: free[%d] is of %q, want %q", c.pool.Name, n.Node, k, f.Name, d.name)
			}
			if f.Count < 0 || f.Count > d.count {
				return Report{}, fmt.Errorf("pool %s: Node %s: free[%s]: %d is not between 0 and the per-node count %d", c.pool.Name, n.Node, d.name, f.Count, d.count)
			}
		}
	}
	return histogramOf(c.devices, nodes, syncedAt), nil
}

// node counts one node: left out, or its free devices.
func (c *counter) node(ctx context.Context, n *corev1.Node, tolerations []corev1.Toleration) (NodeFree, error) {
	why := unschedulable(n, tolerations)
	if id, incomplete := c.slices.incomplete(n.Name); why == "" && incomplete {
		why = fmt.Sprintf("resource pool %s is incomplete", id)
	}
	if why != "" {
		return NodeFree{Node: n.Name, LeftOut: why}, nil
	}
	if err := ctx.Err(); err != nil {
		return NodeFree{}, err
	}
	free, err := c.free(ctx, n)
	if err != nil {
		return NodeFree{}, err
	}
	out := NodeFree{Node: n.Name, Free: make([]agentv1alpha1.Free, len(free))}
	for k, d := range c.devices {
		out.Free[k] = agentv1alpha1.Free{Name: d.name, Count: free[k]}
	}
	return out, nil
}

// histogramOf groups the nodes' counts, which are of the devices in order, into
// buckets: the histogram of the nodes left in, merged to poolreport.MaxBuckets.
func histogramOf(devices []poolDevice, nodes []NodeFree, syncedAt time.Time) Report {
	var groups []group
	byFree := map[string]int{}
	var key []byte
	var leftOut map[string]string
	summary := make([]agentv1alpha1.DeviceSummary, len(devices))
	for k, d := range devices {
		summary[k] = agentv1alpha1.DeviceSummary{Name: d.name, Total: int64(len(nodes)) * d.count}
	}
	for _, n := range nodes {
		if n.LeftOut != "" {
			if leftOut == nil {
				leftOut = map[string]string{}
			}
			leftOut[n.Node] = n.LeftOut
			continue
		}
		key = key[:0]
		for _, f := range n.Free {
			key = strconv.AppendInt(append(key, ','), f.Count, 10)
		}
		if i, ok := byFree[string(key)]; ok {
			groups[i].nodes++
			continue
		}
		free := make([]int64, len(n.Free))
		for k, f := range n.Free {
			free[k] = f.Count
		}
		byFree[string(key)] = len(groups)
		groups = append(groups, group{free: free, nodes: 1})
	}
	// Summed by group before merging, which may round a group's counts
	// down: exact, and per group rather than per node.
	for _, g := range groups {
		for k := range summary {
			summary[k].Free += g.nodes * g.free[k]
		}
	}
	slices.SortFunc(groups, func(a, b group) int { return compareFree(a.free, b.free) })
	groups = merge(groups, poolreport.MaxBuckets)

	r := Report{
		ObservedNodes: int64(len(nodes)),
		// Rounded down: a replica's PodsScheduled time is whole seconds,
		// and the function counts a replica as reported when that time is
		// strictly before observedAt. A pod bound at 12:00:00.7, after a
		// sync at 12:00:00.5, reads as bound at 12:00:00: not before
		// 12:00:00, so it is still charged, as it must be.
		ObservedAt:         syncedAt.UTC().Truncate(time.Second),
		NodesByFreeDevices: make([]agentv1alpha1.Bucket, 0, len(groups)),
		Devices:            summary,
		LeftOut:            leftOut,
	}
	for _, g := range groups {
		b := agentv1alpha1.Bucket{Nodes: g.nodes, Free: []agentv1alpha1.Free{}}
		for k, d := range devices {
			if g.free[k] > 0 {
				b.Free = append(b.Free, agentv1alpha1.Free{Name: d.name, Count: g.free[k]})
			}
		}
		r.NodesByFreeDevices = append(r.NodesByFreeDevices, b)
	}
	return r
}

// SliceNodes names the nodes a ResourceSlice's devices are on, as the
// package reads them: the slice's spec.nodeName, or else each device's
// nodeName (partitionable devices may name their node one by one). A slice
// offered to several nodes by a node selector, or to all nodes, names
// none: its devices are counted on no node. Nil for a nil slice.
func SliceNodes(s *resourcev1.ResourceSlice) []string {
	if s == nil {
		return nil
	}
	out := sliceNodes(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// ClaimPools names the resource pools a ResourceClaim's allocation holds
// devices of, each as "<driver>/<pool>", sorted: what an agent indexes
// claims by to find the claims of a node's resource pools. Nil for a claim
// that is not allocated.
func ClaimPools(c *resourcev1.ResourceClaim) []string {
	if c == nil || c.Status.Allocation == nil {
		return nil
	}
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		out = append(out, ResourcePoolKey(r.Driver, r.Pool))
	}
	slices.SortFunc(out, cmp.Compare[string])
	return slices.Compact(out)
}

// ResourcePoolKey names a driver's resource pool as ClaimPools does.
func ResourcePoolKey(driver, pool string) string { return driver + "/" + pool }
