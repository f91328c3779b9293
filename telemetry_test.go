package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	rtlogging "github.com/crossplane/crossplane-runtime/v2/pkg/logging"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/internal/metrics"
	"github.com/modelplaneai/fleet-scheduler/internal/plan"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// line is one logged line: its level, message and key/value pairs, the
// duration's value left out (it is measured).
type line struct {
	Debug bool
	Msg   string
	KV    map[string]any
}

// recorder is a logging.Logger that keeps what is logged.
type recorder struct {
	mu    sync.Mutex
	lines []line
}

func (r *recorder) log(debug bool, msg string, kv []any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := line{Debug: debug, Msg: msg, KV: map[string]any{}}
	for i := 0; i+1 < len(kv); i += 2 {
		k := fmt.Sprint(kv[i])
		if k == "duration" {
			if _, err := time.ParseDuration(fmt.Sprint(kv[i+1])); err != nil {
				l.KV[k] = fmt.Sprintf("not a duration: %v", kv[i+1])
			}
			continue
		}
		l.KV[k] = kv[i+1]
	}
	r.lines = append(r.lines, l)
}

func (r *recorder) Info(msg string, kv ...any)         { r.log(false, msg, kv) }
func (r *recorder) Debug(msg string, kv ...any)        { r.log(true, msg, kv) }
func (r *recorder) WithValues(...any) rtlogging.Logger { return r }
func (r *recorder) take() []line                       { l := r.lines; r.lines = nil; return l }

func TestTelemetryLog(t *testing.T) {
	gpu := fx.GPU("gpu", 8, "80Gi")
	wholeNode := fx.Cluster("a").Pools(fx.Pool("h100", 2).Devices(gpu).Obj()).Obj()
	invalid := func(rv string) *v1alpha1.InferenceCluster {
		c := fx.Cluster("b").Pools(fx.Pool("h100", 1).Devices(gpu).RawObservation(`"yesterday"`, "1", "[]").Obj()).Obj()
		c.Metadata.ResourceVersion = rv
		return c
	}
	xr := fx.Deployment("m").Replicas(4).Engines(fx.Standalone("main", fx.GPURequest(8))).Obj()
	fatal := request(t, xr, nil, nil)
	fatal.Input = &structpb.Struct{Fields: map[string]*structpb.Value{
		"apiVersion": structpb.NewStringValue("scheduler.fn.modelplane.ai/v1beta1"), "kind": structpb.NewStringValue("Input"),
		"observationMaxage": structpb.NewStringValue("5m"),
	}}
	asked := request(t, xr, nil, nil)
	asked.RequiredResources = nil
	short := func(rv string) *fnv1.RunFunctionRequest { return request(t, xr, []any{wholeNode, invalid(rv)}, nil) }

	placed := func(extra ...line) []line {
		l := line{Msg: "Called", KV: map[string]any{
			"xr": fx.Namespace + "/m", "outcome": "placed", "wanted": int64(4), "placed": 3, "kept": 0, "dropped": 0,
			"replaced": 0, "unplaced": 1, "reason": "a: engine main: pool h100 needs 1 free node, has 0", "wholeNode": map[string]int{"invalid": 1, "missing": 1}, "assumed": 0,
		}}
		return append([]line{l}, extra...)
	}
	warned := func(rv string) line {
		return line{Msg: "Warning: invalid pool report, using whole-node accounting", KV: map[string]any{
			"cluster": "b", "pool": "h100", "resourceVersion": rv, "defect": `observedAt: "yesterday" is not an RFC 3339 time`,
		}}
	}
	cases := map[string]struct {
		reason string
		reqs   []*fnv1.RunFunctionRequest
		ledger bool
		want   [][]line
	}{
		"DebugLedger": {
			reason: "With --debug each pool's ledger once the call placed: both whole-node pools full.",
			reqs:   []*fnv1.RunFunctionRequest{short("1")},
			ledger: true,
			want: [][]line{placed(warned("1"),
				line{Debug: true, Msg: "Pool ledger", KV: map[string]any{"xr": fx.Namespace + "/m", "cluster": "a", "pool": "h100", "wholeNode": true, "steered": false, "saturated": false, "free": "2x[gpu=0]"}},
				line{Debug: true, Msg: "Pool ledger", KV: map[string]any{"xr": fx.Namespace + "/m", "cluster": "b", "pool": "h100", "wholeNode": true, "steered": false, "saturated": false, "free": "1x[gpu=0]"}},
			)},
		},
		"DebugLedgerSteered": {
			reason: "A pool whose report says binding Steered is logged as steered: best fit put the 8-GPU replica on the node with 8 free, not on the empty one.",
			reqs: []*fnv1.RunFunctionRequest{request(t, fx.Deployment("m").Engines(fx.Standalone("main", fx.GPURequest(8))).Obj(), []any{
				fx.Cluster("a").Pools(fx.Pool("h100", 3).Devices(fx.GPU("gpu", 16, "80Gi")).Observed(now.Add(-time.Minute), 2, fx.NodesFree(1, "gpu", 8), fx.NodesFree(1, "gpu", 2)).Steered().Obj()).Obj(),
			}, nil)},
			ledger: true,
			want: [][]line{{
				{Msg: "Called", KV: map[string]any{
					"xr": fx.Namespace + "/m", "outcome": "placed", "wanted": int64(1), "placed": 1, "kept": 0, "dropped": 0,
					"replaced": 0, "unplaced": 0, "wholeNode": map[string]int{}, "assumed": 0,
				}},
				{Debug: true, Msg: "Pool ledger", KV: map[string]any{"xr": fx.Namespace + "/m", "cluster": "a", "pool": "h100", "wholeNode": false, "steered": true, "saturated": false, "free": "1x[gpu=16] 1x[gpu=2] 1x[gpu=0]"}},
			}},
		},
		"Fatal": {
			reason: "A Fatal input is one line, with the error and the XR, read before anything else is.",
			reqs:   []*fnv1.RunFunctionRequest{fatal},
			want: [][]line{{{Msg: "Called", KV: map[string]any{
				"xr": fx.Namespace + "/m", "outcome": "fatal", "error": "invalid Function input: observationMaxage: Forbidden: not a field of the function input; did you mean observationMaxAge?",
			}}}},
		},
		"Asked": {
			reason: "A first iteration that asks for the fleet says so.",
			reqs:   []*fnv1.RunFunctionRequest{asked},
			want:   [][]line{{{Msg: "Called", KV: map[string]any{"xr": fx.Namespace + "/m", "outcome": "asked"}}}},
		},
		"NoClusters": {
			reason: "A call with no cluster to place on is short of every replica.",
			reqs:   []*fnv1.RunFunctionRequest{request(t, xr, nil, nil)},
			want: [][]line{{{Msg: "Called", KV: map[string]any{
				"xr": fx.Namespace + "/m", "outcome": "noClusters", "wanted": int64(4), "placed": 0, "kept": 0, "dropped": 0,
				"replaced": 0, "unplaced": 4, "wholeNode": map[string]int{}, "assumed": 0,
			}}}},
		},
		"InvalidReportOncePerVersion": {
			reason: "A call short of capacity says how short and why; an invalid report is warned of once, until its cluster changes.",
			reqs:   []*fnv1.RunFunctionRequest{short("1"), short("1"), short("2")},
			want:   [][]line{placed(warned("1")), placed(), placed(warned("2"))},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rec := &recorder{}
			f := &Function{log: logging.NewNopLogger(), now: func() time.Time { return now }, planner: plan.Planner{Selectors: scheduling.NewSelectors()}, tel: &telemetry{log: rec, ledger: tc.ledger}}
			for i, req := range tc.reqs {
				if _, err := f.RunFunction(context.Background(), req); err != nil {
					t.Fatalf("call %d: RunFunction(...): %v", i, err)
				}
				if diff := cmp.Diff(tc.want[i], rec.take()); diff != "" {
					t.Errorf("%s\ncall %d: logged -want, +got:\n%s", tc.reason, i, diff)
				}
			}
		})
	}
}

// TestTelemetryKeptDropped scales a deployment down: the replica it keeps
// is kept, the ones it no longer composes dropped.
func TestTelemetryKeptDropped(t *testing.T) {
	gpu := fx.GPU("gpu", 8, "80Gi")
	a := fx.Cluster("a").Pools(fx.Pool("h100", 3).Devices(gpu).Obj()).Obj()
	rec := &recorder{}
	f := &Function{log: logging.NewNopLogger(), now: func() time.Time { return now }, planner: plan.Planner{Selectors: scheduling.NewSelectors()}, tel: &telemetry{log: rec}}
	xr := fx.Deployment("m").Replicas(3).Engines(fx.Standalone("main", fx.GPURequest(8))).Obj()
	rsp, err := f.RunFunction(context.Background(), request(t, xr, []any{a}, nil))
	if err != nil {
		t.Fatal(err)
	}
	rec.take()
	xr.Spec.Replicas = 1
	req := request(t, xr, []any{a}, nil)
	req.Observed.Resources = map[string]*fnv1.Resource{}
	var replicas []any
	for k, r := range rsp.GetDesired().GetResources() {
		req.Observed.Resources[k] = r
		replicas = append(replicas, replicaFrom(t, rsp, k))
	}
	req.RequiredResources[fleet.RequiredReplicas] = resources(t, replicas...)
	if _, err := f.RunFunction(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	want := []line{{Msg: "Called", KV: map[string]any{
		"xr": fx.Namespace + "/m", "outcome": "placed", "wanted": int64(1), "placed": 1, "kept": 1, "dropped": 2,
		"replaced": 0, "unplaced": 0, "wholeNode": map[string]int{"missing": 1}, "assumed": 0,
	}}}
	if diff := cmp.Diff(want, rec.take()); diff != "" {
		t.Errorf("scaled from 3 to 1: logged -want, +got:\n%s", diff)
	}
}

// TestWarnInvalidForgets: the warnings remembered are the fleet's pools
// only. A pool whose cluster left the fleet is forgotten, and warned of
// again if it comes back as it was; a call that read no cluster forgets
// nothing.
func TestWarnInvalidForgets(t *testing.T) {
	cluster := func(name string) scheduling.Cluster {
		c := fx.Cluster(name).Obj()
		c.Metadata.ResourceVersion = "1"
		return scheduling.Cluster{Object: c}
	}
	invalid := func(name string) observation.PoolReport {
		return observation.PoolReport{Cluster: name, Pool: "h100", State: observation.Invalid, Defect: "observedAt: bad"}
	}
	withB := &fleet.Fleet{Clusters: []scheduling.Cluster{cluster("a"), cluster("b")}, Pools: []observation.PoolReport{invalid("a"), invalid("b")}}
	withoutB := &fleet.Fleet{Clusters: []scheduling.Cluster{cluster("a")}, Pools: []observation.PoolReport{invalid("a")}}
	none := &fleet.Fleet{}
	warned := func(clusters ...string) []string { return clusters }

	rec := &recorder{}
	tel := &telemetry{log: rec}
	steps := []struct {
		reason string
		fl     *fleet.Fleet
		want   []string
	}{
		{"both warned of the first time", withB, warned("a", "b")},
		{"no cluster read", none, warned()},
		{"nothing was forgotten: nothing new to say", withB, warned()},
		{"b's cluster gone", withoutB, warned()},
		{"b back as it was: warned of again, a not", withB, warned("b")},
	}
	for i, s := range steps {
		tel.warnInvalid(s.fl)
		var got []string
		for _, l := range rec.take() {
			got = append(got, l.KV["cluster"].(string))
		}
		if diff := cmp.Diff(s.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("step %d, %s: warned of -want, +got:\n%s", i, s.reason, diff)
		}
	}
	if len(tel.warned) != 2 {
		t.Errorf("remembered %d pools, want the fleet's 2: %v", len(tel.warned), tel.warned)
	}
}

// A usable report's device counts, as the pool metrics tell them: every
// device a report counts, free or not.
func TestDeviceCounts(t *testing.T) {
	gpu := fx.GPU("gpu", 8, "80Gi")
	pools := []v1alpha1.GPUPool{fx.Pool("h100", 4).Devices(gpu, fx.NIC(2)).Obj(), fx.Pool("h200", 2).Devices(gpu).Obj(), fx.Pool("huge", 3).Devices(fx.GPU("gpu", 1<<62, "80Gi")).Obj()}
	type args struct {
		o    *scheduling.PoolObservation
		pool string
	}
	cases := map[string]struct {
		reason string
		args   args
		want   []metrics.DeviceCount
	}{
		"Free": {
			reason: "Free devices summed over the buckets, of all the observed nodes have: 3 nodes of 8 GPUs.",
			args: args{o: &scheduling.PoolObservation{ObservedNodes: 3, Buckets: []scheduling.Bucket{
				{Nodes: 2, Free: map[string]int64{"gpu": 8}}, {Nodes: 1, Free: map[string]int64{"gpu": 2}},
			}}, pool: "h200"},
			want: []metrics.DeviceCount{{Device: "gpu", Count: 18, Total: 24}},
		},
		"NoneFree": {
			reason: "A pool whose every device is taken still says so: 0 free of 16, though no bucket lists the device.",
			args:   args{o: &scheduling.PoolObservation{ObservedNodes: 2, Buckets: []scheduling.Bucket{{Nodes: 2, Free: map[string]int64{}}}}, pool: "h200"},
			want:   []metrics.DeviceCount{{Device: "gpu", Count: 0, Total: 16}},
		},
		"OnlyCountedDevices": {
			reason: "Only the devices a report counts, claimed through DRA: not the synthetic NIC.",
			args:   args{o: &scheduling.PoolObservation{ObservedNodes: 1, Buckets: []scheduling.Bucket{{Nodes: 1, Free: map[string]int64{"gpu": 4}}}}, pool: "h100"},
			want:   []metrics.DeviceCount{{Device: "gpu", Count: 4, Total: 8}},
		},
		"HugeCount": {
			reason: "A device count of 2^62 is held at the bound of every count, 2^20, so that the product cannot overflow.",
			args:   args{o: &scheduling.PoolObservation{ObservedNodes: 3, Buckets: []scheduling.Bucket{{Nodes: 3}}}, pool: "huge"},
			want:   []metrics.DeviceCount{{Device: "gpu", Total: 3 << 20}},
		},
		"UnknownPool": {
			reason: "A pool not in gpuPools has no devices to count.",
			args:   args{o: &scheduling.PoolObservation{ObservedNodes: 1}, pool: "l4"},
			want:   []metrics.DeviceCount{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := deviceCounts(tc.args.o, pools, tc.args.pool)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("\n%s\ndeviceCounts(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
