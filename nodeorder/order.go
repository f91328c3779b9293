// Package nodeorder is the order in which the free-device rule of
// docs/spec.md#free-device-accounting picks a node for a claiming pod: the
// one function that the ledger assumes by, and that the cluster agent and
// the simulator will steer by, so that what the function charges and where
// a steered pod goes cannot disagree. A node is its free-device vector: one
// count per pool device, in the pool's device order.
//
// It is a leaf: it imports nothing, so every binary and the simulator can
// call it.
package nodeorder

import "cmp"

// Compare orders two nodes by their free counts of the claimed device
// kinds (those claim counts more than zero of), in the pool's device
// order, then by their free counts of all kinds: negative when a has fewer
// free, positive when more, zero when the two vectors are equal. MostFree
// picks the greatest node that Covers the claim, LeastFree (best fit) the
// least. All three vectors have one count per pool device.
func Compare(a, b, claim []int64) int {
	for i := range claim {
		if claim[i] > 0 && a[i] != b[i] {
			return cmp.Compare(a[i], b[i])
		}
	}
	for i := range a {
		if a[i] != b[i] {
			return cmp.Compare(a[i], b[i])
		}
	}
	return 0
}

// Covers says whether a node with free devices free has the claim free,
// device by device.
func Covers(free, claim []int64) bool {
	for i := range claim {
		if free[i] < claim[i] {
			return false
		}
	}
	return true
}
