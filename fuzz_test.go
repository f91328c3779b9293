package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/codec"
	"github.com/modelplaneai/fleet-scheduler/internal/compose"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/internal/plan"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// FuzzRunFunction: any bytes may arrive as a RunFunctionRequest. Served as
// the server serves them, through the request codec into RunFunction with
// the object caches, they never panic, and when they decode:
//   - what protobuf decodes, the codec decodes too, and the function
//     answers it as it answers the request decoded by protobuf, without
//     caches, byte for byte;
//   - the response marshals and answers the request (its tag);
//   - a response that is not Fatal sets every condition the function owns,
//     or, before the fleet is resolved, none;
//   - it composes no more replicas than the deployment wants, unless every
//     one beyond is one it retains (observed, or in the fleet as its own).
//
// Seeded with the render fixtures' requests and fleetGen's.
func FuzzRunFunction(f *testing.F) {
	for _, req := range fixtureRequests(f) {
		f.Add(mustMarshal(f, req), genClock.Unix())
	}
	g := &fleetGen{rng: rand.New(rand.NewPCG(11, 13))}
	for i := range 64 {
		if i%4 == 0 {
			g.newEpisode()
		} else {
			g.evolve()
		}
		f.Add(mustMarshal(f, g.build()), g.now.Unix())
	}
	f.Fuzz(func(t *testing.T, b []byte, unix int64) {
		now := time.Unix(unix, 0).UTC()
		decoded := &fnv1.RunFunctionRequest{}
		decodes := proto.Unmarshal(b, decoded) == nil
		requests := codec.New(fleet.RequiredClusters, fleet.RequiredReplicas)
		served := &fnv1.RunFunctionRequest{}
		if err := requests.Unmarshal(inFrames(b), served); err != nil {
			if decodes {
				t.Fatalf("the request codec refuses what protobuf decodes: %v", err)
			}
			return
		}
		fn := &Function{log: logging.NewNopLogger(), now: func() time.Time { return now }, fleet: fleet.NewReader(), planner: plan.Planner{Selectors: scheduling.NewSelectors()}}
		rsp, err := requests.Server(fn).RunFunction(context.Background(), served)
		if err != nil {
			t.Fatalf("RunFunction(...): an error, with its caller still waiting: %v", err)
		}
		if _, err := requests.Marshal(rsp); err != nil {
			t.Fatalf("the response does not marshal: %v", err)
		}
		if !decodes {
			return
		}
		if got, want := rsp.GetMeta().GetTag(), decoded.GetMeta().GetTag(); got != want {
			t.Errorf("the response's tag is %q, want the request's %q", got, want)
		}
		checkConditions(t, decoded, rsp)
		checkReplicaCount(t, decoded, rsp)

		// Through the codec, with no cache, as protobuf decodes it: the same
		// answer. (With the caches, the fuzzer can give two different
		// objects one uid and resourceVersion, as no API server does.)
		again := &fnv1.RunFunctionRequest{}
		if err := requests.Unmarshal(inFrames(b), again); err != nil {
			t.Fatalf("the request codec decodes the request once, not twice: %v", err)
		}
		cold := &Function{log: logging.NewNopLogger(), now: func() time.Time { return now }}
		got, err := requests.Server(cold).RunFunction(context.Background(), again)
		if err != nil {
			t.Fatal(err)
		}
		want, err := cold.RunFunction(context.Background(), decoded)
		if err != nil {
			t.Fatal(err)
		}
		deterministic := proto.MarshalOptions{Deterministic: true}
		wb, werr := deterministic.Marshal(want)
		gb, gerr := deterministic.Marshal(got)
		if werr != nil || gerr != nil || !bytes.Equal(wb, gb) {
			t.Errorf("through the request codec the answer differs from protobuf's decoding: -protobuf, +codec:\n%s", cmp.Diff(want, got, protocmp.Transform()))
		}
	})
}

// checkConditions: a response that is not Fatal sets every condition the
// function owns once the fleet is resolved, and none before.
func checkConditions(t *testing.T, req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse) {
	t.Helper()
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			return
		}
	}
	set := map[string]bool{}
	for _, c := range rsp.GetConditions() {
		set[c.GetType()] = true
	}
	_, clusters := req.GetRequiredResources()[fleet.RequiredClusters]
	_, replicas := req.GetRequiredResources()[fleet.RequiredReplicas]
	_, cache := req.GetRequiredResources()[fleet.RequiredCache]
	if !clusters || !replicas || (rsp.GetRequirements().GetResources()[fleet.RequiredCache] != nil && !cache) {
		if len(set) > 0 {
			t.Errorf("before the fleet is resolved, a response sets conditions %v", rsp.GetConditions())
		}
		return
	}
	for _, c := range ownedConditions {
		if !set[c] {
			t.Errorf("a response that is not Fatal sets conditions %v, not %s", rsp.GetConditions(), c)
		}
	}
}

// checkReplicaCount: a response composes more replicas than the
// deployment wants only when every one it composes is one it retains:
// observed as composed, or in the fleet as the deployment's own.
func checkReplicaCount(t *testing.T, req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse) {
	t.Helper()
	xr, err := readXR(req)
	if err != nil {
		return
	}
	retained := map[string]bool{}
	for k := range req.GetObserved().GetResources() {
		retained[k] = true
	}
	for _, it := range req.GetRequiredResources()[fleet.RequiredReplicas].GetItems() {
		r, err := decodeStruct[v1alpha1.ModelReplica](it.GetResource(), "ModelReplica")
		if err != nil || !scheduling.Ours(xr, r.Metadata.Namespace, r.Metadata.Labels[v1alpha1.LabelDeployment], r.Metadata.DeletionTimestamp != nil) {
			continue
		}
		index, err := strconv.Atoi(r.Metadata.Labels[v1alpha1.LabelReplicaIndex])
		if err != nil {
			// An index the scheduler reads its own way: any replica could
			// be this one.
			return
		}
		retained[compose.ReplicaKey(scheduling.Placement{Cluster: r.Spec.ClusterName, Index: index})] = true
	}
	var composed, fresh []string
	for k := range rsp.GetDesired().GetResources() {
		if compose.IsReplicaKey(k) {
			composed = append(composed, k)
			if !retained[k] {
				fresh = append(fresh, k)
			}
		}
	}
	if wanted := max(xr.Spec.Replicas, 0); int64(len(composed)) > wanted && len(fresh) > 0 {
		t.Errorf("%d replicas composed for a deployment that wants %d, %v of them not retained", len(composed), wanted, fresh)
	}
}

func mustMarshal(tb testing.TB, m proto.Message) []byte {
	tb.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// fixtureRequests are the requests Crossplane sends for the render
// fixtures, example/ and e2e/testdata/: each XR with its required and
// observed resources, as written (against genClock).
func fixtureRequests(tb testing.TB) []*fnv1.RunFunctionRequest {
	tb.Helper()
	dirs, err := filepath.Glob(filepath.Join("e2e", "testdata", "*"))
	if err != nil {
		tb.Fatal(err)
	}
	dirs = append(dirs, "example", filepath.Join("example", "observed"))
	out := make([]*fnv1.RunFunctionRequest, 0, len(dirs))
	for _, dir := range dirs {
		xrs := yamlObjects(tb, filepath.Join(dir, "xr.yaml"))
		if len(xrs) == 0 {
			xrs = yamlObjects(tb, filepath.Join("example", "xr.yaml"))
		}
		req := &fnv1.RunFunctionRequest{
			Meta:              &fnv1.RequestMeta{Tag: dir},
			Observed:          &fnv1.State{Composite: &fnv1.Resource{Resource: xrs[0]}, Resources: map[string]*fnv1.Resource{}},
			RequiredResources: map[string]*fnv1.Resources{fleet.RequiredClusters: {}, fleet.RequiredReplicas: {}},
		}
		for _, o := range yamlObjects(tb, filepath.Join(dir, "required-resources", "*.yaml")) {
			name := map[string]string{v1alpha1.KindInferenceCluster: fleet.RequiredClusters, v1alpha1.KindModelReplica: fleet.RequiredReplicas, v1alpha1.KindModelCache: fleet.RequiredCache}[o.GetFields()["kind"].GetStringValue()]
			if req.GetRequiredResources()[name] == nil {
				req.RequiredResources[name] = &fnv1.Resources{}
			}
			req.RequiredResources[name].Items = append(req.RequiredResources[name].Items, &fnv1.Resource{Resource: o})
		}
		for _, o := range yamlObjects(tb, filepath.Join(dir, "observed-resources", "*.yaml")) {
			key := o.GetFields()["metadata"].GetStructValue().GetFields()["annotations"].GetStructValue().GetFields()["crossplane.io/composition-resource-name"].GetStringValue()
			req.Observed.Resources[key] = &fnv1.Resource{Resource: o}
		}
		out = append(out, req)
	}
	return out
}

// yamlObjects are the YAML documents of the files a pattern matches, as
// Structs.
func yamlObjects(tb testing.TB, pattern string) []*structpb.Struct {
	tb.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil {
		tb.Fatal(err)
	}
	var out []*structpb.Struct
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			tb.Fatal(err)
		}
		for doc := range strings.SplitSeq(string(b), "\n---") {
			j, err := yaml.YAMLToJSON([]byte(doc))
			if err != nil {
				tb.Fatalf("%s: %v", file, err)
			}
			if string(bytes.TrimSpace(j)) == "null" {
				continue
			}
			s := &structpb.Struct{}
			if err := protojson.Unmarshal(j, s); err != nil {
				tb.Fatalf("%s: %v", file, err)
			}
			out = append(out, s)
		}
	}
	return out
}
