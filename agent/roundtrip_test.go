package agent

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/poolreport"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// busyPool is a pool of n nodes of 8 GPUs and 8 NICs each, with a random
// number of each held by claims, and the truth: each node's free GPUs and
// NICs.
func busyPool(rng *rand.Rand, n int) (Pool, View, [][]int64) {
	pool := gpuPool(poolDev("gpu", gpuDriver, gpuClass, 8), poolDev("nic", nicDriver, nicClass, 8))
	v := View{DeviceClasses: classes(), SyncedAt: syncedAt}
	truth := make([][]int64, 0, n)
	for i := range n {
		name := fmt.Sprintf("n%03d", i)
		v.Nodes = append(v.Nodes, node(name).obj())
		nics := slice(name+"-nic", nicDriver, name)
		for d := range 8 {
			nics.devices(nic(fmt.Sprintf("nic-%d", d)).obj())
		}
		v.ResourceSlices = append(v.ResourceSlices, gpuSlice(name, 8).obj(), nics.obj())
		usedGPUs, usedNICs := rng.IntN(9), rng.IntN(9)
		c := claim("job-" + name)
		for d := range usedGPUs {
			c.allocated(gpuDriver, name, fmt.Sprintf("gpu-%d", d))
		}
		for d := range usedNICs {
			c.allocated(nicDriver, name, fmt.Sprintf("nic-%d", d))
		}
		v.ResourceClaims = append(v.ResourceClaims, c.obj())
		truth = append(truth, []int64{int64(8 - usedGPUs), int64(8 - usedNICs)})
	}
	return pool, v, truth
}

// TestReportIsUsable publishes a report of a busy pool, whose nodes have
// more distinct free counts than a report may hold, the way Fill does and
// the way a status patch carries it, and reads both back as the function
// does.
func TestReportIsUsable(t *testing.T) {
	pool, v, truth := busyPool(rand.New(rand.NewPCG(3, 5)), 200)
	r, err := PoolReport(t.Context(), pool, v)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.NodesByFreeDevices) > poolreport.MaxBuckets {
		t.Fatalf("%d buckets, more than %d", len(r.NodesByFreeDevices), poolreport.MaxBuckets)
	}
	if distinct := distinctFree(truth); distinct <= poolreport.MaxBuckets {
		t.Fatalf("the fixture has %d distinct free counts: nothing to merge", distinct)
	}

	filled := v1alpha1.GPUPool{Name: pool.Name, Nodes: new(int64(200)), Devices: pool.Devices}
	r.Fill(&filled)

	// The report as an agent patches it onto the status, decoded as the
	// function decodes the InferenceCluster.
	patch, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	decoded := v1alpha1.GPUPool{Name: pool.Name, Nodes: new(int64(200)), Devices: pool.Devices}
	if err := json.Unmarshal(patch, &decoded); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(decoded, filled); diff != "" {
		t.Errorf("Fill and the report's JSON differ: -json, +Fill:\n%s", diff)
	}

	now := syncedAt.Add(30 * time.Second)
	obs, verdict := observation.Pool(&filled, now, 5*time.Minute)
	if verdict.State != observation.Usable || obs == nil {
		t.Fatalf("observation.Pool: want %s, got %s (%s)", observation.Usable, verdict.State, verdict.Reason())
	}
	want := &scheduling.PoolObservation{ObservedAt: r.ObservedAt, ObservedNodes: 200}
	for _, b := range r.NodesByFreeDevices {
		sb := scheduling.Bucket{Nodes: b.Nodes, Free: map[string]int64{}}
		for _, f := range b.Free {
			sb.Free[f.Name] = f.Count
		}
		want.Buckets = append(want.Buckets, sb)
	}
	if diff := cmp.Diff(want, obs); diff != "" {
		t.Errorf("observation.Pool read another report: -want, +got:\n%s", diff)
	}

	// Merged, the report never fits a pod on more nodes than the truth.
	got := make([]group, 0, len(r.NodesByFreeDevices))
	for _, b := range obs.Buckets {
		got = append(got, group{free: []int64{b.Free["gpu"], b.Free["nic"]}, nodes: b.Nodes})
	}
	exact := make([]group, 0, len(truth))
	for _, f := range truth {
		exact = append(exact, group{free: f, nodes: 1})
	}
	for shape := range shapes(2, 8) {
		if have, want := fitting(got, shape), fitting(exact, shape); have > want {
			t.Errorf("the report fits a pod of %v on %d nodes, only %d can take it", shape, have, want)
		}
	}
}

func distinctFree(free [][]int64) int {
	seen := map[string]bool{}
	for _, f := range free {
		seen[fmt.Sprint(f)] = true
	}
	return len(seen)
}

var update = flag.Bool("update", false, "rewrite testdata/ from what the package computes")

// TestPublishedCluster keeps testdata/busy-cluster.yaml, an InferenceCluster
// whose pool carries the report of a busy pool, the report the package
// computes today: test/schemas validates it against the shipped XRD.
func TestPublishedCluster(t *testing.T) {
	pool, v, _ := busyPool(rand.New(rand.NewPCG(3, 5)), 200)
	r, err := PoolReport(t.Context(), pool, v)
	if err != nil {
		t.Fatal(err)
	}
	gpuPool := v1alpha1.GPUPool{Name: pool.Name, Nodes: new(int64(256)), Devices: pool.Devices}
	r.Fill(&gpuPool)
	cluster := map[string]any{
		"apiVersion": v1alpha1.APIVersion,
		"kind":       v1alpha1.KindInferenceCluster,
		"metadata":   map[string]any{"name": "busy"},
		"spec":       map[string]any{"cluster": map[string]any{"source": "Existing", "existing": map[string]any{"secretRef": map[string]any{"name": "busy-kubeconfig", "key": "kubeconfig"}}}},
		"status":     map[string]any{"gpuPools": []any{gpuPool}},
	}
	got, err := yaml.Marshal(cluster)
	if err != nil {
		t.Fatal(err)
	}
	got = append([]byte("# Written by go test ./agent -run TestPublishedCluster -update: the report of a\n# busy pool of 200 nodes, merged to 64 buckets.\n"), got...)
	file := filepath.Join("testdata", "busy-cluster.yaml")
	if *update {
		if err := os.WriteFile(file, got, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s is not the report the package computes; run go test ./agent -run TestPublishedCluster -update:\n%s", file, cmp.Diff(string(want), string(got)))
	}
}
