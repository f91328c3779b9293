package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/modelplaneai/fleet-scheduler/e2e/internal/freshen"
)

// Labels fleet-scheduler manages on the resources it composes.
const (
	labelDeployment = "modelplane.ai/deployment"
	labelCluster    = "modelplane.ai/cluster"
	labelIndex      = "modelplane.ai/replica-index"
	// labelCounted is only on ModelReplicas: whether the usable report of
	// every pool the replica holds counts its pods.
	labelCounted = "scheduler.fn.modelplane.ai/counted"
)

// inputs are a fixture's source files, read as written.
type inputs struct {
	xr       *unstructured.Unstructured
	clusters map[string]*unstructured.Unstructured
	replicas []*unstructured.Unstructured // Every ModelReplica of the fleet.
}

// readInputs reads the fixture in dir, relative to the repository root, the
// way freshen.Prepare resolves it.
func readInputs(t *testing.T, dir string) inputs {
	t.Helper()
	xrFile := filepath.Join(root, dir, freshen.XR)
	if _, err := os.Stat(xrFile); err != nil {
		xrFile = filepath.Join(root, "example", freshen.XR)
	}
	in := inputs{clusters: map[string]*unstructured.Unstructured{}}
	xrs := readYAML(t, xrFile)
	if len(xrs) != 1 {
		t.Fatalf("%s: want one XR, got %d documents", xrFile, len(xrs))
	}
	in.xr = xrs[0]
	files, err := filepath.Glob(filepath.Join(root, dir, freshen.RequiredResources, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no required resources (%v)", dir, err)
	}
	for _, f := range files {
		for _, u := range readYAML(t, f) {
			switch u.GetKind() {
			case "InferenceCluster":
				in.clusters[u.GetName()] = u
			case "ModelReplica":
				in.replicas = append(in.replicas, u)
			}
		}
	}
	return in
}

func readYAML(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	y, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeYAML(y)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return out
}

// decodeYAML decodes a stream of YAML documents, skipping empty ones. Whole
// numbers decode as int64, as they do from the API server.
func decodeYAML(y []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	d := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(y), 4096)
	for {
		var raw json.RawMessage
		if err := d.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := utiljson.Unmarshal(raw, &u.Object); err != nil {
			return nil, err
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// ours reports whether replica r belongs to the fixture's deployment.
func (in inputs) ours(r *unstructured.Unstructured) bool {
	return r.GetLabels()[labelDeployment] == in.xr.GetName() && r.GetNamespace() == in.xr.GetNamespace()
}

// replicaName is docs/spec.md#composed-modelreplicas's metadata.name of a replica.
func replicaName(deployment, cluster string, index int) string {
	sum := sha256.Sum256([]byte(deployment + "-" + cluster + "-" + strconv.Itoa(index)))
	prefix := deployment
	if len(prefix) > 57 {
		prefix = prefix[:57]
	}
	return strings.TrimRight(prefix, "-") + "-" + hex.EncodeToString(sum[:])[:5]
}

// gatewayHost is the cluster's gateway hostname, else its address.
func gatewayHost(c *unstructured.Unstructured) string {
	if h, _, _ := unstructured.NestedString(c.Object, "status", "gateway", "hostname"); h != "" {
		return h
	}
	a, _, _ := unstructured.NestedString(c.Object, "status", "gateway", "address")
	return a
}

// pool returns the named entry of the cluster's status.gpuPools.
func pool(c *unstructured.Unstructured, name string) (map[string]any, bool) {
	pools, _, _ := unstructured.NestedSlice(c.Object, "status", "gpuPools")
	for _, p := range pools {
		if m, ok := p.(map[string]any); ok && m["name"] == name {
			return m, true
		}
	}
	return nil, false
}

// claimingPods is how many of a replica's pods claim a device, per pool: each
// takes a whole node of its pool under whole-node accounting.
func claimingPods(r *unstructured.Unstructured) map[string]int64 {
	out := map[string]int64{}
	engines, _, _ := unstructured.NestedSlice(r.Object, "spec", "engines")
	for _, e := range engines {
		em, _ := e.(map[string]any)
		copies, ok, _ := unstructured.NestedInt64(em, "copies")
		if !ok {
			copies = 1
		}
		members, _, _ := unstructured.NestedSlice(em, "members")
		for _, m := range members {
			mm, _ := m.(map[string]any)
			reqs, _, _ := unstructured.NestedSlice(mm, "deviceRequests")
			if len(reqs) == 0 {
				continue
			}
			pods := int64(1)
			if mm["role"] == "Worker" {
				pods, _, _ = unstructured.NestedInt64(mm, "worker", "nodes")
			}
			p, _, _ := unstructured.NestedString(mm, "nodePoolName")
			out[p] += copies * pods
		}
	}
	return out
}

// condition returns the XR's status condition of type typ.
func condition(xr *unstructured.Unstructured, typ string) (map[string]any, bool) {
	conds, _, _ := unstructured.NestedSlice(xr.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m, true
		}
	}
	return nil, false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// syncBuffer is a bytes.Buffer safe for the function's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestFixtureReplicaNames checks that the fixtures' existing ModelReplicas are
// named and labeled as fleet-scheduler would have composed them, so that the
// fixtures stay believable as they change. It needs neither the function nor
// the crossplane CLI.
func TestFixtureReplicaNames(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range append([]string{filepath.Join("..", "example"), filepath.Join("..", "example", "observed")}, dirs...) {
		files, _ := filepath.Glob(filepath.Join(d, "*", "*.yaml"))
		for _, f := range files {
			for _, r := range readYAML(t, f) {
				if r.GetKind() != "ModelReplica" {
					continue
				}
				l := r.GetLabels()
				idx, err := strconv.Atoi(l[labelIndex])
				if err != nil {
					t.Errorf("%s: %s: label %s: %v", f, r.GetName(), labelIndex, err)
					continue
				}
				cluster, _, _ := unstructured.NestedString(r.Object, "spec", "clusterName")
				if l[labelCluster] != cluster {
					t.Errorf("%s: %s: label %s is %q, spec.clusterName %q", f, r.GetName(), labelCluster, l[labelCluster], cluster)
				}
				if want := replicaName(l[labelDeployment], cluster, idx); r.GetName() != want {
					t.Errorf("%s: ModelReplica %s: want name %s", f, r.GetName(), want)
				}
			}
		}
	}
}

// TestReplicaName pins the name rule itself, against hashes worked out apart
// from it (Python's hashlib).
func TestReplicaName(t *testing.T) {
	cases := map[string]struct {
		deployment, cluster string
		index               int
		want                string
	}{
		"ShortName": {"qwen3-8b", eksUSEast, 0, "qwen3-8b-fd54a"},
		// Cut to 57 characters, "...-longcontext-", then the trailing "-" dropped.
		"LongName": {
			"mistral-small-3-2-24b-instruct-2506-awq-int4-longcontext-rp-v2", solo, 2,
			"mistral-small-3-2-24b-instruct-2506-awq-int4-longcontext-ac455",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := replicaName(tc.deployment, tc.cluster, tc.index); got != tc.want {
				t.Errorf("replicaName(%q, %q, %d): want %s, got %s", tc.deployment, tc.cluster, tc.index, tc.want, got)
			}
		})
	}
}

// TestFixturesAgreeOnSharedObjects: Crossplane core's render engine, which
// `crossplane composition render` runs, keeps one store of objects, as an
// API server does. An object a fixture lists both as observed (composed by
// the XR) and as required (the ModelReplicas the function reads) is one
// object there, and the copy read last wins. So both copies must be the
// same, composition-resource-name annotation included: the engine finds an
// observed resource by that annotation.
func TestFixturesAgreeOnSharedObjects(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(root, "e2e", "testdata", "*"))
	if err != nil {
		t.Fatal(err)
	}
	dirs = append(dirs, filepath.Join(root, "example"), filepath.Join(root, "example", "observed"))
	key := func(u *unstructured.Unstructured) string {
		return u.GetAPIVersion() + " " + u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
	}
	shared := 0
	for _, dir := range dirs {
		observed := map[string]*unstructured.Unstructured{}
		files, err := filepath.Glob(filepath.Join(dir, freshen.ObservedResources, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			for _, u := range readYAML(t, f) {
				observed[key(u)] = u
			}
		}
		files, err = filepath.Glob(filepath.Join(dir, freshen.RequiredResources, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			for _, u := range readYAML(t, f) {
				o, ok := observed[key(u)]
				if !ok {
					continue
				}
				shared++
				if diff := cmp.Diff(o.Object, u.Object); diff != "" {
					t.Errorf("%s: %s differs between %s/ and %s/ (-observed +required):\n%s", dir, key(u), freshen.ObservedResources, freshen.RequiredResources, diff)
				}
			}
		}
	}
	if shared == 0 {
		t.Error("no fixture lists an object as both observed and required: the check checked nothing")
	}
}
