// Package v1beta1 contains the input type for the fleet-scheduler function.
// +kubebuilder:object:generate=true
// +groupName=scheduler.fn.modelplane.ai
// +versionName=v1beta1
package v1beta1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// AssumedBinding names the node the ledger assumes a cluster's scheduler binds
// a pod to.
// +kubebuilder:validation:Enum=MostFree;LeastFree
type AssumedBinding string

// The bindings the ledger can assume.
const (
	// AssumedBindingMostFree assumes the node with the most of the claimed
	// devices free. kube-scheduler scores no DRA device; see
	// scheduling.MostFree for when its default profile lands there.
	AssumedBindingMostFree AssumedBinding = "MostFree"
	// AssumedBindingLeastFree assumes the node with the fewest of the claimed
	// devices free that still fits: where MostAllocated (bin-packing)
	// scoring lands pods, and the default profile once nodes hold the
	// serving image (scheduling.LeastFree).
	AssumedBindingLeastFree AssumedBinding = "LeastFree"
)

// The input's apiVersion and kind, which a Composition's input must name.
const (
	APIVersion = "scheduler.fn.modelplane.ai/v1beta1"
	Kind       = "Input"
)

// Defaults used when the input, or a field of it, is absent.
const (
	DefaultObservationMaxAge       = "5m"
	DefaultAssumedBinding          = AssumedBindingMostFree
	DefaultReplaceUnscheduledAfter = "15m"
	DefaultAgentReleaseNamespace   = "modelplane-cluster-agent"
)

// Bounds of ObservationMaxAge, which the function and the relay both
// refuse an input outside of (internal/plan says why these).
const (
	MinObservationMaxAge = 3 * time.Minute
	MaxObservationMaxAge = 24 * time.Hour
)

// Input configures how fleet-scheduler accounts for the capacity the cluster
// agent reports. Every field is optional.
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:resource:categories=crossplane
type Input struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// ObservationMaxAge is how old a pool's observation (its observedAt) may
	// be and still be used for free-device accounting. An older one falls back
	// to whole-node accounting. A Go duration, for example 5m or 90s.
	// +optional
	// +kubebuilder:default="5m"
	ObservationMaxAge *string `json:"observationMaxAge,omitempty"`

	// AssumedBinding is which node the ledger assumes the cluster's scheduler
	// binds a pod to. LeastFree suits clusters whose kube-scheduler scores with
	// MostAllocated.
	// +optional
	// +kubebuilder:default=MostFree
	AssumedBinding *AssumedBinding `json:"assumedBinding,omitempty"`

	// ReplaceUnscheduledAfter is how long a replica's pods may stay
	// unscheduled (its PodsScheduled condition False) before the replica is
	// re-placed on a pool it was not stuck on. 15m by default, because a
	// pool that grows needs minutes to boot a GPU node; 0s turns it off. A Go
	// duration, for example 15m or 1h.
	// +optional
	// +kubebuilder:default="15m"
	ReplaceUnscheduledAfter *string `json:"replaceUnscheduledAfter,omitempty"`

	// AgentRelease installs the cluster agent's Helm chart in every
	// InferenceCluster's workload cluster, through a provider-helm Release
	// that the relay composes with the cluster. Only the relay's step in the
	// InferenceCluster Composition reads it; fleet-scheduler and the
	// ModelReplica step ignore it. Absent, the relay installs nothing and
	// the agent is installed on each cluster by hand
	// (docs/cluster-agent.md#a-release-with-every-cluster).
	// +optional
	AgentRelease *AgentRelease `json:"agentRelease,omitempty"`
}

// AgentRelease is the cluster agent's chart, as a provider-helm Release
// installs it in each workload cluster.
type AgentRelease struct {
	// Chart is the chart's OCI reference without its version, as
	// ./hack/release.sh pushes it: oci://REGISTRY/charts/cluster-agent.
	// +kubebuilder:validation:Pattern=`^oci://[^/]+/.+$`
	Chart string `json:"chart"`

	// Version is the chart's version, for example 0.1.0.
	// +kubebuilder:validation:MinLength=1
	Version string `json:"version"`

	// Namespace is where the Release installs the agent in each workload
	// cluster; the Release makes it when it does not exist.
	// +optional
	// +kubebuilder:default=modelplane-cluster-agent
	Namespace *string `json:"namespace,omitempty"`

	// Values are the chart's values (docs/cluster-agent.md), the same for
	// every cluster. namespace.create is false unless they set it, since the
	// Release makes the namespace.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	Values *runtime.RawExtension `json:"values,omitempty"`

	// PlainHTTP pulls the chart over HTTP, from a registry without TLS.
	// +optional
	PlainHTTP bool `json:"plainHTTP,omitempty"`
}
