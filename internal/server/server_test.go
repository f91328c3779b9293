package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/crossplane/function-sdk-go"
	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/proto/v1beta1"

	"github.com/modelplaneai/fleet-scheduler/internal/codec"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/benchfleet"
)

// freeAddress is a loopback address no one listens on, for now.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient(%s): %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// echo answers a call with its request's tag, and how many clusters its
// request carried, read through the request codec.
type echo struct {
	fnv1.UnimplementedFunctionRunnerServiceServer
}

func (echo) RunFunction(_ context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	n := 0
	for items := codec.ItemsOf(req.GetRequiredResources()["clusters"]); ; n++ {
		_, ok, err := items.Next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
	}
	return &fnv1.RunFunctionResponse{Meta: &fnv1.ResponseMeta{Tag: fmt.Sprintf("%s: %d clusters", req.GetMeta().GetTag(), n)}}, nil
}

// TestServe serves a function on loopback, as main.go does, and calls
// everything function.Serve would serve: RunFunction in v1 and v1beta1
// through the request codec, server reflection, and the Prometheus metrics
// of the calls.
func TestServe(t *testing.T) {
	addr, metricsAddr := freeAddress(t), freeAddress(t)
	so, err := Options(
		function.Listen("tcp", addr),
		function.Insecure(true),
		function.MaxRecvMessageSize(64<<20),
		function.WithMetricsServer(metricsAddr),
		// The process's default registry takes one server's metrics only.
		function.WithMetricsRegistry(prometheus.NewRegistry()))
	if err != nil {
		t.Fatalf("Options(...): %v", err)
	}
	requests := codec.New("clusters", "all-replicas")
	srv := New(so, requests, echo{}, 4)
	lis, err := Listen(so)
	if err != nil {
		t.Fatalf("Listen(...): %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- Serve(logging.NewNopLogger(), lis, so, srv) }()
	defer func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve(...): %v", err)
		}
	}()
	conn := dial(t, addr)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	clusters, replicas := benchfleet.Fleet(200)
	req := benchfleet.Request(benchfleet.Deployment("qwen"), clusters, replicas, nil)
	req.Meta.Tag = "call"
	want := &fnv1.RunFunctionResponse{Meta: &fnv1.ResponseMeta{Tag: fmt.Sprintf("call: %d clusters", len(clusters))}}

	t.Run("v1 RunFunction, through the request codec", func(t *testing.T) {
		got, err := fnv1.NewFunctionRunnerServiceClient(conn).RunFunction(ctx, req, grpc.WaitForReady(true))
		if err != nil {
			t.Fatalf("RunFunction(...): %v", err)
		}
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("RunFunction(...): in process -want, +served:\n%s", diff)
		}
		// The request codec decoded it, into a copy it keeps for the next.
		if requests.IdleBytes() < proto.Size(req) {
			t.Errorf("the request codec holds %d bytes idle after the call, want the request's %d: it did not decode it", requests.IdleBytes(), proto.Size(req))
		}
	})
	t.Run("v1beta1 RunFunction, for Crossplane before v1.17", func(t *testing.T) {
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		beta := &v1beta1.RunFunctionRequest{}
		if err := proto.Unmarshal(b, beta); err != nil {
			t.Fatal(err)
		}
		got, err := v1beta1.NewFunctionRunnerServiceClient(conn).RunFunction(ctx, beta)
		if err != nil {
			t.Fatalf("v1beta1 RunFunction(...): %v", err)
		}
		if b, err = proto.Marshal(got); err != nil {
			t.Fatal(err)
		}
		gotV1 := &fnv1.RunFunctionResponse{}
		if err := proto.Unmarshal(b, gotV1); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, gotV1, protocmp.Transform()); diff != "" {
			t.Errorf("v1beta1 RunFunction(...): in process -want, +served:\n%s", diff)
		}
	})
	t.Run("server reflection lists both services", func(t *testing.T) {
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatalf("ServerReflectionInfo(...): %v", err)
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		rsp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range rsp.GetListServicesResponse().GetService() {
			got = append(got, s.GetName())
		}
		for _, want := range []string{"apiextensions.fn.proto.v1.FunctionRunnerService", "apiextensions.fn.proto.v1beta1.FunctionRunnerService"} {
			if !strings.Contains(strings.Join(got, " "), want) {
				t.Errorf("reflection lists %v, want %s among them", got, want)
			}
		}
	})
	t.Run("the metrics count the calls", func(t *testing.T) {
		hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsAddr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		hrsp, err := http.DefaultClient.Do(hreq)
		if err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		defer hrsp.Body.Close()
		body, err := io.ReadAll(hrsp.Body)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			`grpc_server_handled_total{grpc_code="OK",grpc_method="RunFunction",grpc_service="apiextensions.fn.proto.v1.FunctionRunnerService",grpc_type="unary"} 1`,
			`grpc_server_handled_total{grpc_code="OK",grpc_method="RunFunction",grpc_service="apiextensions.fn.proto.v1beta1.FunctionRunnerService",grpc_type="unary"} 1`,
		} {
			if !strings.Contains(string(body), want) {
				t.Errorf("GET /metrics has no %s; it has:\n%s", want, body)
			}
		}
	})
}

// TestServeOptions refuses to serve without credentials, as function.Serve
// does.
func TestServeOptions(t *testing.T) {
	cases := map[string]struct {
		reason string
		opts   []function.ServeOption
		want   string
	}{
		"NoCredentials": {
			reason: "Neither --insecure nor a certificates directory: nothing to serve with.",
			opts:   []function.ServeOption{function.MTLSCertificates(""), function.Insecure(false)},
			want:   "no credentials provided",
		},
		"MissingCertificates": {
			reason: "A certificates directory without certificates is an error that says what is missing.",
			opts:   []function.ServeOption{function.MTLSCertificates(t.TempDir())},
			want:   "cannot apply ServeOption: cannot load X509 keypair",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Options(tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s\nOptions(...): want an error containing %q, got %v", tc.reason, tc.want, err)
			}
		})
	}
}

// countingListener counts the bytes the server has read of its
// connections.
type countingListener struct {
	net.Listener

	read *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	return countingConn{Conn: c, read: l.read}, err
}

type countingConn struct {
	net.Conn

	read *atomic.Int64
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

// blocking is a function whose calls wait for release.
type blocking struct {
	fnv1.UnimplementedFunctionRunnerServiceServer

	entered chan struct{}
	release chan struct{}
	active  atomic.Int32
	mu      sync.Mutex
	most    int32
}

func (b *blocking) RunFunction(ctx context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	n := b.active.Add(1)
	defer b.active.Add(-1)
	b.mu.Lock()
	b.most = max(b.most, n)
	b.mu.Unlock()
	b.entered <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &fnv1.RunFunctionResponse{Meta: &fnv1.ResponseMeta{Tag: req.GetMeta().GetTag()}}, nil
}

// TestMaxConcurrentStreams: over the cap, a call waits in the client, its
// request unsent, until a call in flight ends or its own deadline passes:
// queued, never refused, and its bytes never reach the server meanwhile.
func TestMaxConcurrentStreams(t *testing.T) {
	so, err := Options(function.Insecure(true), function.MaxRecvMessageSize(64<<20), function.WithMetricsServer(""))
	if err != nil {
		t.Fatal(err)
	}
	fn := &blocking{entered: make(chan struct{}, 8), release: make(chan struct{})}
	srv := New(so, codec.New("clusters", "all-replicas"), fn, 1)
	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var read atomic.Int64
	go func() { _ = srv.Serve(countingListener{Listener: lis, read: &read}) }()
	defer srv.Stop()
	client := fnv1.NewFunctionRunnerServiceClient(dial(t, lis.Addr().String()))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	type answer struct {
		tag string
		err error
	}
	call := func(ctx context.Context, req *fnv1.RunFunctionRequest, out chan<- answer) {
		rsp, err := client.RunFunction(ctx, req, grpc.WaitForReady(true))
		out <- answer{rsp.GetMeta().GetTag(), err}
	}
	first := make(chan answer, 1)
	go call(ctx, &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "first"}}, first)
	<-fn.entered

	// A request of 8 MiB, over the cap: it waits, and is not sent.
	clusters, replicas := benchfleet.Fleet(2_000)
	big := benchfleet.Request(benchfleet.Deployment("qwen"), clusters, replicas, nil)
	big.Meta.Tag = "queued"
	before := read.Load()
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	timedOut := make(chan answer, 1)
	go call(short, big, timedOut)
	if got := <-timedOut; status.Code(got.err) != codes.DeadlineExceeded {
		t.Errorf("a call over the cap with a 300ms deadline: want %s, got %v", codes.DeadlineExceeded, got.err)
	}
	queued := make(chan answer, 1)
	go call(ctx, big, queued)
	time.Sleep(300 * time.Millisecond)
	if sent := read.Load() - before; sent > 1<<20 {
		t.Errorf("while one call is in flight, the server read %d bytes of the calls over the cap, want none of their %d-byte requests", sent, proto.Size(big))
	}

	close(fn.release)
	for tag, ch := range map[string]chan answer{"first": first, "queued": queued} {
		if got := <-ch; got.err != nil || got.tag != tag {
			t.Errorf("call %s, once the first is done: want its response, got tag %q, error %v", tag, got.tag, got.err)
		}
	}
	if most := fn.most; most != 1 {
		t.Errorf("at most %d calls were in the function at once, want 1", most)
	}
}

// TestListenHeld: an address another process holds is refused before
// anything is served, naming its flag, and nothing is left listening.
func TestListenHeld(t *testing.T) {
	held, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	cases := map[string]struct {
		reason        string
		grpc, metrics string
		want          string
	}{
		"MetricsHeld": {
			reason:  "A metrics port in use stopped only the metrics server, which said so in one line; it is a bad flag.",
			grpc:    freeAddress(t),
			metrics: held.Addr().String(),
			want:    `cannot listen for metrics at --metrics-address "` + held.Addr().String() + `"`,
		},
		"GRPCHeld": {
			reason:  "A gRPC port in use names --address.",
			grpc:    held.Addr().String(),
			metrics: freeAddress(t),
			want:    `cannot listen for tcp connections at --address "` + held.Addr().String() + `"`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			so, err := Options(function.Listen("tcp", tc.grpc), function.Insecure(true), function.WithMetricsServer(tc.metrics))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Listen(so)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s\nListen(...): want an error containing %q, got %v", tc.reason, tc.want, err)
			}
			// The address that was free is free again.
			for _, addr := range []string{tc.grpc, tc.metrics} {
				if addr == held.Addr().String() {
					continue
				}
				l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", addr)
				if err != nil {
					t.Errorf("%s\nafter Listen failed, %s is still held: %v", tc.reason, addr, err)
					continue
				}
				_ = l.Close()
			}
		})
	}
}
