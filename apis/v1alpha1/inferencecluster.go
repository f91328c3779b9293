package v1alpha1

// InferenceCluster is a cluster of the fleet, with the GPU pools it publishes.
type InferenceCluster struct {
	TypeMeta `json:",inline"`

	Metadata ObjectMeta             `json:"metadata"`
	Spec     InferenceClusterSpec   `json:"spec"`
	Status   InferenceClusterStatus `json:"status,omitzero"`
}

// InferenceClusterSpec is the part of a cluster's spec the function reads.
type InferenceClusterSpec struct {
	Taints    []Taint    `json:"taints,omitempty"`
	Placement *Placement `json:"placement,omitempty"`
}

// Taint repels replicas that do not tolerate it.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// Placement carries metadata copied onto what is composed for the cluster.
type Placement struct {
	Metadata TemplateMetadata `json:"metadata,omitzero"`
}

// InferenceClusterStatus is the part of a cluster's status the function reads.
type InferenceClusterStatus struct {
	Conditions []Condition `json:"conditions,omitempty"`
	Gateway    *Gateway    `json:"gateway,omitempty"`
	GPUPools   []GPUPool   `json:"gpuPools,omitempty"`
}

// Gateway is where a cluster receives routed traffic. Newer clusters publish
// a hostname, older ones only an address.
type Gateway struct {
	Hostname string `json:"hostname,omitempty"`
	Address  string `json:"address,omitempty"`
}

// GPUPool is a pool of identical nodes. ObservedNodes, ObservedAt,
// NodesByFreeDevices and Binding are the cluster agent's report, kept as
// decoded JSON (nil, bool, float64, string, []any or map[string]any) for
// the observation package to validate.
type GPUPool struct {
	Name    string   `json:"name"`
	Nodes   *int64   `json:"nodes,omitempty"`
	Devices []Device `json:"devices,omitempty"`

	ObservedNodes      any `json:"observedNodes,omitempty"`
	ObservedAt         any `json:"observedAt,omitempty"`
	NodesByFreeDevices any `json:"nodesByFreeDevices,omitempty"`
	// Binding is "Steered" while the agent steers the pool's pods, absent
	// otherwise (docs/spec.md#pool-reports).
	Binding any `json:"binding,omitempty"`
}

// Device is a kind of device every node of a pool has count of.
type Device struct {
	Name            string                       `json:"name"`
	Claim           string                       `json:"claim,omitempty"`
	Driver          string                       `json:"driver"`
	DeviceClassName string                       `json:"deviceClassName,omitempty"`
	Count           *int64                       `json:"count,omitempty"`
	Attributes      map[string]DeviceAttribute   `json:"attributes,omitempty"`
	Capacity        map[string]DeviceCapacityVal `json:"capacity,omitempty"`
}

// DeviceAttribute is one typed device attribute, as in DRA.
type DeviceAttribute struct {
	String  *string `json:"string,omitempty"`
	Version *string `json:"version,omitempty"`
	Bool    *bool   `json:"bool,omitempty"`
	Int     *int64  `json:"int,omitempty"`
}

// DeviceCapacityVal is one device capacity, a Kubernetes quantity.
type DeviceCapacityVal struct {
	Value string `json:"value"`
}

// IsDRA reports whether the device is claimed through DRA (the default).
func (d Device) IsDRA() bool {
	return d.Claim == "" || d.Claim == ClaimDRA
}
