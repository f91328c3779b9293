package agent

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// View is the cluster as the agent's informers hold it: every Node,
// ResourceSlice, DeviceClass and ResourceClaim, and when they were last
// known to be in sync.
type View struct {
	// Nodes are every Node of the cluster; Pool.Nodes picks the pool's.
	Nodes []*corev1.Node
	// ResourceSlices are every slice of the cluster, as kube-scheduler sees
	// them: with the taints of DeviceTaintRules applied, as
	// k8s.io/dynamic-resource-allocation/resourceslice/tracker's
	// ListPatchedResourceSlices returns them.
	ResourceSlices []*resourcev1.ResourceSlice
	// DeviceClasses are every class; the pool's devices name theirs.
	DeviceClasses []*resourcev1.DeviceClass
	// ResourceClaims are every claim of the cluster, in every namespace:
	// the allocated ones hold devices.
	ResourceClaims []*resourcev1.ResourceClaim

	// SyncedAt is a time as of which the view is complete: every pod
	// bound, every claim allocated before it is in the lists above. Take
	// it when the informers were last known to be in sync, before listing
	// them; never the time the report is published.
	SyncedAt time.Time
}

// Report is one pool's report: the fields the cluster agent publishes on
// the pool's entry of the InferenceCluster's status.gpuPools[]. It
// marshals to those fields' JSON.
type Report struct {
	// ObservedNodes is how many Nodes the pool has now, ready or not.
	ObservedNodes int64 `json:"observedNodes"`
	// ObservedAt is View.SyncedAt in UTC, rounded down to the second.
	ObservedAt time.Time `json:"observedAt"`
	// NodesByFreeDevices are the nodes a new pod could land on, grouped by
	// their free devices: at most poolreport.MaxBuckets, most free first.
	NodesByFreeDevices []agentv1alpha1.Bucket `json:"nodesByFreeDevices"`

	// Devices sums the report per pool device, for the PoolObservation's
	// FREE and TOTAL columns: never relayed, never read by the function.
	Devices []agentv1alpha1.DeviceSummary `json:"-"`

	// LeftOut says, by node name, why each of the pool's nodes that a new
	// pod could not land on is not in the histogram: for the agent's logs,
	// never published.
	LeftOut map[string]string `json:"-"`
}

// PoolReport computes the pool's report from the view, as docs/spec.md#computing-a-pool-report
// defines it. It returns an error for a pool description or a view it
// cannot read (naming the object and the field), or when the allocator
// fails; never a report it could not compute in full. It changes nothing
// it is given: the reports of many pools of one view may be computed at
// once.
func PoolReport(ctx context.Context, pool Pool, view View) (Report, error) {
	devices, err := pool.devices()
	if err != nil {
		return Report{}, fmt.Errorf("pool %s: %w", pool.Name, err)
	}
	if view.SyncedAt.IsZero() {
		return Report{}, fmt.Errorf("view: SyncedAt is not set: a report needs the time its view is complete as of")
	}
	nodes, err := poolNodes(view.Nodes, pool.selector())
	if err != nil {
		return Report{}, err
	}
	classes, err := indexClasses(view.DeviceClasses, devices)
	if err != nil {
		return Report{}, fmt.Errorf("pool %s: %w", pool.Name, err)
	}
	sliceIdx, err := indexSlices(view.ResourceSlices)
	if err != nil {
		return Report{}, err
	}
	held, err := allocated(view.ResourceClaims)
	if err != nil {
		return Report{}, err
	}
	c := &counter{devices: devices, classes: classes, slices: sliceIdx, holdings: held}
	counted := make([]NodeFree, 0, len(nodes))
	for _, n := range nodes {
		nf, err := c.node(ctx, n, pool.Tolerations)
		if err != nil {
			return Report{}, fmt.Errorf("pool %s: %w", pool.Name, err)
		}
		counted = append(counted, nf)
	}
	return histogramOf(devices, counted, view.SyncedAt), nil
}

// poolNodes checks the view's Nodes and returns the pool's, by name.
func poolNodes(all []*corev1.Node, sel labels.Selector) ([]*corev1.Node, error) {
	var out []*corev1.Node
	seen := make(map[string]bool, len(all))
	for i, n := range all {
		switch {
		case n == nil:
			return nil, fmt.Errorf("view.Nodes[%d]: nil", i)
		case n.Name == "":
			return nil, fmt.Errorf("view.Nodes[%d]: metadata.name: empty", i)
		case seen[n.Name]:
			return nil, fmt.Errorf("view.Nodes[%d]: Node %s is listed twice", i, n.Name)
		}
		seen[n.Name] = true
		if sel.Matches(labels.Set(n.Labels)) {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// Fill sets the pool's observedNodes, observedAt and nodesByFreeDevices to
// the report, as decoded JSON: what the function reads from the
// InferenceCluster once the agent has published it.
func (r Report) Fill(p *v1alpha1.GPUPool) {
	buckets := make([]any, 0, len(r.NodesByFreeDevices))
	for _, b := range r.NodesByFreeDevices {
		free := make([]any, 0, len(b.Free))
		for _, f := range b.Free {
			free = append(free, map[string]any{"name": f.Name, "count": float64(f.Count)})
		}
		buckets = append(buckets, map[string]any{"nodes": float64(b.Nodes), "free": free})
	}
	p.ObservedNodes = float64(r.ObservedNodes)
	p.ObservedAt = r.ObservedAt.UTC().Format(time.RFC3339)
	p.NodesByFreeDevices = buckets
}
