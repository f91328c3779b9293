package codec

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"
	"weak"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/wiretest"
)

// lentTo is the buffer c lent to req, if any.
func lentTo(c *Codec, req *fnv1.RunFunctionRequest) ([]byte, bool) {
	c.copies.mu.Lock()
	defer c.copies.mu.Unlock()
	b, ok := c.copies.lent[weak.Make(req)]
	return b, ok
}

// lentCount is how many copies c has lent.
func lentCount(c *Codec) int {
	c.copies.mu.Lock()
	defer c.copies.mu.Unlock()
	return len(c.copies.lent)
}

// itemsServer answers each call with what it read of the request's fleet:
// every item of every required resource, in order, as its response's
// context. What it read of a request in a recycled buffer must be what it
// reads of the request decoded afresh.
type itemsServer struct {
	fnv1.UnimplementedFunctionRunnerServiceServer
}

func (itemsServer) RunFunction(_ context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	fields := map[string]*structpb.Value{}
	for key, res := range req.GetRequiredResources() {
		items, err := decodedItems(res)
		if err != nil {
			return nil, err
		}
		values := make([]*structpb.Value, 0, len(items))
		for _, s := range items {
			values = append(values, structpb.NewStructValue(s))
		}
		fields[key] = structpb.NewListValue(&structpb.ListValue{Values: values})
	}
	return &fnv1.RunFunctionResponse{Context: &structpb.Struct{Fields: fields}}, nil
}

func TestRequestCopiesRecycled(t *testing.T) {
	// The buffer a request was decoded into comes back when the server's
	// call is done with it, and the next request is decoded into it, as if
	// new.
	c := testCodec(t)
	big := newCodecFixture(t).req
	small := proto.CloneOf(big)
	small.RequiredResources[fleetReplicas] = itemsOf(wiretest.StructOf(t, fx.Replica("m", "b", 1).Obj()))
	srv := c.Server(itemsServer{})

	first := &fnv1.RunFunctionRequest{}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wiretest.Marshalled(t, big))}, first); err != nil {
		t.Fatalf("Unmarshal(...): %v", err)
	}
	firstCopy, ok := lentTo(c, first)
	if !ok {
		t.Fatalf("Unmarshal(...): the request's copy is not lent to it")
	}
	if _, err := srv.RunFunction(context.Background(), first); err != nil {
		t.Fatalf("RunFunction(...): %v", err)
	}
	if _, ok := lentTo(c, first); ok {
		t.Errorf("RunFunction(...): the request's copy is still lent to it")
	}
	// Its fleet, which aliased the copy, is gone with it.
	for _, key := range []string{fleetClusters, fleetReplicas} {
		if items, err := All(first.GetRequiredResources()[key]); err != nil || len(items) > 0 {
			t.Errorf("RunFunction(...): the request still has %d %s items (error %v), read from a copy it gave back", len(items), key, err)
		}
	}
	if got, want := c.IdleBytes(), cap(firstCopy); got != want {
		t.Errorf("idleBytes() after RunFunction: got %d, want the request's copy, %d", got, want)
	}

	second := &fnv1.RunFunctionRequest{}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wiretest.Marshalled(t, small))}, second); err != nil {
		t.Fatalf("Unmarshal(...): %v", err)
	}
	secondCopy, _ := lentTo(c, second)
	if len(secondCopy) == 0 || &secondCopy[0] != &firstCopy[0] {
		t.Errorf("Unmarshal(...) of a smaller request: not decoded into the idle copy")
	}
	// Decoded into what the first request left, it reads as new.
	fresh := &fnv1.RunFunctionRequest{}
	if err := testCodec(t).unmarshalRequest(wiretest.Marshalled(t, small), fresh); err != nil {
		t.Fatalf("unmarshalRequest(...): %v", err)
	}
	if diff := cmp.Diff(fresh, second, protocmp.Transform()); diff != "" {
		t.Errorf("Unmarshal(...) into a recycled copy: a fresh decoding's -want, +got:\n%s", diff)
	}
	want, err := srv.RunFunction(context.Background(), fresh)
	if err != nil {
		t.Fatalf("RunFunction(...): %v", err)
	}
	got, err := srv.RunFunction(context.Background(), second)
	if err != nil {
		t.Fatalf("RunFunction(...): %v", err)
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("RunFunction(...) of a request in a recycled copy: a fresh decoding's -want, +got:\n%s", diff)
	}
}

func TestRequestCopiesNotDecoded(t *testing.T) {
	// A request that does not decode aliases nothing: its copy is idle at
	// once.
	c := testCodec(t)
	before := lentCount(c)
	garbage := []byte{0xff, 0xff, 0xff}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(garbage)}, &fnv1.RunFunctionRequest{}); err == nil {
		t.Fatalf("Unmarshal(%x): want an error, got none", garbage)
	}
	if got := lentCount(c); got != before {
		t.Errorf("Unmarshal(%x): %d copies lent, want %d", garbage, got, before)
	}
	if got := c.IdleBytes(); got < len(garbage) {
		t.Errorf("Unmarshal(%x): %d bytes idle, want the copy's", garbage, got)
	}
}

func TestRequestCopiesNeverRun(t *testing.T) {
	// A request decoded but never handed to RunFunction (an interceptor
	// refused the call) lets its copy go with it.
	c := testCodec(t)
	b := wiretest.Marshalled(t, newCodecFixture(t).req)
	key := func() weak.Pointer[fnv1.RunFunctionRequest] {
		req := &fnv1.RunFunctionRequest{}
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, req); err != nil {
			t.Fatalf("Unmarshal(...): %v", err)
		}
		if _, ok := lentTo(c, req); !ok {
			t.Fatalf("Unmarshal(...): the request's copy is not lent to it")
		}
		return weak.Make(req)
	}()
	lent := func() bool {
		c.copies.mu.Lock()
		defer c.copies.mu.Unlock()
		_, ok := c.copies.lent[key]
		return ok
	}
	// Cleanups run after a collection, in their own goroutine.
	for range 100 {
		if !lent() {
			return
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	t.Errorf("after the request was collected: its copy is still lent to it")
}

func TestCopyPool(t *testing.T) {
	type want struct {
		caps []int
	}
	cases := map[string]struct {
		reason string
		idle   []int
		get    int
		want   want
	}{
		"KeepsTheLatest": {
			reason: "Of more idle buffers than it keeps, the pool keeps those given back last.",
			idle:   []int{10, 30, 20},
			want:   want{caps: []int{20, 30}},
		},
		"SmallestThatFits": {
			reason: "A buffer is taken from the smallest idle one that holds it.",
			idle:   []int{30, 20},
			get:    15,
			want:   want{caps: []int{30}},
		},
		"NoneFits": {
			reason: "When no idle buffer holds it, a buffer is new and the idle ones stay.",
			idle:   []int{30, 20},
			get:    40,
			want:   want{caps: []int{20, 30}},
		},
		"OversizedDropped": {
			reason: "An idle buffer over twice the size asked for is of a fleet since shrunk: dropped, not kept or used.",
			idle:   []int{100, 20},
			get:    15,
			want:   want{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := newCopyPool()
			for _, n := range tc.idle {
				p.put(make([]byte, n))
			}
			if tc.get > 0 {
				if b := p.get(tc.get); len(b) != tc.get {
					t.Errorf("%s\nget(%d): %d bytes", tc.reason, tc.get, len(b))
				}
			}
			var caps []int
			for _, b := range p.idle {
				caps = append(caps, cap(b))
			}
			slices.Sort(caps)
			if diff := cmp.Diff(tc.want.caps, caps); diff != "" {
				t.Errorf("%s\nidle buffers' capacities: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
