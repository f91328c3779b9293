package fleet

import (
	"sync"
	"time"

	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// DefaultFullEvery is how often a deployment's calls read the whole fleet
// at least, however safe reading less would be: a label goes stale where
// its deployment stops recomputing it (paused, or every call Fatal), and
// only a full read sees the replicas composed by something that labels
// nothing (docs/spec.md#narrow-requests).
const DefaultFullEvery = 5 * time.Minute

// Narrowing is what a server knows that lets a call ask for only its own
// replicas and those no report counts, instead of every ModelReplica of
// the fleet (docs/spec.md#narrow-requests). It is safe for concurrent
// calls. A nil *Narrowing never narrows.
type Narrowing struct {
	every time.Duration

	mu sync.Mutex
	// labelled is whether the last fleet of API objects this server read
	// whole had the counted label on every ModelReplica.
	labelled bool
	// full is when each deployment's last call read the whole fleet, by
	// its uid.
	full map[string]time.Time
	// usable is whether every pool of each deployment's clusters had a
	// usable report at its last call, by its uid: a call's first
	// iteration, which carries no cluster yet, asks narrowly only then,
	// and a fleet whose reports went stale costs no narrow iteration
	// before every full one.
	usable map[string]bool
}

// NewNarrowing is a server's knowledge as it starts: none, so that every
// deployment's first call reads the whole fleet. A deployment reads it
// again at least every.
func NewNarrowing(every time.Duration) *Narrowing {
	return &Narrowing{every: every, full: map[string]time.Time{}, usable: map[string]bool{}}
}

// Ask is what a call's iteration knows when it decides what to ask for.
type Ask struct {
	// Deployment is the XR's uid; a fixture's XR has none.
	Deployment string
	// WentFull is whether an earlier iteration of the call asked for the
	// whole fleet: it then stays full.
	WentFull bool
	// Carried is whether this iteration carries the clusters Crossplane
	// fetched (maybe none); false before it has fetched them.
	Carried bool
	// Clusters are the clusters this iteration carries, read and judged.
	Clusters []scheduling.Cluster
	// Fixtures is how many of the clusters carried have no uid or
	// resourceVersion: a render's. Crossplane v2.4's render gives the XR a
	// uid, the same on every render of that XR, so renders of one XR
	// against one server share what the server knows of it; a fixture
	// fleet never narrows.
	Fixtures int
	Now      time.Time
}

// Narrow says whether a call's iteration may ask for the narrow requests:
// only when the server has read a fleet of API objects whole with every
// ModelReplica labelled, the deployment read it whole within every, no
// earlier iteration went full, and every pool of every cluster the
// iteration carries has a usable report, none of them a fixture. Before
// any cluster is carried it may, if they all had at the deployment's last
// call: the next iteration, which carries them, decides again.
func (n *Narrowing) Narrow(a Ask) bool {
	if n == nil || a.Deployment == "" || a.WentFull {
		return false
	}
	n.mu.Lock()
	last, ok := n.full[a.Deployment]
	labelled, usable := n.labelled, n.usable[a.Deployment]
	n.mu.Unlock()
	if !labelled || !ok || a.Now.Sub(last) >= n.every || a.Now.Before(last) {
		return false
	}
	if !a.Carried {
		return usable
	}
	if a.Fixtures > 0 {
		return false
	}
	for _, c := range a.Clusters {
		if !everyPoolUsable(c) {
			return false
		}
	}
	return true
}

// everyPoolUsable is whether a cluster read, and each of its pools has a
// usable report: only then does a replica that report counts charge
// nothing there, however it is labelled.
func everyPoolUsable(c scheduling.Cluster) bool {
	if c.Unreadable != "" {
		return false
	}
	for _, p := range c.Object.Status.GPUPools {
		if c.Observed[p.Name] == nil {
			return false
		}
	}
	return true
}

// Answered records a call that read its fleet: whether every pool of its
// clusters had a usable report, for its next call's first iteration.
func (n *Narrowing) Answered(deployment string, clusters []scheduling.Cluster) {
	if n == nil || deployment == "" {
		return
	}
	usable := true
	for _, c := range clusters {
		usable = usable && everyPoolUsable(c)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.usable[deployment] = usable
}

// ReadWhole records a call that read the whole fleet: for a deployment
// with a uid, when; and, when every ModelReplica read was an API object,
// whether every one carried the counted label. A fleet of fixtures proves
// nothing about the fleet.
func (n *Narrowing) ReadWhole(deployment string, unlabelled, fixtures int, now time.Time) {
	if n == nil || deployment == "" {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if fixtures == 0 {
		n.labelled = unlabelled == 0
	}
	n.full[deployment] = now
	if len(n.full) > maxRemembered {
		// Deployments deleted long ago would otherwise stay forever; one
		// forgotten only reads the whole fleet on its next call.
		for uid, at := range n.full {
			if now.Sub(at) >= n.every {
				delete(n.full, uid)
				delete(n.usable, uid)
			}
		}
	}
}

// maxRemembered is how many deployments' last full reads a server keeps
// before it forgets those that are due one anyway.
const maxRemembered = 4096
