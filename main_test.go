package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/internal/codec"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/internal/plan"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// TestServedOverGRPC serves requests through a gRPC server and connection
// with the request codec, as main.go does: gRPC hands the codec a request
// of a few MB in many HTTP/2 frames, and the function recycles its copy
// from one call to the next, a smaller request in between. Every response
// must be what a fresh server gives for the request decoded in process.
func TestServedOverGRPC(t *testing.T) {
	lis := bufconn.Listen(1 << 20)
	requests := codec.New(fleet.RequiredClusters, fleet.RequiredReplicas)
	srv := grpc.NewServer(grpc.ForceServerCodecV2(requests), grpc.MaxRecvMsgSize(64<<20))
	served := &Function{log: logging.NewNopLogger(), now: func() time.Time { return benchNow }, fleet: fleet.NewReader(), planner: plan.Planner{Selectors: scheduling.NewSelectors()}}
	fnv1.RegisterFunctionRunnerServiceServer(srv, requests.Server(served))
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	client := fnv1.NewFunctionRunnerServiceClient(dialBufconn(t, lis))

	bigClusters, bigReplicas := benchFleet(500)
	big := fleetRequest(benchDeployment(), bigClusters, bigReplicas, nil)
	smallClusters, smallReplicas := benchFleet(20)
	small := fleetRequest(benchDeployment(), smallClusters, smallReplicas, nil)
	if size := proto.Size(big); size < 1<<20 {
		t.Fatalf("the big request is %d bytes, want one gRPC sends in many frames", size)
	}
	for i, req := range []*fnv1.RunFunctionRequest{big, big, small, big} {
		fresh := &Function{log: logging.NewNopLogger(), now: func() time.Time { return benchNow }}
		want, err := fresh.RunFunction(context.Background(), proto.CloneOf(req))
		if err != nil {
			t.Fatalf("call %d: in process RunFunction(...): %v", i, err)
		}
		got, err := client.RunFunction(context.Background(), req)
		if err != nil {
			t.Fatalf("call %d: RunFunction(...) over gRPC: %v", i, err)
		}
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("call %d: RunFunction(...) over gRPC: in process -want, +got:\n%s", i, diff)
		}
	}
	// Every call gave its copy back; the pool keeps the biggest.
	if idle := requests.IdleBytes(); idle < proto.Size(big) {
		t.Errorf("after the calls: %d bytes of copies idle, want at least the big request's %d", idle, proto.Size(big))
	}
}

// dialBufconn connects to a server on an in-process listener, closing the
// connection when the test ends.
func dialBufconn(t *testing.T, lis *bufconn.Listener, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, opts...)
	conn, err := grpc.NewClient("passthrough:///fleet-scheduler", opts...)
	if err != nil {
		t.Fatalf("grpc.NewClient(...): %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
