package codec

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/internal/testkit/wiretest"
)

func TestItemReader(t *testing.T) {
	// An item of n bytes of Struct, as the codec leaves it on the wire:
	// a Resource whose field 1 is the Struct.
	item := func(i, n int) ([]byte, []byte) {
		s := wiretest.StructEntry(fmt.Sprintf("k%d", i), bytes.Repeat([]byte{'x'}, n))
		return s, wiretest.BytesField(itemsField, wiretest.BytesField(1, s))
	}
	type want struct {
		items [][]byte
		err   bool
	}
	decoded := wiretest.StructOf(t, map[string]any{"kind": "Decoded"})
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
			wire:   wiretest.Cat(wiretest.VarintField(5, 1), goodWire),
			want:   want{items: [][]byte{good}},
		},
		"TruncatedAfterAnItem": {
			reason: "An item the wire does not frame is an error when the reader gets to it, after the items before it.",
			wire:   wiretest.Cat(goodWire, goodWire[:len(goodWire)-1]),
			want:   want{items: [][]byte{good}, err: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res := &fnv1.Resources{Items: tc.decoded}
			res.ProtoReflect().SetUnknown(tc.wire)
			it := ItemsOf(res)
			var got want
			for {
				b, ok, err := it.Next()
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
				t.Errorf("%s\nNext(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestResourceStructMergesAsProtobuf(t *testing.T) {
	// Protobuf merges a message field written twice: two resources of one
	// Resource merge into one Struct. No marshaller splits a message, but
	// protobuf allows it, and the item reader merges as it does.
	a := wiretest.Marshalled(t, wiretest.StructOf(t, map[string]any{"a": 1}))
	b := wiretest.Marshalled(t, wiretest.StructOf(t, map[string]any{"b": 2}))
	two := wiretest.Cat(wiretest.BytesField(1, a), wiretest.BytesField(1, b))
	want := &fnv1.Resource{}
	if err := proto.Unmarshal(two, want); err != nil {
		t.Fatalf("proto.Unmarshal(...): %v", err)
	}
	s, err := resourceStruct(two)
	if err != nil {
		t.Fatalf("resourceStruct(...): %v", err)
	}
	got := &structpb.Struct{}
	if err := proto.Unmarshal(s, got); err != nil {
		t.Fatalf("proto.Unmarshal(resourceStruct(...)): %v", err)
	}
	if diff := cmp.Diff(want.GetResource(), got, protocmp.Transform()); diff != "" {
		t.Errorf("resourceStruct(<a Resource of two resources>): protobuf's -want, +got:\n%s", diff)
	}
}
