package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// What Modelplane v0.3.1's compose-model-replica names in a workload
// cluster: where it runs a replica's workloads, the labels it puts on their
// pods and its nodes carry, and the taint its pods tolerate. The relay
// selects a replica's pods and a pool's nodes by them, the cluster agent's
// manifests and the simulator's model of v0.3 use them, and the test
// TestShippedManifestsUseModelplaneNames holds every shipped YAML to them.
// One home, so that none of them can drift from v0.3.
const (
	// WorkloadNamespace is where v0.3 runs every replica's workloads in
	// its workload cluster (base.REMOTE_NAMESPACE).
	WorkloadNamespace = "default"
	// SystemNamespace is Modelplane's own namespace in the control plane,
	// where compose-inference-cluster composes an InferenceCluster's
	// Objects.
	SystemNamespace = "modelplane-system"

	// LabelPool is the Node label that names the pool a node belongs to
	// (the operator labels nodes so), and the nodeSelector that pins a
	// member's pods to its pool's nodes.
	LabelPool = "modelplane.ai/pool"
	// LabelServing is on every pod that serves the OpenAI API: a Standalone
	// pod or a gang's leader. Its value is the replica's name.
	LabelServing = "modelplane.ai/serving"
	// LabelWorkload is on a Standalone engine's pods, its Deployment's
	// selector. Its value is the engine's workload name (WorkloadName).
	LabelWorkload = "modelplane.ai/workload"
	// LabelLWSRole is on a gang's leader pods only.
	LabelLWSRole = "modelplane.ai/lws-role"
	// LabelLWSName is the label LeaderWorkerSet puts on every pod of a
	// gang, leader and workers; v0.3 puts no label of its own on workers.
	LabelLWSName = "leaderworkerset.sigs.k8s.io/name"

	// GPUTaintKey is the taint v0.3's GPU node groups carry; every pod it
	// composes for a pool tolerates it (NoSchedule, any value).
	GPUTaintKey = "nvidia.com/gpu"
)

// ChildName is Modelplane's name of a child object (the Python SDK's
// resource.child_name): the parts joined with "-", cut to 57 characters,
// then "-" and the first 5 hex characters of the SHA-256 of the joined
// parts, so that it fits a DNS label.
func ChildName(parts ...string) string {
	full := strings.Join(parts, "-")
	sum := sha256.Sum256([]byte(full))
	return full[:min(len(full), 57)] + "-" + hex.EncodeToString(sum[:])[:5]
}

// WorkloadName is the name of an engine's Deployment or LeaderWorkerSet:
// ChildName of the replica and the engine. A Standalone engine's pods carry
// it as LabelWorkload, a gang's as LabelLWSName.
func WorkloadName(replica, engine string) string { return ChildName(replica, engine) }

// Gang says whether v0.3 runs an engine as a LeaderWorkerSet: it has no
// Standalone member (base.select_backend).
func (e ReplicaEngine) Gang() bool {
	for _, m := range e.Members {
		if m.Role == "" || m.Role == RoleStandalone {
			return false
		}
	}
	return true
}

// CopyCount is how many copies of the engine run: its copies, 1 where they
// are unset or fewer than 1.
func (e Engine) CopyCount() int64 { return copyCount(e.Copies) }

// CopyCount is how many copies of the engine run: its copies, 1 where they
// are unset or fewer than 1.
func (e ReplicaEngine) CopyCount() int64 { return copyCount(e.Copies) }

func copyCount(copies *int64) int64 {
	if copies == nil || *copies < 1 {
		return 1
	}
	return *copies
}
