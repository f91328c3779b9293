// Package codec is the function server's gRPC codec for RunFunctionRequest.
//
// A RunFunctionRequest carrying a fleet is mostly its ModelReplicas: 37 MiB
// on the wire for 10,000 of them, which protobuf decodes into about 330 MiB
// of Structs, in a second, before RunFunction is called. The codec decodes
// every other part of the request as usual, and leaves the items of the
// required resources it is told of on the wire, in a copy of the request's
// bytes that it recycles from call to call. Items reads them, decoded or
// not, as Struct messages on the wire (package wire reads those). The codec
// knows nothing of what the items are.
package codec

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/internal/wire"
)

// Field numbers of the messages the codec takes apart.
const (
	requiredResourcesField protowire.Number = 8 // RunFunctionRequest.required_resources
	mapKeyField            protowire.Number = 1 // a map entry's key
	mapValueField          protowire.Number = 2 // a map entry's value
	itemsField             protowire.Number = 1 // Resources.items
)

// Codec is gRPC's proto codec, except for a RunFunctionRequest: the items of
// the required resources it was made for stay undecoded, as the unknown
// fields of their (otherwise empty) Resources, in a buffer the request
// borrows until Release. It is safe for concurrent calls.
type Codec struct {
	encoding.CodecV2

	// undecoded are the names of the required resources left on the wire.
	undecoded []string
	copies    *copyPool
}

// New returns a codec that leaves the items of the named required
// resources undecoded.
func New(undecoded ...string) *Codec {
	return &Codec{
		CodecV2:   encoding.GetCodecV2(grpcproto.Name),
		undecoded: slices.Clone(undecoded),
		copies:    newCopyPool(),
	}
}

// Register makes the codec every gRPC server's "proto" codec, the one gRPC
// picks for a request that names no other; function.Serve has no option to
// set a codec. Every message but a RunFunctionRequest is left to gRPC's own.
func (c *Codec) Register() {
	encoding.RegisterCodecV2(c)
}

// Unmarshal decodes a RunFunctionRequest into a buffer it lends the request;
// anything else as gRPC's proto codec does.
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*fnv1.RunFunctionRequest)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	// A copy the request keeps: the fleet's items alias it.
	b := c.copies.get(data.Len())
	data.CopyTo(b)
	if err := c.unmarshalRequest(b, req); err != nil {
		// Nothing of a request that did not decode aliases its copy.
		c.copies.put(b)
		return err
	}
	c.copies.lend(req, b)
	return nil
}

// Release takes back the buffer req was decoded from, if this codec decoded
// it. The request's undecoded items, which aliased it, are emptied first:
// what reads them after reads nothing, not the next request's.
func (c *Codec) Release(req *fnv1.RunFunctionRequest) {
	b, ok := c.copies.take(req)
	if !ok {
		return
	}
	for _, name := range c.undecoded {
		if res := req.GetRequiredResources()[name]; res != nil {
			res.ProtoReflect().SetUnknown(nil)
		}
	}
	c.copies.put(b)
}

// IdleBytes is what the codec holds between calls: the buffers it keeps for
// the next requests.
func (c *Codec) IdleBytes() int { return c.copies.idleBytes() }

// Drain drops the idle buffers, as a new server has none.
func (c *Codec) Drain() { c.copies.drain() }

// Server serves srv's calls and gives each request's buffer back to the
// codec once its call is done: nothing RunFunction returns aliases it.
func (c *Codec) Server(srv fnv1.FunctionRunnerServiceServer) fnv1.FunctionRunnerServiceServer {
	return releasing{FunctionRunnerServiceServer: srv, codec: c}
}

type releasing struct {
	fnv1.FunctionRunnerServiceServer

	codec *Codec
}

func (s releasing) RunFunction(ctx context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	defer s.codec.Release(req)
	return s.FunctionRunnerServiceServer.RunFunction(ctx, req)
}

// unmarshalRequest decodes a RunFunctionRequest, leaving the items of the
// undecoded required resources in b. Items reads them, as it reads decoded
// items.
func (c *Codec) unmarshalRequest(b []byte, req *fnv1.RunFunctionRequest) error {
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
			if slices.Contains(c.undecoded, key) {
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
