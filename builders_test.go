package main

// Builders the root package's tests share: requests and responses, a
// function served in process, and the random fleet generator.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/codec"
	"github.com/modelplaneai/fleet-scheduler/internal/compose"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/internal/plan"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

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

var now = time.Date(2026, 10, 20, 20, 8, 0, 0, time.UTC)

func toStruct(t *testing.T, obj any) *structpb.Struct {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(b, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func resources(t *testing.T, objs ...any) *fnv1.Resources {
	t.Helper()
	out := &fnv1.Resources{}
	for _, o := range objs {
		out.Items = append(out.Items, &fnv1.Resource{Resource: toStruct(t, o)})
	}
	return out
}

// request is a RunFunctionRequest for the XR with the fleet resolved.
func request(t *testing.T, xr *v1alpha1.ModelDeployment, clusters []any, replicas []any) *fnv1.RunFunctionRequest {
	t.Helper()
	return &fnv1.RunFunctionRequest{
		Meta:     &fnv1.RequestMeta{Tag: "t"},
		Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: toStruct(t, xr)}},
		RequiredResources: map[string]*fnv1.Resources{
			fleet.RequiredClusters: resources(t, clusters...),
			fleet.RequiredReplicas: resources(t, replicas...),
		},
	}
}

func cond(typ string, status fnv1.Status, reason, msg string) *fnv1.Condition {
	c := &fnv1.Condition{Type: typ, Status: status, Reason: reason, Target: fnv1.Target_TARGET_COMPOSITE.Enum()}
	if msg != "" {
		c.Message = &msg
	}
	return c
}

func result(sev fnv1.Severity, msg string) *fnv1.Result {
	return &fnv1.Result{Severity: sev, Message: msg, Target: fnv1.Target_TARGET_COMPOSITE.Enum()}
}

// run runs the function on a request twice: as tests build it, decoded,
// and as the server receives it, through the request codec, which leaves
// the fleet on the wire. Both must give the same response; the second
// finds the selectors the first compiled.
func run(t *testing.T, req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
	t.Helper()
	f := &Function{log: logging.NewNopLogger(), now: func() time.Time { return now }, planner: plan.Planner{Selectors: scheduling.NewSelectors()}}
	viaCodec := serve(t, f, req)
	rsp, err := f.RunFunction(context.Background(), req)
	if err != nil {
		t.Fatalf("RunFunction(...): unexpected error: %v", err)
	}
	if diff := cmp.Diff(rsp, viaCodec, protocmp.Transform()); diff != "" {
		t.Fatalf("RunFunction(...): decoded request, -want, through the request codec, +got:\n%s", diff)
	}
	return rsp
}

const (
	trueS  = fnv1.Status_STATUS_CONDITION_TRUE
	falseS = fnv1.Status_STATUS_CONDITION_FALSE
)

// replicaFrom reads back a desired ModelReplica as the fleet would list it.
func replicaFrom(t *testing.T, rsp *fnv1.RunFunctionResponse, key string) *v1alpha1.ModelReplica {
	t.Helper()
	b, err := protojson.Marshal(rsp.GetDesired().GetResources()[key].GetResource())
	if err != nil {
		t.Fatal(err)
	}
	r := &v1alpha1.ModelReplica{}
	if err := json.Unmarshal(b, r); err != nil {
		t.Fatal(err)
	}
	return r
}

// testCodec is the request codec, as main.go makes it.
var testCodec = codec.New(fleet.RequiredClusters, fleet.RequiredReplicas)

// serve runs f on a request as the server receives it, through the request
// codec.
func serve(t *testing.T, f *Function, req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
	t.Helper()
	return serveWith(t, testCodec, f, req)
}

// serveWith serves a request as serve does, through a request codec.
func serveWith(t *testing.T, requests *codec.Codec, f *Function, req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
	t.Helper()
	wire, err := proto.Marshal(req)
	if err != nil {
		t.Fatalf("proto.Marshal(...): %v", err)
	}
	// Through the codec, as the server decodes it: into a recycled copy.
	served := &fnv1.RunFunctionRequest{}
	if err := requests.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, served); err != nil {
		t.Fatalf("Unmarshal(...): %v", err)
	}
	rsp, err := requests.Server(f).RunFunction(context.Background(), served)
	if err != nil {
		t.Fatalf("RunFunction(...): %v", err)
	}
	return rsp
}

// replicaObject is a ModelReplica as generic JSON, to give any field any
// type.
// replicaObject is a ModelReplica of a deployment at index 0 on a cluster,
// its engines and conditions as given: any types, to make one that does not
// read.
func replicaObject(deployment, name string, cluster, engines, conditions any) map[string]any {
	return map[string]any{
		"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
		"metadata": map[string]any{"name": name, "namespace": fx.Namespace, "labels": map[string]any{
			"modelplane.ai/deployment": deployment, "modelplane.ai/replica-index": "0",
		}},
		"spec":   map[string]any{"clusterName": cluster, "engines": engines},
		"status": map[string]any{"conditions": conditions},
	}
}

// composed are the keys of the ModelReplicas a response composes.
func composed(rsp *fnv1.RunFunctionResponse) []string {
	var out []string
	for k := range rsp.GetDesired().GetResources() {
		if compose.IsReplicaKey(k) {
			out = append(out, k)
		}
	}
	return out
}

// askedFor are the names of the required resources a response asks for.
func askedFor(rsp *fnv1.RunFunctionResponse) []string {
	var names []string
	for name := range rsp.GetRequirements().GetResources() {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// fleetGen makes random RunFunctionRequests: fleets of a few clusters,
// their pools and agent reports (usable, stale, from the future, invalid in
// a dozen ways), replicas of this and other deployments (pinned, stamped,
// PodsScheduled True, False, unreadable), observed composed resources, a
// ModelCache found, missing or unresolved, function inputs good and bad, and
// objects that do not decode. An episode is a fleet and the few reconciles
// that follow it, each changing it a little, with uids and resourceVersions
// as an API server gives them, so that a server's caches serve most of it.
// It depends only on the API types and fixture builders.

var genClock = time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)

type fleetGen struct {
	rng *rand.Rand
	// episode state: objects kept across the requests of an episode.
	clusters []map[string]any
	replicas []map[string]any
	xr       map[string]any
	input    *structpb.Struct
	observed map[string]any
	cache    string // "", "found", "missing", "unresolved"
	now      time.Time
	rv       int
	// usable makes every pool's report present, valid and at most 200s
	// old, and every cluster an API object: the fleets a call may read
	// narrowly.
	usable bool
}

func (g *fleetGen) n(k int) int       { return g.rng.IntN(k) }
func (g *fleetGen) p(pr float64) bool { return g.rng.Float64() < pr }

func dgToMap(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	return m
}

func (g *fleetGen) nextRV() string { g.rv++; return strconv.Itoa(g.rv) }

var genCELs = []string{
	fx.MemAtLeast80Gi,
	`device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA")`,
	`device.attributes["gpu.nvidia.com"].model == "h100"`,
	`device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0`,
	fx.IB,
	`device.driver == "gpu.nvidia.com"`,
}

func (g *fleetGen) request() v1alpha1.DeviceSelector {
	switch {
	case g.p(0.03):
		return fx.Request("gpu", int64(1+g.n(2)), "device.attributes[") // does not compile
	case g.p(0.15):
		return fx.Request("nic", 1, fx.IB)
	}
	var cels []string
	if g.p(0.5) {
		cels = append(cels, genCELs[g.n(len(genCELs))])
	}
	return fx.Request("gpu", int64([]int{1, 1, 1, 1, 1, 1, 2, 2, 4, 8}[g.n(10)]), cels...)
}

func (g *fleetGen) engine(name string) v1alpha1.Engine {
	var reqs []v1alpha1.DeviceSelector
	for range 1 + g.n(2)*g.n(2) {
		reqs = append(reqs, g.request())
	}
	var e v1alpha1.Engine
	if g.p(0.25) {
		e = fx.Gang(name, int64(g.n(3)), reqs...)
	} else {
		e = fx.Standalone(name, reqs...)
		if g.p(0.1) {
			e.Members = append(e.Members, fx.Member(v1alpha1.RoleStandalone, 0))
		}
	}
	if g.p(0.2) {
		e = fx.Copies(e, int64(1+g.n(3)))
	}
	if g.p(0.1) {
		e = fx.Phase(e, "Prefill")
	}
	return e
}

func (g *fleetGen) deployment() map[string]any {
	names := []string{"m", "qwen", "llama"}
	w := fx.Deployment(names[g.n(len(names))]).Replicas(int64(g.n(7)))
	if g.p(0.1) {
		w = w.Replicas(int64(-1 + g.n(2)*100))
	}
	if g.p(0.2) {
		w = w.Namespace("other")
	}
	engines := []v1alpha1.Engine{g.engine("main")}
	if g.p(0.3) {
		engines = append([]v1alpha1.Engine{g.engine("prefill")}, engines...)
	}
	w = w.Engines(engines...)
	if g.p(0.3) {
		w = w.Tolerations(v1alpha1.Toleration{Key: "maint", Operator: []string{"Exists", "Equal"}[g.n(2)], Value: "x", Effect: []string{"", "NoSchedule", "NoExecute"}[g.n(3)]})
	}
	if g.p(0.2) {
		w = w.ClusterSelector(map[string]string{"tier": "prod"})
	}
	if g.p(0.2) {
		w = w.Labels(map[string]string{"team": "ml", "modelplane.ai/cluster": "spoof"})
	}
	if g.p(0.3) {
		w = w.Cache("qwen-cache")
	}
	xr := w.Obj()
	if g.p(0.3) {
		xr.Metadata.UID = "xr-uid"
	}
	return dgToMap(xr)
}

func (g *fleetGen) device() v1alpha1.Device {
	if g.p(0.15) {
		return fx.NIC(int64(1 + g.n(4)))
	}
	d := fx.GPU("gpu", int64([]int{1, 2, 4, 8}[g.n(4)]), []string{"24Gi", "80Gi", "141Gi"}[g.n(3)])
	if g.p(0.4) {
		d.Attributes["model"] = v1alpha1.DeviceAttribute{String: new([]string{"h100", "l4"}[g.n(2)])}
	}
	if g.p(0.05) {
		d.Attributes["driverVersion"] = v1alpha1.DeviceAttribute{Version: new([]string{"1.2.3", "not-semver"}[g.n(2)])}
	}
	if g.p(0.05) {
		d.Capacity["memory"] = v1alpha1.DeviceCapacityVal{Value: "lots"}
	}
	if g.p(0.1) {
		d.Claim = v1alpha1.ClaimSynthetic
	}
	return d
}

func (g *fleetGen) pool(name string) v1alpha1.GPUPool {
	nodes := int64(g.n(7))
	w := fx.Pool(name, nodes)
	devs := []v1alpha1.Device{g.device()}
	if g.p(0.25) {
		devs = append(devs, fx.NIC(int64(1+g.n(2))))
	}
	w = w.Devices(devs...)
	perNode := int64(1)
	if devs[0].Count != nil {
		perNode = *devs[0].Count
	}
	r := g.rng.Float64()
	if g.usable {
		r = 0.5
	}
	switch {
	case r < 0.3: // missing
	case r < 0.75: // usable or stale
		age := time.Duration(g.n(400)) * time.Second
		if g.usable {
			age = time.Duration(g.n(200)) * time.Second
		}
		if g.p(0.1) && !g.usable {
			age = -time.Duration(g.n(700)) * time.Second
		}
		observed := int64(g.n(int(nodes) + 2))
		var buckets []agentv1alpha1.Bucket
		left := observed
		for left > 0 && g.p(0.8) {
			k := int64(1 + g.n(int(left)))
			b := fx.NodesFree(k, devs[0].Name, int64(g.n(int(perNode)+1)))
			if g.usable && !devs[0].IsDRA() {
				// A valid report lists only devices claimed through DRA.
				b = agentv1alpha1.Bucket{Nodes: k, Free: []agentv1alpha1.Free{}}
			}
			buckets = append(buckets, b)
			left -= k
		}
		w = w.Observed(g.now.Add(-age), observed, buckets...)
	default: // invalid
		at := strconv.Quote(g.now.Add(-30 * time.Second).Format(time.RFC3339))
		bad := [][3]string{
			{at, "-1", "[]"},
			{at, "2", `[{"nodes":3,"free":[{"name":"gpu","count":1}]}]`},
			{at, "2", `[{"nodes":1,"free":[{"name":"nope","count":1}]}]`},
			{at, "2", `[{"nodes":1,"free":[{"name":"gpu","count":99}]}]`},
			{`"yesterday"`, "2", "[]"},
			{`"2026-10-20t20:05:00z"`, "1", "[]"},
			{at, `"two"`, "[]"},
			{at, "2", `{"nodes":1}`},
			{"", "2", "[]"},
			{at, "", "[]"},
			{at, "1.5", "[]"},
			{"12", "1", "[]"},
		}[g.n(12)]
		w = w.RawObservation(bad[0], bad[1], bad[2])
	}
	return w.Obj()
}

func (g *fleetGen) cluster(name string) map[string]any {
	w := fx.Cluster(name)
	switch r := g.rng.Float64(); {
	case r < 0.1:
		w = w.NotReady()
	case r < 0.15:
		w = w.Gateway("")
		w.Status.Gateway = nil
	case r < 0.3:
		w = w.Hostname(name + ".gw.example.com")
	}
	if g.p(0.2) {
		w = w.Taint("maint", "x", []string{"NoSchedule", "NoExecute", "PreferNoSchedule"}[g.n(3)])
	}
	if g.p(0.2) {
		w = w.PlacementLabels(map[string]string{"region": "eu", "modelplane.ai/deployment": "spoof"})
	}
	var pools []v1alpha1.GPUPool
	for i := range 1 + g.n(3) {
		pools = append(pools, g.pool([]string{"l4", "h100", "default"}[i]))
	}
	if g.p(0.05) {
		pools = append(pools, pools[0])
	}
	w = w.Pools(pools...)
	c := w.Obj()
	if g.p(0.5) || g.usable {
		c.Metadata.UID, c.Metadata.ResourceVersion = "uid-"+name, g.nextRV()
	}
	m := dgToMap(c)
	if g.p(0.01) {
		// Malformed: a string where a number goes.
		status := m["status"].(map[string]any)
		status["gpuPools"].([]any)[0].(map[string]any)["nodes"] = "three"
	}
	if g.p(0.01) {
		status := m["status"].(map[string]any)
		status["conditions"].([]any)[0].(map[string]any)["status"] = true
	}
	return m
}

func (g *fleetGen) replica(deployment, ns string, clusters []string, pools []string, index int) map[string]any {
	cluster := clusters[g.n(len(clusters))]
	w := fx.Replica(deployment, cluster, index).Namespace(ns)
	pool := pools[g.n(len(pools))]
	var engines []v1alpha1.ReplicaEngine
	switch r := g.rng.Float64(); {
	case r < 0.6:
		engines = []v1alpha1.ReplicaEngine{fx.PinnedStandalone("main", pool, fx.Stamped(int64(1+g.n(4))))}
	case r < 0.75:
		engines = []v1alpha1.ReplicaEngine{fx.PinnedGang("main", pool, int64(g.n(3)), fx.Stamped(int64(1+g.n(2))))}
	case r < 0.85:
		engines = []v1alpha1.ReplicaEngine{fx.PinnedStandalone("prefill", pool, fx.Stamped(1)), fx.PinnedStandalone("main", pool, fx.Stamped(1))}
	case r < 0.9:
		engines = []v1alpha1.ReplicaEngine{fx.PinnedStandalone("main", pool)}
	default:
		engines = []v1alpha1.ReplicaEngine{fx.PinnedStandalone("main", pool, v1alpha1.DeviceRequest{Name: "gpu", DeviceClassName: "other.class", Count: 1})}
	}
	w = w.Engines(engines...)
	switch r := g.rng.Float64(); {
	case r < 0.3:
	case r < 0.7:
		w = w.PodsScheduled("True", g.now.Add(-time.Duration(g.n(600))*time.Second))
	case r < 0.85:
		w = w.PodsScheduled("False", g.now.Add(-time.Duration(g.n(3600))*time.Second))
	case r < 0.9:
		w = w.Conditions(v1alpha1.Condition{Type: "PodsScheduled", Status: "True", LastTransitionTime: "soon"})
	case r < 0.95:
		w = w.Conditions(v1alpha1.Condition{Type: "Ready", Status: "True"}, v1alpha1.Condition{Type: "PodsScheduled", Status: "True", LastTransitionTime: "2026-10-20t20:00:00z"})
	default:
		w = w.Conditions(v1alpha1.Condition{Type: "Synced", Status: "True"})
	}
	r := w.Obj()
	if g.p(0.6) {
		r.Metadata.UID, r.Metadata.ResourceVersion = fmt.Sprintf("uid-%s-%s-%d-%d", ns, deployment, index, g.n(1000)), g.nextRV()
	}
	if g.p(0.05) {
		r.Metadata.Labels[v1alpha1.LabelReplicaIndex] = []string{"x", "+1", "1_0", ""}[g.n(4)]
	}
	m := dgToMap(r)
	if g.p(0.008) {
		m["spec"].(map[string]any)["engines"] = "none"
	}
	if g.p(0.008) {
		m["status"] = map[string]any{"conditions": "broken"}
	}
	if g.p(0.008) {
		m["spec"].(map[string]any)["clusterName"] = 7.0
	}
	if g.p(0.03) {
		m["metadata"].(map[string]any)["deletionTimestamp"] = g.now.Format(time.RFC3339)
	}
	return m
}

// newEpisode starts a new random fleet.
func (g *fleetGen) newEpisode() {
	g.now = genClock.Add(time.Duration(g.n(100000)) * time.Second)
	g.xr = g.deployment()
	names := []string{"a", "b", "c", "d"}[:1+g.n(4)]
	if g.p(0.05) {
		names = []string{}
	}
	g.clusters = nil
	for _, n := range names {
		g.clusters = append(g.clusters, g.cluster(n))
	}
	if len(names) > 0 && g.p(0.05) {
		g.clusters = append(g.clusters, g.cluster(names[0]))
	}
	g.replicas = nil
	clusterNames := append(append([]string{}, names...), "gone")
	pools := []string{"l4", "h100", "default", "gone"}
	xrName := g.xr["metadata"].(map[string]any)["name"].(string)
	xrNS := g.xr["metadata"].(map[string]any)["namespace"].(string)
	for i := range g.n(12) {
		switch r := g.rng.Float64(); {
		case r < 0.5:
			g.replicas = append(g.replicas, g.replica(xrName, xrNS, clusterNames, pools, i%4))
		case r < 0.6:
			g.replicas = append(g.replicas, g.replica(xrName, "elsewhere", clusterNames, pools, i%4))
		default:
			g.replicas = append(g.replicas, g.replica([]string{"other", "third"}[g.n(2)], "ml-team", clusterNames, pools, i))
		}
	}
	g.observed = map[string]any{}
	for _, r := range g.replicas {
		md := r["metadata"].(map[string]any)
		labels, _ := md["labels"].(map[string]any)
		if labels["modelplane.ai/deployment"] != xrName || md["namespace"] != xrNS || !g.p(0.7) {
			continue
		}
		spec, _ := r["spec"].(map[string]any)
		cl, _ := spec["clusterName"].(string)
		key := fmt.Sprintf("replica-%s-%v", cl, labels["modelplane.ai/replica-index"])
		obs := maps.Clone(r)
		status := "False"
		if g.p(0.6) {
			status = "True"
		}
		obs["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": status}}}
		g.observed[key] = obs
		if status == "True" && g.p(0.5) {
			g.observed["endpoint-"+key[len("replica-"):]] = map[string]any{
				"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelEndpoint",
				"metadata": map[string]any{"name": md["name"], "namespace": xrNS},
				"spec":     map[string]any{"url": "http://x/"},
				"status":   map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}},
			}
		}
	}
	g.cache = []string{"found", "missing", "unresolved", "found", "found", "found"}[g.n(6)]
	g.input = nil
	if g.p(0.3) {
		in := map[string]any{"apiVersion": "scheduler.fn.modelplane.ai/v1beta1", "kind": "Input"}
		if g.p(0.5) {
			in["observationMaxAge"] = []string{"5m", "3m", "90s", "10m", "1h", "5m", "0s", "soon"}[g.n(8)]
		}
		if g.p(0.5) {
			in["assumedBinding"] = []string{"MostFree", "LeastFree", "LeastFree", "MostFree", "Sideways"}[g.n(5)]
		}
		if g.p(0.03) {
			in["observationMaxAge"] = 5.0
		}
		s, err := structpb.NewStruct(in)
		if err != nil {
			panic(err)
		}
		g.input = s
	}
}

// evolve changes the fleet a little, as between two reconciles.
func (g *fleetGen) evolve() {
	g.now = g.now.Add(time.Duration(g.n(120)) * time.Second)
	if g.p(0.3) {
		spec := g.xr["spec"].(map[string]any)
		spec["replicas"] = float64(g.n(7))
	}
	if g.usable {
		// The agents republish as the clock moves: every report stays fresh.
		for i, c := range g.clusters {
			g.clusters[i] = g.cluster(c["metadata"].(map[string]any)["name"].(string))
		}
	}
	if len(g.clusters) > 0 && g.p(0.4) {
		i := g.n(len(g.clusters))
		name := g.clusters[i]["metadata"].(map[string]any)["name"].(string)
		g.clusters[i] = g.cluster(name)
	}
	if len(g.replicas) > 0 && g.p(0.4) {
		g.replicas = append(g.replicas[:0:0], g.replicas[1:]...)
	}
}

func dgStruct(m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s
}

func (g *fleetGen) build() *fnv1.RunFunctionRequest {
	req := &fnv1.RunFunctionRequest{
		Meta:     &fnv1.RequestMeta{Tag: "diff"},
		Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: dgStruct(g.xr)}, Resources: map[string]*fnv1.Resource{}},
		Input:    g.input,
	}
	for k, v := range g.observed {
		req.Observed.Resources[k] = &fnv1.Resource{Resource: dgStruct(v.(map[string]any))}
	}
	if g.p(0.03) {
		// Not yet resolved at all.
		return req
	}
	req.RequiredResources = map[string]*fnv1.Resources{}
	cl := &fnv1.Resources{}
	for _, c := range g.clusters {
		cl.Items = append(cl.Items, &fnv1.Resource{Resource: dgStruct(c)})
	}
	rs := &fnv1.Resources{}
	for _, r := range g.replicas {
		rs.Items = append(rs.Items, &fnv1.Resource{Resource: dgStruct(r)})
	}
	req.RequiredResources["clusters"] = cl
	req.RequiredResources["all-replicas"] = rs
	switch g.cache {
	case "found":
		req.RequiredResources["cache"] = &fnv1.Resources{Items: []*fnv1.Resource{{Resource: dgStruct(map[string]any{
			"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelCache",
			"metadata": map[string]any{"name": "qwen-cache", "namespace": "ml-team"},
			"spec":     map[string]any{"clusterSelector": map[string]any{"matchLabels": map[string]any{"region": "eu"}}},
		})}}}
	case "missing":
		req.RequiredResources["cache"] = &fnv1.Resources{}
	}
	return req
}

// ownedConditions are the XR conditions the function owns.
var ownedConditions = []string{condReplicasScheduled, condReplicasReady, condModelCacheResolved, condCapacityObserved}
