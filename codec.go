package main

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
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
	return unmarshalRequest(data.Materialize(), req)
}

// unmarshalRequest decodes a RunFunctionRequest, leaving the items of the
// fleet's required resources in b, undecoded. readFleet reads them through
// wireItems, as it reads decoded items.
func unmarshalRequest(b []byte, req *fnv1.RunFunctionRequest) error {
	var kept []byte
	fleet := map[string][]byte{}
	for rest := b; len(rest) > 0; {
		num, typ, field, after, err := next(rest)
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
	var value pieces
	for len(b) > 0 {
		num, typ, field, rest, err := next(b)
		if err != nil {
			return "", nil, err
		}
		switch {
		case num == mapKeyField && typ == protowire.BytesType:
			key = string(field)
		case num == mapValueField && typ == protowire.BytesType:
			value.add(field)
		}
		b = rest
	}
	return key, value.b, nil
}
