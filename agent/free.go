package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Features are the DRA features kube-scheduler v1.37 allocates with by
// default (dynamicresources.AllocatorFeatures of its default feature
// gates): partitionable devices (shared counters), consumable capacity,
// device taints, binding conditions with device status, admin access and
// prioritized lists. A cluster with one of them off has API objects
// without its fields, which the allocator then never meets. Fractional
// capacity ranges are off: that gate's v1.37 default is on only from
// --min-compatibility-version 1.37, and the flag defaults to the version
// before the binary's. The simulator's binder (sim/kube.Features, checked
// against kube-scheduler's own framework) allocates with the same set, and
// a test in sim holds the two equal.
func Features() structured.Features {
	return structured.Features{
		AdminAccess:            true,
		ConsumableCapacity:     true,
		DeviceBindingAndStatus: true,
		DeviceTaints:           true,
		PartitionableDevices:   true,
		PrioritizedList:        true,
	}
}

// celCache compiles DeviceClass selectors as kube-scheduler does, with
// consumable capacity's device.allowMultipleAllocations. One per process:
// the compiler behind it is built once.
var celCache = sync.OnceValue(func() *dracel.Cache { //nolint:gochecknoglobals // One compiler and cache per process, as in kube-scheduler.
	return dracel.NewCache(64, dracel.Features{EnableConsumableCapacity: Features().ConsumableCapacity})
})

// classLister serves the view's DeviceClasses to the allocator.
type classLister map[string]*resourcev1.DeviceClass

// List returns every class, by name.
func (l classLister) List() ([]*resourcev1.DeviceClass, error) {
	out := make([]*resourcev1.DeviceClass, 0, len(l))
	for _, name := range slices.Sorted(maps.Keys(l)) {
		out = append(out, l[name])
	}
	return out, nil
}

// Get returns the class of the name, or a NotFound error.
func (l classLister) Get(name string) (*resourcev1.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourcev1.Resource("deviceclasses"), name)
}

// indexClasses checks the classes the pool's devices request and indexes
// every class. A selector that does not compile would fail every
// allocation; it is reported here by class and field instead.
func indexClasses(in []*resourcev1.DeviceClass, devices []poolDevice) (classLister, error) {
	l := make(classLister, len(in))
	for i, c := range in {
		if c == nil {
			return nil, fmt.Errorf("view.DeviceClasses[%d]: nil", i)
		}
		l[c.Name] = c
	}
	for _, d := range devices {
		c, ok := l[d.class]
		if !ok {
			return nil, fmt.Errorf("devices[%s].deviceClassName: no DeviceClass %q in the view", d.name, d.class)
		}
		for i, s := range c.Spec.Selectors {
			if s.CEL == nil {
				return nil, fmt.Errorf("DeviceClass %s: spec.selectors[%d].cel: not set (unsupported selector type?)", c.Name, i)
			}
			if r := celCache().GetOrCompile(s.CEL.Expression); r.Error != nil {
				return nil, fmt.Errorf("DeviceClass %s: spec.selectors[%d].cel.expression: %w", c.Name, i, r.Error)
			}
		}
	}
	return l, nil
}

// holdings are what the view's claims hold, by resource pool, read as
// kube-scheduler gathers them for the allocator: admin access takes
// nothing; with consumable capacity a result with a share ID is one share
// of a device.
type holdings map[resourcePoolID]*poolHoldings

// poolHoldings are what claims hold of one resource pool.
type poolHoldings struct {
	// devices are every device a claim holds, whole or a share of it.
	devices  []structured.DeviceID
	shares   []structured.SharedDeviceID
	consumed []structured.DeviceConsumedCapacity
}

// allocated reads the claims' allocation results.
func allocated(claims []*resourcev1.ResourceClaim) (holdings, error) {
	h := holdings{}
	for i, c := range claims {
		if c == nil {
			return nil, fmt.Errorf("view.ResourceClaims[%d]: nil", i)
		}
		if c.Status.Allocation == nil {
			continue
		}
		for j, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == "" || r.Pool == "" || r.Device == "" {
				return nil, fmt.Errorf("ResourceClaim %s/%s: status.allocation.devices.results[%d]: driver, pool and device must all be set, got %q, %q, %q", c.Namespace, c.Name, j, r.Driver, r.Pool, r.Device)
			}
			if r.AdminAccess != nil && *r.AdminAccess {
				continue
			}
			pid := resourcePoolID{r.Driver, r.Pool}
			p := h[pid]
			if p == nil {
				p = &poolHoldings{}
				h[pid] = p
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			p.devices = append(p.devices, id)
			if r.ShareID == nil {
				continue
			}
			p.shares = append(p.shares, structured.MakeSharedDeviceID(id, r.ShareID))
			if r.ConsumedCapacity != nil {
				p.consumed = append(p.consumed, structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
			}
		}
	}
	return h, nil
}

// state is the allocated state of the resource pools, new, for counting
// whole devices: every device a claim holds any of is in use, a shared one
// too, since a device with a share taken is not whole-free. Its shares and
// consumed capacity are kept as the allocator would see them; it allocates
// no further share of a device in use anyway.
func (h holdings) state(pools []resourcePoolID) structured.AllocatedState {
	s := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, pid := range pools {
		p := h[pid]
		if p == nil {
			continue
		}
		s.AllocatedDevices.Insert(p.devices...)
		s.AllocatedSharedDeviceIDs.Insert(p.shares...)
		for _, c := range p.consumed {
			s.AggregatedCapacity.Insert(c)
		}
	}
	return s
}

// counter counts a node's free devices by asking the allocator.
type counter struct {
	devices  []poolDevice
	classes  classLister
	slices   *sliceIndex
	holdings holdings
}

// free returns the node's free count of each pool device, in pool order.
//
// Each count is how many one-device claims of the device's class the
// allocator allocates on the node one after the other, each device it
// picks then taken for the next, up to the pool's per-node count. So every
// count is of devices that can all be had at once: the allocator checked
// each against those picked before it (not in use, untainted, selected by
// the class, within its shared counters). Devices, one kind after another,
// stay taken across kinds, so the whole vector can be had at once too, and
// two kinds whose classes select the same devices never both count one.
func (c *counter) free(ctx context.Context, node *corev1.Node) ([]int64, error) {
	free := make([]int64, len(c.devices))
	own := c.slices.forNode(node.Name)
	if len(own) == 0 {
		return free, nil
	}
	state := c.holdings.state(c.slices.nodePools[node.Name])
	for k, d := range c.devices {
		for free[k] < d.count {
			id, ok, err := c.allocateOne(ctx, node, own, state, d)
			if err != nil {
				return nil, fmt.Errorf("cannot count free %s on Node %s: %w", d.name, node.Name, err)
			}
			if !ok {
				break
			}
			state.AllocatedDevices.Insert(id)
			// A device the node shares with others is taken, not counted.
			if c.slices.local[id] == node.Name {
				free[k]++
			}
		}
	}
	return free, nil
}

// allocateOne asks the allocator for one device of d's class on the node,
// in the allocated state. It returns the device, or false
// when none can be allocated.
//
// A new allocator each time: the allocator caches a pool's available
// shared counters from the allocated state the first time it needs them,
// so one built before a device was taken would not charge that device's
// counters.
func (c *counter) allocateOne(ctx context.Context, node *corev1.Node, own []*resourcev1.ResourceSlice, state structured.AllocatedState, d poolDevice) (structured.DeviceID, bool, error) {
	a, err := structured.NewAllocator(ctx, Features(), state, c.classes, own, celCache())
	if err != nil {
		return structured.DeviceID{}, false, fmt.Errorf("cannot create the DRA allocator: %w", err)
	}
	results, err := a.Allocate(ctx, node, []*resourcev1.ResourceClaim{d.probe})
	switch {
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		// Only invalid resource pools (say, two devices of one name) had
		// devices left: the allocator allocates none of theirs.
		return structured.DeviceID{}, false, nil
	case err != nil:
		return structured.DeviceID{}, false, fmt.Errorf("the DRA allocator failed: %w", err)
	case len(results) == 0:
		return structured.DeviceID{}, false, nil
	}
	got := results[0].Devices.Results
	if len(got) != 1 {
		return structured.DeviceID{}, false, fmt.Errorf("the DRA allocator allocated %d devices for a claim of one", len(got))
	}
	id := structured.MakeDeviceID(got[0].Driver, got[0].Pool, got[0].Device)
	if state.AllocatedDevices.Has(id) {
		// Never expected; counting on would never end.
		return structured.DeviceID{}, false, fmt.Errorf("the DRA allocator allocated device %s, which is in use", id)
	}
	return id, true, nil
}
