package relay

import (
	"maps"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"sigs.k8s.io/yaml"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
)

// y reads YAML as decoded JSON.
func y(t *testing.T, s string) map[string]any {
	t.Helper()
	if s == "" {
		return nil
	}
	var m map[string]any
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The earlier steps' status of an InferenceCluster of two pools, as
// compose-inference-cluster writes it.
const clusterStatus = `
providerConfigRef: {name: eks-cluster-kubeconfig-1a2b3}
namespace: modelplane-system
gateway: {address: gw.example.com}
gpuPools:
- name: l4
  nodes: 4
  devices: [{name: gpu, driver: gpu.nvidia.com, deviceClassName: gpu.nvidia.com, count: 4, attributes: {productName: {string: NVIDIA L4}}}]
- name: h100
  nodes: 2
  devices: [{name: gpu, driver: gpu.nvidia.com, deviceClassName: gpu.nvidia.com, count: 8}]
`

// allReported is clusterStatus with l4Report on l4 and an empty report on
// h100.
const allReported = `
providerConfigRef: {name: eks-cluster-kubeconfig-1a2b3}
namespace: modelplane-system
gateway: {address: gw.example.com}
gpuPools:
- name: l4
  nodes: 4
  devices: [{name: gpu, driver: gpu.nvidia.com, deviceClassName: gpu.nvidia.com, count: 4, attributes: {productName: {string: NVIDIA L4}}}]
  observedNodes: 3
  observedAt: "2026-10-20T20:06:00Z"
  nodesByFreeDevices: [{nodes: 2, free: [{name: gpu, count: 4}]}, {nodes: 1, free: [{name: gpu, count: 1}]}]
- name: h100
  nodes: 2
  devices: [{name: gpu, driver: gpu.nvidia.com, deviceClassName: gpu.nvidia.com, count: 8}]
  observedNodes: 0
  observedAt: "2026-10-20T20:06:00Z"
  nodesByFreeDevices: []
`

// steeredBefore is clusterStatus with every pool's entry saying binding
// Steered, as an earlier step that copied the observed status would write
// it.
func steeredBefore(t *testing.T) map[string]any {
	t.Helper()
	st := y(t, clusterStatus)
	for _, p := range st["gpuPools"].([]any) {
		p.(map[string]any)["binding"] = "Steered"
	}
	return st
}

// crd is an observed CRD gate Object, Established or not.
func crd(t *testing.T, established string) map[string]any {
	t.Helper()
	return y(t, `status: {atProvider: {manifest: {status: {conditions: [{type: Established, status: "`+established+`"}]}}}}`)
}

// observedPool is a PoolObservation Object that read back the status.
func observedPool(t *testing.T, status string) map[string]any {
	t.Helper()
	o := y(t, `status: {atProvider: {manifest: {status: {}}}}`)
	mapAt(o, "status", "atProvider", "manifest")["status"] = y(t, status)
	return o
}

const l4Report = `
observedNodes: 3
observedAt: "2026-10-20T20:06:00Z"
nodesByFreeDevices: [{nodes: 2, free: [{name: gpu, count: 4}]}, {nodes: 1, free: [{name: gpu, count: 1}]}]
conditions: [{type: Synced, status: "True", reason: Observed}]
`

// poolObject is the Object the relay composes for a pool.
func poolObject(t *testing.T, pool, devices string) map[string]any {
	t.Helper()
	return y(t, `
apiVersion: kubernetes.m.crossplane.io/v1alpha1
kind: Object
metadata: {namespace: modelplane-system}
spec:
  watch: true
  providerConfigRef: {kind: ClusterProviderConfig, name: eks-cluster-kubeconfig-1a2b3}
  forProvider:
    manifest:
      apiVersion: agent.modelplane.ai/v1alpha1
      kind: PoolObservation
      metadata: {name: `+pool+`}
      spec:
        nodeSelector: {modelplane.ai/pool: `+pool+`}
        devices: `+devices+`
        tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
        steering: Disabled
`)
}

func gateObjects(t *testing.T) map[string]map[string]any {
	t.Helper()
	gate := func(name string) map[string]any {
		return y(t, `
apiVersion: kubernetes.m.crossplane.io/v1alpha1
kind: Object
metadata: {namespace: modelplane-system}
spec:
  watch: true
  managementPolicies: [Observe]
  providerConfigRef: {kind: ClusterProviderConfig, name: eks-cluster-kubeconfig-1a2b3}
  forProvider:
    manifest: {apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, metadata: {name: `+name+`}}
`)
	}
	return map[string]map[string]any{
		KeyCRDPoolObservations:    gate(CRDPoolObservations),
		KeyCRDReplicaObservations: gate(CRDReplicaObservations),
	}
}

func TestRelayCluster(t *testing.T) {
	const (
		l4Devices   = `[{name: gpu, driver: gpu.nvidia.com, deviceClassName: gpu.nvidia.com, count: 4, attributes: {productName: {string: NVIDIA L4}}}]`
		h100Devices = `[{name: gpu, driver: gpu.nvidia.com, deviceClassName: gpu.nvidia.com, count: 8}]`
	)
	withPools := func(t *testing.T, extra ...string) map[string]map[string]any {
		t.Helper()
		m := gateObjects(t)
		for _, p := range extra {
			m[KeyPool(p)] = poolObject(t, p, map[string]string{"l4": l4Devices, "h100": h100Devices}[p])
		}
		return m
	}
	open := func(t *testing.T) map[string]map[string]any {
		t.Helper()
		return map[string]map[string]any{KeyCRDPoolObservations: crd(t, "True"), KeyCRDReplicaObservations: crd(t, "True")}
	}
	with := func(m map[string]map[string]any, key string, v map[string]any) map[string]map[string]any {
		m[key] = v
		return m
	}
	type want struct {
		status    string // YAML; "" for none
		resources func(t *testing.T) map[string]map[string]any
		condition Condition
		warnings  []string
	}
	cases := map[string]struct {
		reason string
		in     func(t *testing.T) ClusterInput
		want   want
	}{
		"NoProviderConfig": {
			reason: "without the cluster's provider config nothing can be composed in it",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				return ClusterInput{Observed: y(t, `metadata: {name: eks}`)}
			},
			want: want{
				resources: func(*testing.T) map[string]map[string]any { return map[string]map[string]any{} },
				condition: Condition{Type: ConditionPoolsObserved, Status: "False", Reason: ReasonNoProviderConfig, Message: "the InferenceCluster has no status.providerConfigRef yet: its workload cluster cannot be reached"},
			},
		},
		"AgentNotServed": {
			reason: "until both CRDs are Established only the gate is composed; the status is the earlier steps'",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				return ClusterInput{DesiredStatus: y(t, clusterStatus), Composed: map[string]map[string]any{KeyCRDPoolObservations: crd(t, "True"), KeyCRDReplicaObservations: crd(t, "False")}}
			},
			want: want{
				status:    clusterStatus,
				resources: gateObjects,
				condition: Condition{Type: ConditionPoolsObserved, Status: "False", Reason: ReasonAgentNotServed, Message: "the workload cluster does not serve the cluster agent's poolobservations.agent.modelplane.ai and replicaobservations.agent.modelplane.ai yet: install the agent there"},
			},
		},
		"GateOpen": {
			reason: "once both CRDs are Established each pool's PoolObservation is composed, with its devices and the GPU toleration",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				return ClusterInput{DesiredStatus: y(t, clusterStatus), Composed: open(t)}
			},
			want: want{
				status: clusterStatus,
				resources: func(t *testing.T) map[string]map[string]any {
					t.Helper()
					return withPools(t, "l4", "h100")
				},
				condition: Condition{Type: ConditionPoolsObserved, Status: "False", Reason: ReasonPoolsNotReported, Message: "no report from the cluster agent for h100, l4"},
			},
		},
		"SteerPoolsAnnotated": {
			reason: "the pools the InferenceCluster's steer-pools annotation names are composed with steering Enabled, the others Disabled; a name it does not publish is a warning",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				xr := y(t, `metadata: {name: alpha, annotations: {agent.modelplane.ai/steer-pools: " l4 ,nope,"}}`)
				return ClusterInput{Observed: xr, DesiredStatus: y(t, clusterStatus), Composed: open(t)}
			},
			want: want{
				status: clusterStatus,
				resources: func(t *testing.T) map[string]map[string]any {
					t.Helper()
					m := withPools(t, "l4", "h100")
					mapAt(m[KeyPool("l4")], "spec", "forProvider", "manifest", "spec")["steering"] = "Enabled"
					return m
				},
				condition: Condition{Type: ConditionPoolsObserved, Status: "False", Reason: ReasonPoolsNotReported, Message: "no report from the cluster agent for h100, l4"},
				warnings:  []string{`annotation agent.modelplane.ai/steer-pools names pool "nope", which the InferenceCluster does not publish (its pools: h100, l4): nothing is steered for it`},
			},
		},
		"SteerEveryPool": {
			reason: "steer-pools * steers every pool",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				xr := y(t, `metadata: {name: alpha, annotations: {agent.modelplane.ai/steer-pools: "*"}}`)
				return ClusterInput{Observed: xr, DesiredStatus: y(t, clusterStatus), Composed: open(t)}
			},
			want: want{
				status: clusterStatus,
				resources: func(t *testing.T) map[string]map[string]any {
					t.Helper()
					m := withPools(t, "l4", "h100")
					for _, p := range []string{"l4", "h100"} {
						mapAt(m[KeyPool(p)], "spec", "forProvider", "manifest", "spec")["steering"] = "Enabled"
					}
					return m
				},
				condition: Condition{Type: ConditionPoolsObserved, Status: "False", Reason: ReasonPoolsNotReported, Message: "no report from the cluster agent for h100, l4"},
			},
		},
		"ReportsRelayed": {
			reason: "the three report fields are copied into the pool's entry, and nothing else changes; a pool the agent cannot observe has none",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				c := with(open(t), KeyPool("l4"), observedPool(t, l4Report))
				c = with(c, KeyPool("h100"), observedPool(t, `conditions: [{type: Synced, status: "False", reason: DeviceClassNotFound}]`))
				return ClusterInput{DesiredStatus: y(t, clusterStatus), Composed: c}
			},
			want: want{
				status: `
providerConfigRef: {name: eks-cluster-kubeconfig-1a2b3}
namespace: modelplane-system
gateway: {address: gw.example.com}
gpuPools:
- name: l4
  nodes: 4
  devices: [{name: gpu, driver: gpu.nvidia.com, deviceClassName: gpu.nvidia.com, count: 4, attributes: {productName: {string: NVIDIA L4}}}]
  observedNodes: 3
  observedAt: "2026-10-20T20:06:00Z"
  nodesByFreeDevices: [{nodes: 2, free: [{name: gpu, count: 4}]}, {nodes: 1, free: [{name: gpu, count: 1}]}]
- name: h100
  nodes: 2
  devices: [{name: gpu, driver: gpu.nvidia.com, deviceClassName: gpu.nvidia.com, count: 8}]
`,
				resources: func(t *testing.T) map[string]map[string]any {
					t.Helper()
					return withPools(t, "l4", "h100")
				},
				condition: Condition{Type: ConditionPoolsObserved, Status: "False", Reason: ReasonPoolsNotReported, Message: "no report from the cluster agent for h100"},
			},
		},
		"AllReported": {
			reason: "every pool reported",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				c := with(open(t), KeyPool("l4"), observedPool(t, l4Report))
				c = with(c, KeyPool("h100"), observedPool(t, `{observedNodes: 0, observedAt: "2026-10-20T20:06:00Z", nodesByFreeDevices: []}`))
				return ClusterInput{DesiredStatus: y(t, clusterStatus), Composed: c}
			},
			want: want{
				status: allReported,
				resources: func(t *testing.T) map[string]map[string]any {
					t.Helper()
					return withPools(t, "l4", "h100")
				},
				condition: Condition{Type: ConditionPoolsObserved, Status: "True", Reason: ReasonAllPoolsReported},
			},
		},
		"ReportsTheSchemaRefuses": {
			reason: "a report the InferenceCluster's schema would refuse is left out with a warning naming the field, so the rest of the status is written",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				c := with(open(t), KeyPool("l4"), observedPool(t, `{observedNodes: 2097152, observedAt: "2026-10-20T20:06:00Z", nodesByFreeDevices: []}`))
				c = with(c, KeyPool("h100"), observedPool(t, `{observedAt: "2026-10-20T20:06:00Z"}`))
				return ClusterInput{DesiredStatus: y(t, clusterStatus), Composed: c}
			},
			want: want{
				status: clusterStatus,
				resources: func(t *testing.T) map[string]map[string]any {
					t.Helper()
					return withPools(t, "l4", "h100")
				},
				condition: Condition{Type: ConditionPoolsObserved, Status: "False", Reason: ReasonPoolsNotReported, Message: "no report from the cluster agent for h100, l4"},
				warnings: []string{
					"pool l4: the PoolObservation's report is not relayed: observedNodes: 2097152 is not a whole number from 0 to 1048576",
					"pool h100: the PoolObservation's report is not relayed: it has only some of observedNodes, observedAt and nodesByFreeDevices",
				},
			},
		},
		"StaleFieldsDropped": {
			reason: "report fields in the earlier steps' entry are the relay's to set: with no report they are removed, so the pool reads as unobserved",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				st := y(t, clusterStatus)
				p := st["gpuPools"].([]any)[1].(map[string]any)
				p["observedAt"], p["observedNodes"], p["nodesByFreeDevices"] = "2020-01-01T00:00:00Z", 1.0, []any{}
				return ClusterInput{DesiredStatus: st, Composed: with(open(t), KeyPool("l4"), observedPool(t, l4Report))}
			},
			want: want{
				status: `
providerConfigRef: {name: eks-cluster-kubeconfig-1a2b3}
namespace: modelplane-system
gateway: {address: gw.example.com}
gpuPools:
- name: l4
  nodes: 4
  devices: [{name: gpu, driver: gpu.nvidia.com, deviceClassName: gpu.nvidia.com, count: 4, attributes: {productName: {string: NVIDIA L4}}}]
  observedNodes: 3
  observedAt: "2026-10-20T20:06:00Z"
  nodesByFreeDevices: [{nodes: 2, free: [{name: gpu, count: 4}]}, {nodes: 1, free: [{name: gpu, count: 1}]}]
- name: h100
  nodes: 2
  devices: [{name: gpu, driver: gpu.nvidia.com, deviceClassName: gpu.nvidia.com, count: 8}]
`,
				resources: func(t *testing.T) map[string]map[string]any {
					t.Helper()
					return withPools(t, "l4", "h100")
				},
				condition: Condition{Type: ConditionPoolsObserved, Status: "False", Reason: ReasonPoolsNotReported, Message: "no report from the cluster agent for h100"},
			},
		},
		"SteeredRelayed": {
			reason: "a report that says binding Steered is relayed with it",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				c := with(open(t), KeyPool("l4"), observedPool(t, l4Report+"binding: Steered\n"))
				c = with(c, KeyPool("h100"), observedPool(t, `{observedNodes: 0, observedAt: "2026-10-20T20:06:00Z", nodesByFreeDevices: []}`))
				return ClusterInput{DesiredStatus: y(t, clusterStatus), Composed: c}
			},
			want: want{
				// l4's entry says Steered, h100's nothing.
				status: strings.Replace(allReported, "- name: h100", "  binding: Steered\n- name: h100", 1),
				resources: func(t *testing.T) map[string]map[string]any {
					t.Helper()
					return withPools(t, "l4", "h100")
				},
				condition: Condition{Type: ConditionPoolsObserved, Status: "True", Reason: ReasonAllPoolsReported},
			},
		},
		"SteeredClearedWithTheAgent": {
			reason: "a Steered in the earlier steps' entry never outlives the agent's saying so: with a report that no longer says it (l4), with a binding the schema refuses (h100), it is removed",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				st := steeredBefore(t)
				c := with(open(t), KeyPool("l4"), observedPool(t, l4Report))
				c = with(c, KeyPool("h100"), observedPool(t, `{observedNodes: 0, observedAt: "2026-10-20T20:06:00Z", nodesByFreeDevices: [], binding: Guessed}`))
				return ClusterInput{DesiredStatus: st, Composed: c}
			},
			want: want{
				status: allReported,
				resources: func(t *testing.T) map[string]map[string]any {
					t.Helper()
					return withPools(t, "l4", "h100")
				},
				condition: Condition{Type: ConditionPoolsObserved, Status: "True", Reason: ReasonAllPoolsReported},
			},
		},
		"SteeredClearedWithoutAReport": {
			reason: "a Steered without a report to go with it is removed: a binding alone (l4) or a report that is not relayed (h100)",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				st := steeredBefore(t)
				c := with(open(t), KeyPool("l4"), observedPool(t, `{binding: Steered}`))
				c = with(c, KeyPool("h100"), observedPool(t, `{observedAt: "2026-10-20T20:06:00Z", binding: Steered}`))
				return ClusterInput{DesiredStatus: st, Composed: c}
			},
			want: want{
				status:    clusterStatus,
				resources: func(t *testing.T) map[string]map[string]any { t.Helper(); return withPools(t, "l4", "h100") },
				condition: Condition{Type: ConditionPoolsObserved, Status: "False", Reason: ReasonPoolsNotReported, Message: "no report from the cluster agent for h100, l4"},
				warnings:  []string{"pool h100: the PoolObservation's report is not relayed: it has only some of observedNodes, observedAt and nodesByFreeDevices"},
			},
		},
		"ObjectsKeptWhenTheGateCloses": {
			reason: "a PoolObservation once composed stays composed: deleting and re-creating would flap",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				return ClusterInput{DesiredStatus: y(t, clusterStatus), Composed: map[string]map[string]any{KeyPool("l4"): observedPool(t, l4Report)}}
			},
			want: want{
				status: `
providerConfigRef: {name: eks-cluster-kubeconfig-1a2b3}
namespace: modelplane-system
gateway: {address: gw.example.com}
gpuPools:
- name: l4
  nodes: 4
  devices: [{name: gpu, driver: gpu.nvidia.com, deviceClassName: gpu.nvidia.com, count: 4, attributes: {productName: {string: NVIDIA L4}}}]
  observedNodes: 3
  observedAt: "2026-10-20T20:06:00Z"
  nodesByFreeDevices: [{nodes: 2, free: [{name: gpu, count: 4}]}, {nodes: 1, free: [{name: gpu, count: 1}]}]
- name: h100
  nodes: 2
  devices: [{name: gpu, driver: gpu.nvidia.com, deviceClassName: gpu.nvidia.com, count: 8}]
`,
				resources: func(t *testing.T) map[string]map[string]any {
					t.Helper()
					return withPools(t, "l4")
				},
				condition: Condition{Type: ConditionPoolsObserved, Status: "False", Reason: ReasonPoolsNotReported, Message: "no report from the cluster agent for h100"},
			},
		},
		"NoPoolsWritten": {
			reason: "earlier steps that wrote no gpuPools: the status is theirs, the Objects are composed from the observed pools",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				return ClusterInput{Observed: map[string]any{"status": y(t, clusterStatus)}, Composed: open(t)}
			},
			want: want{
				resources: func(t *testing.T) map[string]map[string]any {
					t.Helper()
					return withPools(t, "l4", "h100")
				},
				condition: Condition{Type: ConditionPoolsObserved, Status: "False", Reason: ReasonPoolsNotReported, Message: "the earlier steps wrote no status.gpuPools: no report is relayed"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := tc.in(t)
			before := cmp.Diff(nil, in.DesiredStatus)
			got := Cluster(in)
			wantStatus, gotStatus := y(t, tc.want.status), got.Status
			if _, ok := wantStatus[FieldPoolReports]; !ok && gotStatus != nil {
				// The case states the pools; the summary is checked
				// against them, then left out of the comparison.
				checkPoolReports(t, wantStatus["gpuPools"], gotStatus[FieldPoolReports])
				gotStatus = maps.Clone(gotStatus)
				delete(gotStatus, FieldPoolReports)
			}
			if diff := cmp.Diff(wantStatus, gotStatus, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nStatus: -want, +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.resources(t), got.Resources, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nResources: -want, +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.condition, got.Condition); diff != "" {
				t.Errorf("%s\nCondition: -want, +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.warnings, got.Warnings, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nWarnings: -want, +got:\n%s", tc.reason, diff)
			}
			if after := cmp.Diff(nil, in.DesiredStatus); after != before {
				t.Errorf("Cluster changed its input's DesiredStatus")
			}
		})
	}
}

// checkPoolReports checks status.poolReports against the gpuPools a case
// expects: how many pools, how many with a report (an observedAt), and the
// oldest observedAt (the fixtures' times are all of one RFC 3339 form, so
// they order as strings).
func checkPoolReports(t *testing.T, pools, got any) {
	t.Helper()
	list, _ := pools.([]any)
	want := map[string]any{"pools": int64(len(list)), "reported": int64(0)}
	for _, p := range list {
		at, _ := p.(map[string]any)[agentv1alpha1.FieldObservedAt].(string)
		if at == "" {
			continue
		}
		want["reported"] = want["reported"].(int64) + 1
		if oldest, ok := want["oldestObservedAt"].(string); !ok || at < oldest {
			want["oldestObservedAt"] = at
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status.%s: -want, +got:\n%s", FieldPoolReports, diff)
	}
}

func TestReportsSummary(t *testing.T) {
	cases := map[string]struct {
		reason string
		pools  []any
		want   map[string]any
	}{
		"None":       {reason: "No pools: none reported, no oldest.", want: map[string]any{"pools": int64(0), "reported": int64(0)}},
		"Unreported": {reason: "Pools without a report count, and report nothing.", pools: []any{map[string]any{"name": "a"}}, want: map[string]any{"pools": int64(1), "reported": int64(0)}},
		"OldestByTime": {
			reason: "The oldest by time, not by text: an offset other than Z is read as the time it is.",
			pools: []any{
				map[string]any{"name": "a", "observedAt": "2026-10-20T20:06:00Z"},
				map[string]any{"name": "b", "observedAt": "2026-10-20T21:05:00+02:00"},
				map[string]any{"name": "c"},
			},
			want: map[string]any{"pools": int64(3), "reported": int64(2), "oldestObservedAt": "2026-10-20T21:05:00+02:00"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, reportsSummary(tc.pools)); diff != "" {
				t.Errorf("%s\nreportsSummary(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
