package controller

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// busyPool fills the view with a pool l4 of n nodes of 8 GPUs, a random
// number of each held by a claim, and returns the claims.
func busyPool(e *env, n int) []string {
	rng := rand.New(rand.NewPCG(1, 1))
	e.add(class(gpuClass, gpuDriver), poolObservation("l4"))
	var names []string
	for i := range n {
		name := fmt.Sprintf("n%04d", i)
		e.add(node(name, "l4"), gpuSlice(name, gpuDriver, 8))
		var held []string
		for d := range rng.IntN(9) {
			held = append(held, fmt.Sprintf("gpu-%d", d))
		}
		e.add(claim("job-"+name, name, held...))
		names = append(names, name)
	}
	return names
}

// BenchmarkPoolRebuild measures a round of the pools' reconciler on a pool
// of 1,000 nodes of 8 GPUs: every node counted (the first round, or after
// the pool's DeviceClass changed), one node recounted after one of its
// claims changed, and a round with nothing changed (a heartbeat). Run it
// with -cpu 1 for one core.
func BenchmarkPoolRebuild(b *testing.B) {
	b.Run("all-nodes", func(b *testing.B) {
		e := newEnv(b)
		busyPool(e, 1000)
		for b.Loop() {
			e.pools().Reconcile(b.Context())
		}
	})
	b.Run("one-claim-changed", func(b *testing.B) {
		e := newEnv(b)
		names := busyPool(e, 1000)
		p := e.pools()
		p.Reconcile(b.Context())
		i := 0
		for b.Loop() {
			i++
			name := names[i%len(names)]
			e.add(claim("job-"+name, name, fmt.Sprintf("gpu-%d", i%8)))
			e.proven = e.proven.Add(time.Second)
			p.Reconcile(b.Context())
		}
	})
	b.Run("nothing-changed", func(b *testing.B) {
		e := newEnv(b)
		busyPool(e, 1000)
		p := e.pools()
		p.Reconcile(b.Context())
		for b.Loop() {
			p.Reconcile(b.Context())
		}
	})
}
