package main

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"weak"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/internal/wire"
)

// A RunFunctionRequest carrying a fleet is mostly its ModelReplicas: 37 MiB
// on the wire for 10,000 of them, which protobuf decodes into about 330 MiB
// of Structs, in a second, before RunFunction is called. The request codec decodes every
// other part of the request as usual, and leaves the items of the fleet's
// required resources on the wire, where decode.go reads the few fields it
// needs of each and skips the rest (pod templates, mostly) by length.

// Field numbers of the messages the codec takes apart.
const (
	requiredResourcesField protowire.Number = 8 // RunFunctionRequest.required_resources
	mapKeyField            protowire.Number = 1 // a map entry's key
	mapValueField          protowire.Number = 2 // a map entry's value
	itemsField             protowire.Number = 1 // Resources.items
)

// requestCodec is gRPC's proto codec, except for a RunFunctionRequest: the
// items of its clusters and replicas stay undecoded, as the unknown fields
// of their (otherwise empty) Resources.
type requestCodec struct {
	encoding.CodecV2
}

// registerRequestCodec makes the request codec the server's "proto" codec,
// the one gRPC picks for a request that names no other; function.Serve has
// no option to set a codec. Every other message is left to gRPC's own.
func registerRequestCodec() {
	encoding.RegisterCodecV2(requestCodec{CodecV2: encoding.GetCodecV2(grpcproto.Name)})
}

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*fnv1.RunFunctionRequest)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	// A copy the request keeps: the fleet's items alias it.
	b := requestCopies.get(data.Len())
	data.CopyTo(b)
	if err := unmarshalRequest(b, req); err != nil {
		// Nothing of a request that did not decode aliases its copy.
		requestCopies.put(b)
		return err
	}
	requestCopies.lend(req, b)
	return nil
}

// requestCopies are the buffers the codec copies requests into, recycled:
// at 10,000 replicas a request is 37 MiB, and a new buffer on every call
// cost 1.5 ms to allocate and zero on top of the 2.5 ms copy, and made the
// garbage collector run about once a call. A buffer is lent to
// the request decoded from it, and back when RunFunction is done with the
// request: nothing RunFunction returns or caches aliases it.
var requestCopies = &copyPool{lent: map[weak.Pointer[fnv1.RunFunctionRequest]][]byte{}} //nolint:gochecknoglobals // The codec is registered process-wide.

// maxIdleCopies is how many buffers the pool keeps between calls: one per
// concurrent call, as far as Crossplane calls concurrently at this size.
const maxIdleCopies = 2

// copyPool is safe for concurrent calls.
type copyPool struct {
	mu   sync.Mutex
	idle [][]byte
	lent map[weak.Pointer[fnv1.RunFunctionRequest]][]byte
}

// get returns a buffer of n bytes: the smallest idle one that holds them,
// else a new one with room for a fleet that grows a little. Every request
// carries the whole fleet, so requests are about the same size until the
// fleet changes: an idle buffer over twice n is of a fleet since shrunk,
// and is dropped, its memory given back.
func (p *copyPool) get(n int) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle = slices.DeleteFunc(p.idle, func(b []byte) bool { return cap(b)/2 > n })
	best := -1
	for i, b := range p.idle {
		if cap(b) >= n && (best < 0 || cap(b) < cap(p.idle[best])) {
			best = i
		}
	}
	if best < 0 {
		return make([]byte, n, n+n/8)
	}
	b := p.idle[best]
	p.idle = slices.Delete(p.idle, best, best+1)
	return b[:n]
}

// put makes a buffer idle, keeping the maxIdleCopies given back last: a
// buffer of a fleet since grown ages out.
func (p *copyPool) put(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle = append(p.idle, b)
	if len(p.idle) > maxIdleCopies {
		p.idle = slices.Delete(p.idle, 0, len(p.idle)-maxIdleCopies)
	}
}

// lend records that req aliases b. Should RunFunction never see req (an
// interceptor refused the call), b goes to the garbage collector with it.
func (p *copyPool) lend(req *fnv1.RunFunctionRequest, b []byte) {
	key := weak.Make(req)
	p.mu.Lock()
	p.lent[key] = b
	p.mu.Unlock()
	runtime.AddCleanup(req, p.forget, key)
}

// release takes back the buffer req was decoded from, if the codec decoded
// it. The request's fleet, which aliased it, is emptied first: what reads
// it after reads no fleet, not the next request's.
func (p *copyPool) release(req *fnv1.RunFunctionRequest) {
	key := weak.Make(req)
	p.mu.Lock()
	b, ok := p.lent[key]
	delete(p.lent, key)
	p.mu.Unlock()
	if !ok {
		return
	}
	for _, name := range []string{requiredClusters, requiredReplicas} {
		if res := req.GetRequiredResources()[name]; res != nil {
			res.ProtoReflect().SetUnknown(nil)
		}
	}
	p.put(b)
}

// idleBytes is what the pool holds between calls.
func (p *copyPool) idleBytes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, b := range p.idle {
		n += cap(b)
	}
	return n
}

// drain drops the idle buffers, as a new server has none.
func (p *copyPool) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle = nil
}

// forget drops the record of a buffer lent to a request that is gone
// without being released; the buffer goes with it.
func (p *copyPool) forget(key weak.Pointer[fnv1.RunFunctionRequest]) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.lent, key)
}

// unmarshalRequest decodes a RunFunctionRequest, leaving the items of the
// fleet's required resources in b, undecoded. readFleet reads them through
// wireItems, as it reads decoded items.
func unmarshalRequest(b []byte, req *fnv1.RunFunctionRequest) error {
	var kept []byte
	fleet := map[string][]byte{}
	for rest := b; len(rest) > 0; {
		num, typ, field, after, err := wire.Next(rest)
		if err != nil {
			return fmt.Errorf("cannot decode RunFunctionRequest: %w", err)
		}
		whole := rest[:len(rest)-len(after)]
		rest = after
		if num == requiredResourcesField && typ == protowire.BytesType {
			key, items, err := mapEntry(field)
			if err != nil {
				return fmt.Errorf("cannot decode RunFunctionRequest: required_resources: %w", err)
			}
			if key == requiredClusters || key == requiredReplicas {
				// Of two entries of a key, the last wins, as in any map.
				fleet[key] = items
				continue
			}
		}
		kept = append(kept, whole...)
	}
	if err := proto.Unmarshal(kept, req); err != nil {
		return fmt.Errorf("cannot decode RunFunctionRequest: %w", err)
	}
	for key, items := range fleet {
		res := &fnv1.Resources{}
		res.ProtoReflect().SetUnknown(items)
		if req.RequiredResources == nil {
			req.RequiredResources = map[string]*fnv1.Resources{}
		}
		req.RequiredResources[key] = res
	}
	return nil
}

// mapEntry reads a map entry of a string key and a message value.
func mapEntry(b []byte) (string, []byte, error) {
	var key string
	var value wire.Pieces
	for len(b) > 0 {
		num, typ, field, rest, err := wire.Next(b)
		if err != nil {
			return "", nil, err
		}
		switch {
		case num == mapKeyField && typ == protowire.BytesType:
			key = string(field)
		case num == mapValueField && typ == protowire.BytesType:
			value.Add(field)
		}
		b = rest
	}
	return key, value.Bytes, nil
}

// resourceStruct is the Struct of a fnv1.Resource message: its field 1.
func resourceStruct(b []byte) ([]byte, error) {
	var s wire.Pieces
	for len(b) > 0 {
		num, typ, payload, rest, err := wire.Next(b)
		if err != nil {
			return nil, fmt.Errorf("cannot read resource: %w", err)
		}
		if num == 1 && typ == protowire.BytesType {
			s.Add(payload)
		}
		b = rest
	}
	return s.Bytes, nil
}
