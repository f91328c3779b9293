package wire

import (
	"maps"
	"math"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/modelplaneai/fleet-scheduler/internal/testkit/wiretest"
)

// FuzzFields: of bytes protobuf decodes as a Struct, Fields and Get read
// every key as protobuf's decoding holds it; of any other bytes, they fail
// without a panic. A seed in testdata/ is an input that caught a broken
// fast path of Fields.
func FuzzFields(f *testing.F) {
	f.Add(wiretest.Marshalled(f, wiretest.StructOf(f, map[string]any{"metadata": map[string]any{"name": "a", "labels": map[string]any{"k": "v"}}, "spec": []any{1.5, true, nil, "s"}})))
	f.Add(wiretest.Cat(wiretest.StructEntry("k", nil), wiretest.StructEntry("k", wiretest.Marshalled(f, wiretest.ValueOf(f, "last")))))
	f.Add([]byte(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFieldsAsProtobuf(t, b)
		o := Object(b)
		_ = o.Get("metadata")
		var r Reader
		_, _ = r.EntriesOf(o)
		_, _ = r.ParseList(b)
		_ = ParseValue(b)
	})
}

// checkFieldsAsProtobuf checks that, of bytes protobuf decodes as a
// Struct, Fields reads every key (and one absent) as protobuf's
// decoding holds it.
func checkFieldsAsProtobuf(t *testing.T, b []byte) {
	t.Helper()
	s := &structpb.Struct{}
	if err := proto.Unmarshal(b, s); err != nil {
		return
	}
	keys := slices.Sorted(maps.Keys(s.GetFields()))
	keys = append(keys[:min(len(keys), 7)], "\x00absent")
	got := make([]Value, len(keys))
	Object(b).Fields(keys, got)
	for i, k := range keys {
		want := s.GetFields()[k]
		if !sameAsProtobuf(got[i], want) {
			t.Errorf("Fields(...)[%q]: got %+v, protobuf decodes %v", k, got[i], want)
		}
	}
}

// sameAsProtobuf is whether v is the value protobuf decoded (nil: absent).
func sameAsProtobuf(v Value, pv *structpb.Value) bool {
	switch v.Kind {
	case KindAbsent:
		return pv.GetKind() == nil
	case KindNull:
		return isNull(pv)
	case KindNumber:
		n, ok := pv.GetKind().(*structpb.Value_NumberValue)
		return ok && (n.NumberValue == v.Num || math.IsNaN(n.NumberValue) && math.IsNaN(v.Num))
	case KindString:
		str, ok := pv.GetKind().(*structpb.Value_StringValue)
		return ok && str.StringValue == string(v.Raw)
	case KindBool:
		bv, ok := pv.GetKind().(*structpb.Value_BoolValue)
		return ok && bv.BoolValue == (v.Num != 0)
	case KindStruct:
		got := &structpb.Struct{}
		return pv.GetStructValue() != nil && proto.Unmarshal(v.Raw, got) == nil && proto.Equal(got, pv.GetStructValue())
	case KindList:
		got := &structpb.ListValue{}
		return pv.GetListValue() != nil && proto.Unmarshal(v.Raw, got) == nil && proto.Equal(got, pv.GetListValue())
	case KindMalformed:
	}
	return false
}

func isNull(pv *structpb.Value) bool {
	_, ok := pv.GetKind().(*structpb.Value_NullValue)
	return ok
}
