package fleet

import (
	"testing"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/wiretest"
	"github.com/modelplaneai/fleet-scheduler/internal/wire"
)

// Hand-crafted wire bytes, for what a marshaller never writes: several
// kinds in one Value, duplicate keys, unknown fields, truncations.

// jsonAlphabet mixes ASCII, JSON's escapes, HTML characters encoding/json
// escapes, multi-byte UTF-8 and the line separators JSON escapes too.
var jsonAlphabet = []rune("abcXYZ019 _-./\"\\\n\t\x00\x1f<>&éßñ€✓🚀\u2028\u2029\ufffd")

// fuzzSeeds are valid fleet objects, on the wire, for FuzzReadWire to
// mutate. They are kept small: the fuzzer
// minimizes every input that finds new code, and its time goes to that.
func fuzzSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	at := time.Date(2026, 10, 20, 20, 8, 0, 0, time.UTC)
	// One replica with its pod templates, for the reader to skip.
	replica := wiretest.StructOf(tb, fx.Replica("m", "a", 3).Engines(fx.PinnedGang("main", "h100", 2, fx.Stamped(4))).PodsScheduled("True", at).Obj())
	small := fx.Replica("other", "b", 0).Obj()
	small.Spec.Engines[0].Members[0].Template = nil
	standalone := wiretest.StructOf(tb, small)
	cluster := wiretest.StructOf(tb, fx.Cluster("a").Taint("gpu", "x", "NoSchedule").PlacementLabels(map[string]string{"region": "eu"}).Hostname("a.example.com").
		Pools(fx.Pool("h100", 4).Devices(fx.GPU("gpu", 8, "80Gi")).Observed(at, 3, fx.NodesFree(2, "gpu", 8)).Steered().Obj()).Obj())
	return [][]byte{
		wiretest.Marshalled(tb, replica),
		wiretest.Marshalled(tb, standalone),
		wiretest.Marshalled(tb, cluster),
		wiretest.Marshalled(tb, wiretest.ValueOf(tb, []any{nil, true, 1.5, "s", map[string]any{"k": []any{}}})),
		nil,
	}
}

// readReplicaWire reads a replica as readFleet and readPins do, without a
// cache: its identity, then its engines, even of a replica that failed.
func readReplicaWire(r *structReader, b []byte) (*v1alpha1.ModelReplica, error) {
	observed, spec, err := r.readReplica(b, nil, 0)
	rep := &v1alpha1.ModelReplica{}
	if err == nil {
		rep = observed.replica.Object
	}
	if perr := r.readPins(spec, rep); err == nil {
		err = perr
	}
	return rep, err
}

// readClusterWire reads a cluster as readFleet does, without a cache.
func readClusterWire(r *structReader, b []byte) (*v1alpha1.InferenceCluster, error) {
	c, err := r.readCluster(b, nil, 0)
	if err != nil {
		return nil, err
	}
	return c.Object(), nil
}

func FuzzReadWire(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b)
	}
	// Any bytes may arrive as an object: reading them may fail, never
	// panic. (Whole requests are the codec's and the function's fuzz.)
	f.Fuzz(func(_ *testing.T, b []byte) {
		var r structReader
		_, _ = readReplicaWire(&r, b)
		_, _ = readClusterWire(&r, b)
		r.start()
		_ = r.decoded(wire.ParseValue(b), "")
		_ = nameOf(b)
	})
}

func TestFuzzSeedsRead(t *testing.T) {
	// The fuzz seeds are what they claim: a replica and a cluster that read
	// without error, so mutations start from valid input.
	seeds := fuzzSeeds(t)
	var r structReader
	for _, i := range []int{0, 1} {
		rep, err := readReplicaWire(&r, seeds[i])
		if err != nil || len(rep.Spec.Engines) == 0 {
			t.Errorf("seed %d: readReplicaWire(...): %v, error %v", i, rep, err)
		}
	}
	if c, err := readClusterWire(&r, seeds[2]); err != nil || len(c.Status.GPUPools) != 1 {
		t.Errorf("seed 2: readClusterWire(...): error %v", err)
	}
}
