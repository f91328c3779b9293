package v1alpha1

import (
	"encoding/json"
	"slices"
)

// ModelReplica is one placed replica of a deployment, on one cluster.
type ModelReplica struct {
	TypeMeta `json:",inline"`

	Metadata ObjectMeta          `json:"metadata"`
	Spec     ModelReplicaSpec    `json:"spec"`
	Status   *ModelReplicaStatus `json:"status,omitempty"`
}

// ModelReplicaSpec pins a replica's engines to a cluster and its pools.
type ModelReplicaSpec struct {
	ClusterName   string          `json:"clusterName"`
	ModelCacheRef *LocalRef       `json:"modelCacheRef,omitempty"`
	Serving       *Serving        `json:"serving,omitempty"`
	Engines       []ReplicaEngine `json:"engines"`
}

// Pools are the pools the replica's engines are pinned to, each once, in
// engine order.
func (r *ModelReplica) Pools() []string {
	var out []string
	for _, e := range r.Spec.Engines {
		for _, m := range e.Members {
			if !slices.Contains(out, m.NodePoolName) {
				out = append(out, m.NodePoolName)
			}
		}
	}
	return out
}

// ReplicaEngine is an engine of a replica, its members pinned to a pool.
type ReplicaEngine struct {
	Name    string          `json:"name"`
	Copies  *int64          `json:"copies,omitempty"`
	Phase   string          `json:"phase,omitempty"`
	Members []ReplicaMember `json:"members"`
}

// ReplicaMember is a member pinned to a pool with its resolved DRA requests.
type ReplicaMember struct {
	Role           string          `json:"role,omitempty"`
	NodePoolName   string          `json:"nodePoolName"`
	DeviceRequests []DeviceRequest `json:"deviceRequests,omitempty"`
	Worker         *Worker         `json:"worker,omitempty"`
	Template       json.RawMessage `json:"template,omitempty"`
}

// DeviceRequest is a resolved DRA request: what each of a member's pods
// claims through its ResourceClaim.
type DeviceRequest struct {
	Name            string     `json:"name"`
	DeviceClassName string     `json:"deviceClassName"`
	Count           int64      `json:"count"`
	Selectors       []Selector `json:"selectors,omitempty"`
}

// ModelReplicaStatus is the part of a replica's status the function reads.
// Conditions stay decoded JSON (nil, bool, float64, string, []any or
// map[string]any): the observation package judges them.
type ModelReplicaStatus struct {
	Conditions any `json:"conditions,omitempty"`
}

// ModelEndpoint routes to one Ready replica through its cluster's gateway.
type ModelEndpoint struct {
	TypeMeta `json:",inline"`

	Metadata ObjectMeta        `json:"metadata"`
	Spec     ModelEndpointSpec `json:"spec"`
}

// ModelEndpointSpec is where a ModelService sends a replica's traffic.
type ModelEndpointSpec struct {
	URL         string `json:"url"`
	RewritePath string `json:"rewritePath"`
}

// ModelCache stages model weights on the clusters it selects.
type ModelCache struct {
	TypeMeta `json:",inline"`

	Metadata ObjectMeta     `json:"metadata"`
	Spec     ModelCacheSpec `json:"spec"`
}

// ModelCacheSpec is the part of a cache's spec the function reads.
type ModelCacheSpec struct {
	ClusterSelector *LabelSelector `json:"clusterSelector,omitempty"`
}
