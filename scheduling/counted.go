package scheduling

import "time"

// The counted rule (docs/spec.md#the-counted-rule): a replica is already counted by a pool's
// histogram when its PodsScheduled became True strictly before the pool was
// observed. Every other replica that holds the pool is charged against it.
// No guessed time window.

// Counted reports whether a histogram observed at observedAt already counts
// the pods of a replica that became scheduled at scheduledSince (nil: not
// scheduled, or no usable time). It is the one test of the rule; every
// other place asks it.
func Counted(scheduledSince *time.Time, observedAt time.Time) bool {
	return scheduledSince != nil && scheduledSince.Before(observedAt)
}

// counted reports whether a pool's histogram already counts a replica's
// pods; a pool without a usable observation counts none.
func counted(r Replica, obs *PoolObservation) bool {
	return obs != nil && Counted(r.ScheduledSince, obs.ObservedAt)
}

// CountedBefore is when the least recent report of a cluster's pools was
// taken, if every pool the cluster publishes has a usable one. A replica on
// the cluster whose pods all became scheduled before then is counted by
// every pool's histogram (see CountedBy): it charges nothing wherever it is
// pinned, so its pins need not even be read.
func CountedBefore(c Cluster) (time.Time, bool) {
	var before time.Time
	pools := c.Object.Status.GPUPools
	for i, p := range pools {
		obs := c.Observed[p.Name]
		if obs == nil {
			return time.Time{}, false
		}
		if i == 0 || obs.ObservedAt.Before(before) {
			before = obs.ObservedAt
		}
	}
	return before, len(pools) > 0
}

// CountedBy reports whether the replica's pods all became scheduled before
// a time CountedBefore returned.
func (r Replica) CountedBy(before time.Time) bool {
	return Counted(r.ScheduledSince, before)
}
