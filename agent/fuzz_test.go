package agent

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/poolreport"
)

// fuzzView is what the fuzzer varies: a pool's devices and the cluster's
// objects, as JSON, so that any field of any object can be garbage.
type fuzzView struct {
	Devices []v1alpha1.Device           `json:"devices"`
	Nodes   []*corev1.Node              `json:"nodes"`
	Slices  []*resourcev1.ResourceSlice `json:"slices"`
	Classes []*resourcev1.DeviceClass   `json:"classes"`
	Claims  []*resourcev1.ResourceClaim `json:"claims"`
}

// FuzzPoolReport feeds PoolReport views decoded from arbitrary JSON. It
// must never panic, and a report it returns must be one the function
// reads as Usable: at most 64 buckets, no count above a device's, no more
// nodes in the buckets than observed.
func FuzzPoolReport(f *testing.F) {
	for seed := range uint64(3) {
		rng := rand.New(rand.NewPCG(seed, seed))
		fv := fuzzView{Devices: []v1alpha1.Device{poolDev("gpu", gpuDriver, gpuClass, 4), poolDev("mig", gpuDriver, migClass, 28)}, Classes: classes()}
		for i := range 3 {
			name := string(rune('a' + i))
			rn := newRandomNode(rng, name, seed == 0)
			fv.Nodes = append(fv.Nodes, node(name).obj())
			fv.Slices = append(fv.Slices, rn.slices...)
			fv.Claims = append(fv.Claims, rn.claims...)
		}
		b, err := json.Marshal(fv)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fv fuzzView
		if err := json.Unmarshal(b, &fv); err != nil {
			return
		}
		pool := Pool{Name: h100, Devices: fv.Devices}
		r, err := PoolReport(t.Context(), pool, View{Nodes: fv.Nodes, ResourceSlices: fv.Slices, DeviceClasses: fv.Classes, ResourceClaims: fv.Claims, SyncedAt: syncedAt})
		if err != nil {
			return
		}
		p := v1alpha1.GPUPool{Name: h100, Nodes: new(int64(poolreport.MaxCount)), Devices: fv.Devices}
		r.Fill(&p)
		if _, verdict := observation.Pool(&p, syncedAt.Add(time.Second), time.Minute); verdict.State != observation.Usable {
			t.Fatalf("the report is not usable: %s\n%+v", verdict.Reason(), r)
		}
	})
}
