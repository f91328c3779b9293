package main

// Hostile requests, served by the server main.go runs, in process: each
// one is answered, in bounded time and memory, with a clear result, and
// the server serves the next call. docs/production.md has the numbers.

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/crossplane/function-sdk-go"
	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/benchfleet"
	"github.com/modelplaneai/fleet-scheduler/internal/codec"
	fx "github.com/modelplaneai/fleet-scheduler/internal/fixture"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/internal/plan"
	"github.com/modelplaneai/fleet-scheduler/internal/server"
	"github.com/modelplaneai/fleet-scheduler/internal/wire/wiretest"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// hostileServer is the server main.go runs, with its defaults, on an
// in-process connection.
func hostileServer(t *testing.T) *grpc.ClientConn {
	t.Helper()
	so, err := server.Options(function.Insecure(true), function.MaxRecvMessageSize(defaultMaxRecvMessageSizeMB<<20), function.WithMetricsServer(""))
	if err != nil {
		t.Fatal(err)
	}
	fn := &Function{log: logging.NewNopLogger(), now: func() time.Time { return benchNow }, fleet: fleet.NewReader(), planner: plan.Planner{Selectors: scheduling.NewSelectors()}}
	srv := server.New(so, codec.New(fleet.RequiredClusters, fleet.RequiredReplicas), fn, defaultMaxConcurrentStreams)
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return dialBufconn(t, lis, grpc.WithDefaultCallOptions(grpc.ForceCodecV2(benchfleet.NewClientCodec()), grpc.MaxCallRecvMsgSize(1<<30)))
}

// Wire fragments of the messages a RunFunctionRequest is made of.
const (
	fieldObserved          protowire.Number = 2 // RunFunctionRequest.observed
	fieldRequiredResources protowire.Number = 8 // RunFunctionRequest.required_resources
	fieldComposite         protowire.Number = 1 // State.composite
	fieldResource          protowire.Number = 1 // Resource.resource
	fieldItems             protowire.Number = 1 // Resources.items
	fieldStructValue       protowire.Number = 5 // Value.struct_value
	fieldListValue         protowire.Number = 6 // Value.list_value
	fieldStringValue       protowire.Number = 3 // Value.string_value
)

func structValue(s []byte) []byte { return wiretest.BytesField(fieldStructValue, s) }

func listValue(values ...[]byte) []byte {
	var l []byte
	for _, v := range values {
		l = append(l, wiretest.BytesField(1, v)...)
	}
	return wiretest.BytesField(fieldListValue, l)
}

func stringValue(s string) []byte { return wiretest.BytesField(fieldStringValue, []byte(s)) }

// structWith is a Struct's bytes with entries set at path, nested objects
// created as needed: an entry of the same key written after another wins,
// as protobuf decodes a map, so the entry replaces any there.
func structWith(t *testing.T, s *structpb.Struct, path []string, value []byte) []byte {
	t.Helper()
	b := wiretest.Marshalled(t, s)
	if len(path) == 1 {
		return append(b, wiretest.StructEntry(path[0], value)...)
	}
	child := s.GetFields()[path[0]].GetStructValue()
	if child == nil {
		child = &structpb.Struct{}
	}
	return append(b, wiretest.StructEntry(path[0], structValue(structWith(t, child, path[1:], value)))...)
}

// withComposite is a request with the XR's Struct given as bytes.
func withComposite(t *testing.T, req *fnv1.RunFunctionRequest, xr []byte) []byte {
	t.Helper()
	req = proto.CloneOf(req)
	req.Observed.Composite = nil
	composite := wiretest.BytesField(fieldComposite, wiretest.BytesField(fieldResource, xr))
	return append(wiretest.Marshalled(t, req), wiretest.BytesField(fieldObserved, composite)...)
}

// withItems is a request with more items of a required resource, each a
// Struct given as bytes, after those it has.
func withItems(t *testing.T, req *fnv1.RunFunctionRequest, name string, items ...[]byte) []byte {
	t.Helper()
	b := wiretest.Marshalled(t, req)
	var resources []byte
	for _, it := range items {
		resources = append(resources, wiretest.BytesField(fieldItems, wiretest.BytesField(fieldResource, it))...)
	}
	// Of two entries of a key the codec keeps the last: this one carries
	// the request's items first.
	for _, it := range req.GetRequiredResources()[name].GetItems() {
		resources = append(wiretest.BytesField(fieldItems, wiretest.Marshalled(t, it)), resources...)
	}
	entry := wiretest.Cat(wiretest.BytesField(1, []byte(name)), wiretest.BytesField(2, resources))
	return append(b, wiretest.BytesField(fieldRequiredResources, entry)...)
}

// manyKeys is a Struct of n string entries.
func manyKeys(n int) []byte {
	var b []byte
	for i := range n {
		b = append(b, wiretest.StructEntry(fmt.Sprintf("k%07d", i), stringValue("v"))...)
	}
	return b
}

// nested is a Struct nested depth deep: {"a": {"a": ... {}}}. Each level
// is a header, the entry's and its value's tags and lengths, before the
// level inside it: the lengths are known from the inside out.
func nested(depth int) []byte {
	headers := make([][]byte, depth)
	inner := 0
	for i := range depth {
		value := protowire.AppendVarint(protowire.AppendTag(nil, fieldStructValue, protowire.BytesType), uint64(inner))
		entry := protowire.AppendTag(nil, 1, protowire.BytesType)
		entry = protowire.AppendVarint(entry, 1)
		entry = append(entry, 'a')
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendVarint(entry, uint64(len(value)+inner))
		entry = append(entry, value...)
		header := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.BytesType), uint64(len(entry)+inner))
		headers[depth-1-i] = append(header, entry...)
		inner += len(headers[depth-1-i])
	}
	return slices.Concat(headers...)
}

// smallFleet is a request the server answers as it should: a few clusters,
// a few replicas, the deployment placed.
func smallFleet() *fnv1.RunFunctionRequest {
	clusters, replicas := benchFleet(50)
	return fleetRequest(benchDeployment(), clusters[:5], replicas, nil)
}

func TestHostileRequests(t *testing.T) {
	type answer struct {
		rsp *fnv1.RunFunctionResponse
		err error
	}
	cases := map[string]struct {
		reason string
		// request is the request's bytes.
		request func(t *testing.T) []byte
		// check says what is wrong with the answer, if anything.
		check func(a answer) string
		// maxHeap bounds the heap the call may take at its peak, above
		// what was live before, in MiB.
		maxHeap int
	}{
		"Garbage": {
			reason: "64 MB of random bytes are no RunFunctionRequest: refused, as a decode error.",
			request: func(*testing.T) []byte {
				b := make([]byte, 64_000_000)
				rng := rand.NewChaCha8([32]byte{13})
				_, _ = rng.Read(b)
				return b
			},
			check: func(a answer) string {
				return wantError(a.err, "cannot decode RunFunctionRequest: truncated or malformed protobuf")
			},
			maxHeap: 256,
		},
		"XRNestedDeep": {
			reason: "An XR nested 10,000 deep is deeper than protobuf decodes: refused, as a decode error.",
			request: func(t *testing.T) []byte {
				t.Helper()
				req := smallFleet()
				return withComposite(t, req, structWith(t, req.GetObserved().GetComposite().GetResource(), []string{"spec", "junk"}, structValue(nested(10_000))))
			},
			check: func(a answer) string {
				return wantError(a.err, "exceeded maximum recursion depth") // protobuf varies the space after "proto:"
			},
			maxHeap: 64,
		},
		"PoolReportNestedDeep": {
			reason: "A cluster whose pool report nests 10,000 deep does not read; the rest of the fleet is scheduled.",
			request: func(t *testing.T) []byte {
				t.Helper()
				req := smallFleet()
				c := fx.Cluster("deep").Pools(fx.Pool("p", 4).Devices(fx.GPU("gpu", 8, "80Gi")).Obj()).Obj()
				s := mustStruct(c)
				pools := s.GetFields()["status"].GetStructValue().GetFields()["gpuPools"].GetListValue().GetValues()
				pool := structWith(t, pools[0].GetStructValue(), []string{"nodesByFreeDevices"}, listValue(structValue(nested(10_000))))
				return withItems(t, req, fleet.RequiredClusters, structWith(t, s, []string{"status", "gpuPools"}, listValue(structValue(pool))))
			},
			check: func(a answer) string {
				return wantPlaced(a.rsp, a.err, benchNewReplicas, "cannot read InferenceCluster deep: status.gpuPools[0].nodesByFreeDevices[0].a.a.a.a.a.a.a.a.(9977 more).a.a.a.a.a.a.a.a.a.a.a.a.a: nested deeper than 10000")
			},
			maxHeap: 64,
		},
		"ReplicaEnginesNestedDeep": {
			reason: "Another deployment's replica whose pods are not scheduled, so charged, and whose engines nest 10,000 deep: it does not read, is charged conservatively, and a warning names it.",
			request: func(t *testing.T) []byte {
				t.Helper()
				req := smallFleet()
				r := mustStruct(unscheduled(benchReplicaOn("cluster-000")))
				// An engine whose members are a Struct 10,000 deep, not a list.
				engine := append(wiretest.StructEntry("name", stringValue("main")), wiretest.StructEntry("members", structValue(nested(10_000)))...)
				return withItems(t, req, fleet.RequiredReplicas, structWith(t, r, []string{"spec", "engines"}, listValue(structValue(engine))))
			},
			check: func(a answer) string {
				r := benchReplicaOn("cluster-000")
				return wantPlaced(a.rsp, a.err, benchNewReplicas, "cannot read ModelReplica "+r.Metadata.Namespace+"/"+r.Metadata.Name+": spec.engines[0].members")
			},
			maxHeap: 64,
		},
		"XRManyKeys": {
			reason: "An XR with a million keys in its template's labels: larger than any object the API server stores, refused before it is decoded.",
			request: func(t *testing.T) []byte {
				t.Helper()
				req := smallFleet()
				return withComposite(t, req, structWith(t, req.GetObserved().GetComposite().GetResource(), []string{"spec", "template", "metadata", "labels"}, structValue(manyKeys(1_000_000))))
			},
			check: func(a answer) string {
				return wantFatal(a.rsp, a.err, "cannot read ModelDeployment: it is 17003052 bytes, more than the 8 MiB of any the API server stores")
			},
			maxHeap: 512,
		},
		"ReplicaManyKeys": {
			reason: "The deployment's own replica with a million more labels: the two the function needs are read among them, so it is kept (a desired replica of its name) and counts toward spec.replicas.",
			request: func(t *testing.T) []byte {
				t.Helper()
				req := smallFleet()
				r := mustStruct(ownReplicaOn("cluster-000"))
				labels := wiretest.Marshalled(t, r.GetFields()["metadata"].GetStructValue().GetFields()["labels"].GetStructValue())
				return withItems(t, req, fleet.RequiredReplicas, structWith(t, r, []string{"metadata", "labels"}, structValue(append(labels, manyKeys(1_000_000)...))))
			},
			check: func(a answer) string {
				if msg := wantPlaced(a.rsp, a.err, benchNewReplicas, ""); msg != "" {
					return msg
				}
				// New replicas take the lowest free indexes, two at most per
				// cluster: index 7 is desired only if the replica was kept.
				if _, ok := a.rsp.GetDesired().GetResources()["replica-cluster-000-7"]; ok {
					return ""
				}
				return "want the replica at index 7 of cluster-000 kept among the desired ones, got " + describe(a.rsp, a.err)
			},
			maxHeap: 128,
		},
		"DeviceManyKeys": {
			reason: "A cluster whose device has a million attributes does not read; the rest of the fleet is scheduled.",
			request: func(t *testing.T) []byte {
				t.Helper()
				req := smallFleet()
				c := mustStruct(fx.Cluster("attrs").Pools(fx.Pool("p", 4).Devices(fx.GPU("gpu", 8, "80Gi")).Obj()).Obj())
				devices := c.GetFields()["status"].GetStructValue().GetFields()["gpuPools"].GetListValue().GetValues()[0].GetStructValue().GetFields()["devices"].GetListValue().GetValues()
				dev := structWith(t, devices[0].GetStructValue(), []string{"attributes"}, structValue(manyKeys(1_000_000)))
				pool := structWith(t, c.GetFields()["status"].GetStructValue().GetFields()["gpuPools"].GetListValue().GetValues()[0].GetStructValue(), []string{"devices"}, listValue(structValue(dev)))
				return withItems(t, req, fleet.RequiredClusters, structWith(t, c, []string{"status", "gpuPools"}, listValue(structValue(pool))))
			},
			check: func(a answer) string {
				return wantPlaced(a.rsp, a.err, benchNewReplicas, "cannot read InferenceCluster attrs: status.gpuPools[0].devices[0]: 17000256 bytes, more than the 65536")
			},
			maxHeap: 128,
		},
		"MillionEmptyReplicas": {
			reason: "A million empty ModelReplicas: on no cluster, they charge nothing, and are left out as they are read.",
			request: func(t *testing.T) []byte {
				t.Helper()
				items := make([][]byte, 1_000_000)
				for i := range items {
					items[i] = []byte{}
				}
				return withItems(t, smallFleet(), fleet.RequiredReplicas, items...)
			},
			check: func(a answer) string {
				return wantPlaced(a.rsp, a.err, benchNewReplicas, "")
			},
			maxHeap: 128,
		},
		"LongCELOnManyDevices": {
			reason: "A 10 KiB CEL selector on 10,000 distinct pool devices: each evaluated once, within DRA's cost limit.",
			request: func(t *testing.T) []byte {
				t.Helper()
				xr := benchDeployment()
				xr.Spec.Template.Spec.Engines = []v1alpha1.Engine{fx.Standalone("main", fx.Request("gpu", 1, longCEL(10<<10)))}
				return wiretest.Marshalled(t, fleetRequest(xr, distinctDevices(100, 10, 10), nil, nil))
			},
			check: func(a answer) string {
				return wantPlaced(a.rsp, a.err, benchNewReplicas, "")
			},
			maxHeap: 128,
		},
		"MillionReplicasWanted": {
			reason: "A deployment that wants a million replicas, on a pool of a million nodes: more than any response holds, refused before it is scheduled.",
			request: func(t *testing.T) []byte {
				t.Helper()
				xr := fx.Deployment("huge").Replicas(1_000_000).Obj()
				c := fx.Cluster("big").Pools(fx.Pool("p", 1<<20).Devices(fx.GPU("gpu", 8, "80Gi")).Obj()).Obj()
				return wiretest.Marshalled(t, fleetRequest(xr, []*v1alpha1.InferenceCluster{c}, nil, nil))
			},
			check: func(a answer) string {
				return wantFatal(a.rsp, a.err, "invalid ModelDeployment: spec.replicas: Invalid value: 1000000: must be at most 16384")
			},
			maxHeap: 64,
		},
		"CELOverCost": {
			reason: "A 10 KiB CEL selector over DRA's cost limit is an invalid nodeSelector, said so, and places nothing.",
			request: func(t *testing.T) []byte {
				t.Helper()
				xr := benchDeployment()
				xr.Spec.Template.Spec.Engines = []v1alpha1.Engine{fx.Standalone("main", fx.Request("gpu", 1, quadraticCEL(10<<10)))}
				return wiretest.Marshalled(t, fleetRequest(xr, distinctDevices(100, 10, 10), nil, nil))
			},
			check: func(a answer) string {
				return wantCondition(a.rsp, a.err, condReplicasScheduled, reasonInvalidNodeSelector, "estimated cost")
			},
			maxHeap: 128,
		},
		"ManyUnreadableReplicas": {
			reason: "100,000 replicas of another deployment that do not read: a hundred warnings, and one that says how many more.",
			request: func(t *testing.T) []byte {
				t.Helper()
				items := make([][]byte, 100_000)
				for i := range items {
					meta := wiretest.Cat(wiretest.StructEntry("name", stringValue(fmt.Sprintf("broken-%06d", i))), wiretest.StructEntry("namespace", stringValue("team-01")))
					items[i] = wiretest.Cat(wiretest.StructEntry("metadata", structValue(meta)), wiretest.StructEntry("spec", stringValue("broken")))
				}
				return withItems(t, smallFleet(), fleet.RequiredReplicas, items...)
			},
			check: func(a answer) string {
				if why := wantPlaced(a.rsp, a.err, benchNewReplicas, "99900 more warnings like the ones above are not shown"); why != "" {
					return why
				}
				if n := len(a.rsp.GetResults()); n > maxWarnings+2 {
					return fmt.Sprintf("want at most %d results, got %d", maxWarnings+2, n)
				}
				return ""
			},
			maxHeap: 512,
		},
		"WidePools": {
			reason: "A cluster of 800 pools, each of 16 device kinds and 64 buckets that list them all.",
			request: func(t *testing.T) []byte {
				t.Helper()
				xr := benchDeployment()
				xr.Spec.Template.Spec.Engines = []v1alpha1.Engine{fx.Standalone("main", fx.Request("d3", 2), fx.Request("d7", 1))}
				return withItems(t, fleetRequest(xr, nil, nil, nil), fleet.RequiredClusters, widePools(t, 800, 16, 64))
			},
			check: func(a answer) string {
				return wantPlaced(a.rsp, a.err, benchNewReplicas, "")
			},
			maxHeap: 768,
		},
	}
	conn := hostileServer(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := tc.request(t)
			var a answer
			began := time.Now()
			heap := peakHeap(func() {
				rsp := &fnv1.RunFunctionResponse{}
				a.err = conn.Invoke(t.Context(), fnv1.FunctionRunnerService_RunFunction_FullMethodName, benchfleet.Encoded{req}, rsp)
				if a.err == nil {
					a.rsp = rsp
				}
			})
			took := time.Since(began)
			t.Logf("%s: %d bytes, %s, peak heap %.1f MiB: %s", name, len(req), took.Round(time.Millisecond), float64(heap)/(1<<20), describe(a.rsp, a.err))
			if why := tc.check(a); why != "" {
				t.Errorf("%s\n%s", tc.reason, why)
			}
			if heap > uint64(tc.maxHeap)<<20 {
				t.Errorf("%s\nthe call took %.0f MiB of heap at its peak, want at most %d MiB", tc.reason, float64(heap)/(1<<20), tc.maxHeap)
			}
			// And the server serves the next call.
			rsp := &fnv1.RunFunctionResponse{}
			err := conn.Invoke(t.Context(), fnv1.FunctionRunnerService_RunFunction_FullMethodName, smallFleet(), rsp)
			if why := wantPlaced(rsp, err, benchNewReplicas, ""); why != "" {
				t.Errorf("the call after: %s", why)
			}
		})
	}
}

// longCEL is a selector of about n bytes that reads a device's serial
// number as often as it can: a disjunction no device satisfies but the
// last clause, which every one does.
func longCEL(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n-100; i++ {
		fmt.Fprintf(&b, "device.attributes[\"gpu.nvidia.com\"].serial == \"none-%05d\" || ", i)
	}
	b.WriteString(`device.attributes["gpu.nvidia.com"].serial.startsWith("s-")`)
	return b.String()
}

// quadraticCEL is a selector of about n bytes whose cost grows with the
// square of its list, far over DRA's limit.
func quadraticCEL(n int) string {
	var b strings.Builder
	b.WriteString("[0")
	for i := 1; b.Len() < n/2-40; i++ {
		fmt.Fprintf(&b, ",%d", i)
	}
	list := b.String() + "]"
	return fmt.Sprintf("%s.all(x, %s.all(y, x != y || device.attributes[\"gpu.nvidia.com\"].serial != \"\"))", list, list)
}

// distinctDevices is a fleet of clusters of pools of devices, each device
// distinct (its own serial number), so that CEL sees each once.
func distinctDevices(clusters, pools, devices int) []*v1alpha1.InferenceCluster {
	out := make([]*v1alpha1.InferenceCluster, 0, clusters)
	for c := range clusters {
		ps := make([]v1alpha1.GPUPool, 0, pools)
		for p := range pools {
			ds := make([]v1alpha1.Device, 0, devices)
			for d := range devices {
				dev := fx.GPU(fmt.Sprintf("gpu%d", d), 8, "80Gi")
				if d == 0 {
					dev.Name = "gpu"
				}
				dev.Attributes["serial"] = v1alpha1.DeviceAttribute{String: new(fmt.Sprintf("s-%d-%d-%d", c, p, d))}
				ds = append(ds, dev)
			}
			ps = append(ps, fx.Pool(fmt.Sprintf("p%d", p), 4).Devices(ds...).Obj())
		}
		out = append(out, fx.Cluster(fmt.Sprintf("c%03d", c)).Pools(ps...).Obj())
	}
	return out
}

// widePools is a cluster of pools of kinds device kinds d0, d1, ..., each
// pool observed with that many buckets, every one listing every kind: one
// pool encoded, then copied under each name.
func widePools(t *testing.T, pools, kinds, buckets int) []byte {
	t.Helper()
	ds := make([]v1alpha1.Device, 0, kinds)
	for k := range kinds {
		ds = append(ds, fx.GPU(fmt.Sprintf("d%d", k), 8, "80Gi"))
	}
	bs := make([]fx.Bucket, 0, buckets)
	for b := range buckets {
		free := make([]fx.Free, 0, kinds)
		for k := range kinds {
			free = append(free, fx.Free{Name: fmt.Sprintf("d%d", k), Count: int64((b + k) % 9)})
		}
		bs = append(bs, fx.Bucket{Nodes: 1, Free: free})
	}
	pool := wiretest.Marshalled(t, mustStruct(fx.Pool("p", int64(buckets)).Devices(ds...).Observed(benchNow.Add(-30*time.Second), int64(buckets), bs...).Obj()))
	list := make([][]byte, 0, pools)
	for p := range pools {
		list = append(list, structValue(append(slices.Clip(pool), wiretest.StructEntry("name", stringValue(fmt.Sprintf("p%03d", p)))...)))
	}
	return structWith(t, mustStruct(fx.Cluster("wide").Obj()), []string{"status", "gpuPools"}, listValue(list...))
}

// benchReplicaOn is another deployment's realistic replica on a cluster,
// scheduled after its pool's report: charged, so its engines are read.
// unscheduled is the replica with its pods not scheduled, so that every
// call reads and charges it.
func unscheduled(r *v1alpha1.ModelReplica) *v1alpha1.ModelReplica {
	r.Status.Conditions = []v1alpha1.Condition{{Type: "PodsScheduled", Status: "False"}}
	return r
}

// ownReplicaOn is a replica of benchDeployment's on the cluster, at index 7.
func ownReplicaOn(cluster string) *v1alpha1.ModelReplica {
	r := benchReplicaOn(cluster)
	d := benchDeployment()
	r.Metadata.Namespace = d.Metadata.Namespace
	r.Metadata.Labels[v1alpha1.LabelDeployment] = d.Metadata.Name
	r.Metadata.Labels[v1alpha1.LabelReplicaIndex] = "7"
	return r
}

func benchReplicaOn(cluster string) *v1alpha1.ModelReplica {
	_, replicas := benchFleet(100)
	r := replicas[99]
	r.Spec.ClusterName = cluster
	return r
}

// wantFatal wants a Fatal result, and nothing composed.
func wantFatal(rsp *fnv1.RunFunctionResponse, err error, contains string) string {
	if err != nil {
		return fmt.Sprintf("want a response, got %v", err)
	}
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL && strings.Contains(r.GetMessage(), contains) {
			if len(rsp.GetDesired().GetResources()) > 0 {
				return fmt.Sprintf("want nothing composed with the Fatal result, got %d resources", len(rsp.GetDesired().GetResources()))
			}
			return ""
		}
	}
	return fmt.Sprintf("want a Fatal result containing %q, got %s", contains, describe(rsp, err))
}

// wantCondition wants the XR's condition of a type with a reason, its
// message containing what.
func wantCondition(rsp *fnv1.RunFunctionResponse, err error, typ, reason, contains string) string {
	if err != nil {
		return fmt.Sprintf("want a response, got %v", err)
	}
	for _, c := range rsp.GetConditions() {
		if c.GetType() == typ && c.GetReason() == reason && strings.Contains(c.GetMessage(), contains) {
			return ""
		}
	}
	return fmt.Sprintf("want condition %s with reason %s and a message containing %q, got %v", typ, reason, contains, rsp.GetConditions())
}

func wantError(err error, contains string) string {
	if err == nil || !strings.Contains(status.Convert(err).Message(), contains) {
		return fmt.Sprintf("want an error containing %q, got %v", contains, err)
	}
	return ""
}

// wantPlaced wants placed replicas composed, and a warning naming what,
// if anything.
func wantPlaced(rsp *fnv1.RunFunctionResponse, err error, placed int, warns string) string {
	if err != nil {
		return fmt.Sprintf("want a response, got %v", err)
	}
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			return "want no Fatal result, got " + r.GetMessage()
		}
	}
	if got := composedReplicas(rsp); got != placed {
		return fmt.Sprintf("want %d replicas composed, got %d: %s", placed, got, describe(rsp, err))
	}
	if warns == "" {
		return ""
	}
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_WARNING && strings.Contains(r.GetMessage(), warns) {
			return ""
		}
	}
	return fmt.Sprintf("want a warning naming %s, got %s", warns, describe(rsp, err))
}

// describe sums an answer up for a message.
func describe(rsp *fnv1.RunFunctionResponse, err error) string {
	if err != nil {
		msg := status.Convert(err).Message()
		return fmt.Sprintf("error %s: %.300s", status.Code(err), msg)
	}
	var results []string
	for _, r := range rsp.GetResults() {
		results = append(results, fmt.Sprintf("%s %.200s", r.GetSeverity(), r.GetMessage()))
	}
	if len(results) > 5 {
		results = append(results[:5], fmt.Sprintf("... %d results", len(results)))
	}
	return fmt.Sprintf("%d replicas, %d bytes, results [%s]", composedReplicas(rsp), proto.Size(rsp), strings.Join(results, "; "))
}
