package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/input/v1beta1"
	"github.com/modelplaneai/fleet-scheduler/internal/assume"
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
// (contract section 3). With Servers, a call takes part in assumed
// placements as the server's does (CONTRACT 4.6): through the ledger of
// the server it goes to, when the XR and every cluster carry a uid.
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
	// Servers, when not nil, are the function's servers, each with its
	// own ledger of assumed placements (CONTRACT 4.6), that the calls are
	// spread over; nil is a server that assumes nothing
	// (--assumed-placement-ttl 0).
	Servers *Servers
}

// Servers are function servers, each keeping its own ledger of assumed
// placements, that calls are spread over round robin, as Crossplane's
// gRPC client spreads them over a function's pods.
type Servers struct {
	ledgers []*assume.Ledger
	next    int
}

// NewServers are n servers whose ledgers keep entries for the default
// TTL, as --assumed-placement-ttl's default.
func NewServers(n int) *Servers {
	s := &Servers{}
	for range max(n, 1) {
		s.ledgers = append(s.ledgers, assume.New(assume.DefaultTTL))
	}
	return s
}

// Len is how many servers there are.
func (s *Servers) Len() int { return len(s.ledgers) }

// ledger is the ledger of the server the next call goes to.
func (s *Servers) ledger() *assume.Ledger {
	l := s.ledgers[s.next%len(s.ledgers)]
	s.next++
	return l
}

// shown is the fleet a call reads, for the ledger to end the assumed
// placements it shows: each replica by namespace and name.
type shown map[[2]string]*v1alpha1.ModelReplica

func shownOf(replicas []*v1alpha1.ModelReplica) shown {
	out := make(shown, len(replicas))
	for _, r := range replicas {
		out[[2]string{r.Metadata.Namespace, r.Metadata.Name}] = r
	}
	return out
}

// Shows implements assume.Fleet: the replica is in the fleet on the
// cluster, pinned to the pools.
func (s shown) Shows(namespace, name, cluster string, pools []string) bool {
	r, ok := s[[2]string{namespace, name}]
	return ok && r.Spec.ClusterName == cluster && slices.Equal(r.Pools(), pools)
}

// assumes is the server's test for taking part in assumed placements
// (root assume.go): the XR and every cluster carry a uid. It returns the
// deployment and the clusters' names by uid.
func assumes(dep *v1alpha1.ModelDeployment, clusters []*v1alpha1.InferenceCluster) (assume.Deployment, map[string]string, bool) {
	d := assume.Deployment{UID: dep.Metadata.UID, Namespace: dep.Metadata.Namespace, Name: dep.Metadata.Name}
	uids := make(map[string]string, len(clusters))
	for _, c := range clusters {
		if c.Metadata.UID == "" {
			return d, nil, false
		}
		uids[c.Metadata.UID] = c.Metadata.Name
	}
	return d, uids, d.UID != "" && len(uids) > 0
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
	snap := scheduling.Snapshot{Deployment: dep, Clusters: cs, Replicas: rs, Options: opts, Now: now}
	var plan *scheduling.Plan
	var err error
	if ad, uids, ok := assumes(dep, clusters); d.Servers != nil && ok {
		plan, err = d.Servers.ledger().Schedule(context.Background(), ad, uids, shownOf(replicas), snap)
	} else {
		plan, err = scheduling.Schedule(snap)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot schedule %s: %w", dep.Metadata.Name, err)
	}
	out := make([]*v1alpha1.ModelReplica, 0, len(plan.Replicas))
	for _, p := range plan.Replicas {
		out = append(out, compose.Replica(dep, p))
	}
	return out, nil
}
