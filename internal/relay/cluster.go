package relay

import (
	"fmt"
	"maps"

	"github.com/modelplaneai/fleet-scheduler/internal/composereplica"
	"github.com/modelplaneai/fleet-scheduler/observation"
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
	CRDPoolObservations    = "poolobservations.agent.modelplane.ai"
	CRDReplicaObservations = "replicaobservations.agent.modelplane.ai"
)

// DefaultNamespace is where the relay composes an InferenceCluster's
// Objects when its status names no namespace: Modelplane's system
// namespace, where compose-inference-cluster composes its own.
const DefaultNamespace = "modelplane-system"

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

// Bounds of a report, as deploy/inferenceclusters.yaml's schema has them:
// a report outside them would fail the InferenceCluster's whole status
// write, so the relay leaves it out.
const (
	maxCount   = 1 << 20
	maxBuckets = 64
	maxFree    = 16
	maxName    = 63
	maxTimeLen = 64
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
}

// ClusterOutput is what the relay adds to an InferenceCluster's call.
type ClusterOutput struct {
	// Status is DesiredStatus with each pool's report set; nil to leave
	// the status as the earlier steps wrote it.
	Status map[string]any
	// Resources are the Objects to compose, by key. All are ready.
	Resources map[string]map[string]any
	Condition Condition
	// Warnings name a report the relay left out, and why.
	Warnings []string
}

// Cluster composes an InferenceCluster's PoolObservations and relays
// their reports into its status.gpuPools (docs/spec.md#the-relay). The
// PoolObservations are composed once both the agent's CRDs are served in
// the workload cluster, and kept from then on. Of each pool's entry only
// observedNodes, observedAt and nodesByFreeDevices are set, and to the
// report's or to none, so that a pool the agent does not report reads as
// unobserved; every other field stays as the earlier steps wrote it.
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

	for key, crd := range map[string]string{KeyCRDPoolObservations: CRDPoolObservations, KeyCRDReplicaObservations: CRDReplicaObservations} {
		out.Resources[key] = object(ns, pc, map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": map[string]any{"name": crd},
		}, true)
	}
	open := established(in.Composed[KeyCRDPoolObservations]) && established(in.Composed[KeyCRDReplicaObservations])

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
			out.Resources[key] = object(ns, pc, poolObservation(name, entry), false)
		}
		if !poolsWritten {
			continue
		}
		entry = copyMap(entry)
		pools[i] = entry
		for _, f := range reportFields {
			delete(entry, f)
		}
		report, err := readReport(mapAt(observedManifest(observed), "status"))
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

	switch {
	case !open && len(out.Resources) == 2:
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
	}
	return out
}

// reportFields are the fields of a pool's report.
var reportFields = [...]string{observation.FieldObservedNodes, observation.FieldObservedAt, observation.FieldNodesByFreeDevices} //nolint:gochecknoglobals // A constant list; Go has no constant arrays.

// poolObservation is the PoolObservation of a pool
// (docs/spec.md#poolobservation): its nodes by v0.3's pool label, its
// devices as the pool publishes them, and the GPU taint every pod v0.3
// composes for a pool tolerates.
func poolObservation(name string, pool map[string]any) map[string]any {
	spec := map[string]any{
		"nodeSelector": map[string]any{composereplica.LabelPool: name},
		"tolerations": []any{map[string]any{
			"key": composereplica.GPUTaintKey, "operator": "Exists", "effect": "NoSchedule",
		}},
	}
	if devices, ok := pool["devices"].([]any); ok {
		spec["devices"] = devices
	}
	return map[string]any{
		"apiVersion": AgentAPIVersion, "kind": KindPoolObservation,
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}
}

// established says whether an observed Object saw its CRD Established.
func established(o map[string]any) bool {
	c := condition(observedManifest(o), "Established")
	return c != nil && c["status"] == "True"
}

// readReport is a PoolObservation status's report: its three fields, or
// nil when it has none (the agent has not reported, or cannot observe the
// pool). A report with only some of the fields, or outside the bounds the
// InferenceCluster's schema sets, is an error: copied, it would fail the
// whole status write. What the schema allows is copied as it is; the
// function judges it (docs/spec.md#usable-reports).
func readReport(status map[string]any) (map[string]any, error) {
	present := 0
	for _, f := range reportFields {
		if _, ok := status[f]; ok {
			present++
		}
	}
	switch present {
	case 0:
		return nil, nil
	case len(reportFields):
	default:
		return nil, fmt.Errorf("it has only some of %s, %s and %s", reportFields[0], reportFields[1], reportFields[2])
	}
	if _, err := wholeNumber(status[observation.FieldObservedNodes], maxCount); err != nil {
		return nil, fmt.Errorf("%s: %w", observation.FieldObservedNodes, err)
	}
	at, ok := status[observation.FieldObservedAt].(string)
	if !ok || len(at) > maxTimeLen {
		return nil, fmt.Errorf("%s: not a string of at most %d characters", observation.FieldObservedAt, maxTimeLen)
	}
	buckets, ok := status[observation.FieldNodesByFreeDevices].([]any)
	if !ok || len(buckets) > maxBuckets {
		return nil, fmt.Errorf("%s: not a list of at most %d buckets", observation.FieldNodesByFreeDevices, maxBuckets)
	}
	for i, b := range buckets {
		if err := checkBucket(b); err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", observation.FieldNodesByFreeDevices, i, err)
		}
	}
	report := map[string]any{}
	for _, f := range reportFields {
		report[f] = status[f]
	}
	return report, nil
}

func checkBucket(b any) error {
	m, ok := b.(map[string]any)
	if !ok {
		return fmt.Errorf("not an object")
	}
	for k := range m {
		if k != "nodes" && k != "free" {
			return fmt.Errorf("%s: not a field of a bucket", k)
		}
	}
	if _, err := wholeNumber(m["nodes"], maxCount); err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	free, ok := m["free"].([]any)
	if _, present := m["free"]; present && (!ok || len(free) > maxFree) {
		return fmt.Errorf("free: not a list of at most %d devices", maxFree)
	}
	for j, f := range free {
		d, ok := f.(map[string]any)
		if !ok {
			return fmt.Errorf("free[%d]: not an object", j)
		}
		if name, ok := d["name"].(string); !ok || len(name) > maxName {
			return fmt.Errorf("free[%d].name: not a string of at most %d characters", j, maxName)
		}
		if _, err := wholeNumber(d["count"], maxCount); err != nil {
			return fmt.Errorf("free[%d].count: %w", j, err)
		}
		for k := range d {
			if k != "name" && k != "count" {
				return fmt.Errorf("free[%d].%s: not a field of a device", j, k)
			}
		}
	}
	return nil
}

// copyMap is a shallow copy.
func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	maps.Copy(out, m)
	return out
}
