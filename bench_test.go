package main

// Benchmarks of RunFunction in process at fleet scale, the size of a
// realistic ModelReplica inside a RunFunctionRequest, and the fleet
// simulator driven through RunFunction. docs/performance.md has the numbers
// and the commands.

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/input/v1beta1"
	"github.com/modelplaneai/fleet-scheduler/internal/assume"
	"github.com/modelplaneai/fleet-scheduler/internal/codec"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	fsmetrics "github.com/modelplaneai/fleet-scheduler/internal/metrics"
	"github.com/modelplaneai/fleet-scheduler/internal/plan"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/benchfleet"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
	"github.com/modelplaneai/fleet-scheduler/sim"
)

// The benchmark fleet, shared with the load driver (sim/cmd/fnload).
const benchNewReplicas = benchfleet.NewReplicas

var (
	benchNow     = benchfleet.Now
	benchFleet   = benchfleet.Fleet
	fleetRequest = benchfleet.Request
	mustStruct   = benchfleet.MustStruct
)

// benchDeployment wants benchNewReplicas replicas of 4 GPUs, none placed yet.
func benchDeployment() *v1alpha1.ModelDeployment { return benchfleet.Deployment("llama-70b-new") }

func runOnce(req *fnv1.RunFunctionRequest, now time.Time) (*fnv1.RunFunctionResponse, error) {
	return runOn(&Function{now: func() time.Time { return now }}, req)
}

// runOn runs a function, failing on a Fatal result.
func runOn(f fnv1.FunctionRunnerServiceServer, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	rsp, err := f.RunFunction(context.Background(), req)
	if err != nil {
		return nil, err
	}
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			return nil, fmt.Errorf("fatal result: %s", r.GetMessage())
		}
	}
	return rsp, nil
}

// composedReplicas is how many ModelReplicas a response composes.
func composedReplicas(rsp *fnv1.RunFunctionResponse) int {
	n := 0
	for k := range rsp.GetDesired().GetResources() {
		if strings.HasPrefix(k, "replica-") {
			n++
		}
	}
	return n
}

// BenchmarkRunFunction serves a request on 100 clusters x 8 freshly
// observed pools carrying a number of other deployments' replicas, placing
// 8 new replicas: the request's bytes as gRPC receives them, decoded by the
// request codec, RunFunction, and the response encoded. With cache=warm the
// same server serves every call, as in production, where between two calls
// nearly every replica is unchanged and its replica cache holds it; with
// cache=cold every call is a server's first. The rows with request=full
// and request=narrow serve one fleet, of which a share of replicas is not
// counted by the reports, asked for whole or narrowly
// (docs/spec.md#narrow-requests), by a warm server that may narrow. Run it
// on one core:
//
//	go test -run '^$' -bench BenchmarkRunFunction -benchmem -cpu 1 -count 6 .
func BenchmarkRunFunction(b *testing.B) {
	for _, n := range []int{1_000, 2_500, 5_000, 10_000, 20_000, 50_000} {
		// Built once per size, and only for a size that runs.
		request := sync.OnceValues(func() ([]byte, error) {
			clusters, replicas := benchFleet(n)
			return proto.Marshal(fleetRequest(benchDeployment(), clusters, replicas, nil))
		})
		for _, warm := range []bool{true, false} {
			name := fmt.Sprintf("replicas=%d/cache=cold", n)
			if warm {
				name = fmt.Sprintf("replicas=%d/cache=warm", n)
			}
			b.Run(name, func(b *testing.B) { benchServe(b, request, n, benchRow{warm: warm}) })
		}
	}
	for _, n := range []int{10_000, 50_000, 100_000} {
		for _, every := range []int{100, 200} {
			xr := benchDeployment()
			xr.Metadata.UID = "uid-bench"
			fleet := sync.OnceValues(func() ([]*v1alpha1.InferenceCluster, []*v1alpha1.ModelReplica) {
				return benchfleet.FleetOf(n, benchNow, every)
			})
			for _, narrow := range []bool{false, true} {
				request := sync.OnceValues(func() ([]byte, error) {
					clusters, replicas := fleet()
					if narrow {
						return proto.Marshal(benchfleet.NarrowRequest(xr, clusters, replicas, nil))
					}
					return proto.Marshal(fleetRequest(xr, clusters, replicas, nil))
				})
				name := fmt.Sprintf("replicas=%d/uncounted=%.1f%%/request=full", n, 100/float64(every))
				if narrow {
					name = fmt.Sprintf("replicas=%d/uncounted=%.1f%%/request=narrow", n, 100/float64(every))
				}
				b.Run(name, func(b *testing.B) { benchServe(b, request, n, benchRow{warm: true, narrow: narrow}) })
			}
		}
	}
}

// BenchmarkTelemetry is what telling on-call costs
// (docs/operations.md#cost): BenchmarkRunFunction's warm call of 10,000
// replicas on two servers, one with the telemetry of a server with
// --metrics-address (its log line, its metrics, and the pools' capacity
// they read) and one with none, called in turn in one process, which goes
// first alternating, so that a shared machine's drift and the collector's
// debt fall on both alike. told/untold is the ratio of their CPU time.
func BenchmarkTelemetry(b *testing.B) {
	clusters, replicas := benchFleet(10_000)
	wire, err := proto.Marshal(fleetRequest(benchDeployment(), clusters, replicas, nil))
	if err != nil {
		b.Fatal(err)
	}
	frames := inFrames(wire)
	untold, told := newBenchServer(), newBenchServer()
	untold.fn.tel = nil
	servers := [2]*benchServer{untold, told}
	for _, s := range servers {
		rsp, err := s.serve(frames)
		if err != nil {
			b.Fatal(err)
		}
		if got := composedReplicas(rsp); got != benchNewReplicas {
			b.Fatalf("placed %d replicas, want %d (it asks for %v)", got, benchNewReplicas, askedFor(rsp))
		}
	}
	var took [2]time.Duration
	var allocated [2]uint64
	var before, after runtime.MemStats
	calls := 0
	for b.Loop() {
		for k := range 2 {
			i := (calls + k) % 2
			runtime.ReadMemStats(&before)
			cpu := cpuTime()
			if _, err := servers[i].serve(frames); err != nil {
				b.Fatal(err)
			}
			took[i] += cpuTime() - cpu
			runtime.ReadMemStats(&after)
			allocated[i] += after.TotalAlloc - before.TotalAlloc
		}
		calls++
	}
	b.ReportMetric(float64(took[0])/float64(calls), "untold-cpu-ns/call")
	b.ReportMetric(float64(took[1])/float64(calls), "told-cpu-ns/call")
	b.ReportMetric(float64(took[1])/float64(took[0]), "told/untold")
	b.ReportMetric(float64(allocated[0])/float64(calls), "untold-B/call")
	b.ReportMetric(float64(allocated[1])/float64(calls), "told-B/call")
}

// benchRow is how a row of the benchmarks serves: a warm server keeps its
// caches across calls; a narrow one has read the labelled fleet whole.
type benchRow struct {
	warm, narrow bool
}

// benchServe is one row of the benchmarks: n replicas, served as row says.
func benchServe(b *testing.B, request func() ([]byte, error), n int, row benchRow) {
	b.Helper()
	wire, err := request()
	if err != nil {
		b.Fatal(err)
	}
	frames := inFrames(wire)
	newServer := func() *benchServer {
		s := newBenchServer()
		if row.narrow {
			// A server that read the labelled fleet whole a minute ago.
			s.fn.narrowing = fleet.NewNarrowing(fleet.DefaultFullEvery)
			s.fn.narrowing.ReadWhole("uid-bench", 0, 0, benchNow.Add(-time.Minute))
			s.fn.narrowing.Answered("uid-bench", nil)
		}
		return s
	}
	f := newServer()
	serve := func() (*fnv1.RunFunctionResponse, error) {
		if !row.warm {
			f = newServer()
		}
		return f.serve(frames)
	}
	rsp, err := serve()
	if err != nil {
		b.Fatal(err)
	}
	if got := composedReplicas(rsp); got != benchNewReplicas {
		b.Fatalf("placed %d replicas, want %d (it asks for %v)", got, benchNewReplicas, askedFor(rsp))
	}
	// The peak counts the call's copy of the request, which the codec's
	// pool then keeps.
	f.codec.Drain()
	heap := peakHeap(func() { _, _ = serve() })
	// What a server keeps between calls: its caches, and the pool's copy
	// of the last request.
	f.codec.Drain()
	kept := liveHeap(func() any {
		s := newServer()
		_, _ = s.serve(frames)
		return s
	})
	// The pool's copy is idle again for the calls timed, as on a server
	// between two calls.
	if _, err := serve(); err != nil {
		b.Fatal(err)
	}
	cpu := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		if _, err := serve(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(heap), "peak-heap-B")
	b.ReportMetric(float64(kept), "kept-heap-B")
	b.ReportMetric(float64(f.codec.IdleBytes()), "idle-copies-B")
	b.ReportMetric(float64(len(wire)), "req-bytes")
	b.ReportMetric(float64(len(wire))/float64(n), "req-bytes/replica")
}

// inFrames are a message's bytes as gRPC hands them to a codec: in the
// buffers of the HTTP/2 DATA frames they came in, 16 KiB each by default.
func inFrames(wire []byte) mem.BufferSlice {
	const frame = 16 << 10
	frames := make(mem.BufferSlice, 0, len(wire)/frame+1)
	for b := wire; len(b) > 0; b = b[min(len(b), frame):] {
		frames = append(frames, mem.SliceBuffer(b[:min(len(b), frame)]))
	}
	return frames
}

// benchServer is what main.go serves: the function with its caches, behind
// the request codec.
type benchServer struct {
	fn    *Function
	codec *codec.Codec
}

func newBenchServer() *benchServer {
	// Its log is the production logger's JSON, written nowhere, and it
	// keeps its metrics, as a server with --metrics-address does.
	log := logging.NewLogrLogger(zapr.NewLogger(zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zapcore.InfoLevel))))
	tel := &telemetry{log: log, metrics: fsmetrics.New(time.Now, nil)}
	return &benchServer{
		fn:    &Function{now: func() time.Time { return benchNow }, fleet: fleet.NewReader(), planner: plan.Planner{Selectors: scheduling.NewSelectors()}, tel: tel},
		codec: codec.New(fleet.RequiredClusters, fleet.RequiredReplicas, fleet.RequiredOwnReplicas, fleet.RequiredUncountedReplicas),
	}
}

// serve does what the server does with a request's bytes, in frames:
// decodes them with the request codec, runs the function, gives the
// request's copy back, and encodes the response.
func (s *benchServer) serve(frames mem.BufferSlice) (*fnv1.RunFunctionResponse, error) {
	req := &fnv1.RunFunctionRequest{}
	if err := s.codec.Unmarshal(frames, req); err != nil {
		return nil, err
	}
	rsp, err := runOn(s.codec.Server(s.fn), req)
	if err != nil {
		return nil, err
	}
	out, err := s.codec.Marshal(rsp)
	if err != nil {
		return nil, err
	}
	out.Free()
	return rsp, nil
}

// BenchmarkSchedule is BenchmarkRunFunction without the protobuf boundary:
// observation and scheduling on the same fleet, already decoded.
//
//	go test -run '^$' -bench BenchmarkSchedule -benchmem -cpu 1 -count 6 .
func BenchmarkSchedule(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 50_000} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			clusters, replicas := benchFleet(n)
			xr := benchDeployment()
			rec := sim.Direct{}
			got, err := rec.Reconcile(xr, clusters, replicas, benchNow)
			if err != nil {
				b.Fatal(err)
			}
			if len(got) != benchNewReplicas {
				b.Fatalf("placed %d replicas, want %d", len(got), benchNewReplicas)
			}
			cpu := cpuTime()
			b.ResetTimer()
			for b.Loop() {
				if _, err := rec.Reconcile(xr, clusters, replicas, benchNow); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkUnmarshalRequest measures what decoding the request costs before
// RunFunction is called: with decoder=proto as gRPC's own codec decodes it
// (every replica into protobuf Structs), with decoder=codec as the request
// codec does (the fleet's items left on the wire, copied once, into a
// buffer recycled once the request is done with, as the server does).
//
//	go test -run '^$' -bench BenchmarkUnmarshalRequest -benchmem -cpu 1 -count 6 .
func BenchmarkUnmarshalRequest(b *testing.B) {
	decoders := []struct {
		name string
		// unmarshal decodes the request's bytes, or its frames, as gRPC
		// hands them over.
		unmarshal func([]byte, mem.BufferSlice, *fnv1.RunFunctionRequest) error
		// done is what the server does with a request once RunFunction is
		// done with it.
		done func(*fnv1.RunFunctionRequest)
	}{
		{"proto", func(w []byte, _ mem.BufferSlice, req *fnv1.RunFunctionRequest) error { return proto.Unmarshal(w, req) }, func(*fnv1.RunFunctionRequest) {}},
		{"codec", benchCodec.unmarshal, benchCodec.release},
	}
	for _, n := range []int{1_000, 10_000, 50_000} {
		request := sync.OnceValues(func() ([]byte, error) {
			clusters, replicas := benchFleet(n)
			return proto.Marshal(fleetRequest(benchDeployment(), clusters, replicas, nil))
		})
		for _, d := range decoders {
			b.Run(fmt.Sprintf("replicas=%d/decoder=%s", n, d.name), func(b *testing.B) {
				wire, err := request()
				if err != nil {
					b.Fatal(err)
				}
				// gRPC's to build, not the codec's: outside the timing.
				frames := inFrames(wire)
				cpu := cpuTime()
				b.ResetTimer()
				for b.Loop() {
					req := &fnv1.RunFunctionRequest{}
					if err := d.unmarshal(wire, frames, req); err != nil {
						b.Fatal(err)
					}
					d.done(req)
				}
				b.StopTimer()
				b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(len(wire)), "req-bytes")
				// What a decoded request holds, its copy included: none idle,
				// and none still lent to a request dropped before.
				benchCodec.reset()
				b.ReportMetric(float64(liveHeap(func() any {
					req := &fnv1.RunFunctionRequest{}
					_ = d.unmarshal(wire, frames, req)
					return req
				})), "req-heap-B")
			})
		}
	}
}

// benchCodec is the request codec of BenchmarkUnmarshalRequest, new for
// each measurement of what a request holds, so that no copy the codec lent
// a request dropped before is counted.
var benchCodec = &resettableCodec{c: codec.New(fleet.RequiredClusters, fleet.RequiredReplicas)}

type resettableCodec struct{ c *codec.Codec }

func (r *resettableCodec) unmarshal(_ []byte, frames mem.BufferSlice, req *fnv1.RunFunctionRequest) error {
	return r.c.Unmarshal(frames, req)
}

func (r *resettableCodec) release(req *fnv1.RunFunctionRequest) { r.c.Release(req) }

func (r *resettableCodec) reset() { r.c = codec.New(fleet.RequiredClusters, fleet.RequiredReplicas) }

// cpuTime is the CPU time the process has used, user and system: on a
// shared machine it tells the work a call does from the wait for a core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// liveHeap is the heap still held, after a collection, by what f returns.
func liveHeap(f func() any) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := f()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(v)
	if after.HeapAlloc > before.HeapAlloc {
		return after.HeapAlloc - before.HeapAlloc
	}
	return 0
}

// peakHeap runs f once and returns the most heap its objects held above
// what was live before, sampled every millisecond (at GOMAXPROCS=1, at each
// preemption) with the default GOGC: what a call needs the container to have.
func peakHeap(f func()) uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	runtime.GC()
	base := read()
	var peak atomic.Uint64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			if h := read(); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	f()
	if h := read(); h > peak.Load() {
		peak.Store(h)
	}
	close(done)
	<-stopped
	if p := peak.Load(); p > base {
		return p - base
	}
	return 0
}

// TestRequestBytesPerReplica measures what one realistic ModelReplica adds
// to a RunFunctionRequest, and checks that main.go's default
// --max-recv-message-size holds a fleet of 10,000 of them with the
// benchmark's 100 clusters.
func TestRequestBytesPerReplica(t *testing.T) {
	clusters, replicas := benchFleet(200)
	empty := proto.Size(fleetRequest(benchDeployment(), clusters, nil, nil))
	full := proto.Size(fleetRequest(benchDeployment(), clusters, replicas, nil))
	per := float64(full-empty) / float64(len(replicas))
	at10k := float64(empty) + 10_000*per
	limit := float64(defaultMaxRecvMessageSizeMB) * 1024 * 1024
	t.Logf("request without replicas: %d bytes (100 clusters x 8 pools); per realistic ModelReplica: %.0f bytes; 10,000 replicas: %.1f MiB of the %d MiB default (%.0f replicas fit)",
		empty, per, at10k/1024/1024, defaultMaxRecvMessageSizeMB, (limit-float64(empty))/per)
	if at10k > limit {
		t.Errorf("a request with 10,000 replicas is %.1f MiB, more than the default --max-recv-message-size of %d MiB", at10k/1024/1024, defaultMaxRecvMessageSizeMB)
	}
}

// runFunctionReconciler drives the fleet simulator through the real
// RunFunction: the simulated fleet goes in as a RunFunctionRequest, the
// desired ModelReplicas come back out of the response.
type runFunctionReconciler struct {
	input v1beta1.Input
}

func (r runFunctionReconciler) Reconcile(d *v1alpha1.ModelDeployment, clusters []*v1alpha1.InferenceCluster, replicas []*v1alpha1.ModelReplica, now time.Time) ([]*v1alpha1.ModelReplica, error) {
	in := r.input
	in.APIVersion, in.Kind = "scheduler.fn.modelplane.ai/v1beta1", "Input"
	rsp, err := runOnce(fleetRequest(d, clusters, replicas, mustStruct(in)), now)
	if err != nil {
		return nil, err
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range rsp.GetDesired().GetResources() {
			if strings.HasPrefix(k, "replica-") && !yield(k) {
				return
			}
		}
	})
	out := make([]*v1alpha1.ModelReplica, 0, len(keys))
	for _, k := range keys {
		mr, err := decodeStruct[v1alpha1.ModelReplica](rsp.GetDesired().GetResources()[k].GetResource(), k)
		if err != nil {
			return nil, err
		}
		out = append(out, mr)
	}
	return out, nil
}

// TestFleetSimThroughRunFunction runs a small mixed scenario, with an agent
// that lags and then goes silent (its reports going stale after 2m), once
// through RunFunction and once through the simulator's direct observation +
// scheduling path, and wants the same fleet round by round: the command's
// numbers are the function's.
func TestFleetSimThroughRunFunction(t *testing.T) {
	pools := []sim.PoolSpec{{Name: "a", Nodes: 3, GPUsPerNode: 8, Memory: "80Gi"}, {Name: "b", Nodes: 2, GPUsPerNode: 8, Memory: "80Gi"}}
	sc := sim.Scenario{Name: "small", Clusters: sim.Fleet(2, pools...), Rounds: 30, AgentStopsAfter: 150 * time.Second, Shapes: map[string]sim.Shape{}}
	for i, g := range []int64{1, 4, 2, 8, 1} {
		d := fx.Deployment("x").Engines(fx.Standalone("main", fx.GPURequest(g))).Obj()
		sc.Events = append(sc.Events, sim.Event{Round: 2 * i, Name: fmt.Sprintf("d%d", i), Replicas: 6, Deployment: d})
	}
	gang := fx.Deployment("x").Engines(fx.Gang("main", 1, fx.GPURequest(8))).Obj()
	sc.Events = append(sc.Events, sim.Event{Round: 3, Name: "gang", Replicas: 2, Deployment: gang}, sim.Event{Round: 12, Name: "d0", Replicas: 2})
	runs := []struct {
		binder sim.Binder
		mode   sim.Mode
	}{
		{sim.KubeDefault, sim.Lagging()},
		{sim.KubeMostAllocated, sim.Fresh()},
		{sim.KubeDefault, sim.WholeNode()},
	}
	if testing.Short() {
		runs = runs[:1]
	}
	for _, run := range runs {
		b, m := run.binder, run.mode
		t.Run(string(b)+"/"+m.Name, func(t *testing.T) {
			t.Parallel()
			// One input, read by one planner on both paths.
			in := sim.Input(sim.AssumedBinding(b))
			in.ObservationMaxAge = new("3m")
			want, err := sim.Run(sc.Config(m, b, sim.Direct{Input: in}))
			if err != nil {
				t.Fatal(err)
			}
			got, err := sim.Run(sc.Config(m, b, runFunctionReconciler{input: in}))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(want.Series, got.Series) {
				t.Errorf("through RunFunction the fleet differs from the direct path:\nwant %v\ngot  %v", want.Series, got.Series)
			}
			if want.Placed == 0 {
				t.Error("nothing was placed")
			}
		})
	}
}

// BenchmarkConcurrentCalls serves 16 callers at once, each a deployment of
// its own (with a uid, as real XRs have), on the fleet of
// BenchmarkRunFunction at 10,000 replicas: with the assumed-placement
// ledger, whose critical section (reading it, planning, recording)
// serialises the plans, and without. ns/op is wall time per call across
// the callers; compare the two in one session.
//
//	go test -run '^$' -bench BenchmarkConcurrentCalls -benchtime 200x -count 6 .
func BenchmarkConcurrentCalls(b *testing.B) {
	const callers, n = 16, 10_000
	clusters, replicas := benchFleet(n)
	var frames []mem.BufferSlice
	for i := range callers {
		d := benchDeployment()
		d.Metadata.Name = fmt.Sprintf("llama-70b-new-%02d", i)
		d.Metadata.UID = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		wire, err := proto.Marshal(fleetRequest(d, clusters, replicas, nil))
		if err != nil {
			b.Fatal(err)
		}
		frames = append(frames, inFrames(wire))
	}
	for _, ledger := range []bool{false, true} {
		b.Run(fmt.Sprintf("ledger=%t", ledger), func(b *testing.B) {
			s := newBenchServer()
			if ledger {
				s.fn.planner.Ledger = assume.New(assume.DefaultTTL)
			}
			// Warm the caches once, as a running server's are.
			for _, f := range frames {
				if _, err := s.serve(f); err != nil {
					b.Fatal(err)
				}
			}
			var next atomic.Int64
			b.SetParallelism(callers / runtime.GOMAXPROCS(0))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.serve(frames[next.Add(1)%callers]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			if ledger {
				b.ReportMetric(float64(s.fn.planner.Ledger.Len()), "assumed")
			}
		})
	}
}
