// Package relay carries the cluster agent's reports from a workload
// cluster to the control plane (docs/spec.md#the-relay): the logic of the
// relay function, a pipeline step appended to Modelplane's InferenceCluster
// and ModelReplica Compositions.
//
// For an InferenceCluster it composes provider-kubernetes Objects that
// create, in the workload cluster, a PoolObservation per pool and watch it,
// and copies each one's report into the pool's entry of status.gpuPools.
// For a ModelReplica it composes an Object for its ReplicaObservation and
// relays the agent's PodsScheduled onto the replica, never with an earlier
// time than the agent saw. Every Object it composes is marked ready, and
// none is composed before the agent's kinds are served in the workload
// cluster. The workload cluster gets no credentials to the control plane:
// the control plane's provider-kubernetes reads the agent's status.
//
// Everything here works on decoded JSON (map[string]any); the relay's
// command does the protobuf.
package relay

import (
	"sort"
	"strings"
)

// provider-kubernetes' namespaced Object and the provider config kind
// Modelplane's InferenceClusters compose.
const (
	ObjectAPIVersion   = "kubernetes.m.crossplane.io/v1alpha1"
	KindObject         = "Object"
	ProviderConfigKind = "ClusterProviderConfig"
)

// Condition is a condition the relay sets on its XR.
type Condition struct {
	Type, Status, Reason, Message string
}

// object wraps a manifest in a provider-kubernetes Object in namespace,
// watched, through the provider config; observeOnly makes it read the
// manifest's object and never create, change or delete it.
func object(namespace, providerConfig string, manifest map[string]any, observeOnly bool) map[string]any {
	spec := map[string]any{
		"watch":             true,
		"providerConfigRef": map[string]any{"kind": ProviderConfigKind, "name": providerConfig},
		"forProvider":       map[string]any{"manifest": manifest},
	}
	if observeOnly {
		spec["managementPolicies"] = []any{"Observe"}
	}
	meta := map[string]any{}
	if namespace != "" {
		meta["namespace"] = namespace
	}
	return map[string]any{"apiVersion": ObjectAPIVersion, "kind": KindObject, "metadata": meta, "spec": spec}
}

// observedManifest is what an observed Object last read of its object in
// the workload cluster (status.atProvider.manifest); nil when it has read
// nothing.
func observedManifest(o map[string]any) map[string]any {
	return mapAt(o, "status", "atProvider", "manifest")
}

// mapAt is the map at a path of decoded JSON; nil when any step is not a
// map.
func mapAt(m map[string]any, path ...string) map[string]any {
	for _, p := range path {
		next, ok := m[p].(map[string]any)
		if !ok {
			return nil
		}
		m = next
	}
	return m
}

// stringAt is the string at a path; "" when absent or not a string.
func stringAt(m map[string]any, path ...string) string {
	if len(path) == 0 {
		return ""
	}
	s, _ := mapAt(m, path[:len(path)-1]...)[path[len(path)-1]].(string)
	return s
}

// condition is the first condition of a type in an object's
// status.conditions; nil when there is none.
func condition(obj map[string]any, typ string) map[string]any {
	conds, _ := mapAt(obj, "status")["conditions"].([]any)
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m
		}
	}
	return nil
}

// joinSorted lists names, sorted, comma separated: stable messages.
func joinSorted(names []string) string {
	s := append([]string(nil), names...)
	sort.Strings(s)
	return strings.Join(s, ", ")
}
