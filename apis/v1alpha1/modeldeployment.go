package v1alpha1

import "encoding/json"

// ModelDeployment is the namespaced XR the function composes.
type ModelDeployment struct {
	TypeMeta `json:",inline"`

	Metadata ObjectMeta          `json:"metadata"`
	Spec     ModelDeploymentSpec `json:"spec"`
}

// ModelDeploymentSpec is the desired state of a ModelDeployment.
type ModelDeploymentSpec struct {
	Replicas int64           `json:"replicas"`
	Template ReplicaTemplate `json:"template"`
}

// ReplicaTemplate is the template every replica is made from.
type ReplicaTemplate struct {
	Metadata TemplateMetadata       `json:"metadata,omitzero"`
	Spec     DeploymentTemplateSpec `json:"spec"`
}

// TemplateMetadata carries labels copied onto every replica.
type TemplateMetadata struct {
	Labels map[string]string `json:"labels,omitempty"`
}

// DeploymentTemplateSpec is what every replica of a deployment runs.
type DeploymentTemplateSpec struct {
	ClusterSelector *LabelSelector `json:"clusterSelector,omitempty"`
	ModelCacheRef   *LocalRef      `json:"modelCacheRef,omitempty"`
	Serving         *Serving       `json:"serving,omitempty"`
	Tolerations     []Toleration   `json:"tolerations,omitempty"`
	Engines         []Engine       `json:"engines"`
}

// Engine is one engine of a deployment: members placed together on one pool.
type Engine struct {
	Name    string   `json:"name"`
	Copies  *int64   `json:"copies,omitempty"`
	Phase   string   `json:"phase,omitempty"`
	Members []Member `json:"members"`
}

// Member is one member of an engine: a Standalone pod, a gang's Leader, or
// its Workers.
type Member struct {
	Role         string          `json:"role,omitempty"`
	NodeSelector *NodeSelector   `json:"nodeSelector,omitempty"`
	Worker       *Worker         `json:"worker,omitempty"`
	Template     json.RawMessage `json:"template,omitempty"`
}

// NodeSelector is a member's DRA device requests, matched against pools.
type NodeSelector struct {
	Devices []DeviceSelector `json:"devices"`
}

// DeviceSelector requests count devices satisfying every CEL selector.
type DeviceSelector struct {
	Name      string     `json:"name"`
	Count     *int64     `json:"count,omitempty"`
	Selectors []Selector `json:"selectors,omitempty"`
}
