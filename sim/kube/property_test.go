package kube

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestBinderNeverOvercommits binds and deletes random pods on random
// nodes and checks, after every step, that no node holds more cpu, memory,
// pods or devices than it has, no device is held twice, and no two pods of
// a gang share a node.
func TestBinderNeverOvercommits(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var nodes []*nodeWrapper
		for i := range 2 + rng.IntN(6) {
			nodes = append(nodes, makeNode(fmt.Sprintf("n%d", i)).cpu(fmt.Sprint(4+rng.IntN(28))).gpus(rng.IntN(9), "80Gi"))
		}
		c := cluster(nodes...)
		prof := Default
		if seed%2 == 1 {
			prof = MostAllocated
		}
		var bound []*Pod
		for step := range 60 {
			if len(bound) > 0 && rng.IntN(4) == 0 {
				i := rng.IntN(len(bound))
				if err := c.RemovePod(bound[i]); err != nil {
					t.Fatal(err)
				}
				bound = append(bound[:i], bound[i+1:]...)
				continue
			}
			w := makePod(fmt.Sprintf("p%d", step)).requests(fmt.Sprint(1+rng.IntN(8)), fmt.Sprintf("%dGi", 1+rng.IntN(64)))
			if g := rng.IntN(4); g > 0 {
				gang := fmt.Sprintf("g%d", g)
				w = w.labels("gang", gang).antiAffinity("gang", gang)
			}
			if n := rng.Int64N(5); n > 0 {
				w = w.claim(Exactly("g", gpuClass, n))
			}
			p := w.obj()
			node, _, err := c.Schedule(context.Background(), p, prof, rng)
			if err != nil {
				t.Fatal(err)
			}
			if node != "" {
				bound = append(bound, p)
			}
			if err := checkNodes(c); err != nil {
				t.Fatalf("seed %d, step %d: %v", seed, step, err)
			}
		}
	}
}

func checkNodes(c *Cluster) error {
	held := map[string]string{}
	for _, n := range c.Nodes() {
		var cpu, mem int64
		gangs := map[string]bool{}
		devices := map[string]bool{}
		for _, s := range n.Slices {
			for _, d := range s.Spec.Devices {
				devices[s.Spec.Driver+"/"+d.Name] = true
			}
		}
		for _, p := range n.Pods {
			for _, ctr := range p.Obj.Spec.Containers {
				cpu += ctr.Resources.Requests.Cpu().MilliValue()
				mem += ctr.Resources.Requests.Memory().Value()
			}
			if g := p.Obj.Labels["gang"]; g != "" {
				if gangs[g] {
					return fmt.Errorf("node %s holds two pods of gang %s", n.Obj.Name, g)
				}
				gangs[g] = true
			}
			for _, rc := range p.Claims {
				for _, r := range rc.Status.Allocation.Devices.Results {
					id := r.Driver + "/" + r.Device
					if r.Pool != n.Obj.Name || !devices[id] {
						return fmt.Errorf("pod %s on %s holds %s of pool %s, not the node's", p.Obj.Name, n.Obj.Name, id, r.Pool)
					}
					key := r.Pool + "/" + id
					if other, ok := held[key]; ok {
						return fmt.Errorf("pods %s and %s both hold %s", other, p.Obj.Name, key)
					}
					held[key] = p.Obj.Name
				}
			}
		}
		allocCPU, allocMem := n.Obj.Status.Allocatable[corev1.ResourceCPU], n.Obj.Status.Allocatable[corev1.ResourceMemory]
		if cpu > allocCPU.MilliValue() || mem > allocMem.Value() || len(n.Pods) > MaxPods {
			return fmt.Errorf("node %s holds %dm cpu, %d memory, %d pods, more than it has", n.Obj.Name, cpu, mem, len(n.Pods))
		}
	}
	return nil
}
