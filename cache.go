package main

import (
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// Crossplane calls the function for every ModelDeployment it reconciles,
// each time with every ModelReplica of the fleet, and between two calls
// nearly all of them are unchanged. The replica cache keeps what
// readReplica read of each, across calls, for as long as the object is the
// same: Kubernetes gives every change of an object a new resourceVersion.
// An object without a uid and a resourceVersion (a render fixture) is never
// cached.

// replicaCacheSweepEvery is how many calls go by between two sweeps of the
// cache, and how many calls an entry no call has read survives.
const replicaCacheSweepEvery = 16

// replicaCache is safe for concurrent calls.
type replicaCache struct {
	mu      sync.Mutex
	calls   uint64
	entries map[string]cachedReplica
}

type cachedReplica struct {
	// replica is what readReplica returned, never handed out itself: the
	// caller gets a copy whose engines it may fill in.
	replica  v1alpha1.ModelReplica
	lastCall uint64
}

func newReplicaCache() *replicaCache {
	return &replicaCache{entries: map[string]cachedReplica{}}
}

// begin starts a call: it returns the call's number, and sweeps out the
// entries no recent call has read.
func (c *replicaCache) begin() uint64 {
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

// get returns a copy of the replica cached under key, if any.
func (c *replicaCache) get(key []byte, call uint64) (*v1alpha1.ModelReplica, bool) {
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
	c.entries[string(key)] = e
	out := e.replica
	return &out, true
}

// put caches a copy of a replica, as read, under key.
func (c *replicaCache) put(key []byte, call uint64, r *v1alpha1.ModelReplica) {
	if c == nil || key == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[string(key)] = cachedReplica{replica: *r, lastCall: call}
}

// appendReplicaKey appends the cache key of a replica: namespace, name, uid
// and resourceVersion, each length-prefixed. It returns nil when the object
// has no uid or no resourceVersion to tell its versions apart.
func appendReplicaKey(b []byte, namespace, name, uid, resourceVersion value) []byte {
	for _, v := range []value{namespace, name, uid, resourceVersion} {
		if v.kind != kindString {
			return nil
		}
	}
	if len(uid.raw) == 0 || len(resourceVersion.raw) == 0 {
		return nil
	}
	for _, v := range []value{namespace, name, uid, resourceVersion} {
		b = protowire.AppendBytes(b, v.raw)
	}
	return b
}
