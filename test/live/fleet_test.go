package live

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

const (
	apiVersion = "modelplane.ai/v1alpha1"

	// fixtureClock is the time example/'s timestamps are written against.
	fixtureClock = "2026-10-20T20:06:00Z"

	// observationMaxAge is the example Composition's input, the default.
	observationMaxAge = 5 * time.Minute
)

// fleet is example/observed: three InferenceClusters with agent reports on
// every pool, and other teams' ModelReplicas relaying PodsScheduled.
type fleet struct {
	clusters []*unstructured.Unstructured
	replicas []*unstructured.Unstructured
}

func readFleet(t *testing.T, root string) fleet {
	t.Helper()
	dir := filepath.Join(root, "example", "observed", "required-resources")
	return fleet{
		clusters: harness.ReadObjects(t, filepath.Join(dir, "clusters.yaml")),
		replicas: harness.ReadObjects(t, filepath.Join(dir, "replicas.yaml")),
	}
}

// asOf returns a copy of objs with every observedAt and lastTransitionTime in
// their status moved by (now - the fixture clock): a report 30s old at the
// fixture clock is 30s old now.
func asOf(t *testing.T, objs []*unstructured.Unstructured, now time.Time) []*unstructured.Unstructured {
	t.Helper()
	clock, err := time.Parse(time.RFC3339, fixtureClock)
	if err != nil {
		t.Fatal(err)
	}
	shift := now.Sub(clock)
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		o = o.DeepCopy()
		shiftTimes(t, o.Object["status"], shift)
		out = append(out, o)
	}
	return out
}

func shiftTimes(t *testing.T, v any, shift time.Duration) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			s, ok := e.(string)
			if !ok || (k != "observedAt" && k != "lastTransitionTime") {
				shiftTimes(t, e, shift)
				continue
			}
			at, err := time.Parse(time.RFC3339, s)
			if err != nil {
				t.Fatalf("%s %q: %v", k, s, err)
			}
			v[k] = at.Add(shift).UTC().Format(time.RFC3339)
		}
	case []any:
		for _, e := range v {
			shiftTimes(t, e, shift)
		}
	}
}

// setObservedAt sets the observedAt of a cluster's pool.
func setObservedAt(t *testing.T, cluster *unstructured.Unstructured, pool string, at time.Time) {
	t.Helper()
	pools, _, _ := unstructured.NestedSlice(cluster.Object, "status", "gpuPools")
	for _, p := range pools {
		if m := p.(map[string]any); m["name"] == pool {
			m["observedAt"] = at.UTC().Format(time.RFC3339)
			if err := unstructured.SetNestedSlice(cluster.Object, pools, "status", "gpuPools"); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("InferenceCluster %s has no pool %s", cluster.GetName(), pool)
}

// agentFields lists, per pool, the fields of the agent's report an
// InferenceCluster read back from the API server still has.
func agentFields(u *unstructured.Unstructured) []string {
	var got []string
	pools, _, _ := unstructured.NestedSlice(u.Object, "status", "gpuPools")
	for _, p := range pools {
		m, _ := p.(map[string]any)
		for _, f := range []string{"observedAt", "observedNodes", "nodesByFreeDevices"} {
			if _, ok := m[f]; ok {
				got = append(got, fmt.Sprintf("%s/%v.%s", u.GetName(), m["name"], f))
			}
		}
	}
	return got
}

// pools counts a cluster's gpuPools.
func pools(u *unstructured.Unstructured) int {
	ps, _, _ := unstructured.NestedSlice(u.Object, "status", "gpuPools")
	return len(ps)
}

// replicaName is Modelplane's name of a deployment's replica on a cluster
// (docs/spec.md#composed-modelendpoints), written here from the specification, not from the function's code.
func replicaName(deployment, cluster string, index int) string {
	sum := sha256.Sum256([]byte(deployment + "-" + cluster + "-" + strconv.Itoa(index)))
	return strings.TrimRight(deployment[:min(len(deployment), 57)], "-") + "-" + hex.EncodeToString(sum[:])[:5]
}

// replica is what the test checks of a composed ModelReplica.
type replica struct {
	Name           string
	Labels         map[string]string
	ClusterName    string
	Pools          []string // each engine member's nodePoolName
	DeviceRequests []any    // each engine member's deviceRequests
}

// placed is the ModelReplica example/xr.yaml's qwen3-8b expects at
// (cluster, index): one Standalone member on pool l4, claiming one L4; not
// counted by any report, since no agent relays its pods' PodsScheduled.
func placed(cluster string, index int) replica {
	labels := map[string]string{
		"team":                        "ml-team",
		"app.kubernetes.io/part-of":   "chat-assistant",
		"modelplane.ai/deployment":    "qwen3-8b",
		"modelplane.ai/cluster":       cluster,
		"modelplane.ai/replica-index": strconv.Itoa(index),
		labelCounted:                  "false",
	}
	if cluster == "gke-us-central" { // its spec.placement.metadata.labels
		labels["fleet.example.com/cost-center"] = "gpu-gcp"
	}
	return replica{
		Name:        replicaName("qwen3-8b", cluster, index),
		Labels:      labels,
		ClusterName: cluster,
		Pools:       []string{"l4"},
		DeviceRequests: []any{[]any{map[string]any{
			"name":            "gpu",
			"deviceClassName": "gpu.nvidia.com",
			"count":           int64(1),
			"selectors": []any{
				map[string]any{"cel": `device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"`},
				map[string]any{"cel": `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20Gi")) >= 0`},
			},
		}}},
	}
}

// withoutPlacementLabels is r as composed from a cluster whose
// spec.placement the API server pruned: Modelplane v0.3's InferenceCluster XRD
// has no schema for it.
func withoutPlacementLabels(r replica) replica {
	delete(r.Labels, "fleet.example.com/cost-center")
	return r
}

// wholeNodePlacements are the replicas whole nodes place of the example's
// four, with v0.3's InferenceCluster XRD (no placement labels).
func wholeNodePlacements() []replica {
	return []replica{
		withoutPlacementLabels(placed("eks-us-east", 0)),
		withoutPlacementLabels(placed("gke-us-central", 0)),
		withoutPlacementLabels(placed("gke-us-central", 1)),
	}
}

// viewReplica returns what the test checks of a ModelReplica read back. Of
// the labels, it leaves out Crossplane's own (crossplane.io/...).
func viewReplica(u unstructured.Unstructured) replica {
	r := replica{Name: u.GetName(), Labels: map[string]string{}}
	for k, v := range u.GetLabels() {
		if !strings.HasPrefix(k, "crossplane.io/") {
			r.Labels[k] = v
		}
	}
	r.ClusterName, _, _ = unstructured.NestedString(u.Object, "spec", "clusterName")
	engines, _, _ := unstructured.NestedSlice(u.Object, "spec", "engines")
	for _, e := range engines {
		members, _, _ := unstructured.NestedSlice(e.(map[string]any), "members")
		for _, m := range members {
			mm := m.(map[string]any)
			pool, _ := mm["nodePoolName"].(string)
			r.Pools = append(r.Pools, pool)
			r.DeviceRequests = append(r.DeviceRequests, mm["deviceRequests"])
		}
	}
	return r
}

// replicasOf reads the deployment's ModelReplicas, sorted by name.
func (cp *controlPlane) replicasOf(t *testing.T, namespace, deployment string) []unstructured.Unstructured {
	t.Helper()
	items := harness.List(t, cp.kube, apiVersion, "ModelReplica", client.InNamespace(namespace), client.MatchingLabels{"modelplane.ai/deployment": deployment})
	slices.SortFunc(items, func(a, b unstructured.Unstructured) int { return strings.Compare(a.GetName(), b.GetName()) })
	return items
}

// uids maps the names of objects to their uids, leaving out those being
// deleted.
func uids(items []unstructured.Unstructured) map[string]string {
	m := map[string]string{}
	for _, u := range items {
		if u.GetDeletionTimestamp() == nil {
			m[u.GetName()] = string(u.GetUID())
		}
	}
	return m
}
