package fleet

import (
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/wire"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// Crossplane calls the function for every ModelDeployment it reconciles,
// each time with every InferenceCluster and ModelReplica of the fleet, and
// between two calls nearly all of them are unchanged. The object caches
// keep what was read of each, across calls, for as long as the object is
// the same: Kubernetes gives every change of an object a new
// resourceVersion. An object without a uid and a resourceVersion (a render
// fixture) is never cached.

// replicaCacheSweepEvery is how many calls go by between two sweeps of a
// cache, and how many calls an entry no call has read survives.
const replicaCacheSweepEvery = 16

// objectCache is safe for concurrent calls. What it holds is shared by
// every call that reads it, and must never be changed: a caller that needs
// to fill in a field works on a copy.
type objectCache[T any] struct {
	mu      sync.Mutex
	calls   uint64
	entries map[string]*cachedObject[T]
}

type cachedObject[T any] struct {
	object   *T
	lastCall uint64
}

func newObjectCache[T any]() *objectCache[T] {
	return &objectCache[T]{entries: map[string]*cachedObject[T]{}}
}

// replicaCache holds what readReplica read of each ModelReplica, and what
// observation made of it.
type replicaCache = objectCache[observedReplica]

func newReplicaCache() *replicaCache { return newObjectCache[observedReplica]() }

// observedReplica is a ModelReplica as read, without its engines, and as
// observed: when its pods were scheduled, or why that cannot be read.
type observedReplica struct {
	replica scheduling.Replica
	finding *observation.ReplicaFinding
	// What every call reads of every replica, inline, so that telling this
	// deployment's replicas from the rest, and settled replicas from those
	// to charge, reads nothing else of a replica read before: at 10,000
	// replicas each pointer followed is a millisecond of cache misses.
	namespace, deployment, cluster string
	scheduledAt                    time.Time
	scheduled, deleting            bool
	// labelled is whether it carries the counted label, and real whether
	// it has a uid and a resourceVersion, as an API server's objects do.
	labelled, real bool
}

func newObservedReplica(o *v1alpha1.ModelReplica) *observedReplica {
	r := &observedReplica{
		namespace:  o.Metadata.Namespace,
		deployment: o.Metadata.Labels[v1alpha1.LabelDeployment],
		cluster:    o.Spec.ClusterName,
		deleting:   o.Metadata.DeletionTimestamp != nil,
	}
	_, r.labelled = o.Metadata.Labels[v1alpha1.LabelCounted]
	r.real = o.Metadata.UID != ""
	r.replica, r.finding = observation.Replica(o)
	if r.replica.ScheduledSince != nil {
		r.scheduledAt, r.scheduled = *r.replica.ScheduledSince, true
	}
	return r
}

// ours is whether the replica is one of the deployment's.
func (r *observedReplica) ours(xr *v1alpha1.ModelDeployment) bool {
	return scheduling.Ours(xr, r.namespace, r.deployment, r.deleting)
}

// countedBy is scheduling.Replica.CountedBy, of the inline time.
func (r *observedReplica) countedBy(before time.Time) bool {
	since := &r.scheduledAt
	if !r.scheduled {
		since = nil
	}
	return scheduling.Counted(since, before)
}

// clusterCache holds what readCluster read of each InferenceCluster, and
// its pool reports read.
type clusterCache = objectCache[observation.ClusterReports]

// begin starts a call: it returns the call's number, and sweeps out the
// entries no recent call has read.
func (c *objectCache[T]) begin() uint64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if c.calls%replicaCacheSweepEvery == 0 {
		for k, e := range c.entries {
			if e.lastCall+replicaCacheSweepEvery < c.calls {
				delete(c.entries, k)
			}
		}
	}
	return c.calls
}

// get returns the object cached under key, if any, not to be changed.
func (c *objectCache[T]) get(key []byte, call uint64) (*T, bool) {
	if c == nil || key == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[string(key)]
	if !ok {
		return nil, false
	}
	e.lastCall = max(e.lastCall, call)
	return e.object, true
}

// put caches an object, as read, under key; from then on it must never be
// changed.
func (c *objectCache[T]) put(key []byte, call uint64, o *T) {
	if c == nil || key == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[string(key)] = &cachedObject[T]{object: o, lastCall: call}
}

// appendObjectKey appends the cache key of an object: namespace (none for
// a cluster-scoped object), name, uid and resourceVersion, each
// length-prefixed. It returns nil when the object has no uid or no
// resourceVersion to tell its versions apart.
func appendObjectKey(b []byte, namespace, name, uid, resourceVersion wire.Value) []byte {
	if namespace.Kind != wire.KindString && !namespace.Absent() {
		return nil
	}
	for _, v := range []wire.Value{name, uid, resourceVersion} {
		if v.Kind != wire.KindString || len(v.Raw) == 0 {
			return nil
		}
	}
	for _, v := range []wire.Value{namespace, name, uid, resourceVersion} {
		b = protowire.AppendBytes(b, v.Raw)
	}
	return b
}
