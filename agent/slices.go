package agent

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/structured"
)

// resourcePoolID names a DRA resource pool: a driver's pool.
type resourcePoolID struct{ driver, pool string }

func (id resourcePoolID) String() string { return id.driver + "/" + id.pool }

// resourcePool is a resource pool's slices, of every generation.
type resourcePool struct {
	slices []*resourcev1.ResourceSlice
	// generation is the newest generation any slice has: the pool's
	// current one, which the driver is publishing.
	generation int64
	// complete is whether every slice of the current generation is there.
	complete bool
}

// sliceIndex is the view's ResourceSlices by resource pool and node.
type sliceIndex struct {
	pools map[resourcePoolID]*resourcePool
	// nodePools are, per node name, the resource pools with a slice (of
	// any generation) or a device on that node alone, sorted.
	nodePools map[string][]resourcePoolID
	// local is, for every device of a current slice that belongs to one
	// node alone, that node. Devices any other way (a node selector, all
	// nodes) are reachable from several nodes: counting them on each would
	// report the same device free several times, so they are not counted.
	local map[structured.DeviceID]string
}

// indexSlices checks the slices and indexes them.
func indexSlices(in []*resourcev1.ResourceSlice) (*sliceIndex, error) {
	x := &sliceIndex{pools: map[resourcePoolID]*resourcePool{}, nodePools: map[string][]resourcePoolID{}, local: map[structured.DeviceID]string{}}
	onNode := map[string]map[resourcePoolID]bool{}
	for i, s := range in {
		if err := checkSlice(s); err != nil {
			return nil, fmt.Errorf("view.ResourceSlices[%d]: %w", i, err)
		}
		id := resourcePoolID{s.Spec.Driver, s.Spec.Pool.Name}
		p := x.pools[id]
		if p == nil {
			p = &resourcePool{generation: s.Spec.Pool.Generation}
			x.pools[id] = p
		}
		p.slices = append(p.slices, s)
		p.generation = max(p.generation, s.Spec.Pool.Generation)
		for _, node := range sliceNodes(s) {
			if onNode[node] == nil {
				onNode[node] = map[resourcePoolID]bool{}
			}
			onNode[node][id] = true
		}
	}
	for id, p := range x.pools {
		p.complete = complete(p)
		x.indexLocal(id, p)
	}
	for node, ids := range onNode {
		list := slices.SortedFunc(maps.Keys(ids), func(a, b resourcePoolID) int {
			return cmp.Or(cmp.Compare(a.driver, b.driver), cmp.Compare(a.pool, b.pool))
		})
		x.nodePools[node] = list
	}
	return x, nil
}

// sliceNodes are the nodes a slice names: its own, or its devices'.
func sliceNodes(s *resourcev1.ResourceSlice) []string {
	if s.Spec.NodeName != nil && *s.Spec.NodeName != "" {
		return []string{*s.Spec.NodeName}
	}
	var out []string
	for _, d := range s.Spec.Devices {
		if d.NodeName != nil && *d.NodeName != "" {
			out = append(out, *d.NodeName)
		}
	}
	return out
}

// indexLocal records the node of each device of the pool's current slices
// that belongs to one node alone.
func (x *sliceIndex) indexLocal(id resourcePoolID, p *resourcePool) {
	for _, s := range p.slices {
		if s.Spec.Pool.Generation != p.generation {
			continue
		}
		for _, d := range s.Spec.Devices {
			node := ""
			switch {
			case s.Spec.NodeName != nil:
				node = *s.Spec.NodeName
			case d.NodeName != nil:
				node = *d.NodeName
			}
			if node != "" {
				x.local[structured.MakeDeviceID(id.driver, id.pool, d.Name)] = node
			}
		}
	}
}

// checkSlice checks what the index and the allocator rely on, which the API
// server would have refused: a view built by hand can hold anything.
func checkSlice(s *resourcev1.ResourceSlice) error {
	if s == nil {
		return fmt.Errorf("nil")
	}
	name := "ResourceSlice " + s.Name
	if errs := validation.IsDNS1123Subdomain(s.Spec.Driver); len(errs) > 0 {
		return fmt.Errorf("%s: spec.driver: %q is not a DRA driver name: %s", name, s.Spec.Driver, strings.Join(errs, "; "))
	}
	switch {
	case s.Spec.Pool.Name == "":
		return fmt.Errorf("%s: spec.pool.name: empty", name)
	case s.Spec.Pool.Generation < 0:
		return fmt.Errorf("%s: spec.pool.generation: %d is negative", name, s.Spec.Pool.Generation)
	case s.Spec.Pool.ResourceSliceCount < 1:
		return fmt.Errorf("%s: spec.pool.resourceSliceCount: %d is less than 1", name, s.Spec.Pool.ResourceSliceCount)
	}
	return nil
}

// complete is whether every slice of the pool's current generation is
// there: as many as each of them says the pool has. Slices that disagree on
// that number leave the pool incomplete, as the driver has not finished
// publishing it.
func complete(p *resourcePool) bool {
	var n, want int64
	for _, s := range p.slices {
		if s.Spec.Pool.Generation != p.generation {
			continue
		}
		if n > 0 && s.Spec.Pool.ResourceSliceCount != want {
			return false
		}
		n, want = n+1, s.Spec.Pool.ResourceSliceCount
	}
	return n == want
}

// incomplete returns a resource pool of the node that is not complete, and
// whether there is one.
func (x *sliceIndex) incomplete(node string) (resourcePoolID, bool) {
	for _, id := range x.nodePools[node] {
		if !x.pools[id].complete {
			return id, true
		}
	}
	return resourcePoolID{}, false
}

// forNode returns the slices the allocator needs to allocate the node's own
// devices: every slice, of every generation, of the node's resource pools,
// so that the allocator makes its own checks of generations, completeness
// and shared counters on the whole pool.
func (x *sliceIndex) forNode(node string) []*resourcev1.ResourceSlice {
	var out []*resourcev1.ResourceSlice
	for _, id := range x.nodePools[node] {
		out = append(out, x.pools[id].slices...)
	}
	return out
}
