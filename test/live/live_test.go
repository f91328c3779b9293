// Package live runs fleet-scheduler where a platform team drops it in: real
// Crossplane core reconciling a ModelDeployment through the function, served
// over mTLS, against a real kube-apiserver and etcd, all built from Go source
// and started on loopback in namespaces of the test's own (see TestMain). It
// asserts on objects read back from the API server: what Crossplane composed,
// pruned to the XRDs' schemas, garbage-collected and requeued.
package live

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

const (
	namespace  = "ml-team"
	deployment = "qwen3-8b"

	// converge is how long Crossplane gets to act on a change it watches
	// (the XR, its composed resources).
	converge = 2 * time.Minute
	// defaultTTL is function-sdk-go's response.DefaultTTL, the longest the
	// function asks Crossplane to wait before calling it again.
	defaultTTL = time.Minute
	// ttlJitter is the most Crossplane adds to a TTL: it requeues after the
	// TTL ±10%.
	ttlJitter = defaultTTL / 10
	// margin is what a reconcile may take past its requeue time.
	margin = 15 * time.Second
)

func TestModelDeploymentOnALiveControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: the live control plane takes minutes to start")
	}
	cp := startControlPlane(t)

	xrds := filepath.Join(cp.root, "test", "schemas", "xrds") // Modelplane v0.3's
	cp.installXRDs(t,
		filepath.Join(xrds, "modeldeployments.yaml"),
		filepath.Join(xrds, "modelreplicas.yaml"),
		filepath.Join(xrds, "modelcaches.yaml"),
		filepath.Join(xrds, "inferenceclusters.yaml"),
		filepath.Join("testdata", "modelendpoints.yaml"),
	)
	cp.applyAll(t, harness.ReadObjects(t, filepath.Join(cp.root, "example", "composition.yaml")))
	fl := cp.applyFleet(t)
	xr := harness.ReadObjects(t, filepath.Join(cp.root, "example", "xr.yaml"))[0]

	// Each step starts from where the one before left the fleet.
	if !t.Run("Modelplane v0.3's InferenceCluster XRD prunes the agent's reports, so whole nodes place 3 of 4 replicas", func(t *testing.T) {
		for _, c := range harness.List(t, cp.kube, apiVersion, "InferenceCluster") {
			if got := agentFields(&c); len(got) > 0 {
				t.Errorf("the API server kept agent fields v0.3's XRD has no schema for: %v", got)
			}
			if p, ok, _ := unstructured.NestedFieldNoCopy(c.Object, "spec", "placement"); ok {
				t.Errorf("the API server kept InferenceCluster %s's spec.placement, which v0.3's XRD has no schema for: %v", c.GetName(), p)
			}
		}
		cp.apply(t, xr)
		cp.waitReplicas(t, converge, wholeNodePlacements()...)
		cp.waitXR(t, converge, xrWant{
			conditions: map[string]conditionWant{
				"ReplicasScheduled": {status: "True", reason: "ReplicasCreated", message: "Scheduled 3 of 4 replicas"},
				"ReplicasReady":     {status: "False", reason: "ModelStarting"},
				"CapacityObserved": {status: "False", reason: "WholeNodeFallback", message: "Whole-node accounting for " +
					"byo-eu-west/h100 (no observation), byo-eu-west/l4 (no observation), eks-us-east/h100 (no observation), eks-us-east/l4 (no observation), " +
					"gke-us-central/h100 (no observation), gke-us-central/l4 (no observation)"},
			},
			total: 3, ready: 0,
		})
	}) {
		return
	}
	if !t.Run("the project's extended XRD keeps the reports, so free devices place the fourth; nothing is re-created", func(t *testing.T) {
		before := uids(cp.replicasOf(t, namespace, deployment))
		// Crossplane v2.4 watches the InferenceClusters the function
		// required: it would call the function at the first report the
		// API server keeps, while the others are still pruned, and the
		// fourth replica would be placed on part of the reports. Paused
		// until every report reads back, the XR is then reconciled once,
		// on all of them.
		cp.setPaused(t, true)
		cp.installXRDs(t, filepath.Join(cp.root, "deploy", "inferenceclusters.yaml"))
		cp.waitSchemaHas(t, "inferenceclusters.modelplane.ai", "observedAt")
		cp.waitReportsKept(t, fl)
		// Unpaused, the XR is reconciled at once: the annotation's removal
		// is a change of the XR, which Crossplane watches. The placement
		// labels are back too: Crossplane updates the replicas composed
		// without them.
		cp.setPaused(t, false)
		cp.waitReplicas(t, defaultTTL+ttlJitter+margin,
			placed("eks-us-east", 0), placed("eks-us-east", 1), placed("gke-us-central", 0), placed("gke-us-central", 1))
		cp.waitXR(t, converge, xrWant{
			conditions: map[string]conditionWant{
				"ReplicasScheduled": {status: "True", reason: "ReplicasCreated", message: "Scheduled 4 of 4 replicas"},
				"CapacityObserved":  {status: "True", reason: "AllPoolsObserved"},
			},
			total: 4, ready: 0,
		})
		harness.CheckKept(t, before, uids(cp.replicasOf(t, namespace, deployment)))
	}) {
		return
	}
	if !t.Run("scaled 4 -> 6 -> 2, Crossplane creates and deletes exactly the replicas the contract says", func(t *testing.T) {
		before := uids(cp.replicasOf(t, namespace, deployment))
		cp.scale(t, 6)
		// Fill: the cluster with the fewest of this deployment's replicas,
		// ties by name, at its lowest free index.
		cp.waitReplicas(t, converge,
			placed("eks-us-east", 0), placed("eks-us-east", 1), placed("eks-us-east", 2),
			placed("gke-us-central", 0), placed("gke-us-central", 1), placed("gke-us-central", 2))
		harness.CheckKept(t, before, uids(cp.replicasOf(t, namespace, deployment)))
		cp.waitXR(t, converge, xrWant{total: 6})

		before = uids(cp.replicasOf(t, namespace, deployment))
		cp.scale(t, 2)
		// Scale down: the highest index on the most-loaded cluster first,
		// ties to the later cluster name: gke-2, eks-2, gke-1, eks-1.
		cp.waitReplicas(t, converge, placed("eks-us-east", 0), placed("gke-us-central", 0))
		harness.CheckKept(t, only(before, replicaName(deployment, "eks-us-east", 0), replicaName(deployment, "gke-us-central", 0)),
			uids(cp.replicasOf(t, namespace, deployment)))
		cp.waitXR(t, converge, xrWant{total: 2})
	}) {
		return
	}
	if !t.Run("every replica labelled, calls go narrow; a stale report sends them back to the whole fleet", func(t *testing.T) {
		cp.narrowCalls(t, fl)
	}) {
		return
	}
	if !t.Run("an agent report ages past observationMaxAge with no other change: CapacityObserved turns False on the response TTL", func(t *testing.T) {
		// Longer from now than the longest TTL, so that the function
		// sees the report fresh at least once and sets the TTL by it.
		now := time.Now()
		staleAt := now.Add(defaultTTL + ttlJitter + 20*time.Second).Truncate(time.Second)
		clusters := asOf(t, fl.clusters, now)
		for _, c := range clusters {
			if c.GetName() == "eks-us-east" {
				setObservedAt(t, c, "l4", staleAt.Add(-observationMaxAge))
			}
		}
		cp.applyAll(t, clusters)
		before := uids(cp.replicasOf(t, namespace, deployment))

		// Crossplane calls the function again within defaultTTL (+10%)
		// of its last call, before staleAt; from then on the function
		// asks to be called when the report goes stale (+10%: at most
		// ttlJitter late). Polling alone, every minute, would be up to a
		// minute late.
		deadline := staleAt.Add(ttlJitter + margin)
		var x *unstructured.Unstructured
		eventually(t, time.Until(deadline), "CapacityObserved False", func() error {
			x = cp.xr(t)
			if s := conditionStatus(x, "CapacityObserved"); s != "False" {
				return fmt.Errorf("CapacityObserved is %q: %s", s, conditionMessage(x, "CapacityObserved"))
			}
			return nil
		})
		seen := time.Now()
		t.Logf("CapacityObserved turned False %s after the report went stale (lastTransitionTime %s after)", seen.Sub(staleAt).Round(time.Second), transitionTime(t, x, "CapacityObserved").Sub(staleAt))
		if got, want := conditionMessage(x, "CapacityObserved"), "Whole-node accounting for eks-us-east/l4 (observation stale for "; !strings.HasPrefix(got, want) {
			t.Errorf("CapacityObserved message: want a prefix %q, got %q", want, got)
		}
		if lt := transitionTime(t, x, "CapacityObserved"); lt.Before(staleAt) {
			t.Errorf("CapacityObserved turned False at %s, before the report went stale at %s", lt, staleAt)
		}
		// Retention ignores capacity: the pool's fallback moves nothing.
		harness.CheckKept(t, before, uids(cp.replicasOf(t, namespace, deployment)))
	}) {
		return
	}
	if !t.Run("a ModelReplica turns Ready: its ModelEndpoint appears", func(t *testing.T) {
		cp.setReady(t, replicaName(deployment, "eks-us-east", 0))
		cp.waitEndpoints(t, converge, endpoint("eks-us-east", 0, "k8s-gateway-envoy-3f9c2a71d4-1187402939.elb.us-east-1.amazonaws.com"))
		cp.waitXR(t, converge, xrWant{total: 2, ready: 1})
	}) {
		return
	}
	t.Run("the function restarts: the reconcile that waited for it resumes, nothing is deleted", func(t *testing.T) {
		before := cp.composedUIDs(t)
		cp.stopFunction(t)
		// A change the XR watches, made while the function is down:
		// Crossplane's call waits for the function (gRPC waitForReady),
		// up to the XR reconcile's timeout (2m in Crossplane v2.3 and v2.4).
		cp.setReady(t, replicaName(deployment, "gke-us-central", 0))
		time.Sleep(10 * time.Second)
		if got := cp.composedUIDs(t); len(got) != len(before) {
			t.Errorf("while the function was down the composed resources changed: before %v, then %v", before, got)
		}
		harness.CheckKept(t, before, cp.composedUIDs(t))

		started := time.Now()
		cp.startFunction(t)
		cp.waitEndpoints(t, converge,
			endpoint("eks-us-east", 0, "k8s-gateway-envoy-3f9c2a71d4-1187402939.elb.us-east-1.amazonaws.com"),
			endpoint("gke-us-central", 0, "gw.gke-us-central.fleet.example.com"))
		t.Logf("the ModelEndpoint of the replica that turned Ready while the function was down appeared %s after it started again", time.Since(started).Round(100*time.Millisecond))
		cp.waitXR(t, converge, xrWant{conditions: map[string]conditionWant{"Synced": {status: "True"}}, total: 2, ready: 2})
		harness.CheckKept(t, before, cp.composedUIDs(t))
	})
}

// applyFleet creates the namespaces of example/observed and applies its
// InferenceClusters and other teams' ModelReplicas, their reports as of now.
func (cp *controlPlane) applyFleet(t *testing.T) fleet {
	t.Helper()
	for _, ns := range []string{namespace, "search", "research"} {
		cp.apply(t, harness.Object("v1", "Namespace", "", ns))
	}
	fl := readFleet(t, cp.root)
	cp.applyAll(t, asOf(t, fl.clusters, time.Now()))
	cp.applyAll(t, asOf(t, fl.replicas, time.Now()))
	return fl
}

// waitReportsKept writes the agents' reports again, as they do every
// report, until the API server keeps them all: it serves a changed CRD's
// new schema a moment after the CRD says it, and until then prunes a write
// as before.
func (cp *controlPlane) waitReportsKept(t *testing.T, fl fleet) {
	t.Helper()
	eventually(t, time.Minute, "the agents' reports kept by the API server", func() error {
		cp.applyAll(t, asOf(t, fl.clusters, time.Now()))
		for _, c := range harness.List(t, cp.kube, apiVersion, "InferenceCluster") {
			if got := agentFields(&c); len(got) != 3*pools(&c) {
				return fmt.Errorf("InferenceCluster %s read back with agent fields %v, want all three on every pool", c.GetName(), got)
			}
			if _, ok, _ := unstructured.NestedFieldNoCopy(c.Object, "spec", "placement"); !ok && c.GetName() == "gke-us-central" {
				return fmt.Errorf("InferenceCluster %s read back without spec.placement", c.GetName())
			}
		}
		return nil
	})
}

// only returns the entries of uids with the names given.
func only(uids map[string]string, names ...string) map[string]string {
	m := map[string]string{}
	for _, n := range names {
		if uid, ok := uids[n]; ok {
			m[n] = uid
		}
	}
	return m
}

// scale sets the ModelDeployment's replicas through its scale subresource,
// as `kubectl scale` and autoscalers do.
func (cp *controlPlane) scale(t *testing.T, replicas int) {
	t.Helper()
	xr := harness.Object(apiVersion, "ModelDeployment", namespace, deployment)
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	if err := cp.kube.SubResource("scale").Patch(t.Context(), xr, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("cannot scale ModelDeployment %s/%s to %d: %v", namespace, deployment, replicas, err)
	}
}

// setReady sets a ModelReplica's Ready condition True, as Modelplane does
// once the replica serves.
func (cp *controlPlane) setReady(t *testing.T, name string) {
	t.Helper()
	u := harness.Object(apiVersion, "ModelReplica", namespace, name)
	cp.applyStatus(t, u, map[string]any{"conditions": []any{map[string]any{
		"type": "Ready", "status": "True", "reason": "Available",
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	}}})
}

// setPaused pauses the XR with Crossplane's pause annotation, and waits
// until Crossplane says so (its Synced condition's reason
// ReconcilePaused), or resumes it.
func (cp *controlPlane) setPaused(t *testing.T, paused bool) {
	t.Helper()
	value := "null"
	if paused {
		value = `"true"`
	}
	xr := harness.Object(apiVersion, "ModelDeployment", namespace, deployment)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"crossplane.io/paused":%s}}}`, value)
	if err := cp.kube.Patch(t.Context(), xr, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("cannot set ModelDeployment %s/%s paused to %t: %v", namespace, deployment, paused, err)
	}
	if !paused {
		return
	}
	eventually(t, converge, "ModelDeployment "+namespace+"/"+deployment+" paused", func() error {
		x := cp.xr(t)
		if reason, _ := harness.Condition(x, "Synced")["reason"].(string); reason != "ReconcilePaused" {
			return fmt.Errorf("its Synced condition's reason is %q", reason)
		}
		return nil
	})
}

func (cp *controlPlane) xr(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	return harness.Get(t, cp.kube, apiVersion, "ModelDeployment", namespace, deployment)
}

// composedUIDs returns the uids of the deployment's ModelReplicas and
// ModelEndpoints, by kind and name.
func (cp *controlPlane) composedUIDs(t *testing.T) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, kind := range []string{"ModelReplica", "ModelEndpoint"} {
		for _, u := range harness.List(t, cp.kube, apiVersion, kind, client.InNamespace(namespace)) {
			if u.GetDeletionTimestamp() != nil {
				continue // being deleted: not kept
			}
			m[kind+"/"+u.GetName()] = string(u.GetUID())
		}
	}
	return m
}

// waitReplicas waits until the deployment's ModelReplicas are exactly want.
func (cp *controlPlane) waitReplicas(t *testing.T, timeout time.Duration, want ...replica) time.Duration {
	t.Helper()
	return eventually(t, timeout, fmt.Sprintf("%d ModelReplicas of %s", len(want), deployment), func() error {
		var got []replica
		for _, u := range cp.replicasOf(t, namespace, deployment) {
			got = append(got, viewReplica(u))
		}
		if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b replica) bool { return a.Name < b.Name })); diff != "" {
			return fmt.Errorf("ModelReplicas: -want, +got:\n%s", diff)
		}
		return nil
	})
}

// endpointView is what the test checks of a ModelEndpoint.
type endpointView struct {
	Name, URL, RewritePath string
	Labels                 map[string]string
}

// endpoint is the ModelEndpoint of qwen3-8b's replica at (cluster, index),
// routed through the cluster's gateway host (docs/spec.md#composed-modelendpoints),
// labelled as the replica but for the counted label, a replica's alone.
func endpoint(cluster string, index int, host string) endpointView {
	name := replicaName(deployment, cluster, index)
	path := "/" + namespace + "/" + name + "/"
	labels := placed(cluster, index).Labels
	delete(labels, labelCounted)
	return endpointView{Name: name, URL: "http://" + host + path + "v1", RewritePath: path, Labels: labels}
}

// waitEndpoints waits until the deployment's ModelEndpoints are exactly want.
func (cp *controlPlane) waitEndpoints(t *testing.T, timeout time.Duration, want ...endpointView) time.Duration {
	t.Helper()
	return eventually(t, timeout, fmt.Sprintf("%d ModelEndpoints", len(want)), func() error {
		var got []endpointView
		for _, u := range harness.List(t, cp.kube, apiVersion, "ModelEndpoint", client.InNamespace(namespace), client.MatchingLabels{"modelplane.ai/deployment": deployment}) {
			e := endpointView{Name: u.GetName(), Labels: map[string]string{}}
			e.URL, _, _ = unstructured.NestedString(u.Object, "spec", "url")
			e.RewritePath, _, _ = unstructured.NestedString(u.Object, "spec", "rewritePath")
			for k, v := range u.GetLabels() {
				if !strings.HasPrefix(k, "crossplane.io/") {
					e.Labels[k] = v
				}
			}
			got = append(got, e)
		}
		if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b endpointView) bool { return a.Name < b.Name })); diff != "" {
			return fmt.Errorf("ModelEndpoints: -want, +got:\n%s", diff)
		}
		return nil
	})
}

// conditionWant is what a condition must be; an empty reason or message is
// not checked, and a message is a prefix.
type conditionWant struct{ status, reason, message string }

// xrWant is what the XR's status must be.
type xrWant struct {
	conditions   map[string]conditionWant
	total, ready int64
}

// waitXR waits until the XR's status, read back from the API server, is as
// wanted: what survived the XRD's schema.
func (cp *controlPlane) waitXR(t *testing.T, timeout time.Duration, want xrWant) {
	t.Helper()
	eventually(t, timeout, "the ModelDeployment's status", func() error {
		x := cp.xr(t)
		var problems []string
		for typ, w := range want.conditions {
			c := harness.Condition(x, typ)
			if c == nil {
				problems = append(problems, typ+" absent")
				continue
			}
			if c["status"] != w.status || (w.reason != "" && c["reason"] != w.reason) || !strings.HasPrefix(fmt.Sprint(c["message"]), w.message) {
				problems = append(problems, fmt.Sprintf("%s: want %s %s %q..., got %v %v %q", typ, w.status, w.reason, w.message, c["status"], c["reason"], c["message"]))
			}
		}
		total, okT, _ := unstructured.NestedInt64(x.Object, "status", "replicas", "total")
		ready, okR, _ := unstructured.NestedInt64(x.Object, "status", "replicas", "ready")
		if !okT || !okR || total != want.total || ready != want.ready {
			got, _, _ := unstructured.NestedFieldNoCopy(x.Object, "status", "replicas")
			problems = append(problems, fmt.Sprintf("status.replicas: want total %d, ready %d; got %v", want.total, want.ready, got))
		}
		if len(problems) > 0 {
			return fmt.Errorf("%s", strings.Join(problems, "; "))
		}
		return nil
	})
}

func transitionTime(t *testing.T, u *unstructured.Unstructured, typ string) time.Time {
	t.Helper()
	s, _ := harness.Condition(u, typ)["lastTransitionTime"].(string)
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("%s lastTransitionTime %q: %v", typ, s, err)
	}
	return at
}
