package scheduling

import (
	"encoding/json"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// What a pass reads (Snapshot) and returns (Plan), and the types they
// carry; why a replica does not fit is explain.go's.

// Binding is which node the ledger assumes a cluster's scheduler binds a
// claiming pod to.
type Binding string

// The bindings the ledger can assume.
const (
	// MostFree assumes the node with the most of the claimed devices free.
	// kube-scheduler does not score DRA devices: its default profile
	// (LeastAllocated over cpu and memory) lands there only while the
	// nodes' images score alike and pods request cpu and memory in step
	// with their GPUs (docs/scheduling.md, "Which node").
	MostFree Binding = "MostFree"
	// LeastFree assumes the fitting node with the fewest claimed devices
	// free: where a bin-packing profile (NodeResourcesFit MostAllocated)
	// lands pods, and where the default profile does once ImageLocality
	// favours the nodes that already run the serving image.
	LeastFree Binding = "LeastFree"
)

// Options steer one scheduling pass.
type Options struct {
	// Binding is the node the ledger assumes a pod binds to. Empty means
	// MostFree.
	Binding Binding

	// RetainOnly keeps existing replicas but places no new ones, for when the
	// candidate clusters cannot be trusted yet (an unresolved ModelCache).
	RetainOnly bool

	// Selectors, when not nil, keeps compiled selectors across passes.
	Selectors *Selectors

	// ReplaceUnscheduledAfter is how long the deployment's replica may stay
	// with its pods unscheduled before it is re-placed (docs/spec.md#re-placing). Zero
	// turns re-placing off.
	ReplaceUnscheduledAfter time.Duration

	// Capacity is how much the plan says of what each pool had left
	// (Plan.Capacity), for a server's metrics and debug log.
	Capacity Capacity

	// PodNodes, when true, has each engine the pass places on a pool with
	// a usable report say where the ledger assumed its claiming pods bind
	// (EnginePlacement.PodNodes), for the fleet simulator to hold a binder
	// to.
	PodNodes bool
}

// Snapshot is everything one scheduling pass reads.
type Snapshot struct {
	Deployment *v1alpha1.ModelDeployment
	Clusters   []Cluster
	Replicas   []Replica
	Options    Options

	// Now is the time of the pass, which how long a replica has waited is
	// measured against. The zero time re-places nothing.
	Now time.Time

	// Assumed are replicas other passes composed recently that the fleet
	// does not show yet (docs/spec.md#assumed-placements): charged where they are pinned as
	// replicas whose pods are not scheduled, never the deployment's.
	Assumed []Replica
}

// Cluster is a candidate InferenceCluster and the agent's usable reports of
// its pools.
type Cluster struct {
	Object *v1alpha1.InferenceCluster

	// Observed holds, by pool name, the pools whose agent report is usable.
	// A pool not in it is accounted by whole nodes. The observations may be
	// shared with other passes, concurrent ones included, and are only
	// read.
	Observed map[string]*PoolObservation

	// Unreadable, when not empty, says why the InferenceCluster could not
	// be read (the field and its defect); Object then holds its name only.
	// It takes no new replica, and the deployment's replicas on it are kept
	// as observed.
	Unreadable string
}

// PoolObservation is a usable report of one pool by the cluster agent.
type PoolObservation struct {
	// ObservedAt is when the agent last reported the pool.
	ObservedAt time.Time

	// ObservedNodes is how many nodes the pool has now, ready or not.
	ObservedNodes int64

	// Buckets group the pool's schedulable nodes by their free devices.
	Buckets []Bucket

	// Steered is whether the report says binding Steered: the agent binds
	// each claiming pod of the pool where best fit puts it, so the pool is
	// accounted as LeastFree whatever Options.Binding says
	// (docs/spec.md#assumed-binding).
	Steered bool
}

// Bucket is a number of nodes with exactly the same free devices.
type Bucket struct {
	Nodes int64
	// Free devices by pool device name; a device not listed has 0 free.
	Free map[string]int64
}

// Replica is an observed ModelReplica of any deployment in the fleet.
type Replica struct {
	Object *v1alpha1.ModelReplica

	// ScheduledSince is when the replica's PodsScheduled condition last
	// became True. Nil when it is not True or carries no usable time.
	ScheduledSince *time.Time

	// UnscheduledSince is when its PodsScheduled condition last became
	// False: some of its pods are not bound since then. Nil when it is not
	// False (no condition at all is not False) or carries no usable time.
	UnscheduledSince *time.Time

	// Ready is whether the replica's Ready condition is True.
	Ready bool

	// Deleting is whether the replica is being deleted. Its pods may still
	// hold devices, so it is charged where it is pinned, but it is never
	// the deployment's: neither kept nor counted (docs/spec.md#whose-replica).
	Deleting bool

	// Assumed is whether the replica is an assumed placement (Snapshot's
	// Assumed): charged, never the deployment's.
	Assumed bool

	// Unreadable, when not empty, says why the ModelReplica could not be
	// read in full (the field and its defect). Object then holds what did
	// read: its identity, and its cluster and engines if they read. The
	// deployment's own is kept as observed; another deployment's is charged
	// as not scheduled where its engines are pinned, and a whole node of
	// every pool of its cluster where they could not be read.
	Unreadable string
}

// Plan is the outcome of a scheduling pass.
type Plan struct {
	// Wanted is how many replicas the deployment asks for.
	Wanted int64

	// Replicas are the retained and new placements, sorted by cluster and
	// index.
	Replicas []Placement

	// Shortfall explains, per cluster, why no cluster could host another
	// replica. Nil when every wanted replica was placed or when placement
	// was not attempted.
	Shortfall *Shortfall

	// Moves are the replicas re-placed because their pods stayed
	// unscheduled, and Waiting how many replicas wait for their pods.
	Moves   []Move
	Waiting Waiting

	// Capacity is what each pool had left once the pass placed its
	// replicas; nil when it placed none and re-placed none, which needs no
	// ledger.
	Capacity []PoolCapacity
}

// Move is a replica re-placed because its pods stayed unscheduled.
type Move struct {
	// Name is the replica's object name; on another cluster the new one
	// has another.
	Name string
	// From and To are where its engines were and now are.
	From, To []PoolRef
	// Unscheduled is how long its pods had been waiting.
	Unscheduled time.Duration
	// SameReplica is true for a move to another pool of its own cluster:
	// the same replica, its pools changed.
	SameReplica bool
}

// PoolRef names a pool of a cluster.
type PoolRef struct {
	Cluster string `json:"cluster"`
	Pool    string `json:"pool"`
}

func (p PoolRef) String() string { return p.Cluster + "/" + p.Pool }

// Waiting is how many of the deployment's replicas wait for their pods to
// be scheduled (PodsScheduled False), and the longest of those waits.
type Waiting struct {
	Replicas int
	Longest  time.Duration
}

// Placement is one replica on one cluster.
type Placement struct {
	// Cluster and Index are the replica's identity.
	Cluster string
	Index   int

	// Gateway is the cluster's gateway hostname or address; empty while the
	// cluster publishes none.
	Gateway string

	// ClusterLabels are the cluster's placement labels, copied onto what is
	// composed for the replica.
	ClusterLabels map[string]string

	// Engines are in the deployment's engine order.
	Engines []EnginePlacement

	// New is true for a replica placed by this pass, and Moved for one
	// re-placed by it (docs/spec.md#re-placing): on another cluster it is New too.
	New, Moved bool

	// Counted is whether the usable report of every pool the replica holds
	// already counts its pods (the counted rule): only ever for a replica
	// kept where it was observed, never for a new or moved one
	// (docs/spec.md#narrow-requests).
	Counted bool

	// Replacement is what to remember of re-placing the replica, written
	// in its AnnotationReplacement; nil for none.
	Replacement *Replacement

	// AsObserved is true for a replica kept exactly as it is because it, or
	// its cluster, could not be read: what is composed for it is what was
	// observed, and Name is its object's name. Its Engines are as observed
	// (nil when they did not read), and nothing else of it was worked out.
	AsObserved bool
	Name       string
}

// EnginePlacement is where one engine of a replica runs.
type EnginePlacement struct {
	Name    string
	Members []MemberPlacement
	// PodNodes are, with Options.PodNodes, the claiming pods of an engine
	// the pass placed on a free-device pool, as the ledger charged them;
	// nil otherwise.
	PodNodes []PodNode
}

// MemberPlacement is a member's pool and the DRA requests each of its pods
// claims. DeviceRequests is empty for a member that claims nothing.
type MemberPlacement struct {
	Role           string
	Pool           string
	DeviceRequests []v1alpha1.DeviceRequest
}

// Capacity is how much a plan says of what each pool had left
// (Plan.Capacity).
type Capacity int

// How much a plan says of what each pool had left.
const (
	// CapacityNone says nothing.
	CapacityNone Capacity = iota
	// CapacityLargest says the most of each device free on one node, as a
	// server's metrics read it on every call.
	CapacityLargest
	// CapacityGroups says that, and every group of nodes by free devices,
	// as a debug log reads it: a copy of each pool's ledger.
	CapacityGroups
)

// PoolCapacity is what one pool had left once a pass had charged the fleet
// and placed the deployment's replicas: the ledger it planned on, read
// only. A whole-node pool's empty nodes have every DRA device free, its
// taken ones none.
type PoolCapacity struct {
	Pool PoolRef
	// WholeNode is whether the pool was accounted in whole nodes, Steered
	// whether by free devices with best fit because its report says the
	// agent steers it, and Saturated whether pods charged to it did not
	// fit, so that it took nothing new.
	WholeNode, Steered, Saturated bool
	// Devices are the pool's device names, in its order; Largest and a
	// group's Free count each.
	Devices []string
	// Largest is the most of each device free on one node.
	Largest []int64
	// Groups are the pool's nodes by free devices, the most free first;
	// only with CapacityGroups.
	Groups []NodeGroup
}

// NodeGroup is a number of nodes with the same free devices.
type NodeGroup struct {
	Nodes int64
	// Free is shared with the pass: read it, never change it.
	Free []int64
}

// Replacement is what the function remembers of re-placing one replica,
// kept in its ModelReplica's AnnotationReplacement, and carried over to
// the replica that replaces it on another cluster. It is dropped once the
// replica's pods are all scheduled: moves are bounded per wait.
type Replacement struct {
	// Moves is how many times the replica moved during this wait.
	Moves int `json:"moves"`
	// MovedAt is when it last moved: its wait on its new pools starts then,
	// whatever its PodsScheduled says until the agent reports again.
	MovedAt time.Time `json:"movedAt"`
	// StuckOn are the pools it was stuck on, oldest first; it never goes
	// back to one of them during this wait.
	StuckOn []PoolRef `json:"stuckOn,omitempty"`
}

// ParseReplacement reads a replica's annotation; false when there is none
// or it does not read, which is as if the replica never moved.
func ParseReplacement(annotation string) (Replacement, bool) {
	var r Replacement
	if annotation == "" || json.Unmarshal([]byte(annotation), &r) != nil || r.Moves < 0 {
		return Replacement{}, false
	}
	return r, true
}

// String is the annotation's value.
func (r Replacement) String() string {
	b, err := json.Marshal(r)
	if err != nil {
		return ""
	}
	return string(b)
}
