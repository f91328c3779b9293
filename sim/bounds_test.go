package sim

import (
	"testing"
)

// TestBoundsHold runs every scenario under every mode and binder and
// wants no result above its bound: running replicas at the end at most the
// replica bound, and GPUs allocated in every round at most that round's
// bound. Placed replicas may exceed the replica bound by those Pending.
// The binders are the default profile, the bin-packing one, and random.
func TestBoundsHold(t *testing.T) {
	binders := []Binder{KubeDefault, KubeMostAllocated, Random}
	if testing.Short() {
		binders = binders[:1]
	}
	for _, sc := range Scenarios() {
		b := Limit(sc)
		for _, m := range Modes() {
			for _, bi := range binders {
				res, err := Run(sc.Config(m, bi, Direct{Input: Input(m.Binding)}))
				if err != nil {
					t.Fatalf("%s, %s, %s: %v", sc.Name, m.Name, bi, err)
				}
				if res.Running > b.Replicas {
					t.Errorf("%s, %s, %s: %d replicas running, above the bound of %d", sc.Name, m.Name, bi, res.Running, b.Replicas)
				}
				for _, p := range res.Series {
					if bound := b.Instant(p.Wanted, p.DemandGPUs, res.FleetGPUs); p.GPUs > bound {
						t.Errorf("%s, %s, %s: round %d allocates %d GPUs, above its bound of %d", sc.Name, m.Name, bi, p.Round, p.GPUs, bound)
					}
				}
			}
		}
	}
}
