package relay

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/modelplaneai/fleet-scheduler/input/v1beta1"
)

// kubernetesPC is the provider-kubernetes ClusterProviderConfig
// compose-inference-cluster composes for clusterStatus's providerConfigRef.
const kubernetesPC = `
apiVersion: kubernetes.m.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: eks-cluster-kubeconfig-1a2b3}
spec:
  credentials: {source: Secret, secretRef: {namespace: modelplane-system, name: eks-kubeconfig, key: kubeconfig}}
  identity: {type: AWSWebIdentityCredentials, source: Secret, secretRef: {namespace: modelplane-system, name: eks-identity, key: credentials}}
`

// helmPC is kubernetesPC as provider-helm's, as the relay composes it.
const helmPC = `
apiVersion: helm.m.crossplane.io/v1beta1
kind: ClusterProviderConfig
metadata: {name: eks-cluster-kubeconfig-1a2b3}
spec:
  credentials: {source: Secret, secretRef: {namespace: modelplane-system, name: eks-kubeconfig, key: kubeconfig}}
  identity: {type: AWSWebIdentityCredentials, source: Secret, secretRef: {namespace: modelplane-system, name: eks-identity, key: credentials}}
`

// release is the Release the relay composes for chart
// oci://registry.example.com/acme/charts/cluster-agent 0.1.0 with no values.
const release = `
apiVersion: helm.m.crossplane.io/v1beta1
kind: Release
metadata:
  namespace: modelplane-system
  annotations: {crossplane.io/external-name: mp-cluster-agent}
spec:
  providerConfigRef: {kind: ClusterProviderConfig, name: eks-cluster-kubeconfig-1a2b3}
  forProvider:
    chart: {repository: "oci://registry.example.com/acme/charts", name: cluster-agent, version: 0.1.0}
    namespace: modelplane-cluster-agent
    values: {namespace: {create: false}}
    takeOwnership: true
`

func TestAgentRelease(t *testing.T) {
	chart := "oci://registry.example.com/acme/charts/cluster-agent"
	valid := func() *v1beta1.AgentRelease { return &v1beta1.AgentRelease{Chart: chart, Version: "0.1.0"} }
	desired := func(t *testing.T) map[string]map[string]any {
		t.Helper()
		return map[string]map[string]any{"cluster-provider-config-kubernetes": y(t, kubernetesPC)}
	}
	// observedRelease is the Release as it exists: named, with what the
	// API server and provider-helm wrote.
	observedRelease := func(t *testing.T) map[string]any {
		t.Helper()
		r := y(t, release)
		meta := mapAt(r, "metadata")
		meta["name"] = "eks-4f7k2"
		meta["uid"] = "0b6f"
		meta["resourceVersion"] = "812"
		meta["annotations"] = map[string]any{
			"crossplane.io/external-name":             "mp-cluster-agent",
			"crossplane.io/external-create-succeeded": "2026-10-20T20:06:00Z",
			"crossplane.io/composition-resource-name": "agent-release",
		}
		meta["finalizers"] = []any{"finalizer.managedresource.crossplane.io"}
		r["status"] = map[string]any{"atProvider": map[string]any{"revision": int64(1)}}
		return r
	}
	// composedWith is release, changed by change when set, with helmPC: the
	// two resources as the relay composes them.
	composedWith := func(change func(release map[string]any)) func(t *testing.T) map[string]map[string]any {
		return func(t *testing.T) map[string]map[string]any {
			t.Helper()
			r := y(t, release)
			if change != nil {
				change(r)
			}
			return map[string]map[string]any{KeyAgentRelease: r, KeyAgentReleaseProviderConfig: y(t, helmPC)}
		}
	}
	type want struct {
		resources func(t *testing.T) map[string]map[string]any // the Release and its provider config only
		warnings  []string
		reason    string // PoolsObserved's
	}
	cases := map[string]struct {
		reason string
		in     func(t *testing.T) ClusterInput
		want   want
	}{
		"Composed": {
			reason: "the Release installs the chart as mp-cluster-agent, through a provider-helm ClusterProviderConfig with the credentials and identity of the cluster's provider-kubernetes one; the Release makes the namespace, so the chart's is off",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				return ClusterInput{DesiredStatus: y(t, clusterStatus), Desired: desired(t), AgentRelease: valid()}
			},
			want: want{
				resources: composedWith(nil),
				reason:    ReasonAgentNotServed,
			},
		},
		"ValuesNamespaceAndPlainHTTP": {
			reason: "values pass through, namespace.create too when they set it false; the namespace and plain HTTP are the input's",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				r := valid()
				ns := "gpu-agent"
				r.Namespace = &ns
				r.PlainHTTP = true
				r.Values = &runtime.RawExtension{Raw: []byte(`{"podNamespaces":["serving"],"namespace":{"create":false,"labels":{"team":"ml"}}}`)}
				return ClusterInput{DesiredStatus: y(t, clusterStatus), Desired: desired(t), AgentRelease: r}
			},
			want: want{
				resources: composedWith(func(r map[string]any) {
					fp := mapAt(r, "spec", "forProvider")
					fp["namespace"] = "gpu-agent"
					fp["plainHTTP"] = true
					fp["values"] = map[string]any{"podNamespaces": []any{"serving"}, "namespace": map[string]any{"create": false, "labels": map[string]any{"team": "ml"}}}
				}),
				reason: ReasonAgentNotServed,
			},
		},
		"CredentialsFromObserved": {
			reason: "when the earlier steps desire no ClusterProviderConfig of that name, the composed one's credentials are taken",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				return ClusterInput{DesiredStatus: y(t, clusterStatus), Composed: desired(t), AgentRelease: valid()}
			},
			want: want{
				resources: composedWith(nil),
				reason:    ReasonAgentNotServed,
			},
		},
		"NoKubernetesProviderConfig": {
			reason: "without the provider-kubernetes ClusterProviderConfig the status names there are no credentials to take: a warning, and no Release",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				other := y(t, kubernetesPC)
				mapAt(other, "metadata")["name"] = "another-cluster"
				return ClusterInput{DesiredStatus: y(t, clusterStatus), Desired: map[string]map[string]any{"pc": other}, AgentRelease: valid()}
			},
			want: want{
				warnings: []string{"the cluster agent's Release is not composed: no provider-kubernetes ClusterProviderConfig eks-cluster-kubeconfig-1a2b3 is composed with the InferenceCluster to take its credentials from"},
				reason:   ReasonAgentNotServed,
			},
		},
		"NoCredentials": {
			reason: "a ClusterProviderConfig without credentials is named",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				pc := y(t, kubernetesPC)
				delete(mapAt(pc, "spec"), "credentials")
				return ClusterInput{DesiredStatus: y(t, clusterStatus), Desired: map[string]map[string]any{"pc": pc}, AgentRelease: valid()}
			},
			want: want{
				warnings: []string{"the cluster agent's Release is not composed: provider-kubernetes ClusterProviderConfig eks-cluster-kubeconfig-1a2b3 has no spec.credentials"},
				reason:   ReasonAgentNotServed,
			},
		},
		"BadInputKeepsRelease": {
			reason: "a Release composed before is kept as it exists, less what the server, Crossplane and provider-helm wrote to its metadata, when the input goes wrong: never uninstalled by a typo",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				composed := map[string]map[string]any{KeyAgentRelease: observedRelease(t), KeyAgentReleaseProviderConfig: y(t, helmPC)}
				return ClusterInput{DesiredStatus: y(t, clusterStatus), Desired: desired(t), Composed: composed, AgentReleaseErr: errors.New("cannot read the relay's input: agentRelease: bad")}
			},
			want: want{
				resources: composedWith(func(r map[string]any) { mapAt(r, "metadata")["name"] = "eks-4f7k2" }),
				warnings:  []string{"the cluster agent's Release is not composed: cannot read the relay's input: agentRelease: bad; the Release composed before is kept as it is"},
				reason:    ReasonAgentNotServed,
			},
		},
		"GateOpen": {
			reason: "the Release is composed beside the pools' Objects once the agent is served",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				served := map[string]map[string]any{KeyCRDPoolObservations: crd(t, "True"), KeyCRDReplicaObservations: crd(t, "True")}
				return ClusterInput{DesiredStatus: y(t, clusterStatus), Desired: desired(t), Composed: served, AgentRelease: valid()}
			},
			want: want{
				resources: composedWith(nil),
				reason:    ReasonPoolsNotReported,
			},
		},
		"NullValues": {
			reason: "values null are no values",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				r := valid()
				r.Values = &runtime.RawExtension{Raw: []byte(`null`)}
				return ClusterInput{DesiredStatus: y(t, clusterStatus), Desired: desired(t), AgentRelease: r}
			},
			want: want{
				resources: composedWith(nil),
				reason:    ReasonAgentNotServed,
			},
		},
		"NoProviderConfigRefKeepsRelease": {
			reason: "a Release composed before is kept while the cluster's status names no provider config: an earlier step's lapse never uninstalls the agent",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				composed := map[string]map[string]any{KeyAgentRelease: observedRelease(t), KeyAgentReleaseProviderConfig: y(t, helmPC)}
				return ClusterInput{Observed: y(t, `metadata: {name: eks}`), Composed: composed, AgentRelease: valid()}
			},
			want: want{
				resources: composedWith(func(r map[string]any) { mapAt(r, "metadata")["name"] = "eks-4f7k2" }),
				reason:    ReasonNoProviderConfig,
			},
		},
		"NoAgentReleaseDropsIt": {
			reason: "an input without agentRelease composes none, even where one was composed: that is how the agent is uninstalled",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				composed := map[string]map[string]any{KeyAgentRelease: observedRelease(t), KeyAgentReleaseProviderConfig: y(t, helmPC)}
				return ClusterInput{DesiredStatus: y(t, clusterStatus), Desired: desired(t), Composed: composed}
			},
			want: want{reason: ReasonAgentNotServed},
		},
		"NoProviderConfigRef": {
			reason: "without the cluster's providerConfigRef nothing is composed, the Release neither",
			in: func(t *testing.T) ClusterInput {
				t.Helper()
				return ClusterInput{Observed: y(t, `metadata: {name: eks}`), Desired: desired(t), AgentRelease: valid()}
			},
			want: want{reason: ReasonNoProviderConfig},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			out := Cluster(tc.in(t))
			got := map[string]map[string]any{}
			for _, k := range []string{KeyAgentRelease, KeyAgentReleaseProviderConfig} {
				if r, ok := out.Resources[k]; ok {
					got[k] = r
				}
			}
			want := map[string]map[string]any{}
			if tc.want.resources != nil {
				want = tc.want.resources(t)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s\nCluster(...): -want Release, +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.warnings, out.Warnings); diff != "" {
				t.Errorf("%s\nCluster(...): -want warnings, +got:\n%s", tc.reason, diff)
			}
			if out.Condition.Reason != tc.want.reason {
				t.Errorf("%s\nCluster(...): PoolsObserved %s, want %s", tc.reason, out.Condition.Reason, tc.want.reason)
			}
		})
	}
}

func TestAgentReleaseInputRefused(t *testing.T) {
	cases := map[string]struct {
		reason string
		change func(r *v1beta1.AgentRelease)
		want   string // the warning, after "the cluster agent's Release is not composed: "
	}{
		"ChartNotOCI": {
			reason: "a chart that is not an OCI reference is refused by name",
			change: func(r *v1beta1.AgentRelease) { r.Chart = "https://charts.example.com/cluster-agent" },
			want:   `input agentRelease.chart "https://charts.example.com/cluster-agent" must be the chart's OCI reference without its version, as oci://REGISTRY/charts/cluster-agent`,
		},
		"ChartWithoutName": {
			reason: "a chart reference ending in a slash names no chart",
			change: func(r *v1beta1.AgentRelease) { r.Chart = "oci://registry.example.com/acme/charts/" },
			want:   `input agentRelease.chart "oci://registry.example.com/acme/charts/" must be the chart's OCI reference without its version, as oci://REGISTRY/charts/cluster-agent`,
		},
		"ChartWithVersion": {
			reason: "a chart reference with a tag is refused: the version has a field of its own",
			change: func(r *v1beta1.AgentRelease) { r.Chart = "oci://localhost:5000/charts/cluster-agent:0.1.0" },
			want:   `input agentRelease.chart "oci://localhost:5000/charts/cluster-agent:0.1.0" must not carry a version: set agentRelease.version`,
		},
		"NoVersion": {
			reason: "an empty version is refused: provider-helm would take whatever is newest",
			change: func(r *v1beta1.AgentRelease) { r.Version = " " },
			want:   `input agentRelease.version " " must be the chart's version, for example 0.1.0`,
		},
		"VersionWithSpaces": {
			reason: "a version with spaces is refused, not sent as it is",
			change: func(r *v1beta1.AgentRelease) { r.Version = " 0.1.0" },
			want:   `input agentRelease.version " 0.1.0" must be the chart's version, for example 0.1.0`,
		},
		"BadNamespace": {
			reason: "a namespace that cannot be one is refused by name",
			change: func(r *v1beta1.AgentRelease) { ns := "GPU_Agent"; r.Namespace = &ns },
			want:   `input agentRelease.namespace "GPU_Agent" must be a namespace's name: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit`,
		},
		"ValuesNotAnObject": {
			reason: "values that are not an object are refused",
			change: func(r *v1beta1.AgentRelease) { r.Values = &runtime.RawExtension{Raw: []byte(`["podNamespaces"]`)} },
			want:   "input agentRelease.values must be an object of the chart's values: json: cannot unmarshal array into Go value of type map[string]interface {}",
		},
		"NamespaceCreateRefused": {
			reason: "the chart's own namespace would collide with the one the Release makes: refused by name",
			change: func(r *v1beta1.AgentRelease) {
				r.Values = &runtime.RawExtension{Raw: []byte(`{"namespace":{"create":true}}`)}
			},
			want: "input agentRelease.values.namespace.create must not be true: the Release makes the namespace, and Helm would refuse the chart's own",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := &v1beta1.AgentRelease{Chart: "oci://registry.example.com/acme/charts/cluster-agent", Version: "0.1.0"}
			tc.change(r)
			out := Cluster(ClusterInput{
				DesiredStatus: y(t, clusterStatus),
				Desired:       map[string]map[string]any{"cluster-provider-config-kubernetes": y(t, kubernetesPC)},
				AgentRelease:  r,
			})
			if diff := cmp.Diff([]string{"the cluster agent's Release is not composed: " + tc.want}, out.Warnings); diff != "" {
				t.Errorf("%s\nCluster(...): -want warnings, +got:\n%s", tc.reason, diff)
			}
			for _, k := range []string{KeyAgentRelease, KeyAgentReleaseProviderConfig} {
				if _, ok := out.Resources[k]; ok {
					t.Errorf("%s\nCluster(...): composed %s, want nothing of the refused input", tc.reason, k)
				}
			}
		})
	}
}
