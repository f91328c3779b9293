// Package assume keeps a server's assumed placements (docs/spec.md#assumed-placements): the
// replicas its recent responses composed that the fleet does not show yet.
//
// Crossplane reconciles many ModelDeployments at once, and each call reads
// the fleet before the others' replicas exist: every call would see the
// same free devices and place onto them. The server remembers what it
// placed, per pool, and charges it to every other deployment's call until
// the replica appears in the fleet (then the fleet charges it, never
// twice), its deployment's next call no longer wants it, or TTL passes.
// Reading the assumed placements, planning and recording the new ones is
// one critical section: Lock, Assumed, Record, Unlock.
//
// The ledger is per server and in memory: a restart empties it, and two
// function pods each keep their own (docs/production.md says what that
// leaves open).
package assume

import (
	"slices"
	"sync"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// DefaultTTL is how long an assumed placement is charged at most. Crossplane
// applies what a call composes as soon as the call returns, and the replica
// is in the fleet of every call that starts after that, within seconds; an
// entry outlives that by far, so that a replica is never missed while it is
// being created, but a replica that is never created (its apply failed, or
// the response was lost) stops holding devices soon. Two minutes: longer
// than Crossplane's call timeout and an apply, shorter than the minute or
// two a user waits before wondering why nothing is placed.
const DefaultTTL = 2 * time.Minute

// Deployment identifies the ModelDeployment whose call placed a replica:
// by uid, so that one deleted and created again under its name is another.
type Deployment struct {
	UID, Namespace, Name string
}

// Entry is one assumed placement: the ModelReplica as composed (its
// cluster, engines, pools and device requests), on the cluster of the uid.
type Entry struct {
	Replica    *v1alpha1.ModelReplica
	ClusterUID string
	At         time.Time
}

// Fleet is what a call reads of the fleet, to tell which assumed placements
// it already shows.
type Fleet interface {
	// Shows reports whether the fleet holds the replica on cluster with
	// its engines pinned to pools, in engine order.
	Shows(namespace, name, cluster string, pools []string) bool
}

// Ledger is a server's assumed placements. It is safe for concurrent calls,
// and a call holds it, locked, from reading to recording.
type Ledger struct {
	mu      sync.Mutex
	ttl     time.Duration
	entries map[Deployment][]Entry
}

// New returns an empty ledger whose entries last ttl at most.
func New(ttl time.Duration) *Ledger {
	return &Ledger{ttl: ttl, entries: map[Deployment][]Entry{}}
}

// Lock starts a call's critical section.
func (l *Ledger) Lock() { l.mu.Lock() }

// Unlock ends it.
func (l *Ledger) Unlock() { l.mu.Unlock() }

// Assumed are the replicas other deployments' calls placed that this call
// must charge: on the clusters of its fleet (their names by uid), not yet
// shown by the fleet, not expired. Those the fleet shows, and those
// expired, end here. Call with the ledger locked.
func (l *Ledger) Assumed(d Deployment, clusters map[string]string, fleet Fleet, now time.Time) []*v1alpha1.ModelReplica {
	var out []*v1alpha1.ModelReplica
	for dep, entries := range l.entries {
		entries = slices.DeleteFunc(entries, func(e Entry) bool {
			return now.Sub(e.At) > l.ttl || fleet.Shows(e.Replica.Metadata.Namespace, e.Replica.Metadata.Name, e.Replica.Spec.ClusterName, e.Replica.Pools())
		})
		if len(entries) == 0 {
			delete(l.entries, dep)
			continue
		}
		l.entries[dep] = entries
		if dep == d {
			continue
		}
		for _, e := range entries {
			name, ok := clusters[e.ClusterUID]
			if !ok {
				continue
			}
			r := *e.Replica
			// Charged on the cluster as this call's fleet names it.
			r.Spec.ClusterName = name
			out = append(out, &r)
		}
	}
	return out
}

// Record replaces what a deployment's calls assumed with what this one
// placed anew: what its last call placed and this one no longer wants
// ends. Call with the ledger locked.
func (l *Ledger) Record(d Deployment, placed []Entry) {
	if len(placed) == 0 {
		delete(l.entries, d)
		return
	}
	l.entries[d] = slices.Clone(placed)
}

// Len is how many placements the ledger assumes.
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, entries := range l.entries {
		n += len(entries)
	}
	return n
}

// Held is how many placements the ledger assumes that have not expired at
// now: those the fleet already shows end only at the next call's Assumed.
// It waits for a call's critical section to end.
func (l *Ledger) Held(now time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, entries := range l.entries {
		for _, e := range entries {
			if now.Sub(e.At) <= l.ttl {
				n++
			}
		}
	}
	return n
}
