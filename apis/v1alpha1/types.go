// Package v1alpha1 holds Go types for the Modelplane kinds fleet-scheduler
// reads and writes (modelplane.ai/v1alpha1), built from the XRD schemas of
// Modelplane v0.3. Only the fields the scheduler uses are typed; pod
// templates pass through verbatim. Status fields the cluster agent publishes
// are kept raw here so that a malformed report is judged by the observation
// package, field by field, instead of failing to decode the whole object.
package v1alpha1

// Group and version of every kind in this package.
const (
	Group      = "modelplane.ai"
	Version    = "v1alpha1"
	APIVersion = Group + "/" + Version
)

// Kinds read and written by the function.
const (
	KindModelDeployment  = "ModelDeployment"
	KindModelReplica     = "ModelReplica"
	KindModelEndpoint    = "ModelEndpoint"
	KindInferenceCluster = "InferenceCluster"
	KindModelCache       = "ModelCache"
)

// Labels the function stamps on what it composes, and reads back to tell a
// replica's deployment and (cluster, index) identity.
const (
	LabelDeployment   = "modelplane.ai/deployment"
	LabelCluster      = "modelplane.ai/cluster"
	LabelReplicaIndex = "modelplane.ai/replica-index"

	// LabelCounted is "true" on a composed ModelReplica whose pods the
	// usable report of every pool it holds already counts, and "false" on
	// every other one, so that a call may ask for the uncounted ones alone
	// (docs/spec.md#narrow-requests).
	LabelCounted = "scheduler.fn.modelplane.ai/counted"
)

// AnnotationReplacement is the annotation in which the function keeps, on
// each ModelReplica it composes, what it must remember of re-placing the
// replica when its pods stay unscheduled: see scheduling.Replacement.
const AnnotationReplacement = "scheduler.fn.modelplane.ai/replacement"

// Member roles.
const (
	RoleStandalone = "Standalone"
	RoleLeader     = "Leader"
	RoleWorker     = "Worker"
)

// Device claim kinds of a pool device.
const (
	ClaimDRA       = "DRA"
	ClaimSynthetic = "Synthetic"
)

// Taint effects.
const (
	TaintNoSchedule = "NoSchedule"
	TaintNoExecute  = "NoExecute"
)

// ObjectMeta is the part of Kubernetes object metadata the function uses.
type ObjectMeta struct {
	Name            string            `json:"name,omitempty"`
	Namespace       string            `json:"namespace,omitempty"`
	UID             string            `json:"uid,omitempty"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	Annotations     map[string]string `json:"annotations,omitempty"`
	// DeletionTimestamp is set once the object is being deleted; only
	// whether it is set is read.
	DeletionTimestamp *string `json:"deletionTimestamp,omitempty"`
}

// TypeMeta is an object's apiVersion and kind.
type TypeMeta struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
}

// Condition is a Kubernetes-style status condition. LastTransitionTime stays a
// string so that a garbage timestamp is a finding, not a decode failure.
type Condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason,omitempty"`
	Message            string `json:"message,omitempty"`
	LastTransitionTime string `json:"lastTransitionTime,omitempty"`
}

// FindCondition returns the condition of the given type, or nil.
func FindCondition(cs []Condition, typ string) *Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}

// LabelSelector selects objects by labels.
type LabelSelector struct {
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
}

// LocalRef names an object in the referrer's namespace.
type LocalRef struct {
	Name string `json:"name"`
}

// Serving is how a deployment's replicas are served.
type Serving struct {
	Mode string `json:"mode,omitempty"`
}

// Toleration of a cluster taint, with Kubernetes semantics.
type Toleration struct {
	Key      string `json:"key,omitempty"`
	Operator string `json:"operator,omitempty"`
	Value    string `json:"value,omitempty"`
	Effect   string `json:"effect,omitempty"`
}

// Selector is one DRA CEL selector.
type Selector struct {
	CEL string `json:"cel,omitempty"`
}

// Worker is a Worker member's fan-out.
type Worker struct {
	Nodes int64 `json:"nodes"`
}
