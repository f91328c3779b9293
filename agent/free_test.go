package agent

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// randomNode is one node's slices and claims: GPUs that are whole, or
// partitionable into 1g partitions sharing the GPU's counters, or shared
// (consumable capacity), some tainted, some held by claims.
type randomNode struct {
	slices []*resourcev1.ResourceSlice
	claims []*resourcev1.ResourceClaim
	// simple is whether no GPU is partitionable or shared: then the free
	// count of whole GPUs can be counted by hand.
	simple bool
	// wholeFree is that count, for a simple node: untainted (or tainted
	// None, or PreferNoSchedule-free) GPUs that no claim holds.
	wholeFree int64
}

func newRandomNode(rng *rand.Rand, name string, simple bool) randomNode {
	counters := slice(name+"-counters", gpuDriver, name).pool(name, 1, 2)
	devices := slice(name+"-gpu", gpuDriver, name).pool(name, 1, 2)
	c := claim("jobs-" + name)
	out := randomNode{simple: simple}
	for g := range 1 + rng.IntN(4) {
		id := fmt.Sprintf("gpu-%d", g)
		kind := 0
		if !simple {
			kind = rng.IntN(3)
		}
		d := gpu(id, "H100")
		tainted := false
		switch rng.IntN(6) {
		case 0:
			d.taint("xid", resourcev1.DeviceTaintEffectNoSchedule)
			tainted = true
		case 1:
			d.taint("note", resourcev1.DeviceTaintEffectNone)
		}
		switch kind {
		case 0:
			devices.devices(d.obj())
			if rng.IntN(3) == 0 {
				c.allocated(gpuDriver, name, id)
			} else if !tainted {
				out.wholeFree++
			}
		case 1:
			// Partitions of 10Gi or 20Gi: seven of them leave the whole
			// GPU no room, four use it up.
			parts, size := 7, "10Gi"
			if rng.IntN(2) == 0 {
				parts, size = 4, "20Gi"
			}
			counters.counters(id, map[string]string{"memory": "80Gi"})
			devices.devices(d.consumes(id, map[string]string{"memory": "80Gi"}).obj())
			for p := range parts {
				part := fmt.Sprintf("%s-1g-%d", id, p)
				devices.devices(mig(part).consumes(id, map[string]string{"memory": size}).obj())
				if rng.IntN(5) == 0 {
					c.allocated(gpuDriver, name, part)
				}
			}
		case 2:
			devices.devices(d.shared().obj())
			if rng.IntN(2) == 0 {
				c.share(gpuDriver, name, id, "10Gi")
			}
		}
	}
	if len(counters.Spec.SharedCounters) == 0 {
		devices.pool(name, 1, 1)
		out.slices = []*resourcev1.ResourceSlice{devices.obj()}
	} else {
		out.slices = []*resourcev1.ResourceSlice{counters.obj(), devices.obj()}
	}
	if c.Status.Allocation != nil {
		out.claims = []*resourcev1.ResourceClaim{c.obj()}
	}
	return out
}

// TestFreeCanAllBeHad checks, over random nodes, that a pod claiming every
// device the report says is free, of every kind at once, is allocated on
// the node by Kubernetes' allocator: the report never says more is free
// than there is. On nodes of whole GPUs only, it also checks the count is
// exact, against a count by hand.
func TestFreeCanAllBeHad(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	runs := 300
	if testing.Short() {
		runs = 60
	}
	pool := gpuPool(poolDev("gpu", gpuDriver, gpuClass, 4), poolDev("mig", gpuDriver, migClass, 28))
	for run := range runs {
		name := fmt.Sprintf("n%d", run)
		rn := newRandomNode(rng, name, run%3 == 0)
		n := node(name).obj()
		r := report(t, pool, View{Nodes: nodes(node(name)), ResourceSlices: rn.slices, ResourceClaims: rn.claims})
		if len(r.NodesByFreeDevices) != 1 {
			t.Fatalf("run %d: want one bucket, got %v", run, r.NodesByFreeDevices)
		}
		free := map[string]int64{}
		for _, f := range r.NodesByFreeDevices[0].Free {
			free[f.Name] = f.Count
		}

		if rn.simple && free["gpu"] != rn.wholeFree {
			t.Errorf("run %d: %d whole GPUs free, want %d by hand", run, free["gpu"], rn.wholeFree)
		}

		// The pod: one request per kind, for all that is reported free.
		pod := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml-team", Name: "pod"}}
		for _, d := range pool.Devices {
			if free[d.Name] == 0 {
				continue
			}
			pod.Spec.Devices.Requests = append(pod.Spec.Devices.Requests, resourcev1.DeviceRequest{
				Name: d.Name,
				Exactly: &resourcev1.ExactDeviceRequest{
					DeviceClassName: d.DeviceClassName, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: free[d.Name],
				},
			})
		}
		if len(pod.Spec.Devices.Requests) == 0 {
			continue
		}
		// A whole device is one no claim holds any of: the claims'
		// devices, shares included, are in use.
		inUse := sets.New[structured.DeviceID]()
		for _, c := range rn.claims {
			for _, res := range c.Status.Allocation.Devices.Results {
				inUse.Insert(structured.MakeDeviceID(res.Driver, res.Pool, res.Device))
			}
		}
		a, err := structured.NewAllocator(t.Context(), Features(), structured.AllocatedState{AllocatedDevices: inUse}, classLister{gpuClass: classes()[0], migClass: classes()[1]}, rn.slices, celCache())
		if err != nil {
			t.Fatal(err)
		}
		got, err := a.Allocate(t.Context(), n, []*resourcev1.ResourceClaim{pod})
		if err != nil || got == nil {
			t.Errorf("run %d: the report says %v free, but a claim for it all is not allocated (%v)", run, free, err)
		}
	}
}

// TestShuffledViewsReportTheSame checks that the report depends on the
// view's objects, not on the order they are listed in.
func TestShuffledViewsReportTheSame(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pool := gpuPool(poolDev("gpu", gpuDriver, gpuClass, 4), poolDev("mig", gpuDriver, migClass, 28))
	v := View{DeviceClasses: classes(), SyncedAt: syncedAt}
	for i := range 40 {
		name := fmt.Sprintf("n%d", i)
		rn := newRandomNode(rng, name, false)
		v.Nodes = append(v.Nodes, node(name).obj())
		v.ResourceSlices = append(v.ResourceSlices, rn.slices...)
		v.ResourceClaims = append(v.ResourceClaims, rn.claims...)
	}
	want := report(t, pool, v)
	for range 5 {
		rng.Shuffle(len(v.Nodes), func(i, j int) { v.Nodes[i], v.Nodes[j] = v.Nodes[j], v.Nodes[i] })
		rng.Shuffle(len(v.ResourceSlices), func(i, j int) {
			v.ResourceSlices[i], v.ResourceSlices[j] = v.ResourceSlices[j], v.ResourceSlices[i]
		})
		rng.Shuffle(len(v.ResourceClaims), func(i, j int) {
			v.ResourceClaims[i], v.ResourceClaims[j] = v.ResourceClaims[j], v.ResourceClaims[i]
		})
		rng.Shuffle(len(v.DeviceClasses), func(i, j int) {
			v.DeviceClasses[i], v.DeviceClasses[j] = v.DeviceClasses[j], v.DeviceClasses[i]
		})
		if diff := cmp.Diff(want, report(t, pool, v)); diff != "" {
			t.Fatalf("the same view in another order: -want, +got:\n%s", diff)
		}
	}
}

func TestAShareInUseCouldStillBeShared(t *testing.T) {
	// The allocator alone would give a claim another share of gpu-0:
	// the report's zero is the contract's rule that a device any claim
	// holds part of is not whole-free, not the allocator's refusal.
	s := []*resourcev1.ResourceSlice{slice("n1-gpu", gpuDriver, "n1").devices(gpu("gpu-0", "H100").shared().obj()).obj()}
	held := claims(claim("a").share(gpuDriver, "n1", "gpu-0", "10Gi"))
	res := held[0].Status.Allocation.Devices.Results[0]
	id := structured.MakeDeviceID(res.Driver, res.Pool, res.Device)
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New(structured.MakeSharedDeviceID(id, res.ShareID)),
		AggregatedCapacity:       structured.ConsumedCapacityCollection{},
	}
	state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, res.ConsumedCapacity))
	d, err := gpuPool().devices()
	if err != nil {
		t.Fatal(err)
	}
	a, err := structured.NewAllocator(t.Context(), Features(), state, classLister{gpuClass: classes()[0]}, s, celCache())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := a.Allocate(t.Context(), node("n1").obj(), []*resourcev1.ResourceClaim{d[0].probe}); err != nil || got == nil {
		t.Fatalf("want the allocator to allocate another share of gpu-0, got %v, %v", got, err)
	}
	r := report(t, gpuPool(poolDev("gpu", gpuDriver, gpuClass, 1)), View{Nodes: nodes(node("n1")), ResourceSlices: s, ResourceClaims: held})
	if diff := cmp.Diff(histogram(1, bucket(1)), r); diff != "" {
		t.Errorf("a shared device in use: -want, +got:\n%s", diff)
	}
}

// The probe is what a pod of one device of the kind would claim.
func TestProbe(t *testing.T) {
	got := probe(v1alpha1.Device{Name: "gpu", Driver: gpuDriver, DeviceClassName: gpuClass})
	want := resourcev1.ExactDeviceRequest{
		DeviceClassName: gpuClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`}}},
	}
	if diff := cmp.Diff(want, *got.Spec.Devices.Requests[0].Exactly); diff != "" {
		t.Errorf("probe: -want, +got:\n%s", diff)
	}
}

// TestConcurrentReports computes the reports of one view from several
// goroutines, as an agent of many pools may: PoolReport changes nothing it
// is given (go test -race checks it).
func TestConcurrentReports(t *testing.T) {
	pool, v, _ := busyPool(rand.New(rand.NewPCG(4, 4)), 20)
	want := fullReport(t, pool, v)
	got := make([]Report, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i], errs[i] = PoolReport(t.Context(), pool, v) })
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if diff := cmp.Diff(want, got[i]); diff != "" {
			t.Errorf("report %d: -want, +got:\n%s", i, diff)
		}
	}
}
