// Package wiretest builds protobuf wire bytes by hand for tests: fields,
// messages and Struct entries, including what a marshaller never writes
// (several kinds in one Value, duplicate keys, unknown fields, truncations).
package wiretest

import (
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Marshalled is a message's wire bytes, deterministic so that tests can
// compare them.
func Marshalled(tb testing.TB, m proto.Message) []byte {
	tb.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		tb.Fatalf("proto.Marshal(...): %v", err)
	}
	return b
}

// BytesField is a length-delimited field.
func BytesField(num protowire.Number, payload []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), payload)
}

// VarintField is a varint field.
func VarintField(num protowire.Number, x uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), x)
}

// Fixed64Field is a fixed64 field.
func Fixed64Field(num protowire.Number, x uint64) []byte {
	return protowire.AppendFixed64(protowire.AppendTag(nil, num, protowire.Fixed64Type), x)
}

// Cat concatenates wire fragments into a message.
func Cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// StructEntry is a Struct's field 1: a map entry of key and Value bytes.
func StructEntry(key string, val []byte) []byte {
	return BytesField(1, Cat(BytesField(1, []byte(key)), BytesField(2, val)))
}

// ValueOf is v, as structpb.NewValue takes it, as a google.protobuf.Value.
func ValueOf(tb testing.TB, v any) *structpb.Value {
	tb.Helper()
	pv, err := structpb.NewValue(v)
	if err != nil {
		tb.Fatalf("structpb.NewValue(%v): %v", v, err)
	}
	return pv
}

// StructOf is an object, as JSON sees it, as a google.protobuf.Struct.
func StructOf(tb testing.TB, obj any) *structpb.Struct {
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
