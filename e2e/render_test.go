package e2e

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Names the cases below use again and again.
const (
	eksUSEast    = "eks-us-east"
	gkeUSCentral = "gke-us-central"
	solo         = "solo"
	poolL4       = "l4"
	poolH100     = "h100"

	statusTrue  = "True"
	statusFalse = "False"

	condReplicasScheduled = "ReplicasScheduled"
	condReplicasReady     = "ReplicasReady"
	condCapacityObserved  = "CapacityObserved"

	reasonScheduling           = "Scheduling"
	reasonInsufficientCapacity = "InsufficientCapacity"
	reasonModelStarting        = "ModelStarting"
	reasonNoReplicasScheduled  = "NoReplicasScheduled"
	reasonReplicasCreated      = "ReplicasCreated"
)

// id is a replica's identity: its cluster and its index there.
type id struct {
	cluster string
	index   int
}

func (i id) String() string { return i.cluster + "-" + strconv.Itoa(i.index) }

// wantReplica is a ModelReplica a render must compose.
type wantReplica struct {
	id

	// pools are the nodePoolName of each member, engine by engine.
	pools map[string][]string
}

// wantCondition is an XR condition a render must set.
type wantCondition struct {
	status string
	// reasons the condition may carry; any one of them will do. Empty
	// accepts any.
	reasons []string
	// message holds substrings the message must contain, ignoring case.
	message []string
}

// TestRender renders each fixture with the real crossplane CLI and checks the
// composed ModelReplicas and ModelEndpoints, and the XR's status, against
// docs/spec.md#placement. The expected placements are worked out by hand from the
// contract's rules; each case says how.
func TestRender(t *testing.T) {
	l4 := func(n string) map[string][]string { return map[string][]string{n: {"l4"}} }

	cases := map[string]struct {
		reason   string
		fixture  string
		replicas []wantReplica
		// ready is status.replicas.ready.
		ready int64
		// counted are the replicas labelled counted; every other one is
		// labelled not counted (docs/spec.md#narrow-requests).
		counted []id
		// endpoints are the replicas that get a ModelEndpoint.
		endpoints  []id
		conditions map[string]wantCondition
		// warnings each hold substrings one warning result must contain,
		// ignoring case.
		warnings [][]string
		// wholeNode says no pool has a usable observation, so that no pool
		// may end with more claiming pods charged than it has nodes
		// (docs/spec.md#whole-node-accounting), unless only retained replicas put them there.
		wholeNode bool
	}{
		"Example": {
			reason: "With no observations every claiming pod takes a whole L4 node. " +
				"byo-eu-west's NoSchedule taint is not tolerated. embed-bge-m3 holds one node of " +
				"eks-us-east (2) and gke-us-central (3), leaving 1 and 2. Spread-first fill, ties by " +
				"name: eks-us-east 0, gke-us-central 0, then eks-us-east is full, gke-us-central 1. " +
				"The fourth replica fits nowhere.",
			fixture: "example",
			replicas: []wantReplica{
				{id{eksUSEast, 0}, l4("qwen3-8b")},
				{id{gkeUSCentral, 0}, l4("qwen3-8b")},
				{id{gkeUSCentral, 1}, l4("qwen3-8b")},
			},
			conditions: map[string]wantCondition{
				condReplicasScheduled: {status: statusFalse, reasons: []string{reasonInsufficientCapacity, reasonScheduling}, message: []string{"taint"}},
				condReplicasReady:     {status: statusFalse, reasons: []string{reasonModelStarting}},
				condCapacityObserved:  {status: statusFalse, message: []string{gkeUSCentral, eksUSEast, "byo-eu-west", poolL4, poolH100}},
			},
			wholeNode: true,
		},
		"ExampleObserved": {
			reason: "The same fleet with fresh agent reports: eks-us-east has 7 free L4s and " +
				"gke-us-central 11, one per replica, so all four fit, spread two and two. " +
				"embed-bge-m3's pods were scheduled before the observations, so are not charged again.",
			fixture: "example/observed",
			replicas: []wantReplica{
				{id{eksUSEast, 0}, l4("qwen3-8b")},
				{id{eksUSEast, 1}, l4("qwen3-8b")},
				{id{gkeUSCentral, 0}, l4("qwen3-8b")},
				{id{gkeUSCentral, 1}, l4("qwen3-8b")},
			},
			conditions: map[string]wantCondition{
				condReplicasScheduled: {status: statusFalse, reasons: []string{reasonScheduling}},
				condReplicasReady:     {status: statusFalse, reasons: []string{reasonModelStarting}},
				condCapacityObserved:  {status: statusTrue},
			},
		},
		"SingleClusterFirstPoolThatFits": {
			reason: "Each replica takes the lowest free index on the only cluster, and its engine " +
				"the first pool in published order with a node left: l4 twice, then h100.",
			fixture: "e2e/testdata/single-cluster",
			replicas: []wantReplica{
				{id{solo, 0}, map[string][]string{"engine": {poolL4}}},
				{id{solo, 1}, map[string][]string{"engine": {poolL4}}},
				{id{solo, 2}, map[string][]string{"engine": {poolH100}}},
			},
			conditions: map[string]wantCondition{
				condReplicasScheduled: {status: statusFalse, reasons: []string{reasonScheduling}},
				condReplicasReady:     {status: statusFalse, reasons: []string{reasonModelStarting}},
				condCapacityObserved:  {status: statusFalse, message: []string{solo, poolL4, poolH100}},
			},
			wholeNode: true,
		},
		"NotReadyAndGatewaylessClustersTakeNoNewReplicas": {
			reason: "bravo is not Ready and charlie has no gateway, so only alpha's two L4 nodes " +
				"take new replicas; the third replica fits nowhere, and the message says why per cluster.",
			fixture: "e2e/testdata/not-ready",
			replicas: []wantReplica{
				{id{"alpha", 0}, l4("engine")},
				{id{"alpha", 1}, l4("engine")},
			},
			conditions: map[string]wantCondition{
				condReplicasScheduled: {status: statusFalse, reasons: []string{reasonInsufficientCapacity, reasonScheduling}, message: []string{"ready", "gateway"}},
				condReplicasReady:     {status: statusFalse, reasons: []string{reasonModelStarting}},
			},
			wholeNode: true,
		},
		"RetainExistingReplica": {
			reason: "qwen3-8b's replica on bravo keeps index 1 and, being Ready, gets its endpoint " +
				"at bravo's gateway address. The other namespace's qwen3-8b on alpha is not ours, only " +
				"charged: alpha has 1 L4 node left. Fill: alpha 0 (alpha has fewest), then alpha and " +
				"bravo tie at 1 but alpha is full, so bravo's lowest free index, 0.",
			fixture: "e2e/testdata/retain",
			replicas: []wantReplica{
				{id{"alpha", 0}, l4("engine")},
				{id{"bravo", 0}, l4("engine")},
				{id{"bravo", 1}, l4("engine")},
			},
			ready:     1,
			endpoints: []id{{"bravo", 1}},
			conditions: map[string]wantCondition{
				condReplicasScheduled: {status: statusTrue, reasons: []string{"ReplicasCreated"}},
				condReplicasReady:     {status: statusFalse, reasons: []string{reasonModelStarting}},
			},
			wholeNode: true,
		},
		"MalformedClusterDoesNotStopTheFleet": {
			reason: "alpha's Ready status is a boolean: alpha does not read. The call is not Fatal: a Warning names alpha " +
				"and the field, CapacityObserved names it, qwen3-8b's Ready replica on it stays as observed (index 0), and the " +
				"second replica goes to bravo.",
			fixture: "e2e/testdata/malformed-cluster",
			replicas: []wantReplica{
				{id{"alpha", 0}, l4("engine")},
				{id{"bravo", 0}, l4("engine")},
			},
			ready: 1,
			conditions: map[string]wantCondition{
				condReplicasScheduled: {status: statusTrue, reasons: []string{"ReplicasCreated"}},
				condReplicasReady:     {status: statusFalse, reasons: []string{reasonModelStarting}},
				condCapacityObserved:  {status: statusFalse, message: []string{"alpha (does not read: status.conditions[0].status"}},
			},
			warnings:  [][]string{{"cannot read InferenceCluster alpha", "status.conditions[0].status: cannot use a boolean as a string"}},
			wholeNode: true,
		},
		"StuckReplicaIsReplaced": {
			reason: "llama-70b's replica on alpha has waited 20m for a node with 8 free H100s, over the 15m default: it is re-placed " +
				"on bravo, whose node is free, and dropped from alpha in the same response; a Warning says from where, to where " +
				"and for how long, and ReplicasScheduled counts the replica waiting.",
			fixture:  "e2e/testdata/stuck-replica",
			replicas: []wantReplica{{id{"bravo", 0}, map[string][]string{"engine": {poolH100}}}},
			conditions: map[string]wantCondition{
				condReplicasScheduled: {status: statusFalse, reasons: []string{reasonScheduling}, message: []string{"1 replica waits for its pods"}},
				condCapacityObserved:  {status: statusTrue},
			},
			warnings: [][]string{{"Re-placed ModelReplica ml-team/llama-70b-edca6 on another cluster", "unscheduled for 20m", "on alpha/h100; now on bravo/h100"}},
		},
		"ReplacementKeptWhileTheStuckReplicaIsDeleted": {
			reason: "The next call: the stuck replica is still in the fleet, being deleted, so it is charged (alpha's node stays full) " +
				"but is not llama-70b's; its replacement on bravo is kept with its memory of the move, and nothing moves.",
			fixture:  "e2e/testdata/stuck-replica-next",
			replicas: []wantReplica{{id{"bravo", 0}, map[string][]string{"engine": {poolH100}}}},
			conditions: map[string]wantCondition{
				condReplicasScheduled: {status: statusTrue, reasons: []string{"ReplicasCreated"}, message: []string{"1 replica waits for its pods"}},
				condCapacityObserved:  {status: statusTrue},
			},
		},
		"TaintsAndTolerations": {
			reason: "alpha's untolerated NoExecute taint evicts qwen3-8b's replica there and takes " +
				"no new one; charlie's NoSchedule taint is not tolerated; bravo's is. Both " +
				"replicas go to bravo, at indexes 0 and 1.",
			fixture: "e2e/testdata/taints",
			replicas: []wantReplica{
				{id{"bravo", 0}, l4("engine")},
				{id{"bravo", 1}, l4("engine")},
			},
			conditions: map[string]wantCondition{
				condReplicasScheduled: {status: statusFalse, reasons: []string{reasonScheduling}},
				condReplicasReady:     {status: statusFalse, reasons: []string{reasonModelStarting}},
			},
			wholeNode: true,
		},
		"EndpointsForReadyReplicas": {
			reason: "All three replicas are retained. The two Ready ones get endpoints, at gke's " +
				"gateway hostname (not its address) and at eks's address; gke's second, not " +
				"Ready, gets none.",
			fixture: "e2e/testdata/endpoints",
			replicas: []wantReplica{
				{id{"eks", 0}, l4("engine")},
				{id{"gke", 0}, l4("engine")},
				{id{"gke", 1}, l4("engine")},
			},
			ready:     2,
			endpoints: []id{{"eks", 0}, {"gke", 0}},
			conditions: map[string]wantCondition{
				condReplicasScheduled: {status: statusTrue, reasons: []string{"ReplicasCreated"}},
				condReplicasReady:     {status: statusFalse, reasons: []string{reasonModelStarting}},
			},
		},
		"ScaleDownMostLoadedClusterFirst": {
			reason: "Five replicas, three wanted: alpha and bravo tie at two, so the later name's " +
				"highest index, bravo 1, goes first; then alpha, now the most loaded, loses index 1.",
			fixture: "e2e/testdata/scale-down",
			replicas: []wantReplica{
				{id{"alpha", 0}, l4("engine")},
				{id{"bravo", 0}, l4("engine")},
				{id{"charlie", 0}, l4("engine")},
			},
			ready:     3,
			endpoints: []id{{"alpha", 0}, {"bravo", 0}, {"charlie", 0}},
			conditions: map[string]wantCondition{
				condReplicasScheduled: {status: statusTrue, reasons: []string{"ReplicasCreated"}},
				condReplicasReady:     {status: statusTrue, reasons: []string{"AllReplicasReady"}},
			},
		},
		"ModelCacheNarrowsClusters": {
			reason:  "The ModelCache stages only to us-east: both replicas go to east-1, though west-1 has more room.",
			fixture: "e2e/testdata/cache",
			replicas: []wantReplica{
				{id{"east-1", 0}, l4("engine")},
				{id{"east-1", 1}, l4("engine")},
			},
			conditions: map[string]wantCondition{
				"ModelCacheResolved":  {status: statusTrue},
				condReplicasScheduled: {status: statusFalse, reasons: []string{reasonScheduling}},
			},
			wholeNode: true,
		},
		"MissingModelCachePlacesNothing": {
			reason:   "The referenced ModelCache does not exist: no new replica is placed.",
			fixture:  "e2e/testdata/cache-missing",
			replicas: nil,
			conditions: map[string]wantCondition{
				"ModelCacheResolved":  {status: statusFalse, message: []string{"llama-8b-weights"}},
				condReplicasScheduled: {status: statusFalse},
				condReplicasReady:     {status: statusFalse, reasons: []string{reasonNoReplicasScheduled}},
			},
		},
		"StaleObservationFallsBackToWholeNodes": {
			reason: "solo's l4 pool was observed 20 minutes ago, over the 5m default: whole-node " +
				"accounting, two nodes, two replicas.",
			fixture: "e2e/testdata/stale-observation",
			replicas: []wantReplica{
				{id{solo, 0}, l4("engine")},
				{id{solo, 1}, l4("engine")},
			},
			conditions: map[string]wantCondition{
				condCapacityObserved:  {status: statusFalse, message: []string{solo, poolL4, "stale"}},
				condReplicasScheduled: {status: statusFalse, reasons: []string{reasonInsufficientCapacity, reasonScheduling}},
			},
			wholeNode: true,
		},
		"FreshObservationCountsFreeDevices": {
			reason:  "The same pool observed 30s ago: eight free L4s take all three one-GPU replicas.",
			fixture: "e2e/testdata/fresh-observation",
			replicas: []wantReplica{
				{id{solo, 0}, l4("engine")},
				{id{solo, 1}, l4("engine")},
				{id{solo, 2}, l4("engine")},
			},
			conditions: map[string]wantCondition{
				condCapacityObserved:  {status: statusTrue},
				condReplicasScheduled: {status: statusFalse, reasons: []string{reasonScheduling}},
			},
		},
		"LowerCaseObservedAtIsUsable": {
			reason:  "The fresh observation written 2026-10-20t20:05:30z (RFC 3339 allows lower case) is as usable: the same three replicas.",
			fixture: "e2e/testdata/lowercase-observation",
			replicas: []wantReplica{
				{id{solo, 0}, l4("engine")},
				{id{solo, 1}, l4("engine")},
				{id{solo, 2}, l4("engine")},
			},
			conditions: map[string]wantCondition{
				condCapacityObserved:  {status: statusTrue},
				condReplicasScheduled: {status: statusFalse, reasons: []string{reasonScheduling}},
			},
		},
		"PodsScheduledBeforeObservationAreNotChargedAgain": {
			reason: "llama-70b's pods were scheduled before solo's h100 pool was observed, so the " +
				"histogram's 4 free GPUs already exclude them: the four-GPU replica fits.",
			fixture: "e2e/testdata/pods-counted",
			replicas: []wantReplica{
				{id{solo, 0}, map[string][]string{"engine": {poolH100}}},
			},
			conditions: map[string]wantCondition{
				condCapacityObserved: {status: statusTrue},
			},
		},
		"RetainedReplicaCountedByTheReport": {
			reason: "qwen3-32b's own replica holds 4 of solo's 8 H100s, its pods scheduled before the " +
				"report: it is kept and labelled counted, though it was composed labelled not counted. " +
				"The second replica fits the 4 free GPUs, and is new: not counted.",
			fixture: "e2e/testdata/retained-counted",
			replicas: []wantReplica{
				{id{solo, 0}, map[string][]string{"engine": {poolH100}}},
				{id{solo, 1}, map[string][]string{"engine": {poolH100}}},
			},
			counted:   []id{{solo, 0}},
			ready:     1,
			endpoints: []id{{solo, 0}},
			conditions: map[string]wantCondition{
				condCapacityObserved:  {status: statusTrue},
				condReplicasScheduled: {status: statusTrue, reasons: []string{reasonReplicasCreated}},
			},
		},
		"GangFitsOnTwoNodes": {
			reason: "The Leader and the Worker each claim 4 GPUs, and each of the pool's two nodes " +
				"has 4 free: one node each, both members pinned to h100.",
			fixture: "e2e/testdata/gang-fits-on-two-nodes",
			replicas: []wantReplica{
				{id{solo, 0}, map[string][]string{"gang": {poolH100, poolH100}}},
			},
			conditions: map[string]wantCondition{
				condCapacityObserved:  {status: statusTrue},
				"ModelCacheResolved":  {status: statusTrue},
				condReplicasScheduled: {status: statusFalse, reasons: []string{reasonScheduling}},
			},
		},
		"SteeredPoolPacks": {
			reason: "The h100 pool's nodes have 8 and 4 GPUs free, and its report says binding Steered: " +
				"accounted with best fit whatever the function assumes (MostFree by default), the " +
				"4-GPU prefill takes the node with 4 free and the 8-GPU decode the node with 8. " +
				"Under MostFree alone the prefill would take the node with 8, and nothing would fit.",
			fixture: "e2e/testdata/steered-pool-packs",
			replicas: []wantReplica{
				{id{solo, 0}, map[string][]string{"prefill": {poolH100}, "decode": {poolH100}}},
			},
			conditions: map[string]wantCondition{
				condCapacityObserved:  {status: statusTrue},
				condReplicasScheduled: {status: statusFalse, reasons: []string{reasonScheduling}},
			},
		},
		"GangNeedsDistinctNodes": {
			reason: "One schedulable node with 8 free GPUs would hold both pods' 4, but a gang's " +
				"claiming pods take distinct nodes: the gang does not fit.",
			fixture:  "e2e/testdata/gang-needs-distinct-nodes",
			replicas: nil,
			conditions: map[string]wantCondition{
				condCapacityObserved:  {status: statusTrue},
				condReplicasScheduled: {status: statusFalse, reasons: []string{reasonInsufficientCapacity}, message: []string{poolH100}},
				condReplicasReady:     {status: statusFalse, reasons: []string{reasonNoReplicasScheduled}},
			},
		},
		"InvalidObservationFallsBackWithAWarning": {
			reason: "9 free GPUs on nodes of 8 is invalid: the h100 pool is counted in whole " +
				"nodes, two nodes for two of the three four-GPU replicas, and a warning names " +
				"the cluster and the pool.",
			fixture: "e2e/testdata/invalid-observation",
			replicas: []wantReplica{
				{id{solo, 0}, map[string][]string{"engine": {poolH100}}},
				{id{solo, 1}, map[string][]string{"engine": {poolH100}}},
			},
			conditions: map[string]wantCondition{
				condCapacityObserved:  {status: statusFalse, message: []string{solo, poolH100, "invalid"}},
				condReplicasScheduled: {status: statusFalse, reasons: []string{reasonInsufficientCapacity, reasonScheduling}},
			},
			warnings:  [][]string{{solo, poolH100}},
			wholeNode: true,
		},
		"NodeSelectorTypoSaysWhat": {
			reason: "productname for productName: no pool matches, and a warning names the selector, " +
				"the runtime error, the spelling the devices publish and the products the pools offer.",
			fixture: "e2e/testdata/selector-typo",
			conditions: map[string]wantCondition{
				condReplicasScheduled: {status: statusFalse, reasons: []string{reasonInsufficientCapacity}, message: []string{"engine main: no pool matches the nodeSelector"}},
			},
			warnings: [][]string{{
				"engine main member 0 (Standalone) request gpu matches no pool of solo",
				`selector #0 "device.attributes[\"gpu.nvidia.com\"].productname`,
				"no such key: productname",
				`it uses "productname", the devices publish productName`,
				`the devices' productName: "NVIDIA H100 80GB HBM3"`,
			}},
		},
		"ClusterSelectorTypoEchoed": {
			reason:  "A clusterSelector label value with a typo selects no cluster: NoClusters echoes the selector.",
			fixture: "e2e/testdata/cluster-selector-typo",
			conditions: map[string]wantCondition{
				condReplicasScheduled: {status: statusFalse, reasons: []string{"NoClusters"}, message: []string{"No InferenceCluster has every label of clusterSelector.matchLabels {region=eu-wset}"}},
			},
			warnings: [][]string{{"No InferenceClusters found"}},
		},
		"PodsScheduledAfterObservationAreCharged": {
			reason: "llama-70b's pods were scheduled after the observation, so the ledger charges " +
				"its 4 GPUs against the histogram's 4 free: the four-GPU replica does not fit.",
			fixture:  "e2e/testdata/pods-scheduled-after-observation",
			replicas: nil,
			conditions: map[string]wantCondition{
				condCapacityObserved:  {status: statusTrue},
				condReplicasScheduled: {status: statusFalse, reasons: []string{reasonInsufficientCapacity}},
				condReplicasReady:     {status: statusFalse, reasons: []string{reasonNoReplicasScheduled}},
			},
		},
	}

	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if skip != "" {
				t.Skip(skip)
			}
			in := readInputs(t, tc.fixture)
			out := render(t, tc.fixture)
			t.Logf("%s\n%s", tc.reason, out.raw)

			checkComposedKeys(t, tc.replicas, tc.endpoints, out)
			for _, w := range tc.replicas {
				if r, ok := out.composed["replica-"+w.String()]; ok {
					checkReplica(t, in, w, r)
					want := strconv.FormatBool(slices.Contains(tc.counted, w.id))
					if got := r.GetLabels()[labelCounted]; got != want {
						t.Errorf("replica-%s: label %s: want %q, got %q", w.String(), labelCounted, want, got)
					}
				}
			}
			for _, e := range tc.endpoints {
				if ep, ok := out.composed["endpoint-"+e.String()]; ok {
					checkEndpoint(t, in, e, ep)
				}
			}
			checkStatus(t, out.xr, int64(len(tc.replicas)), tc.ready)
			for _, typ := range sortedKeys(tc.conditions) {
				checkCondition(t, out.xr, typ, tc.conditions[typ])
			}
			for _, w := range tc.warnings {
				checkWarning(t, out.results, w)
			}
			if tc.wholeNode {
				checkWholeNodeCapacity(t, in, out)
			}
		})
	}
}

// checkComposedKeys checks that exactly the wanted replicas and endpoints are
// composed, under their keys (docs/spec.md#composed-modelreplicas).
func checkComposedKeys(t *testing.T, replicas []wantReplica, endpoints []id, out rendered) {
	t.Helper()
	want := make([]string, 0, len(replicas)+len(endpoints))
	for _, r := range replicas {
		want = append(want, "replica-"+r.String())
	}
	for _, e := range endpoints {
		want = append(want, "endpoint-"+e.String())
	}
	slices.Sort(want)
	got := sortedKeys(out.composed)
	if !slices.Equal(want, got) {
		t.Errorf("composed resources: want %v, got %v", want, got)
	}
	for key, u := range out.composed {
		kind := "ModelReplica"
		if strings.HasPrefix(key, "endpoint-") {
			kind = "ModelEndpoint"
		}
		if u.GetAPIVersion() != "modelplane.ai/v1alpha1" || u.GetKind() != kind {
			t.Errorf("%s: want modelplane.ai/v1alpha1 %s, got %s %s", key, kind, u.GetAPIVersion(), u.GetKind())
		}
	}
}

// wantLabels are the labels (docs/spec.md#composed-modelreplicas) of a replica and its endpoint:
// the template's, the cluster's placement labels, then the managed ones.
func wantLabels(in inputs, w id) map[string]string {
	l := map[string]string{}
	tmpl, _, _ := unstructured.NestedStringMap(in.xr.Object, "spec", "template", "metadata", "labels")
	maps.Copy(l, tmpl)
	if c, ok := in.clusters[w.cluster]; ok {
		pl, _, _ := unstructured.NestedStringMap(c.Object, "spec", "placement", "metadata", "labels")
		maps.Copy(l, pl)
	}
	l[labelDeployment] = in.xr.GetName()
	l[labelCluster] = w.cluster
	l[labelIndex] = strconv.Itoa(w.index)
	return l
}

func checkLabels(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	for _, k := range sortedKeys(want) {
		if got[k] != want[k] {
			t.Errorf("%s: label %s: want %q, got %q", what, k, want[k], got[k])
		}
	}
}

// checkReplica checks one composed ModelReplica against docs/spec.md#composed-modelreplicas.
func checkReplica(t *testing.T, in inputs, w wantReplica, r *unstructured.Unstructured) {
	t.Helper()
	what := "replica-" + w.String()
	if want := replicaName(in.xr.GetName(), w.cluster, w.index); r.GetName() != want {
		t.Errorf("%s: metadata.name: want %s, got %s", what, want, r.GetName())
	}
	if r.GetNamespace() != in.xr.GetNamespace() {
		t.Errorf("%s: metadata.namespace: want %s, got %s", what, in.xr.GetNamespace(), r.GetNamespace())
	}
	checkLabels(t, what, wantLabels(in, w.id), r.GetLabels())

	if got, _, _ := unstructured.NestedString(r.Object, "spec", "clusterName"); got != w.cluster {
		t.Errorf("%s: spec.clusterName: want %s, got %s", what, w.cluster, got)
	}
	wantCache, _, _ := unstructured.NestedString(in.xr.Object, "spec", "template", "spec", "modelCacheRef", "name")
	if got, _, _ := unstructured.NestedString(r.Object, "spec", "modelCacheRef", "name"); got != wantCache {
		t.Errorf("%s: spec.modelCacheRef.name: want %q, got %q", what, wantCache, got)
	}
	wantServing, _, _ := unstructured.NestedFieldNoCopy(in.xr.Object, "spec", "template", "spec", "serving")
	if got, _, _ := unstructured.NestedFieldNoCopy(r.Object, "spec", "serving"); !reflect.DeepEqual(wantServing, got) {
		t.Errorf("%s: spec.serving: want %v, got %v", what, wantServing, got)
	}

	xrEngines, _, _ := unstructured.NestedSlice(in.xr.Object, "spec", "template", "spec", "engines")
	engines, _, _ := unstructured.NestedSlice(r.Object, "spec", "engines")
	if len(engines) != len(xrEngines) {
		t.Fatalf("%s: want %d engines, got %d", what, len(xrEngines), len(engines))
	}
	cluster := in.clusters[w.cluster]
	for i := range xrEngines {
		xe, _ := xrEngines[i].(map[string]any)
		ge, _ := engines[i].(map[string]any)
		checkEngine(t, what, xe, ge, w.pools, cluster)
	}
}

// checkEngine checks that a replica's engine mirrors the deployment's, with
// each member pinned to the wanted pool and its device requests resolved.
func checkEngine(t *testing.T, what string, want, got map[string]any, pools map[string][]string, cluster *unstructured.Unstructured) {
	t.Helper()
	name, _ := want["name"].(string)
	what = fmt.Sprintf("%s: engine %s", what, name)
	if got["name"] != name {
		t.Errorf("%s: got engine named %v", what, got["name"])
	}
	wantCopies, ok, _ := unstructured.NestedInt64(want, "copies")
	if !ok {
		wantCopies = 1
	}
	if gotCopies, ok, _ := unstructured.NestedInt64(got, "copies"); ok && gotCopies != wantCopies {
		t.Errorf("%s: copies: want %d, got %d", what, wantCopies, gotCopies)
	}
	if !reflect.DeepEqual(want["phase"], got["phase"]) {
		t.Errorf("%s: phase: want %v, got %v", what, want["phase"], got["phase"])
	}
	wm, _, _ := unstructured.NestedSlice(want, "members")
	gm, _, _ := unstructured.NestedSlice(got, "members")
	if len(gm) != len(wm) {
		t.Errorf("%s: want %d members, got %d", what, len(wm), len(gm))
		return
	}
	for j := range wm {
		xm, _ := wm[j].(map[string]any)
		m, _ := gm[j].(map[string]any)
		mwhat := fmt.Sprintf("%s: member %d", what, j)
		role, ok := xm["role"]
		if !ok {
			role = "Standalone"
		}
		if m["role"] != role {
			t.Errorf("%s: role: want %v, got %v", mwhat, role, m["role"])
		}
		if !reflect.DeepEqual(xm["template"], m["template"]) {
			t.Errorf("%s: template: want the deployment's\n%v\ngot\n%v", mwhat, xm["template"], m["template"])
		}
		if !reflect.DeepEqual(xm["worker"], m["worker"]) {
			t.Errorf("%s: worker: want %v, got %v", mwhat, xm["worker"], m["worker"])
		}
		poolName, _, _ := unstructured.NestedString(m, "nodePoolName")
		if len(pools[name]) > j && poolName != pools[name][j] {
			t.Errorf("%s: nodePoolName: want %s, got %s", mwhat, pools[name][j], poolName)
		}
		checkDeviceRequests(t, mwhat, xm, m, cluster, poolName)
	}
}

// checkDeviceRequests checks a member's stamped deviceRequests: one per
// request of its nodeSelector, named and counted as the request, with its
// selectors, and the deviceClassName of the pool device it resolves to. In
// these fixtures every pool has one device, a DRA GPU, so every request
// resolves to it.
func checkDeviceRequests(t *testing.T, what string, want, got map[string]any, cluster *unstructured.Unstructured, poolName string) {
	t.Helper()
	reqs, _, _ := unstructured.NestedSlice(want, "nodeSelector", "devices")
	stamped, has := got["deviceRequests"]
	if len(reqs) == 0 {
		if has {
			t.Errorf("%s: claims nothing, so want no deviceRequests key, got %v", what, stamped)
		}
		return
	}
	gotReqs, _, _ := unstructured.NestedSlice(got, "deviceRequests")
	if len(gotReqs) != len(reqs) {
		t.Errorf("%s: want %d deviceRequests, got %d: %v", what, len(reqs), len(gotReqs), stamped)
		return
	}
	var class any
	if p, ok := pool(cluster, poolName); ok {
		if devs, _ := p["devices"].([]any); len(devs) == 1 {
			class = devs[0].(map[string]any)["deviceClassName"]
		}
	}
	for k := range reqs {
		wr, _ := reqs[k].(map[string]any)
		gr, _ := gotReqs[k].(map[string]any)
		count, ok, _ := unstructured.NestedInt64(wr, "count")
		if !ok {
			count = 1
		}
		if gotCount, _, _ := unstructured.NestedInt64(gr, "count"); gr["name"] != wr["name"] || gotCount != count {
			t.Errorf("%s: deviceRequests[%d]: want name %v count %d, got %v", what, k, wr["name"], count, gr)
		}
		if class != nil && gr["deviceClassName"] != class {
			t.Errorf("%s: deviceRequests[%d].deviceClassName: want %v, got %v", what, k, class, gr["deviceClassName"])
		}
		if !reflect.DeepEqual(wr["selectors"], gr["selectors"]) {
			t.Errorf("%s: deviceRequests[%d].selectors: want %v, got %v", what, k, wr["selectors"], gr["selectors"])
		}
	}
}

// checkEndpoint checks a composed ModelEndpoint against docs/spec.md#composed-modelendpoints.
func checkEndpoint(t *testing.T, in inputs, w id, ep *unstructured.Unstructured) {
	t.Helper()
	what := "endpoint-" + w.String()
	name := replicaName(in.xr.GetName(), w.cluster, w.index)
	ns := in.xr.GetNamespace()
	if ep.GetName() != name || ep.GetNamespace() != ns {
		t.Errorf("%s: want %s/%s, got %s/%s", what, ns, name, ep.GetNamespace(), ep.GetName())
	}
	checkLabels(t, what, wantLabels(in, w), ep.GetLabels())
	host := gatewayHost(in.clusters[w.cluster])
	wantURL := "http://" + host + "/" + ns + "/" + name + "/v1"
	if got, _, _ := unstructured.NestedString(ep.Object, "spec", "url"); got != wantURL {
		t.Errorf("%s: spec.url: want %s, got %s", what, wantURL, got)
	}
	wantPath := "/" + ns + "/" + name + "/"
	if got, _, _ := unstructured.NestedString(ep.Object, "spec", "rewritePath"); got != wantPath {
		t.Errorf("%s: spec.rewritePath: want %s, got %s", what, wantPath, got)
	}
}

func checkStatus(t *testing.T, xr *unstructured.Unstructured, total, ready int64) {
	t.Helper()
	gotTotal, _, _ := unstructured.NestedInt64(xr.Object, "status", "replicas", "total")
	gotReady, _, _ := unstructured.NestedInt64(xr.Object, "status", "replicas", "ready")
	if gotTotal != total || gotReady != ready {
		t.Errorf("XR status.replicas: want total %d ready %d, got total %d ready %d", total, ready, gotTotal, gotReady)
	}
}

func checkCondition(t *testing.T, xr *unstructured.Unstructured, typ string, w wantCondition) {
	t.Helper()
	c, ok := condition(xr, typ)
	if !ok {
		t.Errorf("XR has no %s condition", typ)
		return
	}
	if c["status"] != w.status {
		t.Errorf("XR condition %s: want status %s, got %v (reason %v: %v)", typ, w.status, c["status"], c["reason"], c["message"])
	}
	if r, _ := c["reason"].(string); len(w.reasons) > 0 && !slices.Contains(w.reasons, r) {
		t.Errorf("XR condition %s: want reason %s, got %q (message %v)", typ, strings.Join(w.reasons, " or "), r, c["message"])
	}
	msg, _ := c["message"].(string)
	for _, s := range w.message {
		if !strings.Contains(strings.ToLower(msg), strings.ToLower(s)) {
			t.Errorf("XR condition %s: want a message mentioning %q, got %q", typ, s, msg)
		}
	}
}

// checkWarning checks that some warning result mentions every one of want.
func checkWarning(t *testing.T, results []*unstructured.Unstructured, want []string) {
	t.Helper()
	var warnings []string
	for _, r := range results {
		// The render engine reports the XR's events as results: a
		// function's warning is a Warning event, its message prefixed with
		// the pipeline step's name.
		if sev, _, _ := unstructured.NestedString(r.Object, "severity"); sev != "Warning" {
			continue
		}
		msg, _, _ := unstructured.NestedString(r.Object, "message")
		warnings = append(warnings, msg)
		mentionsAll := true
		for _, s := range want {
			if !strings.Contains(strings.ToLower(msg), strings.ToLower(s)) {
				mentionsAll = false
			}
		}
		if mentionsAll {
			return
		}
	}
	t.Errorf("want a warning mentioning %q, got warnings %q", want, warnings)
}

// checkWholeNodeCapacity checks docs/spec.md#invariants's "never overcommit" under
// whole-node accounting: a pool that takes a new replica ends with no more
// claiming pods charged to it, other deployments' and ours, than it has nodes.
func checkWholeNodeCapacity(t *testing.T, in inputs, out rendered) {
	t.Helper()
	existing := map[id]bool{}
	charged := map[string]int64{} // By cluster/pool.
	for _, r := range in.replicas {
		cluster, _, _ := unstructured.NestedString(r.Object, "spec", "clusterName")
		if in.ours(r) {
			idx, _ := strconv.Atoi(r.GetLabels()[labelIndex])
			existing[id{cluster, idx}] = true
			continue // Charged below, if still composed.
		}
		for p, n := range claimingPods(r) {
			charged[cluster+"/"+p] += n
		}
	}
	placed := map[string]bool{}
	for _, r := range out.composed {
		if r.GetKind() != "ModelReplica" {
			continue
		}
		cluster, _, _ := unstructured.NestedString(r.Object, "spec", "clusterName")
		idx, _ := strconv.Atoi(r.GetLabels()[labelIndex])
		for p, n := range claimingPods(r) {
			charged[cluster+"/"+p] += n
			if !existing[id{cluster, idx}] {
				placed[cluster+"/"+p] = true
			}
		}
	}
	for _, cp := range sortedKeys(placed) {
		cluster, poolName, _ := strings.Cut(cp, "/")
		p, ok := pool(in.clusters[cluster], poolName)
		if !ok {
			t.Errorf("a new replica is pinned to %s, which is not a pool of the fleet", cp)
			continue
		}
		nodes, _, _ := unstructured.NestedInt64(p, "nodes")
		if charged[cp] > nodes {
			t.Errorf("pool %s is overcommitted: %d claiming pods on %d nodes", cp, charged[cp], nodes)
		}
	}
}

// TestRenderInvalidNodeSelector checks docs/spec.md#invalid-node-selectors's rule: a
// deployment whose nodeSelector no longer compiles places nothing new and
// moves nothing; the replica that exists stays desired exactly as observed.
func TestRenderInvalidNodeSelector(t *testing.T) {
	t.Parallel()
	if skip != "" {
		t.Skip(skip)
	}
	const dir = "e2e/testdata/invalid-cel"
	in := readInputs(t, dir)
	out := render(t, dir)
	t.Logf("%s", out.raw)

	var replicas []string
	for key, u := range out.composed {
		if u.GetKind() == "ModelReplica" {
			replicas = append(replicas, key)
		}
	}
	slices.Sort(replicas)
	if want := []string{"replica-bravo-1"}; !slices.Equal(replicas, want) {
		t.Fatalf("composed ModelReplicas: want %v, got %v", want, replicas)
	}
	var observed *unstructured.Unstructured
	for _, r := range in.replicas {
		if in.ours(r) {
			observed = r
		}
	}
	got := out.composed["replica-bravo-1"]
	if got.GetName() != observed.GetName() || got.GetNamespace() != observed.GetNamespace() {
		t.Errorf("replica-bravo-1: want %s/%s, got %s/%s", observed.GetNamespace(), observed.GetName(), got.GetNamespace(), got.GetName())
	}
	if !reflect.DeepEqual(observed.Object["spec"], got.Object["spec"]) {
		t.Errorf("replica-bravo-1: want its observed spec\n%v\ngot\n%v", observed.Object["spec"], got.Object["spec"])
	}
	checkLabels(t, "replica-bravo-1", observed.GetLabels(), got.GetLabels())
	checkCondition(t, out.xr, condReplicasScheduled, wantCondition{
		status:  statusFalse,
		reasons: []string{"InvalidNodeSelector"},
		message: []string{"engine", "gpu"},
	})
}

// TestRendersOfOneXRShareNothing: Crossplane v2.4's render gives an XR a
// uid, the same on every render, so every fixture of ml-team/qwen3-32b is
// one deployment to the function these tests share. One fixture's fleet must
// not decide what another's call asks for: here invalid-observation reads
// a fleet of no replicas whole, pods-counted a fleet whose every pool
// reports, and pods-scheduled-after-observation must still read its whole
// fleet (its llama-70b carries no counted label) and charge llama-70b
// (docs/spec.md#narrow-requests). Not parallel: the order is the test.
func TestRendersOfOneXRShareNothing(t *testing.T) {
	if skip != "" {
		t.Skip(skip)
	}
	render(t, "e2e/testdata/invalid-observation")
	render(t, "e2e/testdata/pods-counted")
	out := render(t, "e2e/testdata/pods-scheduled-after-observation")
	if keys := sortedKeys(out.composed); len(keys) != 0 {
		t.Errorf("after two other fixtures of the same XR, pods-scheduled-after-observation composed %v, want nothing: llama-70b's 4 GPUs, scheduled after the observation, must be charged\n%s", keys, out.raw)
	}
}
