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
