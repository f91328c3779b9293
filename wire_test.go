package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/fixture"
)

// compareValues compares values by field; raw bytes nil and empty are the
// same bytes, and NaN is the number NaN.
var compareValues = cmp.Options{cmp.AllowUnexported(value{}), cmpopts.EquateEmpty(), cmpopts.EquateNaNs()}

// marshalled is a message's wire bytes, deterministic so that tests can
// compare them.
func marshalled(tb testing.TB, m proto.Message) []byte {
	tb.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		tb.Fatalf("proto.Marshal(...): %v", err)
	}
	return b
}

// valueOf is v, as structpb.NewValue takes it, as a google.protobuf.Value.
func valueOf(tb testing.TB, v any) *structpb.Value {
	tb.Helper()
	pv, err := structpb.NewValue(v)
	if err != nil {
		tb.Fatalf("structpb.NewValue(%v): %v", v, err)
	}
	return pv
}

// structOf is an object, as JSON sees it, as a google.protobuf.Struct.
func structOf(tb testing.TB, obj any) *structpb.Struct {
	tb.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		tb.Fatalf("json.Marshal(...): %v", err)
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(b, s); err != nil {
		tb.Fatalf("protojson.Unmarshal(...): %v", err)
	}
	return s
}

// Hand-crafted wire bytes, for what a marshaller never writes: several
// kinds in one Value, duplicate keys, unknown fields, truncations.

// bytesField is a length-delimited field.
func bytesField(num protowire.Number, payload []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), payload)
}

// varintField is a varint field.
func varintField(num protowire.Number, x uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), x)
}

// fixed64Field is a fixed64 field.
func fixed64Field(num protowire.Number, x uint64) []byte {
	return protowire.AppendFixed64(protowire.AppendTag(nil, num, protowire.Fixed64Type), x)
}

// cat concatenates wire fragments into a message.
func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// structEntry is a Struct's field 1: a map entry of key and Value bytes.
func structEntry(key string, val []byte) []byte {
	return bytesField(1, cat(bytesField(mapKeyField, []byte(key)), bytesField(mapValueField, val)))
}

// protobufValue is what protobuf decodes of a Value's bytes, as a value:
// the oracle parseValue must agree with. ok is false when protobuf refuses
// the bytes.
func protobufValue(tb testing.TB, b []byte) (v value, ok bool) {
	tb.Helper()
	pv := &structpb.Value{}
	if err := proto.Unmarshal(b, pv); err != nil {
		return value{kind: kindMalformed}, false
	}
	switch k := pv.GetKind().(type) {
	case *structpb.Value_NullValue:
		return value{kind: kindNull}, true
	case *structpb.Value_NumberValue:
		return value{kind: kindNumber, num: k.NumberValue}, true
	case *structpb.Value_StringValue:
		return value{kind: kindString, raw: []byte(k.StringValue)}, true
	case *structpb.Value_BoolValue:
		v := value{kind: kindBool}
		if k.BoolValue {
			v.num = 1
		}
		return v, true
	case *structpb.Value_StructValue:
		return value{kind: kindStruct, raw: marshalled(tb, k.StructValue)}, true
	case *structpb.Value_ListValue:
		return value{kind: kindList, raw: marshalled(tb, k.ListValue)}, true
	}
	return value{}, true
}

func TestParseValue(t *testing.T) {
	obj := marshalled(t, &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStringValue("b")}})
	list := marshalled(t, &structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(1), structpb.NewBoolValue(true)}})
	str := marshalled(t, structpb.NewStringValue("héllo, €✓"))
	type args struct {
		b []byte
	}
	type want struct {
		v value
		// protobufDiffers is set where parseValue is deliberately laxer
		// than protobuf, which then must refuse the bytes.
		protobufDiffers bool
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"Null": {
			reason: "A null Value is of kind null.",
			args:   args{b: marshalled(t, structpb.NewNullValue())},
			want:   want{v: value{kind: kindNull}},
		},
		"Number": {
			reason: "A number is read as the float64 it was written as.",
			args:   args{b: marshalled(t, structpb.NewNumberValue(-1.5e-7))},
			want:   want{v: value{kind: kindNumber, num: -1.5e-7}},
		},
		"NumberZero": {
			reason: "Zero is written, as the oneof is set, and read as the number zero, not as absent.",
			args:   args{b: marshalled(t, structpb.NewNumberValue(0))},
			want:   want{v: value{kind: kindNumber}},
		},
		"NaN": {
			reason: "JSON has no NaN, but the wire does: it is a number.",
			args:   args{b: marshalled(t, structpb.NewNumberValue(math.NaN()))},
			want:   want{v: value{kind: kindNumber, num: math.NaN()}},
		},
		"PositiveInfinity": {
			reason: "JSON has no infinity, but the wire does: it is a number.",
			args:   args{b: marshalled(t, structpb.NewNumberValue(math.Inf(1)))},
			want:   want{v: value{kind: kindNumber, num: math.Inf(1)}},
		},
		"String": {
			reason: "A string's bytes are its UTF-8.",
			args:   args{b: str},
			want:   want{v: value{kind: kindString, raw: []byte("héllo, €✓")}},
		},
		"EmptyString": {
			reason: "The empty string is a string, not absent.",
			args:   args{b: marshalled(t, structpb.NewStringValue(""))},
			want:   want{v: value{kind: kindString}},
		},
		"True": {
			reason: "True is the boolean 1.",
			args:   args{b: marshalled(t, structpb.NewBoolValue(true))},
			want:   want{v: value{kind: kindBool, num: 1}},
		},
		"False": {
			reason: "False is written, as the oneof is set, and read as the boolean 0.",
			args:   args{b: marshalled(t, structpb.NewBoolValue(false))},
			want:   want{v: value{kind: kindBool}},
		},
		"BoolAnyNonZeroVarint": {
			reason: "Protobuf reads any varint other than 0 as true.",
			args:   args{b: varintField(protowire.Number(kindBool), 300)},
			want:   want{v: value{kind: kindBool, num: 1}},
		},
		"Struct": {
			reason: "An object is its Struct message's bytes, unread.",
			args:   args{b: marshalled(t, structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStringValue("b")}}))},
			want:   want{v: value{kind: kindStruct, raw: obj}},
		},
		"List": {
			reason: "A list is its ListValue message's bytes, unread.",
			args:   args{b: marshalled(t, structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(1), structpb.NewBoolValue(true)}}))},
			want:   want{v: value{kind: kindList, raw: list}},
		},
		"EmptyList": {
			reason: "An empty list is a list, not absent.",
			args:   args{b: marshalled(t, structpb.NewListValue(&structpb.ListValue{}))},
			want:   want{v: value{kind: kindList}},
		},
		"Nil": {
			reason: "No bytes are a Value with no kind set: absent.",
			args:   args{},
			want:   want{v: value{}},
		},
		"EmptyMessage": {
			reason: "An empty message is a Value with no kind set: absent.",
			args:   args{b: []byte{}},
			want:   want{v: value{}},
		},
		"StringThenNumber": {
			reason: "Of two kinds set, the last wins, as protobuf decodes a oneof.",
			args:   args{b: cat(str, fixed64Field(protowire.Number(kindNumber), math.Float64bits(2)))},
			want:   want{v: value{kind: kindNumber, num: 2}},
		},
		"NumberThenString": {
			reason: "Of two kinds set, the last wins, whichever kind it is.",
			args:   args{b: cat(fixed64Field(protowire.Number(kindNumber), math.Float64bits(2)), str)},
			want:   want{v: value{kind: kindString, raw: []byte("héllo, €✓")}},
		},
		"StringThenNull": {
			reason: "A null set last wins over a string set first.",
			args:   args{b: cat(str, varintField(protowire.Number(kindNull), 0))},
			want:   want{v: value{kind: kindNull}},
		},
		"ListThenBool": {
			reason: "A boolean set last wins over a list set first.",
			args:   args{b: cat(bytesField(protowire.Number(kindList), list), varintField(protowire.Number(kindBool), 0))},
			want:   want{v: value{kind: kindBool}},
		},
		"UnknownFieldSkipped": {
			reason: "A field a Value does not have is skipped, as protobuf keeps it as unknown.",
			args:   args{b: cat(varintField(9, 1), str, bytesField(10, []byte("x")))},
			want:   want{v: value{kind: kindString, raw: []byte("héllo, €✓")}},
		},
		"WrongWireTypeSkipped": {
			reason: "A number written as a varint is not the number field: protobuf keeps it as unknown.",
			args:   args{b: varintField(protowire.Number(kindNumber), 7)},
			want:   want{v: value{}},
		},
		"StringTruncated": {
			reason: "A string shorter than its length is malformed.",
			args:   args{b: str[:len(str)-1]},
			want:   want{v: value{kind: kindMalformed}},
		},
		"NumberTruncated": {
			reason: "A number of fewer than 8 bytes is malformed.",
			args:   args{b: fixed64Field(protowire.Number(kindNumber), math.Float64bits(2))[:5]},
			want:   want{v: value{kind: kindMalformed}},
		},
		"TagTruncated": {
			reason: "A tag cut in the middle of its varint is malformed.",
			args:   args{b: []byte{0x80}},
			want:   want{v: value{kind: kindMalformed}},
		},
		"TrailingGarbage": {
			reason: "A well-formed kind followed by bytes that are no field is malformed.",
			args:   args{b: cat(str, []byte{0xff})},
			want:   want{v: value{kind: kindMalformed}},
		},
		"FieldNumberZero": {
			reason: "Field number 0 is invalid protobuf.",
			args:   args{b: []byte{0x00, 0x00}},
			want:   want{v: value{kind: kindMalformed}},
		},
		"InvalidUTF8": {
			reason: "A string is not checked for UTF-8: its bytes are compared, never printed as JSON, so protobuf's refusal is not worth a pass over every string.",
			args:   args{b: bytesField(protowire.Number(kindString), []byte{0xff, 0xfe})},
			want:   want{v: value{kind: kindString, raw: []byte{0xff, 0xfe}}, protobufDiffers: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := parseValue(tc.args.b)
			if diff := cmp.Diff(tc.want.v, got, compareValues); diff != "" {
				t.Errorf("%s\nparseValue(...): -want, +got:\n%s", tc.reason, diff)
			}
			// The same bytes, as protobuf decodes them.
			pb, ok := protobufValue(t, tc.args.b)
			if tc.want.protobufDiffers {
				if ok {
					t.Errorf("%s\nproto.Unmarshal(...): want an error, got none", tc.reason)
				}
				return
			}
			if diff := cmp.Diff(pb, got, compareValues); diff != "" {
				t.Errorf("%s\nparseValue(...): protobuf's decoding -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestObjectGetAndFields(t *testing.T) {
	str := func(s string) []byte { return marshalled(t, structpb.NewStringValue(s)) }
	num := func(f float64) []byte { return marshalled(t, structpb.NewNumberValue(f)) }
	ab := marshalled(t, structOf(t, map[string]any{"a": "x", "b": 2}))
	type args struct {
		o    object
		keys []string
	}
	cases := map[string]struct {
		reason string
		args   args
		want   []value
	}{
		"PresentKeys": {
			reason: "Each key present is its value.",
			args:   args{o: ab, keys: []string{"b", "a"}},
			want:   []value{{kind: kindNumber, num: 2}, {kind: kindString, raw: []byte("x")}},
		},
		"AbsentKey": {
			reason: "A key not in the object is absent; a key present beside it still read.",
			args:   args{o: ab, keys: []string{"c", "a"}},
			want:   []value{{}, {kind: kindString, raw: []byte("x")}},
		},
		"KeyIsCaseSensitive": {
			reason: "Keys are compared byte for byte.",
			args:   args{o: ab, keys: []string{"A"}},
			want:   []value{{}},
		},
		"NilObject": {
			reason: "No object has no keys.",
			args:   args{keys: []string{"a"}},
			want:   []value{{}},
		},
		"DuplicateKeyLastWins": {
			reason: "Of two entries of a key, the last wins, as when protobuf decodes a map.",
			args:   args{o: cat(structEntry("a", str("first")), structEntry("b", num(1)), structEntry("a", str("second"))), keys: []string{"a", "b"}},
			want:   []value{{kind: kindString, raw: []byte("second")}, {kind: kindNumber, num: 1}},
		},
		"UnknownFieldsSkipped": {
			reason: "Fields other than entries, and entries of the wrong wire type, are skipped.",
			args: args{o: cat(
				varintField(2, 5), structEntry("a", str("x")), bytesField(3, []byte("junk")),
				varintField(1, 7), fixed64Field(4, 1), structEntry("b", num(3)),
			), keys: []string{"a", "b"}},
			want: []value{{kind: kindString, raw: []byte("x")}, {kind: kindNumber, num: 3}},
		},
		"EntryValueBeforeKey": {
			reason: "An entry's value may come before its key.",
			args:   args{o: bytesField(1, cat(bytesField(mapValueField, str("x")), bytesField(mapKeyField, []byte("a")))), keys: []string{"a"}},
			want:   []value{{kind: kindString, raw: []byte("x")}},
		},
		"EntryUnknownFieldSkipped": {
			reason: "A field an entry does not have is skipped.",
			args:   args{o: bytesField(1, cat(bytesField(mapKeyField, []byte("a")), varintField(7, 1), bytesField(mapValueField, str("x")))), keys: []string{"a"}},
			want:   []value{{kind: kindString, raw: []byte("x")}},
		},
		"EntryWithoutValue": {
			reason: "An entry of a key and no value is a Value with no kind set: absent.",
			args:   args{o: bytesField(1, bytesField(mapKeyField, []byte("a"))), keys: []string{"a"}},
			want:   []value{{}},
		},
		"EntryWithoutKey": {
			reason: "An entry of no key is of the empty key.",
			args:   args{o: bytesField(1, bytesField(mapValueField, str("x"))), keys: []string{"", "a"}},
			want:   []value{{kind: kindString, raw: []byte("x")}, {}},
		},
		"ValueOfAnEntryMalformed": {
			reason: "An entry whose value is not a Value reads as malformed; its neighbours do not.",
			args:   args{o: cat(structEntry("a", []byte{0xff}), structEntry("b", num(1))), keys: []string{"a", "b"}},
			want:   []value{{kind: kindMalformed}, {kind: kindNumber, num: 1}},
		},
		"Truncated": {
			reason: "An object cut short is malformed, whatever key is asked for.",
			args:   args{o: ab[:len(ab)-1], keys: []string{"a", "c"}},
			want:   []value{{kind: kindMalformed}, {kind: kindMalformed}},
		},
		"EntryMalformed": {
			reason: "An entry whose own fields are not protobuf makes the object malformed.",
			args:   args{o: cat(structEntry("a", str("x")), bytesField(1, []byte{0x0a, 0x05, 'b'})), keys: []string{"a"}},
			want:   []value{{kind: kindMalformed}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := make([]value, len(tc.args.keys))
			tc.args.o.fields(tc.args.keys, got)
			if diff := cmp.Diff(tc.want, got, compareValues); diff != "" {
				t.Errorf("%s\nfields(%q): -want, +got:\n%s", tc.reason, tc.args.keys, diff)
			}
			for i, k := range tc.args.keys {
				if diff := cmp.Diff(tc.want[i], tc.args.o.get(k), compareValues); diff != "" {
					t.Errorf("%s\nget(%q): -want, +got:\n%s", tc.reason, k, diff)
				}
			}
		})
	}
}

func TestObjectDuplicateKeyAsProtobuf(t *testing.T) {
	// The hand-crafted duplicate of TestObjectGetAndFields, checked against
	// protobuf itself: the map it decodes holds the last entry of a key.
	b := cat(structEntry("a", marshalled(t, structpb.NewStringValue("first"))), structEntry("a", marshalled(t, structpb.NewStringValue("second"))))
	s := &structpb.Struct{}
	if err := proto.Unmarshal(b, s); err != nil {
		t.Fatalf("proto.Unmarshal(...): %v", err)
	}
	want := value{kind: kindString, raw: []byte(s.GetFields()["a"].GetStringValue())}
	if diff := cmp.Diff(want, object(b).get("a"), compareValues); diff != "" {
		t.Errorf("get(%q): protobuf's decoding -want, +got:\n%s", "a", diff)
	}
}

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
			got := r.decoded(parseValue(marshalled(t, valueOf(t, in))), "")
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
	b := bytesField(protowire.Number(kindStruct), cat(
		structEntry("a", marshalled(t, structpb.NewNumberValue(1))),
		structEntry("b", marshalled(t, structpb.NewBoolValue(true))),
		structEntry("a", marshalled(t, structpb.NewStringValue("last"))),
	))
	var want any
	if err := json.Unmarshal([]byte(`{"a": 1, "b": true, "a": "last"}`), &want); err != nil {
		t.Fatalf("json.Unmarshal(...): %v", err)
	}
	var r structReader
	if diff := cmp.Diff(want, r.decoded(parseValue(b), "")); diff != "" {
		t.Errorf("decoded(...): encoding/json's -want, +got:\n%s", diff)
	}
}

func TestDecodedMalformedNamesThePath(t *testing.T) {
	// A malformed value deep in an object is an error naming its path.
	inner := bytesField(protowire.Number(kindList), cat(
		bytesField(1, marshalled(t, structpb.NewNumberValue(1))),
		bytesField(1, []byte{0xff}),
	))
	b := bytesField(protowire.Number(kindStruct), structEntry("pools", inner))
	var r structReader
	r.decoded(parseValue(b), "status")
	got := ""
	if r.err != nil {
		got = r.err.Error()
	}
	want := "status.pools[1]: " + errTruncated.Error()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded(...) error: -want, +got:\n%s", diff)
	}
}

func TestDelimited(t *testing.T) {
	long := strings.Repeat("x", 200)
	type args struct {
		b   []byte
		tag byte
	}
	type want struct {
		field, rest []byte
		ok          bool
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"OneByteLength": {
			reason: "A length under 128 is one byte.",
			args:   args{b: cat(bytesField(1, []byte("abc")), []byte{9}), tag: tagField1},
			want:   want{field: []byte("abc"), rest: []byte{9}, ok: true},
		},
		"LongestOneByteLength": {
			reason: "127 is the longest one-byte length.",
			args:   args{b: bytesField(1, []byte(long[:127])), tag: tagField1},
			want:   want{field: []byte(long[:127]), ok: true},
		},
		"ShortestTwoByteLength": {
			reason: "128 is the shortest two-byte length.",
			args:   args{b: cat(bytesField(2, []byte(long[:128])), []byte{1, 2}), tag: tagField2},
			want:   want{field: []byte(long[:128]), rest: []byte{1, 2}, ok: true},
		},
		"TwoByteLength": {
			reason: "A length of 200 is two bytes.",
			args:   args{b: bytesField(1, []byte(long)), tag: tagField1},
			want:   want{field: []byte(long), ok: true},
		},
		"Empty": {
			reason: "A zero-length field is empty, and ok.",
			args:   args{b: bytesField(1, nil), tag: tagField1},
			want:   want{field: []byte{}, ok: true},
		},
		"OtherTag": {
			reason: "A field under another tag is not read.",
			args:   args{b: bytesField(2, []byte("abc")), tag: tagField1},
		},
		"NoBytes": {
			reason: "Nothing is not a field.",
			args:   args{tag: tagField1},
		},
		"TagOnly": {
			reason: "A tag without its length is truncated.",
			args:   args{b: []byte{tagField1}, tag: tagField1},
		},
		"OneByteLengthTooLong": {
			reason: "A one-byte length past the end is truncated.",
			args:   args{b: []byte{tagField1, 4, 'a', 'b', 'c'}, tag: tagField1},
		},
		"TwoByteLengthTooLong": {
			reason: "A two-byte length past the end is truncated.",
			args:   args{b: bytesField(1, []byte(long))[:150], tag: tagField1},
		},
		"LengthVarintCut": {
			reason: "A length whose varint is cut is truncated.",
			args:   args{b: []byte{tagField1, 0x80}, tag: tagField1},
		},
		"HugeLength": {
			reason: "A length beyond any slice is truncated, not a panic.",
			args:   args{b: cat([]byte{tagField1}, protowire.AppendVarint(nil, math.MaxUint64)), tag: tagField1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			field, rest, ok := delimited(tc.args.b, tc.args.tag)
			got := want{field: field, rest: rest, ok: ok}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\ndelimited(...): -want, +got:\n%s", tc.reason, diff)
			}
			// next reads any field delimited reads, the same.
			if !tc.want.ok {
				return
			}
			_, typ, field, rest, err := next(tc.args.b)
			if err != nil || typ != protowire.BytesType {
				t.Fatalf("%s\nnext(...): type %v, error %v", tc.reason, typ, err)
			}
			got = want{field: field, rest: rest, ok: true}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nnext(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestDelimitedMultiByteLengths(t *testing.T) {
	// A string of 200+ bytes and a key of 130 bytes have two-byte lengths,
	// as do the entry and the Struct holding them: every fast path of
	// wire.go falls through to its varint path.
	long := strings.Repeat("é", 150) // 300 bytes
	key := strings.Repeat("k", 130)
	s := &structpb.Struct{Fields: map[string]*structpb.Value{
		key: structpb.NewStringValue(long),
		"l": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue(long), structpb.NewStringValue("short")}}),
	}}
	b := marshalled(t, structpb.NewStructValue(s))
	if b[1] < 0x80 {
		t.Fatalf("the Value's length is one byte: the test no longer covers long lengths")
	}
	v := parseValue(b)
	if v.kind != kindStruct {
		t.Fatalf("parseValue(...): want an object, got %s", v.describe())
	}
	if diff := cmp.Diff(value{kind: kindString, raw: []byte(long)}, object(v.raw).get(key), compareValues); diff != "" {
		t.Errorf("get(<130-byte key>): -want, +got:\n%s", diff)
	}
	var r structReader
	got := r.decoded(v, "")
	want := map[string]any{key: long, "l": []any{long, "short"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded(...): -want, +got:\n%s", diff)
	}
	if r.err != nil {
		t.Errorf("decoded(...): %v", r.err)
	}
}

func TestWireMergesRepeatedMessagesAsProtobuf(t *testing.T) {
	// Protobuf merges a message field written twice: two struct_values of
	// one Value, two values of one Struct entry, two resources of one
	// Resource. No marshaller splits a message, but protobuf allows it, and
	// the wire readers merge as it does.

	a := marshalled(t, structOf(t, map[string]any{"a": 1}))
	b := marshalled(t, structOf(t, map[string]any{"b": 2}))
	cases := map[string]struct {
		reason string
		wire   []byte
		read   func(b []byte) (any, error)
		want   proto.Message
	}{
		"ValueStructTwice": {
			reason: "Two struct_values of one Value merge into one object.",
			wire:   cat(bytesField(protowire.Number(kindStruct), a), bytesField(protowire.Number(kindStruct), b)),
			read: func(w []byte) (any, error) {
				var r structReader
				return r.decoded(parseValue(w), ""), r.err
			},
			want: &structpb.Value{},
		},
		"EntryValueTwice": {
			reason: "Two values of one entry merge into one value.",
			wire: bytesField(protowire.Number(kindStruct), bytesField(1, cat(bytesField(mapKeyField, []byte("k")),
				bytesField(mapValueField, bytesField(protowire.Number(kindStruct), a)),
				bytesField(mapValueField, bytesField(protowire.Number(kindStruct), b))))),
			read: func(w []byte) (any, error) {
				var r structReader
				return r.decoded(parseValue(w), ""), r.err
			},
			want: &structpb.Value{},
		},
		"ResourceStructTwice": {
			reason: "Two resources of one Resource merge into one Struct.",
			wire:   cat(bytesField(1, a), bytesField(1, b)),
			read: func(w []byte) (any, error) {
				s, err := resourceStruct(w)
				if err != nil {
					return nil, err
				}
				var r structReader
				return r.decoded(value{kind: kindStruct, raw: s}, ""), r.err
			},
			want: &fnv1.Resource{},
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
	replica := structOf(tb, fx.Replica("m", "a", 3).Engines(fx.PinnedGang("main", "h100", 2, fx.Stamped(4))).PodsScheduled("True", at).Obj())
	small := fx.Replica("other", "b", 0).Obj()
	small.Spec.Engines[0].Members[0].Template = nil
	standalone := structOf(tb, small)
	cluster := structOf(tb, fx.Cluster("a").Taint("gpu", "x", "NoSchedule").PlacementLabels(map[string]string{"region": "eu"}).Hostname("a.example.com").
		Pools(fx.Pool("h100", 4).Devices(fx.GPU("gpu", 8, "80Gi")).Observed(at, 3, fx.NodesFree(2, "gpu", 8)).Obj()).Obj())
	req := &fnv1.RunFunctionRequest{
		Meta:  &fnv1.RequestMeta{Tag: "t"},
		Input: structOf(tb, map[string]any{"observationMaxAge": "5m"}),
		RequiredResources: map[string]*fnv1.Resources{
			requiredClusters: {Items: []*fnv1.Resource{{Resource: structOf(tb, map[string]any{"metadata": map[string]any{"name": "a"}})}}},
			requiredReplicas: {Items: []*fnv1.Resource{{Resource: standalone}}},
			requiredCache:    {},
		},
	}
	return [][]byte{
		marshalled(tb, replica),
		marshalled(tb, standalone),
		marshalled(tb, cluster),
		marshalled(tb, valueOf(tb, []any{nil, true, 1.5, "s", map[string]any{"k": []any{}}})),
		marshalled(tb, req),
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
		_ = r.decoded(parseValue(b), "")
		_ = nameOf(b)

		req := &fnv1.RunFunctionRequest{}
		if err := unmarshalRequest(b, req); err != nil {
			return
		}
		// The fleet left on the wire is read as readFleet reads it.
		for _, key := range []string{requiredClusters, requiredReplicas} {
			items, err := wireItems(req.GetRequiredResources()[key])
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
	got := make([]value, len(keys))
	object(b).fields(keys, got)
	for i, k := range keys {
		want := s.GetFields()[k]
		if !sameAsProtobuf(got[i], want) {
			t.Errorf("fields(...)[%q]: got %+v, protobuf decodes %v", k, got[i], want)
		}
	}
}

// sameAsProtobuf is whether v is the value protobuf decoded (nil: absent).
func sameAsProtobuf(v value, pv *structpb.Value) bool {
	switch v.kind {
	case kindAbsent:
		return pv.GetKind() == nil
	case kindNull:
		return isNull(pv)
	case kindNumber:
		n, ok := pv.GetKind().(*structpb.Value_NumberValue)
		return ok && (n.NumberValue == v.num || math.IsNaN(n.NumberValue) && math.IsNaN(v.num))
	case kindString:
		str, ok := pv.GetKind().(*structpb.Value_StringValue)
		return ok && str.StringValue == string(v.raw)
	case kindBool:
		bv, ok := pv.GetKind().(*structpb.Value_BoolValue)
		return ok && bv.BoolValue == (v.num != 0)
	case kindStruct:
		got := &structpb.Struct{}
		return pv.GetStructValue() != nil && proto.Unmarshal(v.raw, got) == nil && proto.Equal(got, pv.GetStructValue())
	case kindList:
		got := &structpb.ListValue{}
		return pv.GetListValue() != nil && proto.Unmarshal(v.raw, got) == nil && proto.Equal(got, pv.GetListValue())
	case kindMalformed:
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
	if err := unmarshalRequest(seeds[4], req); err != nil {
		t.Fatalf("seed 4: unmarshalRequest(...): %v", err)
	}
	items, err := wireItems(req.GetRequiredResources()[requiredReplicas])
	if err != nil || len(items) != 1 {
		t.Errorf("seed 4: wireItems(...): %d items, error %v", len(items), err)
	}
	if diff := cmp.Diff(&fnv1.RequestMeta{Tag: "t"}, req.GetMeta(), protocmp.Transform()); diff != "" {
		t.Errorf("seed 4: unmarshalRequest(...) meta: -want, +got:\n%s", diff)
	}
}

// TestPiecesAmortized: a message written in many pieces is gathered with
// amortized growth, not a copy of everything gathered per piece, whose cost
// a crafted request could make quadratic.
func TestPiecesAmortized(t *testing.T) {
	const n = 10_000
	var b []byte
	for range n {
		b = append(b, bytesField(protowire.Number(kindStruct), structEntry("k", nil))...)
	}
	v := parseValue(b)
	if v.kind != kindStruct || len(v.raw) != n*len(structEntry("k", nil)) {
		t.Fatalf("parseValue of %d pieces: kind %d, %d bytes; want an object of every piece", n, v.kind, len(v.raw))
	}
	// Doubling growth: about log2(n) allocations, where a copy per piece
	// would make n.
	if allocs := testing.AllocsPerRun(5, func() { parseValue(b) }); allocs > 40 {
		t.Errorf("parseValue of %d pieces: %.0f allocations, want at most 40", n, allocs)
	}
}

func TestItemReader(t *testing.T) {
	// An item of n bytes of Struct, as the codec leaves it on the wire:
	// a Resource whose field 1 is the Struct.
	item := func(i, n int) ([]byte, []byte) {
		s := structEntry(fmt.Sprintf("k%d", i), bytes.Repeat([]byte{'x'}, n))
		return s, bytesField(itemsField, bytesField(1, s))
	}
	type want struct {
		items [][]byte
		err   bool
	}
	decoded := structOf(t, map[string]any{"kind": "Decoded"})
	decodedWire, err := proto.Marshal(decoded)
	if err != nil {
		t.Fatalf("proto.Marshal(...): %v", err)
	}
	many := want{}
	var manyWire []byte
	// Items over several batches, some straddling a batch's end.
	for i := range 3 * warmBatchBytes / 20_000 {
		s, w := item(i, 20_000)
		many.items = append(many.items, s)
		manyWire = append(manyWire, w...)
	}
	good, goodWire := item(0, 10)
	cases := map[string]struct {
		reason  string
		decoded []*fnv1.Resource
		wire    []byte
		want    want
	}{
		"ManyBatches": {
			reason: "Every item of a fleet bigger than a batch comes, in order.",
			wire:   manyWire,
			want:   many,
		},
		"DecodedFirst": {
			reason:  "Decoded items come first, encoded back, then those on the wire.",
			decoded: []*fnv1.Resource{{Resource: decoded}},
			wire:    goodWire,
			want:    want{items: [][]byte{decodedWire, good}},
		},
		"OtherFields": {
			reason: "Fields of Resources other than its items are skipped.",
			wire:   cat(varintField(5, 1), goodWire),
			want:   want{items: [][]byte{good}},
		},
		"TruncatedAfterAnItem": {
			reason: "An item the wire does not frame is an error when the reader gets to it, after the items before it.",
			wire:   cat(goodWire, goodWire[:len(goodWire)-1]),
			want:   want{items: [][]byte{good}, err: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res := &fnv1.Resources{Items: tc.decoded}
			res.ProtoReflect().SetUnknown(tc.wire)
			it := newItemReader(res)
			var got want
			for {
				b, ok, err := it.next()
				if err != nil {
					got.err = true
					break
				}
				if !ok {
					break
				}
				got.items = append(got.items, b)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{}), cmp.Comparer(bytes.Equal)); diff != "" {
				t.Errorf("%s\nnext(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
