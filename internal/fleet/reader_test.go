package fleet

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/wiretest"
	"github.com/modelplaneai/fleet-scheduler/internal/wire"
)

// jsonEqual compares raw JSON by meaning, not bytes: key order may differ.
var jsonEqual = cmp.Comparer(func(a, b json.RawMessage) bool {
	var x, y any
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return cmp.Equal(x, y)
})

func TestReadErrors(t *testing.T) {
	set := func(obj any, path []string, v *structpb.Value) *structpb.Struct {
		s := wiretest.StructOf(t, obj)
		f := s
		for _, p := range path[:len(path)-1] {
			f = f.GetFields()[p].GetStructValue()
		}
		f.Fields[path[len(path)-1]] = v
		return s
	}
	pools := func(v *structpb.Value) *structpb.Value {
		l, _ := structpb.NewList([]any{map[string]any{"name": "p", "nodes": 1.0}})
		l.Values[0].GetStructValue().Fields["devices"] = v
		return structpb.NewListValue(l)
	}
	cases := map[string]struct {
		reason string
		read   func() error
		want   string
	}{
		"ReplicaCopiesString": {
			reason: "A wrong type names the field path.",
			read: func() error {
				s := wiretest.StructOf(t, fx.Replica("m", "a", 0).Obj())
				s.Fields["spec"].GetStructValue().Fields["engines"].GetListValue().Values[0].GetStructValue().Fields["copies"] = structpb.NewStringValue("two")
				_, err := readReplicaStruct(s)
				return err
			},
			want: "spec.engines[0].copies: cannot use a string as a whole number",
		},
		"ReplicaFractionalCount": {
			reason: "A fractional count is not a whole number.",
			read: func() error {
				s := wiretest.StructOf(t, fx.Replica("m", "a", 0).Obj())
				m := s.GetFields()["spec"].GetStructValue().GetFields()["engines"].GetListValue().GetValues()[0].GetStructValue().GetFields()["members"].GetListValue().GetValues()[0]
				m.GetStructValue().Fields["deviceRequests"].GetListValue().Values[0].GetStructValue().Fields["count"] = structpb.NewNumberValue(1.5)
				_, err := readReplicaStruct(s)
				return err
			},
			want: "spec.engines[0].members[0].deviceRequests[0].count: cannot use a number as a whole number",
		},
		"ReplicaLabelsList": {
			reason: "Labels that are not an object are refused.",
			read: func() error {
				_, err := readReplicaStruct(set(fx.Replica("m", "a", 0).Obj(), []string{"metadata", "labels"}, structpb.NewListValue(&structpb.ListValue{})))
				return err
			},
			want: "metadata.labels: cannot use a list as an object",
		},
		"ClusterUnusedFieldIgnored": {
			reason: "A malformed cluster field the scheduler has no use for does not fail the call.",
			read: func() error {
				_, err := readClusterStruct(set(fx.Cluster("a").Obj(), []string{"metadata", "labels"}, structpb.NewListValue(&structpb.ListValue{})))
				return err
			},
		},
		"ClusterDeviceTooLarge": {
			reason: "A device larger than a DRA device can be is refused by its size, before its entries are read.",
			read: func() error {
				d := wiretest.StructOf(t, fx.GPU("gpu", 8, "80Gi"))
				d.Fields["attributes"].GetStructValue().Fields["blob"] = structpb.NewStructValue(wiretest.StructOf(t, map[string]any{"string": strings.Repeat("x", maxDeviceBytes)}))
				_, err := readClusterStruct(set(fx.Cluster("a").Obj(), []string{"status", "gpuPools"}, pools(structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStructValue(d)}}))))
				return err
			},
			want: "status.gpuPools[0].devices[0]: 65809 bytes, more than the 65536 a device of at most 32 attributes and capacities can be",
		},
		"ClusterDevicesNumber": {
			reason: "A pool's devices that are not a list are refused.",
			read: func() error {
				_, err := readClusterStruct(set(fx.Cluster("a").Obj(), []string{"status", "gpuPools"}, pools(structpb.NewNumberValue(3))))
				return err
			},
			want: "status.gpuPools[0].devices: cannot use a number as a list",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ""
			if err := tc.read(); err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nerror: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestReadHugeCountIsHeld(t *testing.T) {
	c := fx.Cluster("a").Obj()
	c.Status.GPUPools[0].Nodes = nil
	s := wiretest.StructOf(t, c)
	s.Fields["status"].GetStructValue().Fields["gpuPools"].GetListValue().Values[0].GetStructValue().Fields["nodes"] = structpb.NewNumberValue(1e300)
	got, err := readClusterStruct(s)
	if err != nil {
		t.Fatalf("readCluster(...): %v", err)
	}
	if n := *got.Status.GPUPools[0].Nodes; n != 1<<62 {
		t.Errorf("readClusterStruct(...) nodes: want %d, got %d", int64(1<<62), n)
	}
}

func TestReadTooDeep(t *testing.T) {
	// A list nested deeper than any decoder allows, as an agent report
	// field: it must be refused, not exhaust the stack. Written outside in,
	// each level's length known from the sizes of the levels inside it.
	const depth = maxDepth + 100
	sizes := make([]int, depth+1)
	sizes[0] = 2 // the innermost Value: an empty list_value
	listSize := func(i int) int { return 1 + protowire.SizeVarint(uint64(sizes[i-1])) + sizes[i-1] }
	for i := 1; i <= depth; i++ {
		sizes[i] = 1 + protowire.SizeVarint(uint64(listSize(i))) + listSize(i)
	}
	var v []byte
	for i := depth; i >= 1; i-- {
		v = protowire.AppendVarint(protowire.AppendTag(v, 6, protowire.BytesType), uint64(listSize(i)))
		v = protowire.AppendVarint(protowire.AppendTag(v, 1, protowire.BytesType), uint64(sizes[i-1]))
	}
	v = protowire.AppendVarint(protowire.AppendTag(v, 6, protowire.BytesType), 0)
	if len(v) != sizes[depth] {
		t.Fatalf("built %d bytes, want %d", len(v), sizes[depth])
	}
	var r structReader
	r.decoded(wire.ParseValue(v), "nodesByFreeDevices")
	if r.err == nil || !strings.Contains(r.err.Error(), "nested deeper than") {
		t.Errorf("decoded(...): error %v, want one saying the value is nested too deep", r.err)
	}
}

// TestReadErrorPaths: an error inside decoded JSON or a map of labels names
// the field once (found in review).
func TestReadErrorPaths(t *testing.T) {
	cases := map[string]struct {
		reason string
		read   func() error
		want   string
	}{
		"ObjectInAList": {
			reason: "An object inside a list is named by its index alone.",
			read: func() error {
				obj := wiretest.BytesField(protowire.Number(wire.KindStruct), wiretest.StructEntry("k", []byte{0xff}))
				list := wiretest.BytesField(protowire.Number(wire.KindList), wiretest.BytesField(1, obj))
				var r structReader
				r.decoded(wire.ParseValue(wiretest.BytesField(protowire.Number(wire.KindStruct), wiretest.StructEntry("pools", list))), "status")
				return r.err
			},
			want: "status.pools[0].k: ",
		},
		"MalformedLabels": {
			reason: "Placement labels whose bytes are malformed are named once.",
			read: func() error {
				labels := wiretest.BytesField(protowire.Number(wire.KindStruct), []byte{0x0a, 0x05, 0x01})
				md := wiretest.BytesField(protowire.Number(wire.KindStruct), wiretest.StructEntry("labels", labels))
				pl := wiretest.BytesField(protowire.Number(wire.KindStruct), wiretest.StructEntry("metadata", md))
				spec := wiretest.BytesField(protowire.Number(wire.KindStruct), wiretest.StructEntry("placement", pl))
				name := wiretest.BytesField(protowire.Number(wire.KindStruct), wiretest.StructEntry("name", wiretest.BytesField(protowire.Number(wire.KindString), []byte("c"))))
				var r structReader
				_, err := r.readCluster(wiretest.Cat(wiretest.StructEntry("metadata", name), wiretest.StructEntry("spec", spec)), nil, 0)
				return err
			},
			want: "spec.placement.metadata.labels: ",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.read()
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("%s\nerror: %v, want one starting %q", tc.reason, err, tc.want)
			}
		})
	}
}

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

// TestWhereElidesTheMiddle: the path of a value nested thousands deep is
// spelled out by its two ends, so that a warning stays a line.
func TestWhereElidesTheMiddle(t *testing.T) {
	var r structReader
	r.enter("status", notAnElement)
	r.enter("gpuPools", 0)
	for range 30 {
		r.enter("a", notAnElement)
	}
	want := "status.gpuPools[0].a.a.a.a.a.a.a.a.a.a.(8 more).a.a.a.a.a.a.a.a.a.a.a.a.leaf"
	if got := r.where("leaf"); got != want {
		t.Errorf("where(leaf) of a path 32 deep:\nwant %s\ngot  %s", want, got)
	}
}

// TestReadRefusesInvalidUTF8: protobuf refuses a string that is not UTF-8,
// decoding a request and encoding a response; the reader, which reads the
// fleet in protobuf's place, refuses it too, so that none reaches a
// response (found by FuzzRunFunction: the response did not marshal).
func TestReadRefusesInvalidUTF8(t *testing.T) {
	str := func(s string) []byte { return wiretest.BytesField(3, []byte(s)) }
	obj := func(entries ...[]byte) []byte { return wiretest.BytesField(5, wiretest.Cat(entries...)) }
	list := func(values ...[]byte) []byte {
		var l []byte
		for _, v := range values {
			l = append(l, wiretest.BytesField(1, v)...)
		}
		return wiretest.BytesField(6, l)
	}
	e := wiretest.StructEntry
	cases := map[string]struct {
		reason string
		read   func(b []byte) error
		object []byte
		want   string
	}{
		"ClusterName": {
			reason: "A name, read as a shared string.",
			read:   func(b []byte) error { var r structReader; _, err := readClusterWire(&r, b); return err },
			object: e("metadata", obj(e("name", str("a\xff")))),
			want:   "metadata.name: invalid UTF-8",
		},
		"ReplicaName": {
			reason: "A replica's name, read as a string of its own.",
			read:   func(b []byte) error { var r structReader; _, err := readReplicaWire(&r, b); return err },
			object: e("metadata", obj(e("name", str("r\xff")))),
			want:   "metadata.name: invalid UTF-8",
		},
		"PlacementLabelKey": {
			reason: "A label's key, copied into every replica composed on the cluster.",
			read:   func(b []byte) error { var r structReader; _, err := readClusterWire(&r, b); return err },
			object: e("spec", obj(e("placement", obj(e("metadata", obj(e("labels", obj(e("k\xff", str("v")))))))))),
			want:   "spec.placement.metadata.labels: invalid UTF-8",
		},
		"ReportString": {
			reason: "A string of an agent's report, decoded as JSON.",
			read:   func(b []byte) error { var r structReader; _, err := readClusterWire(&r, b); return err },
			object: e("status", obj(e("gpuPools", list(obj(e("name", str("p")), e("observedAt", str("2026\xff"))))))),
			want:   "status.gpuPools[0]: invalid UTF-8",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ""
			if err := tc.read(tc.object); err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nerror: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
