package main

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// maxResponseBytes is the most Crossplane receives of a response: its
// function runner (internal/xfn/function_runner.go:254 in v2.3.4 and
// v2.4.0) and its render engine, which `crossplane composition render` runs
// (internal/render/runner.go:57 in both), dial without a receive limit of
// their own, so gRPC's default of 4 MiB holds, and a larger response fails
// the reconcile with ResourceExhausted.
const maxResponseBytes = 4 << 20

// responseBudget counts what a response composes, so that one Crossplane
// would refuse is not built whole: a template's labels are copied into
// every replica, and a million of them in eight replicas took 87 s and
// 2.6 GiB to compose into a 136 MB response.
type responseBudget struct {
	left int
}

// spend counts a composed resource, and is an error once the response
// would be over maxResponseBytes. The response's desired resources are then
// dropped: it becomes a Fatal result, whose desired state Crossplane does
// not use, and whose size it would refuse.
func (b *responseBudget) spend(rsp *fnv1.RunFunctionResponse, key string, r *fnv1.Resource) error {
	// The map entry's key and framing, a few bytes, are left out.
	b.left -= len(key) + proto.Size(r)
	if b.left < 0 {
		clear(rsp.GetDesired().GetResources())
		return fmt.Errorf("cannot compose %s: the response would be over the %d MiB Crossplane accepts from a function (%d bytes composed so far)", key, maxResponseBytes>>20, maxResponseBytes-b.left)
	}
	return nil
}
