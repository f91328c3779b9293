package relay

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/input/v1beta1"
	"github.com/modelplaneai/fleet-scheduler/poolreport"
)

// Keys of the composed resources the relay adds to an InferenceCluster.
const (
	// KeyCRDPoolObservations and KeyCRDReplicaObservations observe the
	// agent's CRDs in the workload cluster: the gate.
	KeyCRDPoolObservations    = "agent-crd-poolobservations"
	KeyCRDReplicaObservations = "agent-crd-replicaobservations"
	keyPoolPrefix             = "pool-observation-"
)

// KeyPool is the key of a pool's PoolObservation Object.
func KeyPool(pool string) string { return keyPoolPrefix + pool }

// The agent's CRDs, as the agent's manifests install them.
const (
	CRDPoolObservations    = "poolobservations." + agentv1alpha1.Group
	CRDReplicaObservations = "replicaobservations." + agentv1alpha1.Group
)

// DefaultNamespace is where the relay composes an InferenceCluster's
// Objects when its status names no namespace: Modelplane's system
// namespace, where compose-inference-cluster composes its own.
const DefaultNamespace = v1alpha1.SystemNamespace

// ConditionPoolsObserved is the condition the relay sets on an
// InferenceCluster: whether every pool's report reached it.
const ConditionPoolsObserved = "PoolsObserved"

// Reasons of PoolsObserved.
const (
	ReasonAllPoolsReported = "AllPoolsReported"
	ReasonPoolsNotReported = "PoolsNotReported"
	ReasonAgentNotServed   = "AgentNotServed"
	ReasonNoProviderConfig = "WaitingForProviderConfig"
)

// ClusterInput is what the relay reads of an InferenceCluster's call.
type ClusterInput struct {
	// Observed is the InferenceCluster as it is.
	Observed map[string]any
	// DesiredStatus is the InferenceCluster's status as the earlier steps
	// of its pipeline wrote it in this call; nil when they wrote none.
	DesiredStatus map[string]any
	// Composed are the observed composed resources, by key.
	Composed map[string]map[string]any
	// Desired are the composed resources the earlier steps of the
	// pipeline desire in this call, by key.
	Desired map[string]map[string]any
	// AgentRelease is the relay's input's agentRelease: when set, the
	// relay also composes the Release that installs the agent in the
	// workload cluster.
	AgentRelease *v1beta1.AgentRelease
	// AgentReleaseErr says why the input's agentRelease could not be read:
	// no Release is composed, and one composed before is kept.
	AgentReleaseErr error
}

// ClusterOutput is what the relay adds to an InferenceCluster's call.
type ClusterOutput struct {
	// Status is DesiredStatus with each pool's report set; nil to leave
	// the status as the earlier steps wrote it.
	Status map[string]any
	// Resources are the Objects to compose, by key, and the agent's
	// Release and its provider config when asked for. All are ready.
	Resources map[string]map[string]any
	Condition Condition
	// Warnings name a report the relay left out, and why.
	Warnings []string
}

// Cluster composes an InferenceCluster's PoolObservations and relays
// their reports into its status.gpuPools (docs/spec.md#the-relay). The
// PoolObservations are composed once both the agent's CRDs are served in
// the workload cluster, and kept from then on. Of each pool's entry only
// observedNodes, observedAt, nodesByFreeDevices and binding are set, and to
// the report's or to none, so that a pool the agent does not report reads
// as unobserved, and one it no longer steers as not steered; every other
// field stays as the earlier steps wrote it.
func Cluster(in ClusterInput) ClusterOutput {
	out := ClusterOutput{Resources: map[string]map[string]any{}}
	status := in.DesiredStatus
	pools, poolsWritten := status["gpuPools"].([]any)
	if poolsWritten {
		pools = append([]any(nil), pools...) // entries are replaced, never the input's
	} else {
		pools, _ = mapAt(in.Observed, "status")["gpuPools"].([]any)
	}
	pc := stringAt(status, "providerConfigRef", "name")
	if pc == "" {
		pc = stringAt(in.Observed, "status", "providerConfigRef", "name")
	}
	if pc == "" {
		keepAgentRelease(in, &out)
		out.Condition = Condition{
			Type: ConditionPoolsObserved, Status: "False", Reason: ReasonNoProviderConfig,
			Message: "the InferenceCluster has no status.providerConfigRef yet: its workload cluster cannot be reached",
		}
		return out
	}
	ns := stringAt(status, "namespace")
	if ns == "" {
		ns = stringAt(in.Observed, "status", "namespace")
	}
	if ns == "" {
		ns = DefaultNamespace
	}

	addAgentRelease(in, ns, pc, &out)
	objects := len(out.Resources)
	for key, crd := range map[string]string{KeyCRDPoolObservations: CRDPoolObservations, KeyCRDReplicaObservations: CRDReplicaObservations} {
		out.Resources[key] = object(ns, pc, map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": map[string]any{"name": crd},
		}, true)
	}
	open := established(in.Composed[KeyCRDPoolObservations]) && established(in.Composed[KeyCRDReplicaObservations])

	steer, named := steeredPools(in.Observed)
	var unreported []string
	for i, p := range pools {
		entry, ok := p.(map[string]any)
		name, _ := entry["name"].(string)
		if !ok || name == "" {
			continue
		}
		key := KeyPool(name)
		observed, exists := in.Composed[key]
		if open || exists {
			out.Resources[key] = object(ns, pc, poolObservation(name, entry, steer(name)), false)
		}
		if !poolsWritten {
			continue
		}
		entry = copyMap(entry)
		pools[i] = entry
		// The report's fields are the relay's alone, binding with them: each
		// is set from the PoolObservation or removed, so that nothing the
		// agent no longer says (a Steered above all) outlives its report.
		for _, f := range agentv1alpha1.ReportFields {
			delete(entry, f)
		}
		delete(entry, agentv1alpha1.FieldBinding)
		report, err := poolreport.Relayable(mapAt(observedManifest(observed), "status"))
		switch {
		case err != nil:
			out.Warnings = append(out.Warnings, fmt.Sprintf("pool %s: the PoolObservation's report is not relayed: %v", name, err))
			unreported = append(unreported, name)
		case report == nil:
			unreported = append(unreported, name)
		default:
			maps.Copy(entry, report)
		}
	}

	for _, n := range named {
		if !slices.ContainsFunc(pools, func(p any) bool { e, _ := p.(map[string]any); return e["name"] == n }) {
			out.Warnings = append(out.Warnings, fmt.Sprintf("annotation %s names pool %q, which the InferenceCluster does not publish (its pools: %s): nothing is steered for it",
				agentv1alpha1.AnnotationSteerPools, n, joinSorted(poolNames(pools))))
		}
	}

	switch {
	case !open && len(out.Resources) == objects+2:
		out.Condition = Condition{
			Type: ConditionPoolsObserved, Status: "False", Reason: ReasonAgentNotServed,
			Message: "the workload cluster does not serve the cluster agent's " + CRDPoolObservations + " and " + CRDReplicaObservations + " yet: install the agent there",
		}
	case !poolsWritten:
		out.Condition = Condition{
			Type: ConditionPoolsObserved, Status: "False", Reason: ReasonPoolsNotReported,
			Message: "the earlier steps wrote no status.gpuPools: no report is relayed",
		}
	case len(unreported) > 0:
		out.Condition = Condition{
			Type: ConditionPoolsObserved, Status: "False", Reason: ReasonPoolsNotReported,
			Message: "no report from the cluster agent for " + joinSorted(unreported),
		}
	default:
		out.Condition = Condition{Type: ConditionPoolsObserved, Status: "True", Reason: ReasonAllPoolsReported}
	}
	if poolsWritten {
		out.Status = copyMap(status)
		out.Status["gpuPools"] = pools
		out.Status[FieldPoolReports] = reportsSummary(pools)
	}
	return out
}

// FieldPoolReports is the InferenceCluster's status field the relay sums
// its pools' reports into, for kubectl's printer columns (the extended
// XRD's REPORTED, POOLS and OLDEST REPORT): the function reads gpuPools.
const FieldPoolReports = "poolReports"

// reportsSummary is status.poolReports: how many pools there are, how
// many carry a report, and the oldest report's observedAt, when any does.
func reportsSummary(pools []any) map[string]any {
	var reported int64
	var oldest time.Time
	var oldestText string
	for _, p := range pools {
		entry, _ := p.(map[string]any)
		at, _ := entry[agentv1alpha1.FieldObservedAt].(string)
		if at == "" {
			continue
		}
		reported++
		// Relayable let only a valid time through.
		if t, err := poolreport.ParseTime(at); err == nil && (oldestText == "" || t.Before(oldest)) {
			oldest, oldestText = t, at
		}
	}
	out := map[string]any{"pools": int64(len(pools)), "reported": reported}
	if oldestText != "" {
		out["oldestObservedAt"] = oldestText
	}
	return out
}

// steeredPools reads the InferenceCluster's AnnotationSteerPools: whether
// a pool is to be steered, and the pool names it lists (not "*").
func steeredPools(cluster map[string]any) (func(pool string) bool, []string) {
	v, _ := mapAt(cluster, "metadata", "annotations")[agentv1alpha1.AnnotationSteerPools].(string)
	all := false
	var named []string
	for n := range strings.SplitSeq(v, ",") {
		switch n = strings.TrimSpace(n); n {
		case "":
		case "*":
			all = true
		default:
			named = append(named, n)
		}
	}
	return func(pool string) bool { return all || slices.Contains(named, pool) }, named
}

// poolNames are the names of the entries of status.gpuPools.
func poolNames(pools []any) []string {
	var out []string
	for _, p := range pools {
		if e, ok := p.(map[string]any); ok {
			if n, ok := e["name"].(string); ok && n != "" {
				out = append(out, n)
			}
		}
	}
	return out
}

// poolObservation is the PoolObservation of a pool
// (docs/spec.md#poolobservation): its nodes by v0.3's pool label, its
// devices as the pool publishes them, the GPU taint every pod v0.3
// composes for a pool tolerates, and whether the agent steers it, always
// set, so that a pool taken out of the annotation stops being steered.
func poolObservation(name string, pool map[string]any, steer bool) map[string]any {
	steering := agentv1alpha1.SteeringDisabled
	if steer {
		steering = agentv1alpha1.SteeringEnabled
	}
	spec := map[string]any{
		"nodeSelector": map[string]any{v1alpha1.LabelPool: name},
		"tolerations": []any{map[string]any{
			"key": v1alpha1.GPUTaintKey, "operator": "Exists", "effect": "NoSchedule",
		}},
		"steering": string(steering),
	}
	if devices, ok := pool["devices"].([]any); ok {
		spec["devices"] = devices
	}
	return map[string]any{
		"apiVersion": agentv1alpha1.Group + "/" + agentv1alpha1.Version, "kind": agentv1alpha1.KindPoolObservation,
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}
}

// established says whether an observed Object saw its CRD Established.
func established(o map[string]any) bool {
	c := condition(observedManifest(o), "Established")
	return c != nil && c["status"] == "True"
}

// copyMap is a shallow copy.
func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	maps.Copy(out, m)
	return out
}
