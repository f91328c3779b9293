package wire

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/modelplaneai/fleet-scheduler/internal/testkit/wiretest"
)

// compareValues compares values by field; raw bytes nil and empty are the
// same bytes, and NaN is the number NaN.
var compareValues = cmp.Options{cmp.AllowUnexported(Value{}), cmpopts.EquateEmpty(), cmpopts.EquateNaNs()}

// protobufValue is what protobuf decodes of a Value's bytes, as a value:
// the oracle parseValue must agree with. ok is false when protobuf refuses
// the bytes.
func protobufValue(tb testing.TB, b []byte) (v Value, ok bool) {
	tb.Helper()
	pv := &structpb.Value{}
	if err := proto.Unmarshal(b, pv); err != nil {
		return Value{Kind: KindMalformed}, false
	}
	switch k := pv.GetKind().(type) {
	case *structpb.Value_NullValue:
		return Value{Kind: KindNull}, true
	case *structpb.Value_NumberValue:
		return Value{Kind: KindNumber, Num: k.NumberValue}, true
	case *structpb.Value_StringValue:
		return Value{Kind: KindString, Raw: []byte(k.StringValue)}, true
	case *structpb.Value_BoolValue:
		v := Value{Kind: KindBool}
		if k.BoolValue {
			v.Num = 1
		}
		return v, true
	case *structpb.Value_StructValue:
		return Value{Kind: KindStruct, Raw: wiretest.Marshalled(tb, k.StructValue)}, true
	case *structpb.Value_ListValue:
		return Value{Kind: KindList, Raw: wiretest.Marshalled(tb, k.ListValue)}, true
	}
	return Value{}, true
}

func TestParseValue(t *testing.T) {
	obj := wiretest.Marshalled(t, &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStringValue("b")}})
	list := wiretest.Marshalled(t, &structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(1), structpb.NewBoolValue(true)}})
	str := wiretest.Marshalled(t, structpb.NewStringValue("héllo, €✓"))
	type args struct {
		b []byte
	}
	type want struct {
		v Value
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
			args:   args{b: wiretest.Marshalled(t, structpb.NewNullValue())},
			want:   want{v: Value{Kind: KindNull}},
		},
		"Number": {
			reason: "A number is read as the float64 it was written as.",
			args:   args{b: wiretest.Marshalled(t, structpb.NewNumberValue(-1.5e-7))},
			want:   want{v: Value{Kind: KindNumber, Num: -1.5e-7}},
		},
		"NumberZero": {
			reason: "Zero is written, as the oneof is set, and read as the number zero, not as absent.",
			args:   args{b: wiretest.Marshalled(t, structpb.NewNumberValue(0))},
			want:   want{v: Value{Kind: KindNumber}},
		},
		"NaN": {
			reason: "JSON has no NaN, but the wire does: it is a number.",
			args:   args{b: wiretest.Marshalled(t, structpb.NewNumberValue(math.NaN()))},
			want:   want{v: Value{Kind: KindNumber, Num: math.NaN()}},
		},
		"PositiveInfinity": {
			reason: "JSON has no infinity, but the wire does: it is a number.",
			args:   args{b: wiretest.Marshalled(t, structpb.NewNumberValue(math.Inf(1)))},
			want:   want{v: Value{Kind: KindNumber, Num: math.Inf(1)}},
		},
		"String": {
			reason: "A string's bytes are its UTF-8.",
			args:   args{b: str},
			want:   want{v: Value{Kind: KindString, Raw: []byte("héllo, €✓")}},
		},
		"EmptyString": {
			reason: "The empty string is a string, not absent.",
			args:   args{b: wiretest.Marshalled(t, structpb.NewStringValue(""))},
			want:   want{v: Value{Kind: KindString}},
		},
		"True": {
			reason: "True is the boolean 1.",
			args:   args{b: wiretest.Marshalled(t, structpb.NewBoolValue(true))},
			want:   want{v: Value{Kind: KindBool, Num: 1}},
		},
		"False": {
			reason: "False is written, as the oneof is set, and read as the boolean 0.",
			args:   args{b: wiretest.Marshalled(t, structpb.NewBoolValue(false))},
			want:   want{v: Value{Kind: KindBool}},
		},
		"BoolAnyNonZeroVarint": {
			reason: "Protobuf reads any varint other than 0 as true.",
			args:   args{b: wiretest.VarintField(protowire.Number(KindBool), 300)},
			want:   want{v: Value{Kind: KindBool, Num: 1}},
		},
		"Struct": {
			reason: "An object is its Struct message's bytes, unread.",
			args:   args{b: wiretest.Marshalled(t, structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStringValue("b")}}))},
			want:   want{v: Value{Kind: KindStruct, Raw: obj}},
		},
		"List": {
			reason: "A list is its ListValue message's bytes, unread.",
			args:   args{b: wiretest.Marshalled(t, structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(1), structpb.NewBoolValue(true)}}))},
			want:   want{v: Value{Kind: KindList, Raw: list}},
		},
		"EmptyList": {
			reason: "An empty list is a list, not absent.",
			args:   args{b: wiretest.Marshalled(t, structpb.NewListValue(&structpb.ListValue{}))},
			want:   want{v: Value{Kind: KindList}},
		},
		"Nil": {
			reason: "No bytes are a Value with no kind set: absent.",
			args:   args{},
			want:   want{v: Value{}},
		},
		"EmptyMessage": {
			reason: "An empty message is a Value with no kind set: absent.",
			args:   args{b: []byte{}},
			want:   want{v: Value{}},
		},
		"StringThenNumber": {
			reason: "Of two kinds set, the last wins, as protobuf decodes a oneof.",
			args:   args{b: wiretest.Cat(str, wiretest.Fixed64Field(protowire.Number(KindNumber), math.Float64bits(2)))},
			want:   want{v: Value{Kind: KindNumber, Num: 2}},
		},
		"NumberThenString": {
			reason: "Of two kinds set, the last wins, whichever kind it is.",
			args:   args{b: wiretest.Cat(wiretest.Fixed64Field(protowire.Number(KindNumber), math.Float64bits(2)), str)},
			want:   want{v: Value{Kind: KindString, Raw: []byte("héllo, €✓")}},
		},
		"StringThenNull": {
			reason: "A null set last wins over a string set first.",
			args:   args{b: wiretest.Cat(str, wiretest.VarintField(protowire.Number(KindNull), 0))},
			want:   want{v: Value{Kind: KindNull}},
		},
		"ListThenBool": {
			reason: "A boolean set last wins over a list set first.",
			args:   args{b: wiretest.Cat(wiretest.BytesField(protowire.Number(KindList), list), wiretest.VarintField(protowire.Number(KindBool), 0))},
			want:   want{v: Value{Kind: KindBool}},
		},
		"UnknownFieldSkipped": {
			reason: "A field a Value does not have is skipped, as protobuf keeps it as unknown.",
			args:   args{b: wiretest.Cat(wiretest.VarintField(9, 1), str, wiretest.BytesField(10, []byte("x")))},
			want:   want{v: Value{Kind: KindString, Raw: []byte("héllo, €✓")}},
		},
		"WrongWireTypeSkipped": {
			reason: "A number written as a varint is not the number field: protobuf keeps it as unknown.",
			args:   args{b: wiretest.VarintField(protowire.Number(KindNumber), 7)},
			want:   want{v: Value{}},
		},
		"StringTruncated": {
			reason: "A string shorter than its length is malformed.",
			args:   args{b: str[:len(str)-1]},
			want:   want{v: Value{Kind: KindMalformed}},
		},
		"NumberTruncated": {
			reason: "A number of fewer than 8 bytes is malformed.",
			args:   args{b: wiretest.Fixed64Field(protowire.Number(KindNumber), math.Float64bits(2))[:5]},
			want:   want{v: Value{Kind: KindMalformed}},
		},
		"TagTruncated": {
			reason: "A tag cut in the middle of its varint is malformed.",
			args:   args{b: []byte{0x80}},
			want:   want{v: Value{Kind: KindMalformed}},
		},
		"TrailingGarbage": {
			reason: "A well-formed kind followed by bytes that are no field is malformed.",
			args:   args{b: wiretest.Cat(str, []byte{0xff})},
			want:   want{v: Value{Kind: KindMalformed}},
		},
		"FieldNumberZero": {
			reason: "Field number 0 is invalid protobuf.",
			args:   args{b: []byte{0x00, 0x00}},
			want:   want{v: Value{Kind: KindMalformed}},
		},
		"InvalidUTF8": {
			reason: "A string is not checked for UTF-8: its bytes are compared, never printed as JSON, so protobuf's refusal is not worth a pass over every string.",
			args:   args{b: wiretest.BytesField(protowire.Number(KindString), []byte{0xff, 0xfe})},
			want:   want{v: Value{Kind: KindString, Raw: []byte{0xff, 0xfe}}, protobufDiffers: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ParseValue(tc.args.b)
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
	str := func(s string) []byte { return wiretest.Marshalled(t, structpb.NewStringValue(s)) }
	num := func(f float64) []byte { return wiretest.Marshalled(t, structpb.NewNumberValue(f)) }
	ab := wiretest.Marshalled(t, &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStringValue("x"), "b": structpb.NewNumberValue(2)}})
	type args struct {
		o    Object
		keys []string
	}
	cases := map[string]struct {
		reason string
		args   args
		want   []Value
	}{
		"PresentKeys": {
			reason: "Each key present is its value.",
			args:   args{o: ab, keys: []string{"b", "a"}},
			want:   []Value{{Kind: KindNumber, Num: 2}, {Kind: KindString, Raw: []byte("x")}},
		},
		"AbsentKey": {
			reason: "A key not in the object is absent; a key present beside it still read.",
			args:   args{o: ab, keys: []string{"c", "a"}},
			want:   []Value{{}, {Kind: KindString, Raw: []byte("x")}},
		},
		"KeyIsCaseSensitive": {
			reason: "Keys are compared byte for byte.",
			args:   args{o: ab, keys: []string{"A"}},
			want:   []Value{{}},
		},
		"NilObject": {
			reason: "No object has no keys.",
			args:   args{keys: []string{"a"}},
			want:   []Value{{}},
		},
		"DuplicateKeyLastWins": {
			reason: "Of two entries of a key, the last wins, as when protobuf decodes a map.",
			args:   args{o: wiretest.Cat(wiretest.StructEntry("a", str("first")), wiretest.StructEntry("b", num(1)), wiretest.StructEntry("a", str("second"))), keys: []string{"a", "b"}},
			want:   []Value{{Kind: KindString, Raw: []byte("second")}, {Kind: KindNumber, Num: 1}},
		},
		"UnknownFieldsSkipped": {
			reason: "Fields other than entries, and entries of the wrong wire type, are skipped.",
			args: args{o: wiretest.Cat(
				wiretest.VarintField(2, 5), wiretest.StructEntry("a", str("x")), wiretest.BytesField(3, []byte("junk")),
				wiretest.VarintField(1, 7), wiretest.Fixed64Field(4, 1), wiretest.StructEntry("b", num(3)),
			), keys: []string{"a", "b"}},
			want: []Value{{Kind: KindString, Raw: []byte("x")}, {Kind: KindNumber, Num: 3}},
		},
		"EntryValueBeforeKey": {
			reason: "An entry's value may come before its key.",
			args:   args{o: wiretest.BytesField(1, wiretest.Cat(wiretest.BytesField(2, str("x")), wiretest.BytesField(1, []byte("a")))), keys: []string{"a"}},
			want:   []Value{{Kind: KindString, Raw: []byte("x")}},
		},
		"EntryUnknownFieldSkipped": {
			reason: "A field an entry does not have is skipped.",
			args:   args{o: wiretest.BytesField(1, wiretest.Cat(wiretest.BytesField(1, []byte("a")), wiretest.VarintField(7, 1), wiretest.BytesField(2, str("x")))), keys: []string{"a"}},
			want:   []Value{{Kind: KindString, Raw: []byte("x")}},
		},
		"EntryWithoutValue": {
			reason: "An entry of a key and no value is a Value with no kind set: absent.",
			args:   args{o: wiretest.BytesField(1, wiretest.BytesField(1, []byte("a"))), keys: []string{"a"}},
			want:   []Value{{}},
		},
		"EntryWithoutKey": {
			reason: "An entry of no key is of the empty key.",
			args:   args{o: wiretest.BytesField(1, wiretest.BytesField(2, str("x"))), keys: []string{"", "a"}},
			want:   []Value{{Kind: KindString, Raw: []byte("x")}, {}},
		},
		"ValueOfAnEntryMalformed": {
			reason: "An entry whose value is not a Value reads as malformed; its neighbours do not.",
			args:   args{o: wiretest.Cat(wiretest.StructEntry("a", []byte{0xff}), wiretest.StructEntry("b", num(1))), keys: []string{"a", "b"}},
			want:   []Value{{Kind: KindMalformed}, {Kind: KindNumber, Num: 1}},
		},
		"Truncated": {
			reason: "An object cut short is malformed, whatever key is asked for.",
			args:   args{o: ab[:len(ab)-1], keys: []string{"a", "c"}},
			want:   []Value{{Kind: KindMalformed}, {Kind: KindMalformed}},
		},
		"EntryMalformed": {
			reason: "An entry whose own fields are not protobuf makes the object malformed.",
			args:   args{o: wiretest.Cat(wiretest.StructEntry("a", str("x")), wiretest.BytesField(1, []byte{0x0a, 0x05, 'b'})), keys: []string{"a"}},
			want:   []Value{{Kind: KindMalformed}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := make([]Value, len(tc.args.keys))
			tc.args.o.Fields(tc.args.keys, got)
			if diff := cmp.Diff(tc.want, got, compareValues); diff != "" {
				t.Errorf("%s\nfields(%q): -want, +got:\n%s", tc.reason, tc.args.keys, diff)
			}
			for i, k := range tc.args.keys {
				if diff := cmp.Diff(tc.want[i], tc.args.o.Get(k), compareValues); diff != "" {
					t.Errorf("%s\nget(%q): -want, +got:\n%s", tc.reason, k, diff)
				}
			}
		})
	}
}

func TestObjectDuplicateKeyAsProtobuf(t *testing.T) {
	// The hand-crafted duplicate of TestObjectGetAndFields, checked against
	// protobuf itself: the map it decodes holds the last entry of a key.
	b := wiretest.Cat(wiretest.StructEntry("a", wiretest.Marshalled(t, structpb.NewStringValue("first"))), wiretest.StructEntry("a", wiretest.Marshalled(t, structpb.NewStringValue("second"))))
	s := &structpb.Struct{}
	if err := proto.Unmarshal(b, s); err != nil {
		t.Fatalf("proto.Unmarshal(...): %v", err)
	}
	want := Value{Kind: KindString, Raw: []byte(s.GetFields()["a"].GetStringValue())}
	if diff := cmp.Diff(want, Object(b).Get("a"), compareValues); diff != "" {
		t.Errorf("get(%q): protobuf's decoding -want, +got:\n%s", "a", diff)
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
			args:   args{b: wiretest.Cat(wiretest.BytesField(1, []byte("abc")), []byte{9}), tag: tagField1},
			want:   want{field: []byte("abc"), rest: []byte{9}, ok: true},
		},
		"LongestOneByteLength": {
			reason: "127 is the longest one-byte length.",
			args:   args{b: wiretest.BytesField(1, []byte(long[:127])), tag: tagField1},
			want:   want{field: []byte(long[:127]), ok: true},
		},
		"ShortestTwoByteLength": {
			reason: "128 is the shortest two-byte length.",
			args:   args{b: wiretest.Cat(wiretest.BytesField(2, []byte(long[:128])), []byte{1, 2}), tag: tagField2},
			want:   want{field: []byte(long[:128]), rest: []byte{1, 2}, ok: true},
		},
		"TwoByteLength": {
			reason: "A length of 200 is two bytes.",
			args:   args{b: wiretest.BytesField(1, []byte(long)), tag: tagField1},
			want:   want{field: []byte(long), ok: true},
		},
		"Empty": {
			reason: "A zero-length field is empty, and ok.",
			args:   args{b: wiretest.BytesField(1, nil), tag: tagField1},
			want:   want{field: []byte{}, ok: true},
		},
		"OtherTag": {
			reason: "A field under another tag is not read.",
			args:   args{b: wiretest.BytesField(2, []byte("abc")), tag: tagField1},
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
			args:   args{b: wiretest.BytesField(1, []byte(long))[:150], tag: tagField1},
		},
		"LengthVarintCut": {
			reason: "A length whose varint is cut is truncated.",
			args:   args{b: []byte{tagField1, 0x80}, tag: tagField1},
		},
		"HugeLength": {
			reason: "A length beyond any slice is truncated, not a panic.",
			args:   args{b: wiretest.Cat([]byte{tagField1}, protowire.AppendVarint(nil, math.MaxUint64)), tag: tagField1},
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
			_, typ, field, rest, err := Next(tc.args.b)
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
	b := wiretest.Marshalled(t, structpb.NewStructValue(s))
	if b[1] < 0x80 {
		t.Fatalf("the Value's length is one byte: the test no longer covers long lengths")
	}
	v := ParseValue(b)
	if v.Kind != KindStruct {
		t.Fatalf("parseValue(...): want an object, got %s", v.Describe())
	}
	if diff := cmp.Diff(Value{Kind: KindString, Raw: []byte(long)}, Object(v.Raw).Get(key), compareValues); diff != "" {
		t.Errorf("get(<130-byte key>): -want, +got:\n%s", diff)
	}
	var r Reader
	list, err := r.ParseList(Object(v.Raw).Get("l").Raw)
	if err != nil {
		t.Fatalf("ParseList(...): %v", err)
	}
	want := []Value{{Kind: KindString, Raw: []byte(long)}, {Kind: KindString, Raw: []byte("short")}}
	if diff := cmp.Diff(want, list, compareValues); diff != "" {
		t.Errorf("ParseList(<a list holding a 130-byte string>): -want, +got:\n%s", diff)
	}
}

// TestPiecesAmortized: a message written in many pieces is gathered with
// amortized growth, not a copy of everything gathered per piece, whose cost
// a crafted request could make quadratic.
func TestPiecesAmortized(t *testing.T) {
	const n = 10_000
	var b []byte
	for range n {
		b = append(b, wiretest.BytesField(protowire.Number(KindStruct), wiretest.StructEntry("k", nil))...)
	}
	v := ParseValue(b)
	if v.Kind != KindStruct || len(v.Raw) != n*len(wiretest.StructEntry("k", nil)) {
		t.Fatalf("parseValue of %d pieces: kind %d, %d bytes; want an object of every piece", n, v.Kind, len(v.Raw))
	}
	// Doubling growth: about log2(n) allocations, where a copy per piece
	// would make n.
	if allocs := testing.AllocsPerRun(5, func() { ParseValue(b) }); allocs > 40 {
		t.Errorf("parseValue of %d pieces: %.0f allocations, want at most 40", n, allocs)
	}
}

// TestReaderRelease: what was parsed before a mark stays as it was, and
// what was parsed since is given back, so that walking a large object's
// nested objects one by one holds one of them at a time.
func TestReaderRelease(t *testing.T) {
	outer := Object(wiretest.Cat(wiretest.StructEntry("a", nil), wiretest.StructEntry("b", nil)))
	inner := Object(wiretest.Cat(wiretest.StructEntry("x", nil), wiretest.StructEntry("y", nil), wiretest.StructEntry("z", nil)))
	var w Reader
	kept, err := w.EntriesOf(outer)
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		m := w.Mark()
		if _, err := w.EntriesOf(inner); err != nil {
			t.Fatal(err)
		}
		w.Release(m)
	}
	if got := len(w.entries); got != len(kept) {
		t.Errorf("after 100 nested objects parsed and released: %d entries held, want the outer object's %d", got, len(kept))
	}
	var keys []string
	for _, e := range kept {
		keys = append(keys, string(e.Key))
	}
	if diff := cmp.Diff([]string{"a", "b"}, keys); diff != "" {
		t.Errorf("the entries parsed before the mark: -want, +got:\n%s", diff)
	}
}
