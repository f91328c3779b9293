// Package server serves a function as function.Serve (function-sdk-go
// v0.7.1) serves it, which takes no gRPC server options, plus two: the
// request codec, for this server only, and a cap on the calls in flight on
// each connection.
//
// gRPC reads a whole request before the handler runs, so a cap inside the
// handler would bound nothing: a request carrying a large fleet is tens of
// MiB, and Crossplane's default reconcile concurrency sends a hundred at
// once (docs/fnload.md measures what that costs). The cap is HTTP/2's
// stream quota (SETTINGS_MAX_CONCURRENT_STREAMS): a gRPC client does not
// open a stream over it, and waits for one to close, up to its call's
// deadline, before sending a byte, so a burst queues in the client instead
// of arriving.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	grpcprometheus "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/crossplane/function-sdk-go"
	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/proto/v1beta1"

	"github.com/modelplaneai/fleet-scheduler/internal/codec"
)

// Options are function.Serve's defaults with opts applied, so that
// every ServeOption of the SDK (Listen, MTLSCertificates, Insecure,
// MaxRecvMessageSize, WithMetricsServer, ...) means here what it means
// there.
func Options(opts ...function.ServeOption) (*function.ServeOptions, error) {
	registry, ok := prometheus.DefaultRegisterer.(*prometheus.Registry)
	if !ok {
		return nil, errors.New("cannot serve metrics: the default Prometheus registerer is not a registry")
	}
	so := &function.ServeOptions{
		Network:         function.DefaultNetwork,
		Address:         function.DefaultAddress,
		MaxRecvMsgSize:  function.DefaultMaxRecvMsgSize,
		MetricsAddress:  function.DefaultMetricsAddress,
		MetricsRegistry: registry,
	}
	for _, o := range opts {
		if err := o(so); err != nil {
			return nil, fmt.Errorf("cannot apply ServeOption: %w", err)
		}
	}
	if so.Credentials == nil {
		return nil, errors.New("no credentials provided - did you specify the Insecure or MTLSCertificates options?")
	}
	return so, nil
}

// New is the gRPC server function.Serve builds, with the request
// codec and at most streams calls in flight per connection (0: no cap),
// its Prometheus metrics registered when so asks for them.
func New(so *function.ServeOptions, requests *codec.Codec, fn fnv1.FunctionRunnerServiceServer, streams uint32) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(so.MaxRecvMsgSize),
		grpc.Creds(so.Credentials),
		grpc.ForceServerCodecV2(requests),
		grpc.MaxConcurrentStreams(streams),
	}
	var metrics *grpcprometheus.ServerMetrics
	if so.MetricsAddress != "" {
		metrics = grpcprometheus.NewServerMetrics(so.MetricsServerOpts...)
		interceptors := append([]grpc.UnaryServerInterceptor{metrics.UnaryServerInterceptor()}, so.UnaryInterceptors...)
		opts = append(opts, grpc.ChainUnaryInterceptor(interceptors...))
		so.MetricsRegistry.MustRegister(metrics)
	}
	srv := grpc.NewServer(opts...)
	reflection.Register(srv)
	served := requests.Server(fn)
	fnv1.RegisterFunctionRunnerServiceServer(srv, served)
	v1beta1.RegisterFunctionRunnerServiceServer(srv, function.ServeBeta(served))
	if so.HealthServer != nil {
		healthgrpc.RegisterHealthServer(srv, so.HealthServer)
	}
	if metrics != nil {
		metrics.InitializeMetrics(srv)
	}
	return srv
}

// Listeners are what a server listens at: gRPC's, and the metrics' where
// so serves metrics.
type Listeners struct {
	gRPC, metrics net.Listener
}

// Listen listens where so says, for gRPC and for the metrics, before
// anything is served: an address another process holds fails here, naming
// its flag, instead of leaving the function serving without metrics as
// function.Serve does.
func Listen(so *function.ServeOptions) (Listeners, error) {
	var l Listeners
	var err error
	if l.gRPC, err = (&net.ListenConfig{}).Listen(context.Background(), so.Network, so.Address); err != nil {
		return Listeners{}, fmt.Errorf("cannot listen for %s connections at --address %q: %w", so.Network, so.Address, err)
	}
	if so.MetricsAddress == "" {
		return l, nil
	}
	if l.metrics, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp", so.MetricsAddress); err != nil {
		_ = l.gRPC.Close()
		return Listeners{}, fmt.Errorf("cannot listen for metrics at --metrics-address %q: %w", so.MetricsAddress, err)
	}
	return l, nil
}

// Serve serves srv at l's gRPC listener and the Prometheus metrics at its
// metrics listener, and blocks until the gRPC server stops.
func Serve(log logging.Logger, l Listeners, so *function.ServeOptions, srv *grpc.Server) error {
	if l.metrics != nil {
		metrics := &http.Server{
			Handler:           promhttp.HandlerFor(so.MetricsRegistry, promhttp.HandlerOpts{}),
			ReadHeaderTimeout: 30 * time.Second,
		}
		go func() {
			// Serving stops only with the process, or with an error worth
			// a line: the gRPC server goes on, as function.Serve's does.
			if err := metrics.Serve(l.metrics); err != nil {
				log.Info("Stopped serving metrics", "address", so.MetricsAddress, "error", err)
			}
		}()
	}
	if err := srv.Serve(l.gRPC); err != nil {
		return fmt.Errorf("cannot serve mTLS gRPC connections: %w", err)
	}
	return nil
}
