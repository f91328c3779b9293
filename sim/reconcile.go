package sim

import (
	"fmt"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/input/v1beta1"
	"github.com/modelplaneai/fleet-scheduler/internal/compose"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// Reconciler runs one reconcile of a deployment against the fleet as
// observed at now, and returns every ModelReplica the deployment should
// have. A replica is identified by its name.
type Reconciler interface {
	Reconcile(d *v1alpha1.ModelDeployment, clusters []*v1alpha1.InferenceCluster, replicas []*v1alpha1.ModelReplica, now time.Time) ([]*v1alpha1.ModelReplica, error)
}

// Direct reconciles through the packages fn.go calls, without the protobuf
// boundary: observation.Clusters and observation.Replicas, then
// scheduling.Schedule with the function input's defaults (re-placing
// replicas whose pods stay unscheduled after 15m included), then a
// ModelReplica per placement named and built as the function composes it
// (contract section 3).
type Direct struct {
	// MaxAge is observationMaxAge; zero means the default 5m.
	MaxAge time.Duration
	// Binding is the function input's assumedBinding.
	Binding scheduling.Binding
	// ReplaceAfter is replaceUnscheduledAfter; zero means the default 15m,
	// a negative duration turns re-placing off.
	ReplaceAfter time.Duration
	// Cache, when not nil, keeps what was observed between calls.
	Cache *Cache
}

// defaultReplaceAfter is the function input's default
// replaceUnscheduledAfter.
func defaultReplaceAfter() time.Duration {
	d, err := time.ParseDuration(v1beta1.DefaultReplaceUnscheduledAfter)
	if err != nil {
		panic(err) // The default is a constant the function's input reads.
	}
	return d
}

// Cache keeps what Direct observed between calls, as the function's server
// keeps what it read and observed of each unchanged object (and its
// compiled selectors): each replica by its object, which the simulator
// replaces whenever the replica changes, and the clusters of a round by
// their objects and the time. What one call observes is what it would
// observe afresh.
type Cache struct {
	replicas   map[*v1alpha1.ModelReplica]scheduling.Replica
	clustersOf *v1alpha1.InferenceCluster
	clustersAt time.Time
	clusters   []scheduling.Cluster
	selectors  *scheduling.Selectors
}

// NewCache is an empty cache.
func NewCache() *Cache {
	return &Cache{replicas: map[*v1alpha1.ModelReplica]scheduling.Replica{}, selectors: scheduling.NewSelectors()}
}

func (c *Cache) observe(clusters []*v1alpha1.InferenceCluster, replicas []*v1alpha1.ModelReplica, now time.Time, maxAge time.Duration) ([]scheduling.Cluster, []scheduling.Replica) {
	if c == nil {
		cs, _ := observation.Clusters(clusters, now, maxAge)
		rs, _ := observation.Replicas(replicas)
		return cs, rs
	}
	if len(clusters) == 0 || clusters[0] != c.clustersOf || !now.Equal(c.clustersAt) {
		c.clusters, _ = observation.Clusters(clusters, now, maxAge)
		c.clustersOf, c.clustersAt = nil, now
		if len(clusters) > 0 {
			c.clustersOf = clusters[0]
		}
	}
	// Keep only the replicas this call sees, so the cache does not grow
	// with the fleet's history.
	seen := make(map[*v1alpha1.ModelReplica]scheduling.Replica, len(replicas))
	rs := make([]scheduling.Replica, 0, len(replicas))
	for _, o := range replicas {
		r, ok := c.replicas[o]
		if !ok {
			r, _ = observation.Replica(o)
		}
		seen[o] = r
		rs = append(rs, r)
	}
	c.replicas = seen
	return c.clusters, rs
}

// DefaultMaxAge is the function's default observationMaxAge.
const DefaultMaxAge = 5 * time.Minute

// Reconcile implements Reconciler.
func (d Direct) Reconcile(dep *v1alpha1.ModelDeployment, clusters []*v1alpha1.InferenceCluster, replicas []*v1alpha1.ModelReplica, now time.Time) ([]*v1alpha1.ModelReplica, error) {
	maxAge := d.MaxAge
	if maxAge == 0 {
		maxAge = DefaultMaxAge
	}
	cs, rs := d.Cache.observe(clusters, replicas, now, maxAge)
	opts := scheduling.Options{Binding: d.Binding, ReplaceUnscheduledAfter: max(d.ReplaceAfter, 0)}
	if d.ReplaceAfter == 0 {
		opts.ReplaceUnscheduledAfter = defaultReplaceAfter()
	}
	if d.Cache != nil {
		opts.Selectors = d.Cache.selectors
	}
	plan, err := scheduling.Schedule(scheduling.Snapshot{Deployment: dep, Clusters: cs, Replicas: rs, Options: opts, Now: now})
	if err != nil {
		return nil, fmt.Errorf("cannot schedule %s: %w", dep.Metadata.Name, err)
	}
	out := make([]*v1alpha1.ModelReplica, 0, len(plan.Replicas))
	for _, p := range plan.Replicas {
		out = append(out, compose.Replica(dep, p))
	}
	return out, nil
}
