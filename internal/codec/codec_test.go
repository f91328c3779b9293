package codec

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/wiretest"
)

// itemsOf is a Resources of the Structs as its items' resources.
func itemsOf(ss ...*structpb.Struct) *fnv1.Resources {
	out := &fnv1.Resources{}
	for _, s := range ss {
		out.Items = append(out.Items, &fnv1.Resource{Resource: s})
	}
	return out
}

// wireStructs are a required resource's items as All reads them,
// decoded back into Structs to compare.
func wireStructs(t *testing.T, res *fnv1.Resources) ([]*structpb.Struct, error) {
	t.Helper()
	items, err := decodedItems(res)
	if errors.Is(err, errNotAStruct) {
		t.Fatal(err)
	}
	return items, err
}

var errNotAStruct = errors.New("an item is not a Struct")

// decodedItems are a required resource's items as All reads them, decoded.
func decodedItems(res *fnv1.Resources) ([]*structpb.Struct, error) {
	items, err := All(res)
	if err != nil {
		return nil, err
	}
	out := make([]*structpb.Struct, 0, len(items))
	for i, b := range items {
		s := &structpb.Struct{}
		if err := proto.Unmarshal(b, s); err != nil {
			return nil, fmt.Errorf("item %d: %w: %w", i, errNotAStruct, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// isFleet is whether the request codec leaves a required resource's items
// on the wire.
func isFleet(key string) bool { return key == fleetClusters || key == fleetReplicas }

// The required resources of the test requests: two the codec leaves on the
// wire, as the function's codec leaves its fleet, and one it decodes.
const (
	fleetClusters = "clusters"
	fleetReplicas = "all-replicas"
	otherRequired = "cache"
)

// testCodec is a codec that leaves the test fleet on the wire.
func testCodec(t *testing.T) *Codec {
	t.Helper()
	defaultCodec(t)
	return New(fleetClusters, fleetReplicas)
}

var now = time.Date(2026, 10, 20, 20, 8, 0, 0, time.UTC)

// withFleetDecoded is the request with the fleet's items decoded, as
// protobuf would have decoded them.
func withFleetDecoded(t *testing.T, req *fnv1.RunFunctionRequest) *fnv1.RunFunctionRequest {
	t.Helper()
	out := proto.CloneOf(req)
	for key, res := range out.GetRequiredResources() {
		if !isFleet(key) {
			continue
		}
		items, err := wireStructs(t, res)
		if err != nil {
			t.Fatalf("All(%q): %v", key, err)
		}
		out.RequiredResources[key] = itemsOf(items...)
	}
	return out
}

// codecFixture is a request of every part, its fleet resolved.
type codecFixture struct {
	clusters, replicas []*structpb.Struct
	cache              *structpb.Struct
	req                *fnv1.RunFunctionRequest
}

func newCodecFixture(tb testing.TB) codecFixture {
	tb.Helper()
	t := tb
	f := codecFixture{
		clusters: []*structpb.Struct{wiretest.StructOf(t, fx.Cluster("a").Obj()), wiretest.StructOf(t, fx.Cluster("b").NotReady().Obj())},
		replicas: []*structpb.Struct{
			wiretest.StructOf(t, fx.Replica("m", "a", 0).Engines(fx.PinnedGang("main", "h100", 2, fx.Stamped(4))).PodsScheduled("True", now).Obj()),
			wiretest.StructOf(t, fx.Replica("m", "b", 1).Obj()),
			wiretest.StructOf(t, fx.Replica("other", "a", 0).Namespace("elsewhere").Obj()),
		},
		cache: wiretest.StructOf(t, map[string]any{"apiVersion": v1alpha1.APIVersion, "kind": v1alpha1.KindModelCache, "metadata": map[string]any{"name": "qwen", "namespace": fx.Namespace}}),
	}
	f.req = &fnv1.RunFunctionRequest{
		Meta:     &fnv1.RequestMeta{Tag: "t"},
		Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: wiretest.StructOf(t, fx.Deployment("m").Cache("qwen").Obj())}},
		Desired:  &fnv1.State{Resources: map[string]*fnv1.Resource{"r": {Resource: f.replicas[0], Ready: fnv1.Ready_READY_TRUE}}},
		Input:    wiretest.StructOf(t, map[string]any{"apiVersion": "fleet.fn.modelplane.ai/v1beta1", "kind": "Input", "observationMaxAge": "5m"}),
		Context:  wiretest.StructOf(t, map[string]any{"k": "v"}),
		RequiredResources: map[string]*fnv1.Resources{
			fleetClusters: itemsOf(f.clusters...),
			fleetReplicas: itemsOf(f.replicas...),
			otherRequired: itemsOf(f.cache),
		},
	}
	return f
}

// withoutFleetItems is the request as unmarshalRequest decodes it: the
// fleet's Resources empty, but for their unknown fields.
func withoutFleetItems(req *fnv1.RunFunctionRequest) *fnv1.RunFunctionRequest {
	out := proto.CloneOf(req)
	for key := range out.GetRequiredResources() {
		if isFleet(key) {
			out.RequiredResources[key] = &fnv1.Resources{}
		}
	}
	return out
}

// withoutFleetWire is the request without the fleet's items left on the
// wire, to compare the rest: protocmp parses unknown fields, and panics on
// those that are not protobuf.
func withoutFleetWire(req *fnv1.RunFunctionRequest) *fnv1.RunFunctionRequest {
	out := proto.CloneOf(req)
	for key, res := range out.GetRequiredResources() {
		if isFleet(key) {
			res.ProtoReflect().SetUnknown(nil)
		}
	}
	return out
}

func TestUnmarshalRequest(t *testing.T) {
	f := newCodecFixture(t)
	full := wiretest.Marshalled(t, f.req)
	only := func(res map[string]*fnv1.Resources) []byte {
		return wiretest.Marshalled(t, &fnv1.RunFunctionRequest{RequiredResources: res})
	}
	type want struct {
		// req is the request decoded, its fleet's items aside.
		req *fnv1.RunFunctionRequest
		// items are each required resource's items, through All.
		items map[string][]*structpb.Struct
		// itemsErr names a required resource whose items All refuses.
		itemsErr string
		err      bool
	}
	cases := map[string]struct {
		reason string
		wire   []byte
		want   want
	}{
		"Fleet": {
			reason: "Everything is decoded but the items of the clusters and replicas, which stay on the wire, in order; the cache's items are decoded.",
			wire:   full,
			want: want{
				req:   withoutFleetItems(f.req),
				items: map[string][]*structpb.Struct{fleetClusters: f.clusters, fleetReplicas: f.replicas, otherRequired: {f.cache}},
			},
		},
		"ReplicasEntryWithoutValue": {
			reason: "A map entry of a key and no value is a resolved resource of no items.",
			wire:   wiretest.Cat(only(map[string]*fnv1.Resources{fleetClusters: itemsOf(f.clusters[0])}), wiretest.BytesField(requiredResourcesField, wiretest.BytesField(mapKeyField, []byte(fleetReplicas)))),
			want: want{
				req:   &fnv1.RunFunctionRequest{RequiredResources: map[string]*fnv1.Resources{fleetClusters: {}, fleetReplicas: {}}},
				items: map[string][]*structpb.Struct{fleetClusters: {f.clusters[0]}, fleetReplicas: nil},
			},
		},
		"ReplicasResolvedEmpty": {
			reason: "An entry of no items, as a marshaller writes it, is a resolved resource of no items.",
			wire:   only(map[string]*fnv1.Resources{fleetReplicas: {}}),
			want: want{
				req:   &fnv1.RunFunctionRequest{RequiredResources: map[string]*fnv1.Resources{fleetReplicas: {}}},
				items: map[string][]*structpb.Struct{fleetReplicas: nil},
			},
		},
		"DuplicateKeysLastWins": {
			reason: "Of two entries of a key, the last wins, as in any map, whether its items stay on the wire or not.",
			wire: wiretest.Cat(full, only(map[string]*fnv1.Resources{
				fleetClusters: itemsOf(f.clusters[1]),
				fleetReplicas: {},
				otherRequired: itemsOf(f.clusters[0]),
			})),
			want: want{
				req: func() *fnv1.RunFunctionRequest {
					req := withoutFleetItems(f.req)
					req.RequiredResources[otherRequired] = itemsOf(f.clusters[0])
					return req
				}(),
				items: map[string][]*structpb.Struct{fleetClusters: {f.clusters[1]}, fleetReplicas: nil, otherRequired: {f.clusters[0]}},
			},
		},
		"EntryValueBeforeKey": {
			reason: "A map entry's value may come before its key.",
			wire:   wiretest.BytesField(requiredResourcesField, wiretest.Cat(wiretest.BytesField(mapValueField, wiretest.Marshalled(t, itemsOf(f.clusters...))), wiretest.BytesField(mapKeyField, []byte(fleetClusters)))),
			want: want{
				req:   &fnv1.RunFunctionRequest{RequiredResources: map[string]*fnv1.Resources{fleetClusters: {}}},
				items: map[string][]*structpb.Struct{fleetClusters: f.clusters},
			},
		},
		"NoFleet": {
			reason: "A request whose fleet is not resolved yet has no clusters or replicas, not empty ones.",
			wire:   only(map[string]*fnv1.Resources{otherRequired: itemsOf(f.cache)}),
			want: want{
				req:   &fnv1.RunFunctionRequest{RequiredResources: map[string]*fnv1.Resources{otherRequired: itemsOf(f.cache)}},
				items: map[string][]*structpb.Struct{otherRequired: {f.cache}},
			},
		},
		"Empty": {
			reason: "No bytes are the empty request.",
			want:   want{req: &fnv1.RunFunctionRequest{}},
		},
		"FleetItemsMalformed": {
			reason: "The fleet's items are only read when All reads them: bytes that are not a Resources fail there.",
			wire:   wiretest.BytesField(requiredResourcesField, wiretest.Cat(wiretest.BytesField(mapKeyField, []byte(fleetClusters)), wiretest.BytesField(mapValueField, []byte{0x0a, 0x09, 'x'}))),
			want: want{
				req:      &fnv1.RunFunctionRequest{RequiredResources: map[string]*fnv1.Resources{fleetClusters: {}}},
				itemsErr: fleetClusters,
			},
		},
		"Truncated": {
			reason: "A request cut short is an error.",
			wire:   full[:len(full)-1],
			want:   want{err: true},
		},
		"Garbage": {
			reason: "Bytes that are not protobuf are an error.",
			wire:   []byte{0xff, 0xff, 0xff},
			want:   want{err: true},
		},
		"FleetEntryMalformed": {
			reason: "A fleet map entry whose fields are not protobuf is an error.",
			wire:   wiretest.BytesField(requiredResourcesField, []byte{0x0a, 0x05, 'c'}),
			want:   want{err: true},
		},
		"OtherFieldMalformed": {
			reason: "A field protobuf decodes that is not protobuf is an error.",
			wire:   wiretest.Cat(only(map[string]*fnv1.Resources{fleetClusters: itemsOf(f.clusters...)}), wiretest.BytesField(1, []byte{0xff})),
			want:   want{err: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "stale"}} // a message reused: nothing of it may survive
			err := testCodec(t).unmarshalRequest(tc.wire, got)
			if (err != nil) != tc.want.err {
				t.Fatalf("%s\nunmarshalRequest(...): want error %t, got %v", tc.reason, tc.want.err, err)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want.req, withoutFleetWire(got), protocmp.Transform()); diff != "" {
				t.Errorf("%s\nunmarshalRequest(...): -want, +got:\n%s", tc.reason, diff)
			}
			for key, res := range got.GetRequiredResources() {
				if isFleet(key) && len(res.GetItems()) > 0 {
					t.Errorf("%s\nunmarshalRequest(...): %q: decoded %d items, want them left on the wire", tc.reason, key, len(res.GetItems()))
				}
			}
			for key, want := range tc.want.items {
				items, err := wireStructs(t, got.GetRequiredResources()[key])
				if err != nil {
					t.Errorf("%s\nAll(%q): %v", tc.reason, key, err)
					continue
				}
				if diff := cmp.Diff(want, items, protocmp.Transform(), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("%s\nAll(%q): -want, +got:\n%s", tc.reason, key, diff)
				}
			}
			if tc.want.itemsErr != "" {
				if _, err := All(got.GetRequiredResources()[tc.want.itemsErr]); err == nil {
					t.Errorf("%s\nAll(%q): want an error, got none", tc.reason, tc.want.itemsErr)
				}
				return
			}
			// The fleet's items decoded, the request is what protobuf decodes.
			pb := &fnv1.RunFunctionRequest{}
			if err := proto.Unmarshal(tc.wire, pb); err != nil {
				t.Fatalf("proto.Unmarshal(...): %v", err)
			}
			if diff := cmp.Diff(pb, withFleetDecoded(t, got), protocmp.Transform()); diff != "" {
				t.Errorf("%s\nunmarshalRequest(...), its fleet decoded: protobuf's -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestUnmarshalRequestMergesLikeProtobuf(t *testing.T) {
	// Protobuf merges a map entry's value written twice: the items of both
	// are the resource's. mapEntry keeps the last value instead. No
	// marshaller splits a message, so no request Crossplane sends is
	// affected.

	f := newCodecFixture(t)
	wire := wiretest.BytesField(requiredResourcesField, wiretest.Cat(
		wiretest.BytesField(mapKeyField, []byte(fleetClusters)),
		wiretest.BytesField(mapValueField, wiretest.Marshalled(t, itemsOf(f.clusters[0]))),
		wiretest.BytesField(mapValueField, wiretest.Marshalled(t, itemsOf(f.clusters[1]))),
	))
	pb := &fnv1.RunFunctionRequest{}
	if err := proto.Unmarshal(wire, pb); err != nil {
		t.Fatalf("proto.Unmarshal(...): %v", err)
	}
	got := &fnv1.RunFunctionRequest{}
	if err := testCodec(t).unmarshalRequest(wire, got); err != nil {
		t.Fatalf("unmarshalRequest(...): %v", err)
	}
	if diff := cmp.Diff(pb, withFleetDecoded(t, got), protocmp.Transform()); diff != "" {
		t.Errorf("unmarshalRequest(...), its fleet decoded: protobuf's -want, +got:\n%s", diff)
	}
}

// defaultCodec is gRPC's own proto codec, which the request codec wraps.
func defaultCodec(t *testing.T) encoding.CodecV2 {
	t.Helper()
	c := encoding.GetCodecV2(grpcproto.Name)
	if _, ok := c.(*Codec); ok {
		t.Fatalf("the %q codec registered is the request codec: gRPC's own is no longer there to compare with", grpcproto.Name)
	}
	return c
}

func TestRequestCodecName(t *testing.T) {
	// gRPC picks the codec by name: the request codec must replace "proto".
	c := testCodec(t)
	if diff := cmp.Diff(grpcproto.Name, c.Name()); diff != "" {
		t.Errorf("Name(): -want, +got:\n%s", diff)
	}
}

func TestRequestCodecUnmarshalRequest(t *testing.T) {
	f := newCodecFixture(t)
	b := wiretest.Marshalled(t, f.req)
	want := &fnv1.RunFunctionRequest{}
	if err := testCodec(t).unmarshalRequest(bytes.Clone(b), want); err != nil {
		t.Fatalf("unmarshalRequest(...): %v", err)
	}
	c := testCodec(t)
	cases := map[string]struct {
		reason string
		data   mem.BufferSlice
	}{
		"OneBuffer": {
			reason: "A request in one buffer decodes as unmarshalRequest decodes it.",
			data:   mem.BufferSlice{mem.SliceBuffer(bytes.Clone(b))},
		},
		"SplitBuffers": {
			reason: "A request split across buffers, as gRPC reads it off the connection, decodes the same.",
			data:   mem.BufferSlice{mem.SliceBuffer(bytes.Clone(b[:7])), mem.SliceBuffer(bytes.Clone(b[7 : len(b)/2])), mem.SliceBuffer(bytes.Clone(b[len(b)/2:]))},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := &fnv1.RunFunctionRequest{}
			if err := c.Unmarshal(tc.data, got); err != nil {
				t.Fatalf("%s\nUnmarshal(...): %v", tc.reason, err)
			}
			// Unknown fields compared too: the fleet's items, on the wire.
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("%s\nUnmarshal(...): unmarshalRequest's -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestRequestCodecOtherMessages(t *testing.T) {
	// Every message but a RunFunctionRequest is gRPC's codec's to encode
	// and decode, and a RunFunctionRequest's to encode.
	f := newCodecFixture(t)
	rsp := &fnv1.RunFunctionResponse{
		Meta:    &fnv1.ResponseMeta{Tag: "t"},
		Desired: f.req.GetDesired(),
		Results: []*fnv1.Result{{Severity: fnv1.Severity_SEVERITY_WARNING, Message: "careful", Target: fnv1.Target_TARGET_COMPOSITE.Enum()}},
		Context: f.req.GetContext(),
		Requirements: &fnv1.Requirements{Resources: map[string]*fnv1.ResourceSelector{
			fleetClusters: {ApiVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindInferenceCluster, Match: &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: map[string]string{"tier": "prod"}}}},
		}},
	}
	def := defaultCodec(t)
	c := testCodec(t)
	cases := map[string]struct {
		reason string
		msg    proto.Message
	}{
		"Response": {
			reason: "A response goes through as gRPC's codec encodes and decodes it.",
			msg:    rsp,
		},
		"Request": {
			reason: "A request is encoded as gRPC's codec encodes it; only its decoding differs.",
			msg:    f.req,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// Encoded by the request codec, decoded by gRPC's.
			data, err := c.Marshal(tc.msg)
			if err != nil {
				t.Fatalf("%s\nMarshal(...): %v", tc.reason, err)
			}
			got := tc.msg.ProtoReflect().New().Interface()
			if err := def.Unmarshal(data, got); err != nil {
				t.Fatalf("%s\ngRPC's Unmarshal(...): %v", tc.reason, err)
			}
			data.Free()
			if !proto.Equal(tc.msg, got) {
				t.Errorf("%s\nMarshal(...), then gRPC's Unmarshal(...): -want, +got:\n%s", tc.reason, cmp.Diff(tc.msg, got, protocmp.Transform()))
			}
			if _, ok := tc.msg.(*fnv1.RunFunctionRequest); ok {
				return
			}
			// Encoded by gRPC's, decoded by the request codec.
			data, err = def.Marshal(tc.msg)
			if err != nil {
				t.Fatalf("%s\ngRPC's Marshal(...): %v", tc.reason, err)
			}
			got = tc.msg.ProtoReflect().New().Interface()
			if err := c.Unmarshal(data, got); err != nil {
				t.Fatalf("%s\nUnmarshal(...): %v", tc.reason, err)
			}
			data.Free()
			if !proto.Equal(tc.msg, got) {
				t.Errorf("%s\ngRPC's Marshal(...), then Unmarshal(...): -want, +got:\n%s", tc.reason, cmp.Diff(tc.msg, got, protocmp.Transform()))
			}
		})
	}
}

func TestRequestCodecNotAMessage(t *testing.T) {
	// What gRPC's codec refuses, the request codec refuses.
	c := testCodec(t)
	var notAMessage struct{}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer{}}, &notAMessage); err == nil {
		t.Errorf("Unmarshal(..., %T): want an error, got none", &notAMessage)
	}
}

func TestRequestCodecCopiesInput(t *testing.T) {
	// gRPC reuses a message's buffers once Unmarshal returns, and the
	// fleet's items alias what the codec decoded: it must decode a copy.
	f := newCodecFixture(t)
	b := wiretest.Marshalled(t, f.req)
	got := &fnv1.RunFunctionRequest{}
	c := testCodec(t)
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got); err != nil {
		t.Fatalf("Unmarshal(...): %v", err)
	}
	for i := range b {
		b[i] = 0xff
	}
	for key, want := range map[string][]*structpb.Struct{fleetClusters: f.clusters, fleetReplicas: f.replicas} {
		items, err := wireStructs(t, got.GetRequiredResources()[key])
		if err != nil {
			t.Fatalf("All(%q) after the input was overwritten: %v", key, err)
		}
		if diff := cmp.Diff(want, items, protocmp.Transform()); diff != "" {
			t.Errorf("All(%q) after the input was overwritten: -want, +got:\n%s", key, diff)
		}
	}

	// unmarshalRequest itself does alias its input, which is what makes
	// the copy necessary, and this test able to tell.
	b = wiretest.Marshalled(t, f.req)
	direct := &fnv1.RunFunctionRequest{}
	if err := testCodec(t).unmarshalRequest(b, direct); err != nil {
		t.Fatalf("unmarshalRequest(...): %v", err)
	}
	before, err := All(direct.GetRequiredResources()[fleetClusters])
	if err != nil {
		t.Fatalf("All(%q): %v", fleetClusters, err)
	}
	before = slices.Collect(func(yield func([]byte) bool) {
		for _, item := range before {
			if !yield(bytes.Clone(item)) {
				return
			}
		}
	})
	for i := range b {
		b[i] = 0xff
	}
	if after, err := All(direct.GetRequiredResources()[fleetClusters]); err == nil && cmp.Equal(before, after) {
		t.Errorf("unmarshalRequest(...): items unchanged by overwriting its input; the test no longer tells whether the codec copies")
	}
}

// FuzzUnmarshalRequest: any bytes may arrive as a request. The codec never
// panics and decodes whatever protobuf decodes (it may take more: the items
// it leaves on the wire are only read, or fail, as the reader gets to
// them); then the buffer goes back.
func FuzzUnmarshalRequest(f *testing.F) {
	f.Add(wiretest.Marshalled(f, newCodecFixture(f).req))
	f.Add(wiretest.Marshalled(f, &fnv1.RunFunctionRequest{RequiredResources: map[string]*fnv1.Resources{fleetReplicas: {}}}))
	f.Add([]byte(nil))
	c := New(fleetClusters, fleetReplicas)
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &fnv1.RunFunctionRequest{}
		err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, req)
		if err != nil && proto.Unmarshal(b, &fnv1.RunFunctionRequest{}) == nil {
			t.Fatalf("Unmarshal(%x): %v, but protobuf decodes it", b, err)
		}
		if err != nil {
			return
		}
		defer c.Release(req)
		for _, key := range []string{fleetClusters, fleetReplicas} {
			_, _ = All(req.GetRequiredResources()[key])
		}
	})
}
