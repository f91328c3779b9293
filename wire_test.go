package main

import (
	"encoding/json"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/codec"
	fx "github.com/modelplaneai/fleet-scheduler/internal/fixture"
	"github.com/modelplaneai/fleet-scheduler/internal/wire"
	"github.com/modelplaneai/fleet-scheduler/internal/wire/wiretest"
)

// Hand-crafted wire bytes, for what a marshaller never writes: several
// kinds in one Value, duplicate keys, unknown fields, truncations.

// jsonAlphabet mixes ASCII, JSON's escapes, HTML characters encoding/json
// escapes, multi-byte UTF-8 and the line separators JSON escapes too.
var jsonAlphabet = []rune("abcXYZ019 _-./\"\\\n\t\x00\x1f<>&éßñ€✓🚀\u2028\u2029\ufffd")

func randomString(r *rand.Rand) string {
	n := r.IntN(12)
	if r.IntN(20) == 0 {
		n = 100 + r.IntN(200) // long enough for a multi-byte length
	}
	var b strings.Builder
	for range n {
		b.WriteRune(jsonAlphabet[r.IntN(len(jsonAlphabet))])
	}
	return b.String()
}

// randomNumber is a finite float64: JSON has no NaN or infinity, and
// encoding/json writes each finite float64 so that it reads back exactly.
func randomNumber(r *rand.Rand) float64 {
	switch r.IntN(7) {
	case 0:
		return float64(r.IntN(300)) // boxed once under 256
	case 1:
		return -float64(r.IntN(1000))
	case 2:
		return r.NormFloat64() * 1e3
	case 3:
		return math.Float64frombits(r.Uint64()&^(0x7ff<<52) | uint64(r.IntN(0x7ff))<<52) // any finite bit pattern
	case 4:
		return []float64{math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, 1 << 53, 1<<53 + 2, 0.1, math.Copysign(0, -1)}[r.IntN(7)]
	case 5:
		return float64(r.Int64())
	}
	return r.Float64()
}

// randomJSON is a JSON-like value, as encoding/json decodes into an any,
// nested no deeper than depth.
func randomJSON(r *rand.Rand, depth int) any {
	kinds := 6
	if depth == 0 {
		kinds = 4 // leaves only
	}
	switch r.IntN(kinds) {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return randomNumber(r)
	case 3:
		return randomString(r)
	case 4:
		n := r.IntN(6)
		m := make(map[string]any, n)
		for range n {
			m[randomString(r)] = randomJSON(r, depth-1)
		}
		return m
	}
	l := make([]any, r.IntN(6))
	for i := range l {
		l[i] = randomJSON(r, depth-1)
	}
	return l
}

func TestDecodedAsJSON(t *testing.T) {
	// decoded must give exactly what encoding/json gives for the same
	// value: the observation package judges it as decoded JSON.
	var r structReader // one reader for all, as for a fleet: its interned strings must not leak between values
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		for i := range 100 {
			in := randomJSON(rng, 5)
			if i == 0 {
				in = map[string]any{"top": in} // an object at the top, as every fleet object is
			}
			js, err := json.Marshal(in)
			if err != nil {
				t.Fatalf("seed %d, value %d: json.Marshal(...): %v", seed, i, err)
			}
			var want any
			if err := json.Unmarshal(js, &want); err != nil {
				t.Fatalf("seed %d, value %d: json.Unmarshal(...): %v", seed, i, err)
			}
			r.start()
			got := r.decoded(wire.ParseValue(wiretest.Marshalled(t, wiretest.ValueOf(t, in))), "")
			if r.err != nil {
				t.Fatalf("seed %d, value %d: decoded(...): %v", seed, i, r.err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("seed %d, value %d: decoded(...) of %s: encoding/json's -want, +got:\n%s", seed, i, js, diff)
			}
		}
	}
}

func TestDecodedDuplicateKeyLastWins(t *testing.T) {
	// encoding/json keeps the last of a duplicated key; so must decoded.
	b := wiretest.BytesField(protowire.Number(wire.KindStruct), wiretest.Cat(
		wiretest.StructEntry("a", wiretest.Marshalled(t, structpb.NewNumberValue(1))),
		wiretest.StructEntry("b", wiretest.Marshalled(t, structpb.NewBoolValue(true))),
		wiretest.StructEntry("a", wiretest.Marshalled(t, structpb.NewStringValue("last"))),
	))
	var want any
	if err := json.Unmarshal([]byte(`{"a": 1, "b": true, "a": "last"}`), &want); err != nil {
		t.Fatalf("json.Unmarshal(...): %v", err)
	}
	var r structReader
	if diff := cmp.Diff(want, r.decoded(wire.ParseValue(b), "")); diff != "" {
		t.Errorf("decoded(...): encoding/json's -want, +got:\n%s", diff)
	}
}

func TestDecodedMalformedNamesThePath(t *testing.T) {
	// A malformed value deep in an object is an error naming its path.
	inner := wiretest.BytesField(protowire.Number(wire.KindList), wiretest.Cat(
		wiretest.BytesField(1, wiretest.Marshalled(t, structpb.NewNumberValue(1))),
		wiretest.BytesField(1, []byte{0xff}),
	))
	b := wiretest.BytesField(protowire.Number(wire.KindStruct), wiretest.StructEntry("pools", inner))
	var r structReader
	r.decoded(wire.ParseValue(b), "status")
	got := ""
	if r.err != nil {
		got = r.err.Error()
	}
	want := "status.pools[1]: " + wire.ErrTruncated.Error()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded(...) error: -want, +got:\n%s", diff)
	}
}

func TestWireMergesRepeatedMessagesAsProtobuf(t *testing.T) {
	// Protobuf merges a message field written twice: two struct_values of
	// one Value, two values of one Struct entry, two resources of one
	// Resource. No marshaller splits a message, but protobuf allows it, and
	// the wire readers merge as it does.

	a := wiretest.Marshalled(t, wiretest.StructOf(t, map[string]any{"a": 1}))
	b := wiretest.Marshalled(t, wiretest.StructOf(t, map[string]any{"b": 2}))
	cases := map[string]struct {
		reason string
		wire   []byte
		read   func(b []byte) (any, error)
		want   proto.Message
	}{
		"ValueStructTwice": {
			reason: "Two struct_values of one Value merge into one object.",
			wire:   wiretest.Cat(wiretest.BytesField(protowire.Number(wire.KindStruct), a), wiretest.BytesField(protowire.Number(wire.KindStruct), b)),
			read: func(w []byte) (any, error) {
				var r structReader
				return r.decoded(wire.ParseValue(w), ""), r.err
			},
			want: &structpb.Value{},
		},
		"EntryValueTwice": {
			reason: "Two values of one entry merge into one value.",
			wire: wiretest.BytesField(protowire.Number(wire.KindStruct), wiretest.BytesField(1, wiretest.Cat(wiretest.BytesField(1, []byte("k")),
				wiretest.BytesField(2, wiretest.BytesField(protowire.Number(wire.KindStruct), a)),
				wiretest.BytesField(2, wiretest.BytesField(protowire.Number(wire.KindStruct), b))))),
			read: func(w []byte) (any, error) {
				var r structReader
				return r.decoded(wire.ParseValue(w), ""), r.err
			},
			want: &structpb.Value{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if err := proto.Unmarshal(tc.wire, tc.want); err != nil {
				t.Fatalf("proto.Unmarshal(...): %v", err)
			}
			var want any
			js, err := protojson.Marshal(tc.want)
			if err != nil {
				t.Fatalf("protojson.Marshal(...): %v", err)
			}
			if err := json.Unmarshal(js, &want); err != nil {
				t.Fatalf("json.Unmarshal(...): %v", err)
			}
			if res, ok := want.(map[string]any)["resource"]; ok {
				want = res
			}
			got, err := tc.read(tc.wire)
			if err != nil {
				t.Fatalf("%s\nread: %v", tc.reason, err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s\nread: protobuf's -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// fuzzSeeds are valid fleet objects and a request carrying them, on the
// wire, for FuzzReadWire to mutate. They are kept small: the fuzzer
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
		Pools(fx.Pool("h100", 4).Devices(fx.GPU("gpu", 8, "80Gi")).Observed(at, 3, fx.NodesFree(2, "gpu", 8)).Obj()).Obj())
	req := &fnv1.RunFunctionRequest{
		Meta:  &fnv1.RequestMeta{Tag: "t"},
		Input: wiretest.StructOf(tb, map[string]any{"observationMaxAge": "5m"}),
		RequiredResources: map[string]*fnv1.Resources{
			requiredClusters: {Items: []*fnv1.Resource{{Resource: wiretest.StructOf(tb, map[string]any{"metadata": map[string]any{"name": "a"}})}}},
			requiredReplicas: {Items: []*fnv1.Resource{{Resource: standalone}}},
			requiredCache:    {},
		},
	}
	return [][]byte{
		wiretest.Marshalled(tb, replica),
		wiretest.Marshalled(tb, standalone),
		wiretest.Marshalled(tb, cluster),
		wiretest.Marshalled(tb, wiretest.ValueOf(tb, []any{nil, true, 1.5, "s", map[string]any{"k": []any{}}})),
		wiretest.Marshalled(tb, req),
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
	// Any bytes may arrive: reading them may fail, never panic; and what
	// protobuf decodes as a Struct, fields reads as protobuf does.
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFieldsAsProtobuf(t, b)
		var r structReader
		_, _ = readReplicaWire(&r, b)
		_, _ = readClusterWire(&r, b)
		r.start()
		_ = r.decoded(wire.ParseValue(b), "")
		_ = nameOf(b)

		req := &fnv1.RunFunctionRequest{}
		if err := testCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, req); err != nil {
			return
		}
		defer testCodec.Release(req)
		// The fleet left on the wire is read as readFleet reads it.
		for _, key := range []string{requiredClusters, requiredReplicas} {
			items, err := codec.All(req.GetRequiredResources()[key])
			if err != nil {
				continue
			}
			for _, item := range items {
				_, _ = readReplicaWire(&r, item)
				_, _ = readClusterWire(&r, item)
			}
		}
	})
}

// checkFieldsAsProtobuf checks that, of bytes protobuf decodes as a
// Struct, object.fields reads every key (and one absent) as protobuf's
// decoding holds it.
func checkFieldsAsProtobuf(t *testing.T, b []byte) {
	t.Helper()
	s := &structpb.Struct{}
	if err := proto.Unmarshal(b, s); err != nil {
		return
	}
	keys := slices.Sorted(maps.Keys(s.GetFields()))
	keys = append(keys[:min(len(keys), 7)], "\x00absent")
	got := make([]wire.Value, len(keys))
	wire.Object(b).Fields(keys, got)
	for i, k := range keys {
		want := s.GetFields()[k]
		if !sameAsProtobuf(got[i], want) {
			t.Errorf("fields(...)[%q]: got %+v, protobuf decodes %v", k, got[i], want)
		}
	}
}

// sameAsProtobuf is whether v is the value protobuf decoded (nil: absent).
func sameAsProtobuf(v wire.Value, pv *structpb.Value) bool {
	switch v.Kind {
	case wire.KindAbsent:
		return pv.GetKind() == nil
	case wire.KindNull:
		return isNull(pv)
	case wire.KindNumber:
		n, ok := pv.GetKind().(*structpb.Value_NumberValue)
		return ok && (n.NumberValue == v.Num || math.IsNaN(n.NumberValue) && math.IsNaN(v.Num))
	case wire.KindString:
		str, ok := pv.GetKind().(*structpb.Value_StringValue)
		return ok && str.StringValue == string(v.Raw)
	case wire.KindBool:
		bv, ok := pv.GetKind().(*structpb.Value_BoolValue)
		return ok && bv.BoolValue == (v.Num != 0)
	case wire.KindStruct:
		got := &structpb.Struct{}
		return pv.GetStructValue() != nil && proto.Unmarshal(v.Raw, got) == nil && proto.Equal(got, pv.GetStructValue())
	case wire.KindList:
		got := &structpb.ListValue{}
		return pv.GetListValue() != nil && proto.Unmarshal(v.Raw, got) == nil && proto.Equal(got, pv.GetListValue())
	case wire.KindMalformed:
	}
	return false
}

func isNull(pv *structpb.Value) bool {
	_, ok := pv.GetKind().(*structpb.Value_NullValue)
	return ok
}

func TestFuzzSeedsRead(t *testing.T) {
	// The fuzz seeds are what they claim: a replica, a cluster and a
	// request that read without error, so mutations start from valid input.
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
	req := &fnv1.RunFunctionRequest{}
	if err := testCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(seeds[4])}, req); err != nil {
		t.Fatalf("seed 4: Unmarshal(...): %v", err)
	}
	defer testCodec.Release(req)
	items, err := codec.All(req.GetRequiredResources()[requiredReplicas])
	if err != nil || len(items) != 1 {
		t.Errorf("seed 4: codec.All(...): %d items, error %v", len(items), err)
	}
	if diff := cmp.Diff(&fnv1.RequestMeta{Tag: "t"}, req.GetMeta(), protocmp.Transform()); diff != "" {
		t.Errorf("seed 4: Unmarshal(...) meta: -want, +got:\n%s", diff)
	}
}
