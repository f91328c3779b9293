package agent

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkPoolReport reports pools of 8 GPUs and 8 NICs a node, a random
// number of each held by claims: the cost an agent pays per pool and
// heartbeat, and the simulator per sample.
func BenchmarkPoolReport(b *testing.B) {
	for _, n := range []int{32, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			pool, v, _ := busyPool(rand.New(rand.NewPCG(1, 1)), n)
			for b.Loop() {
				if _, err := PoolReport(b.Context(), pool, v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPartitionedNode reports one node of two GPUs partitionable into
// seven 1g partitions each, by whole GPUs and by partitions.
func BenchmarkPartitionedNode(b *testing.B) {
	pool := gpuPool(poolDev("gpu", gpuDriver, gpuClass, 2), poolDev("mig", gpuDriver, migClass, 14))
	v := View{Nodes: nodes(node("n1")), ResourceSlices: resourceSlices(partitioned("n1")...), DeviceClasses: classes(), SyncedAt: syncedAt}
	for b.Loop() {
		if _, err := PoolReport(b.Context(), pool, v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSteer decides one window of a steered pool: nodes of 8 GPUs, a
// random number free, and four 1-GPU held pods a node, each of a replica
// of its own. Steer scans every node for every pod, so its cost grows with
// pods times nodes; this says what that is at a pool's sizes.
func BenchmarkSteer(b *testing.B) {
	for _, n := range []int{32, 256, 1000} {
		b.Run(fmt.Sprintf("nodes=%d/pods=%d", n, 4*n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			nodes := make([]SteerNode, n)
			for i := range nodes {
				nodes[i] = SteerNode{Name: fmt.Sprintf("node-%04d", i), Free: []int64{r.Int64N(9)}}
			}
			pods := make([]SteerPod, 4*n)
			for i := range pods {
				pods[i] = SteerPod{
					Name:  fmt.Sprintf("default/pod-%05d", i),
					Claim: []int64{1},
					Charge: ChargeOrder{
						Known: true, Namespace: "default", Replica: fmt.Sprintf("replica-%05d", i),
					},
				}
			}
			for b.Loop() {
				Steer(1, nodes, pods)
			}
		})
	}
}
