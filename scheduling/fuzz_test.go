package scheduling

import (
	"math/rand/v2"
	"reflect"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzSchedule decodes a small fleet and deployment from the fuzz bytes (the
// property tests' generator, its choices read from the bytes) and checks
// that a pass never panics or errs on it, never overcommits a pool, keeps
// every retainable replica where it is, gives the same plan for the same
// inputs in any order, and, unless counts are huge, the plan of the
// whole-node oracle (no reports) or of the node-by-node oracle (reports). The first byte picks the options: bit 0 lets
// pools carry agent reports, bit 1 lets counts grow huge, bit 2 assumes
// LeastFree. .ci/run can fuzz it for a fixed time:
//
//	go test ./scheduling -run '^$' -fuzz '^FuzzSchedule$' -fuzztime 20s
//
// Without -fuzz, go test runs only the seed corpus.
func FuzzSchedule(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0})
	f.Add([]byte{1, 3, 1, 1, 2, 0, 5, 1, 4, 0, 0, 2, 1, 3})
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{5, 2, 9, 9, 3, 2, 2, 2, 1, 4, 4, 4, 0, 1, 2, 3, 6, 6, 6, 6, 1, 1})
	rng := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		b := make([]byte, 64+rng.IntN(128))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		f.Add(b)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		var mode byte
		if len(data) > 0 {
			mode, data = data[0], data[1:]
		}
		o := genOptions{observe: mode&1 != 0, huge: mode&2 != 0}
		binding := MostFree
		if mode&4 != 0 {
			binding = LeastFree
		}
		// The shuffle seed comes from the bytes too, so a failure
		// reproduces from its input alone.
		var seed uint64
		for _, b := range data {
			seed = seed*31 + uint64(b)
		}
		fleet := genFleet(&byteChooser{b: data}, o)

		s := fleet.snapshot()
		s.Options.Binding = binding
		plan, p, err := schedule(s)
		if err != nil {
			t.Fatalf("schedule: %v", err)
		}
		if p.ledger != nil {
			for _, msg := range overcommits(fleet, plan, p, !o.huge) {
				t.Errorf("%s", msg)
			}
		}

		want := sortPlacements(oracleScaleDown(oracleRetain(fleet), int(max(fleet.d.replicas, 0))))
		got := []oPlacement{}
		for _, pl := range fromPlan(plan) {
			if !pl.New {
				got = append(got, pl)
			}
		}
		if diff := gocmp.Diff(want, got); diff != "" {
			t.Errorf("retained replicas: -want, +got:\n%s", diff)
		}
		if len(plan.Replicas) > int(plan.Wanted) {
			t.Errorf("%d replicas for %d wanted", len(plan.Replicas), plan.Wanted)
		}
		if !o.observe {
			want, short := oracleWholeNode(fleet)
			if diff := gocmp.Diff(want, fromPlan(plan)); diff != "" && !o.huge {
				t.Errorf("against the whole-node oracle: -want, +got:\n%s", diff)
			}
			if diff := gocmp.Diff(short, plan.Shortfall, cmpopts.EquateEmpty(), ignoreUnmatched); diff != "" && !o.huge {
				t.Errorf("shortfall against the whole-node oracle: -want, +got:\n%s", diff)
			}
		}

		if o.observe && !o.huge {
			if diff := gocmp.Diff(oracleFreeDevice(fleet, binding), fromPlan(plan)); diff != "" {
				t.Errorf("against the node-by-node oracle: -want, +got:\n%s", diff)
			}
		}

		again := shuffled(rand.New(rand.NewPCG(seed, 3)), fleet.snapshot())
		again.Options.Binding = binding
		plan2, err := Schedule(again)
		if err != nil {
			t.Fatalf("Schedule(shuffled): %v", err)
		}
		if !reflect.DeepEqual(plan, plan2) {
			t.Errorf("Schedule(shuffled): -want, +got:\n%s", gocmp.Diff(plan, plan2))
		}
	})
}
