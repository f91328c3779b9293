package agent

import (
	"cmp"
	"slices"
	"strings"

	"github.com/modelplaneai/fleet-scheduler/nodeorder"
)

// Steering (docs/spec.md#steering) is the agent deciding which node each
// held claiming pod of a steered pool binds to, by the rule the function
// accounts a steered pool with: best fit (nodeorder, the least free node
// that has the claim free), in the order the function's ledger charges the
// pods (docs/spec.md#charge-order), a gang's pods on distinct nodes. Steer
// is that decision, pure, so that the cluster agent and the simulator's
// steered binder make the very same one.

// SteerNode is a node of a steered pool that held pods may be steered to:
// its name, and its free devices, one count per pool device in the pool's
// order (Counter.Devices), with the claims of pods already released to it
// but not yet allocated taken off (they hold the node though the report
// does not show them yet).
type SteerNode struct {
	Name string
	Free []int64
}

// SteerPod is one held claiming pod of a steered pool.
type SteerPod struct {
	// Name identifies the pod (namespace/name) in its Decision, and breaks
	// the last ties of the order.
	Name string
	// Claim is what the pod claims, one count per pool device.
	Claim []int64
	// Charge is where the ledger charges the pod.
	Charge ChargeOrder
	// Gang names the pod's gang: the pods of one replica engine with the
	// same non-empty Gang take distinct nodes and are decided together,
	// all or none.
	Gang string
}

// ChargeOrder is where the function's ledger charges a pod among the
// others (docs/spec.md#charge-order): replicas by namespace, then name,
// then their engines in order. A replica's copies and a gang's claims of
// equal size are interchangeable: Steer orders those by claim and name.
type ChargeOrder struct {
	// Known is false for a pod the agent cannot tie to its replica yet. It
	// is decided after every pod that is known.
	Known bool
	// Namespace and Replica are the ModelReplica's namespace and name in
	// the control plane.
	Namespace string
	Replica   string
	// Engine is the index of the pod's engine in the replica's engines.
	Engine int
}

// Decision is where Steer sends one pod: Node is the node it is pinned to,
// or empty when it fits no node, and then Reason says why. A pod that fits
// no node is released unpinned, to wait as it would without steering.
type Decision struct {
	Pod    string
	Node   string
	Reason string
}

// Why a pod is released unpinned.
const (
	// UnpinnedNoNode: no node has the pod's claim free.
	UnpinnedNoNode = "no node of the pool has the pod's claim free"
	// UnpinnedGang: the gang's pods do not fit on distinct nodes together.
	UnpinnedGang = "the gang's pods do not fit on distinct nodes of the pool together"
	// UnpinnedClaim: the claim does not name the pool's devices (none of
	// them, a count below zero, or another number of devices).
	UnpinnedClaim = "the pod claims none of the pool's devices"
)

// Steer decides a batch of held pods of one pool of devices devices, and
// returns a decision per pod, in the order they were decided, and the
// nodes with the decided claims taken off. Each pod, in charge order
// (SortSteerPods), takes the node that nodeorder.Compare finds least free
// among those with its claim free, ties going to the node whose name sorts
// first; a gang's pods, biggest claims first, take distinct nodes or none
// at all. The nodes passed in are not changed; a node whose free counts do
// not number devices is never chosen.
func Steer(devices int, nodes []SteerNode, pods []SteerPod) ([]Decision, []SteerNode) {
	state := make([]SteerNode, 0, len(nodes))
	for _, n := range nodes {
		if len(n.Free) == devices {
			state = append(state, SteerNode{Name: n.Name, Free: slices.Clone(n.Free)})
		}
	}
	slices.SortStableFunc(state, func(a, b SteerNode) int { return strings.Compare(a.Name, b.Name) })

	order := slices.Clone(pods)
	SortSteerPods(order)
	decisions := make([]Decision, 0, len(order))
	for len(order) > 0 {
		n := 1
		if g := order[0].Gang; g != "" {
			for n < len(order) && order[n].Gang == g && order[n].Charge == order[0].Charge {
				n++
			}
		}
		decisions = append(decisions, steerGang(devices, state, order[:n])...)
		order = order[n:]
	}
	return decisions, state
}

// steerGang places one gang (or one pod, a gang of one) on distinct nodes,
// taking their claims off state, or places none of them.
func steerGang(devices int, state []SteerNode, gang []SteerPod) []Decision {
	out := make([]Decision, len(gang))
	used := make([]int, 0, len(gang))
	reason := ""
	for i, p := range gang {
		out[i].Pod = p.Name
		if reason != "" {
			continue
		}
		if !namesDevices(devices, p.Claim) {
			reason = UnpinnedClaim
			continue
		}
		best := -1
		for j := range state {
			if slices.Contains(used, j) || !nodeorder.Covers(state[j].Free, p.Claim) {
				continue
			}
			if best < 0 || nodeorder.Compare(state[j].Free, state[best].Free, p.Claim) < 0 {
				best = j
			}
		}
		if best < 0 {
			reason = UnpinnedNoNode
			if len(gang) > 1 {
				reason = UnpinnedGang
			}
			continue
		}
		used = append(used, best)
		out[i].Node = state[best].Name
	}
	if reason != "" {
		for i := range out {
			out[i].Node, out[i].Reason = "", reason
		}
		return out
	}
	for i, j := range used {
		for k, c := range gang[i].Claim {
			state[j].Free[k] -= c
		}
	}
	return out
}

// namesDevices says whether a claim names the pool's devices: one count per
// device, none negative, some positive.
func namesDevices(devices int, c []int64) bool {
	if len(c) != devices {
		return false
	}
	some := false
	for _, n := range c {
		if n < 0 {
			return false
		}
		some = some || n > 0
	}
	return some
}

// SortSteerPods sorts pods into the order Steer decides them in: the
// ledger's charge order (known pods first, then by replica namespace,
// replica name and engine), a gang's pods together, and within a gang or
// among the interchangeable copies of an engine the biggest claims first
// (by their sum, then device by device in the pool's order), then by gang
// and pod name.
func SortSteerPods(pods []SteerPod) {
	slices.SortStableFunc(pods, func(a, b SteerPod) int {
		if a.Charge.Known != b.Charge.Known {
			if a.Charge.Known {
				return -1
			}
			return 1
		}
		return cmp.Or(
			strings.Compare(a.Charge.Namespace, b.Charge.Namespace),
			strings.Compare(a.Charge.Replica, b.Charge.Replica),
			cmp.Compare(a.Charge.Engine, b.Charge.Engine),
			strings.Compare(a.Gang, b.Gang),
			cmp.Compare(total(b.Claim), total(a.Claim)),
			slices.Compare(b.Claim, a.Claim),
			strings.Compare(a.Name, b.Name),
		)
	})
}

func total(c []int64) int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}
