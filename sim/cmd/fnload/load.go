package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/benchfleet"
)

// requests are the calls' RunFunctionRequests on the wire: the fleet,
// encoded once, after a part of each call's own naming its deployment.
// Protobuf merges concatenated messages, so the two parts are one request.
type requests struct {
	fleet []byte
}

// newRequests encodes the fleet as observed now: the server judges the
// pool reports by its clock, and with its default observationMaxAge (5m)
// they stay fresh for a level, as a live agent keeps them.
func newRequests(replicas int) (*requests, error) {
	clusters, placed := benchfleet.FleetAt(replicas, time.Now())
	full := benchfleet.Request(benchfleet.Deployment("fleet"), clusters, placed, nil)
	b, err := proto.Marshal(&fnv1.RunFunctionRequest{RequiredResources: map[string]*fnv1.Resources{
		fleet.RequiredClusters: full.GetRequiredResources()[fleet.RequiredClusters],
		fleet.RequiredReplicas: full.GetRequiredResources()[fleet.RequiredReplicas],
	}})
	if err != nil {
		return nil, fmt.Errorf("cannot encode the fleet: %w", err)
	}
	return &requests{fleet: b}, nil
}

// call is the request of the call for deployment name.
func (r *requests) call(name string) (benchfleet.Encoded, error) {
	own := benchfleet.Request(benchfleet.Deployment(name), nil, nil, nil)
	// The fleet's part carries these.
	delete(own.GetRequiredResources(), fleet.RequiredClusters)
	delete(own.GetRequiredResources(), fleet.RequiredReplicas)
	own.Meta.Tag = name
	b, err := proto.Marshal(own)
	if err != nil {
		return nil, fmt.Errorf("cannot encode the request for %s: %w", name, err)
	}
	return benchfleet.Encoded{b, r.fleet}, nil
}

// result is one level of one server: what the client saw, and what the
// kernel says of the server.
type result struct {
	server       string
	requestBytes int
	n, calls     int
	elapsed      time.Duration
	latencies    []time.Duration // sorted
	errors       map[string]int  // by gRPC code, or "wrong answer"
	peakRSS      int64
	cpuPerOp     time.Duration
}

func (r result) perSecond() float64 { return float64(r.calls) / r.elapsed.Seconds() }

// quantile is the q-quantile of the latencies, nearest rank.
func (r result) quantile(q float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	i := int(q*float64(len(r.latencies))+0.999999) - 1
	return r.latencies[min(max(i, 0), len(r.latencies)-1)]
}

func (r result) errorCount() int {
	n := 0
	for _, c := range r.errors {
		n += c
	}
	return n
}

func (r result) errorText() string {
	if len(r.errors) == 0 {
		return "0"
	}
	var parts []string
	for k, c := range r.errors {
		parts = append(parts, fmt.Sprintf("%d %s", c, k))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// runLevel makes calls calls, n at a time, over one connection to the
// server, as Crossplane does (waitForReady, its 4 MB receive limit): a
// warm-up call first, then the level, timed.
func runLevel(ctx context.Context, p *process, reqs *requests, n, calls int, timeout time.Duration) (result, error) {
	conn, err := grpc.NewClient("passthrough:///"+p.addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(benchfleet.NewClientCodec()), grpc.WaitForReady(true)))
	if err != nil {
		return result{}, fmt.Errorf("cannot connect to %s: %w", p.addr, err)
	}
	defer func() { _ = conn.Close() }()
	warmup, err := reqs.call("warmup")
	if err != nil {
		return result{}, err
	}
	if why := invoke(ctx, conn, warmup, timeout); why != "" {
		return result{}, fmt.Errorf("the warm-up call failed: %s", why)
	}

	// Each call its own deployment, encoded before the clock starts.
	own := make([]benchfleet.Encoded, calls)
	for i := range own {
		if own[i], err = reqs.call(fmt.Sprintf("load-%05d", i)); err != nil {
			return result{}, err
		}
	}
	before, err := p.usage()
	if err != nil {
		return result{}, err
	}
	res := result{n: n, calls: calls, errors: map[string]int{}, latencies: make([]time.Duration, calls)}
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for range n {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= calls {
					return
				}
				began := time.Now()
				why := invoke(ctx, conn, own[i], timeout)
				res.latencies[i] = time.Since(began)
				if why != "" {
					mu.Lock()
					res.errors[why]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	after, err := p.usage()
	if err != nil {
		return result{}, err
	}
	slices.Sort(res.latencies)
	res.peakRSS = after.peakRSS
	res.cpuPerOp = (after.cpu - before.cpu) / time.Duration(calls)
	return res, ctx.Err()
}

// invoke makes one call and says what went wrong, if anything: the gRPC
// code of an error, or a wrong answer.
func invoke(ctx context.Context, conn *grpc.ClientConn, req benchfleet.Encoded, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rsp := &fnv1.RunFunctionResponse{}
	if err := conn.Invoke(ctx, fnv1.FunctionRunnerService_RunFunction_FullMethodName, req, rsp); err != nil {
		return status.Code(err).String()
	}
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			return "fatal result"
		}
	}
	placed := 0
	for k := range rsp.GetDesired().GetResources() {
		if strings.HasPrefix(k, "replica-") {
			placed++
		}
	}
	if placed != benchfleet.NewReplicas {
		return fmt.Sprintf("wrong answer (%d replicas placed)", placed)
	}
	return ""
}
