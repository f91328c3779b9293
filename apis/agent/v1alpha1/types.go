// Package v1alpha1 holds the cluster agent's two kinds,
// agent.modelplane.ai/v1alpha1 PoolObservation and ReplicaObservation
// (docs/spec.md#the-cluster-agent): the control plane creates them in a
// workload cluster, the agent writes their status, and the control plane
// reads it back. Their CRDs are deploy/cluster-agent/crds/.
//
// It is the contract between the three binaries: the agent writes these
// kinds, the relay copies their reports onto InferenceClusters and
// ModelReplicas, and the function reads them there. So it imports only
// Kubernetes' API types and the Modelplane kinds it describes pools with,
// and every binary may import it.
package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fsv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// Group and version of the agent's kinds.
const (
	Group   = "agent.modelplane.ai"
	Version = "v1alpha1"
)

// The agent's kinds and their resources.
const (
	KindPoolObservation    = "PoolObservation"
	KindReplicaObservation = "ReplicaObservation"
)

// PoolObservationResource and ReplicaObservationResource are the
// resources the agent reads and whose status it writes.
var (
	PoolObservationResource    = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "poolobservations"}    //nolint:gochecknoglobals // A constant; Go has no constant structs.
	ReplicaObservationResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "replicaobservations"} //nolint:gochecknoglobals // A constant; Go has no constant structs.
)

// The fields of a pool's report: a PoolObservation's status, and the same
// fields on the pool's entry of an InferenceCluster's status.gpuPools[]
// once the relay has copied them (docs/spec.md#pool-reports).
const (
	FieldObservedNodes      = "observedNodes"
	FieldObservedAt         = "observedAt"
	FieldNodesByFreeDevices = "nodesByFreeDevices"
)

// FieldBinding is the optional field of a pool's report that says how
// its pods bind: BindingSteered while the agent steers the pool
// (docs/spec.md#steering), absent otherwise. It sits beside the three
// fields below, in the PoolObservation's status and in the pool's entry of
// status.gpuPools[], and is relayed with them.
const FieldBinding = "binding"

// BindingSteered is FieldBinding's one value: the agent decides which node
// each claiming pod of the pool binds to, by the rule the function
// accounts the pool with.
const BindingSteered = "Steered"

// ReportFields are the three fields of a pool's report, in the order above.
var ReportFields = [...]string{FieldObservedNodes, FieldObservedAt, FieldNodesByFreeDevices} //nolint:gochecknoglobals // A constant list; Go has no constant arrays.

// The fields of a Bucket and of a Free.
const (
	FieldBucketNodes = "nodes"
	FieldBucketFree  = "free"
	FieldFreeName    = "name"
	FieldFreeCount   = "count"
)

// Bucket is how many nodes have exactly the free devices it lists. A pool
// device it does not list has none free on them.
type Bucket struct {
	Nodes int64  `json:"nodes"`
	Free  []Free `json:"free"`
}

// Free is how many devices of one pool device (by name) a node has free.
type Free struct {
	Name  string `json:"name"`
	Count int64  `json:"count"`
}

// DeviceSummary is a pool report summed for people, per pool device:
// kubectl's FREE and TOTAL columns. The function and the relay read the
// histogram, never this.
type DeviceSummary struct {
	// Name is the pool device's, as spec.devices[].name.
	Name string `json:"name"`
	// Free is how many of the device are free on the nodes the histogram
	// counts (those a new pod could land on), summed before buckets are
	// merged, so exact.
	Free int64 `json:"free"`
	// Total is observedNodes times the device's spec count: what the
	// pool's nodes have, ready or not, by its description.
	Total int64 `json:"total"`
}

// Steering is whether the agent steers a pool's claiming pods
// (docs/spec.md#steering). An enumeration rather than a bool, as
// Kubernetes' API conventions advise, so that other ways of steering can
// be added without a second field.
type Steering string

// The values of PoolObservationSpec.Steering.
const (
	// SteeringDisabled: the cluster's own scheduler picks each pod's node,
	// and nothing in the cluster changes. The default.
	SteeringDisabled Steering = "Disabled"
	// SteeringEnabled: the agent holds each claiming pod of the pool at
	// admission, decides its node and releases it pinned there.
	SteeringEnabled Steering = "Enabled"
)

// What steering puts on Pods and on the admission policy that holds them.
// The shipped MutatingAdmissionPolicy (deploy/cluster-agent/steering/policy.yaml)
// and the agent use these names.
const (
	// SchedulingGate is the scheduling gate the admission policy adds to a
	// claiming pod of a steered pool, and the agent removes when it
	// releases the pod.
	SchedulingGate = "agent.modelplane.ai/steering"
	// AnnotationSteeredPools is on the leading agent's own Pod: the names
	// of the pools it steers, comma-separated. The admission policy reads
	// it from its param (that Pod) and holds only those pools' pods.
	AnnotationSteeredPools = "agent.modelplane.ai/steered-pools"
	// AnnotationSteeredTo is on a pod the agent released: the node it
	// decided, or empty when the pod fitted no node and was released
	// unpinned. A bound claiming pod of a steered pool without it bound
	// without the agent's decision.
	AnnotationSteeredTo = "agent.modelplane.ai/steered-to"
	// AnnotationSteerPools is on an InferenceCluster in the control plane:
	// the pools of its workload cluster to steer, comma-separated, or "*"
	// for every pool. The relay composes their PoolObservations with
	// spec.steering Enabled and every other pool's with Disabled.
	AnnotationSteerPools = "agent.modelplane.ai/steer-pools"
	// SteeringPolicy is the name of the shipped MutatingAdmissionPolicy
	// that holds a steered pool's pods, and of its binding. The agent
	// reports a pool Steered only while both exist as shipped.
	SteeringPolicy = "modelplane-cluster-agent-steering"
)

// Condition types the agent writes.
const (
	// ConditionSynced is a PoolObservation's: True while the agent reports
	// the pool, False with why when it cannot.
	ConditionSynced = "Synced"
	// ConditionSteering is a PoolObservation's while its spec asks for
	// steering: True while steering is in force and the status says
	// binding Steered, False with why when it is not.
	ConditionSteering = "Steering"
	// ConditionPodsScheduled is a ReplicaObservation's: True once spec.pods
	// of the selected pods are bound to a node.
	ConditionPodsScheduled = "PodsScheduled"
)

// Reasons of the Synced condition.
const (
	// ReasonObserved: the status holds the pool's report.
	ReasonObserved = "Observed"
	// ReasonInvalidSpec: the PoolObservation's spec cannot be read (a
	// device without a driver, a node selector that is not a selector).
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonDeviceClassNotFound: a pool device names a DeviceClass the
	// cluster does not have.
	ReasonDeviceClassNotFound = "DeviceClassNotFound"
	// ReasonInvalidObject: an object of the cluster cannot be read (a
	// DeviceClass whose CEL selector does not compile, a claim holding a
	// device its resource pool does not have).
	ReasonInvalidObject = "InvalidObject"
	// ReasonCannotCount: the DRA allocator failed on a node of the pool.
	ReasonCannotCount = "CannotCount"
)

// Reasons of the Steering condition (docs/spec.md#steering). It is True
// with ReasonSteered while the status says binding Steered, and otherwise
// False with one of the others and a message saying what to do.
const (
	// ReasonSteered: steering is in force: the admission policy and its
	// binding are as shipped, this agent leads, keeps the pool in its
	// Pod's AnnotationSteeredPools, and no claiming pod of the pool bound
	// without its decision during the last report period.
	ReasonSteered = "Steered"
	// ReasonAdmissionPolicyUnsupported: the cluster does not serve
	// admissionregistration.k8s.io/v1 MutatingAdmissionPolicies
	// (Kubernetes older than 1.36): the agent cannot hold pods there.
	ReasonAdmissionPolicyUnsupported = "AdmissionPolicyUnsupported"
	// ReasonPolicyNotFound: the policy or its binding named
	// SteeringPolicy does not exist, or the agent cannot read them.
	ReasonPolicyNotFound = "PolicyNotFound"
	// ReasonPolicyNotAsShipped: the policy or its binding differs from
	// what is shipped in a field steering's promises rest on.
	ReasonPolicyNotAsShipped = "PolicyNotAsShipped"
	// ReasonAgentPodNotMarked: the agent cannot keep the pool in the
	// AnnotationSteeredPools of its own Pod (it does not know its Pod, or
	// the patch failed), so the policy holds none of the pool's pods.
	ReasonAgentPodNotMarked = "AgentPodNotMarked"
	// ReasonReleaseFailed: the agent could not release a held pod of the
	// pool (an error other than a conflict) within the last hold bound.
	ReasonReleaseFailed = "ReleaseFailed"
	// ReasonBoundUnsteered: a claiming pod of the pool bound without the
	// agent's decision (no AnnotationSteeredTo) during the last report
	// period.
	ReasonBoundUnsteered = "BoundUnsteered"
	// ReasonPoolNotObserved: the pool is not reported (Synced False), so
	// there is nothing to steer by.
	ReasonPoolNotObserved = "PoolNotObserved"
	// ReasonAgentStopped: the agent that steered the pool stopped leading
	// as it shut down; the next leader reports the pool again.
	ReasonAgentStopped = "AgentStopped"
)

// Reasons of the PodsScheduled condition.
const (
	// ReasonPodsBound: at least spec.pods selected pods are bound.
	ReasonPodsBound = "PodsBound"
	// ReasonPodsNotBound: fewer than spec.pods are.
	ReasonPodsNotBound = "PodsNotBound"
	// ReasonSelectorInvalid: a selector cannot be read; the status is
	// Unknown.
	ReasonSelectorInvalid = "SelectorInvalid"
	// ReasonNamespaceNotWatched: the agent does not read the pods of the
	// ReplicaObservation's namespace (--pod-namespaces); the status is
	// Unknown.
	ReasonNamespaceNotWatched = "NamespaceNotWatched"
)

// PoolObservation asks the agent to report one GPU pool of the cluster:
// cluster-scoped, named after the pool.
type PoolObservation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"` //nolint:modernize // Kubernetes API types spell it so; the API server fills metadata in either way.

	Spec   PoolObservationSpec   `json:"spec"`
	Status PoolObservationStatus `json:"status,omitzero"`
}

// PoolObservationSpec describes the pool as the InferenceCluster
// publishes it.
type PoolObservationSpec struct {
	// NodeSelector is the matchLabels of the pool's Nodes; empty selects
	// those labelled modelplane.ai/pool=<name>.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Devices are the pool's devices, as status.gpuPools[].devices.
	Devices []fsv1alpha1.Device `json:"devices,omitempty"`
	// Tolerations are the taints the pool's pods tolerate.
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// Steering is whether the agent steers the pool's claiming pods;
	// empty is SteeringDisabled.
	Steering Steering `json:"steering,omitempty"`
}

// PoolObservationStatus is the agent's report of the pool
// (docs/spec.md#pool-reports), or none with Synced False.
type PoolObservationStatus struct {
	// ObservedNodes is how many Nodes the pool has, ready or not.
	ObservedNodes *int64 `json:"observedNodes,omitempty"`
	// ObservedAt is a time as of which the report is complete: every pod
	// bound before it is reflected.
	ObservedAt *metav1.Time `json:"observedAt,omitempty"`
	// NodesByFreeDevices are the schedulable nodes grouped by their free
	// devices. A pointer, so that an empty histogram is published as an
	// empty list and no histogram as none.
	NodesByFreeDevices *[]Bucket `json:"nodesByFreeDevices,omitempty"`
	// Binding is BindingSteered while steering is in force, and empty
	// otherwise (the Steering condition says why).
	Binding string `json:"binding,omitempty"`
	// Devices sums the report per counted pool device, in the spec's
	// order; with the report, or none.
	Devices []DeviceSummary `json:"devices,omitempty"`
	// Conditions hold Synced, and Steering when the spec asks for it.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ReplicaObservation asks the agent whether a ModelReplica's pods are
// bound: namespaced, in the namespace of the pods, named after the
// replica.
type ReplicaObservation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"` //nolint:modernize // Kubernetes API types spell it so; the API server fills metadata in either way.

	Spec   ReplicaObservationSpec   `json:"spec"`
	Status ReplicaObservationStatus `json:"status,omitzero"`
}

// ReplicaObservationSpec selects the replica's pods.
type ReplicaObservationSpec struct {
	// Selectors select the replica's pods: a pod is the replica's when it
	// matches any of them (one per engine).
	Selectors []metav1.LabelSelector `json:"selectors"`
	// Pods is how many pods the replica's engines run, gang workers
	// included.
	Pods int64 `json:"pods"`
	// ReplicaNamespace is the ModelReplica's namespace in the control
	// plane. A steering agent orders held pods as the function's ledger
	// charges them, by that namespace, then the replica's name (the
	// ReplicaObservation's), then the engine (the index of the selector a
	// pod matches). Empty in ReplicaObservations of older relays.
	ReplicaNamespace string `json:"replicaNamespace,omitempty"`
}

// ReplicaObservationStatus says how many of the replica's pods are bound.
type ReplicaObservationStatus struct {
	// ScheduledPods is how many selected pods are bound to a node, live
	// (not terminal, not being deleted).
	ScheduledPods *int64 `json:"scheduledPods,omitempty"`
	// Conditions hold PodsScheduled.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}
