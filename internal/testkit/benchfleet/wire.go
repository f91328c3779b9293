package benchfleet

import (
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Encoded is a request already on the wire, in parts: protobuf merges
// concatenated messages, so the parts are one message. ClientCodec sends it
// as it is, which lets a client send bytes no message encodes (garbage, a
// Struct nested deeper than protobuf decodes) and share one encoding of a
// fleet between calls.
type Encoded [][]byte

// ClientCodec is a client's gRPC codec that sends an Encoded request as it
// is, and encodes and decodes every other message as gRPC's proto codec.
type ClientCodec struct{ encoding.CodecV2 }

// NewClientCodec returns a ClientCodec; pass it with grpc.ForceCodecV2.
func NewClientCodec() ClientCodec {
	return ClientCodec{encoding.GetCodecV2(grpcproto.Name)}
}

// Marshal sends an Encoded request's parts without copying them.
func (c ClientCodec) Marshal(v any) (mem.BufferSlice, error) {
	e, ok := v.(Encoded)
	if !ok {
		return c.CodecV2.Marshal(v)
	}
	out := make(mem.BufferSlice, 0, len(e))
	for _, part := range e {
		out = append(out, mem.SliceBuffer(part))
	}
	return out, nil
}
