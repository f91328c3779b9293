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
	"github.com/modelplaneai/fleet-scheduler/internal/plan"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// Reconciler runs one reconcile of a deployment against the fleet as
// observed at now, and returns every ModelReplica the deployment should
// have. A replica is identified by its name.
type Reconciler interface {
	Reconcile(d *v1alpha1.ModelDeployment, clusters []*v1alpha1.InferenceCluster, replicas []*v1alpha1.ModelReplica, now time.Time) ([]*v1alpha1.ModelReplica, error)
}

// Direct reconciles through the path the function takes after reading
// its request: observation.Clusters and observation.Replicas, then
// plan.Planner.Plan with the function input's settings (assumed placements
// and their critical section included), then a ModelReplica per placement
// named and built as the function composes it
// (docs/spec.md#composed-modelreplicas).
type Direct struct {
	// Input is the function input, as a Composition gives it: a field
	// left out takes its default, exactly as in the function.
	Input v1beta1.Input
	// Cache, when not nil, keeps what was observed between calls.
	Cache *Cache
	// Servers, when not nil, are the function's servers, each with its
	// own ledger of assumed placements (docs/spec.md#assumed-placements),
	// that the calls are spread over; nil is a server that assumes
	// nothing (--assumed-placement-ttl 0).
	Servers *Servers
}

// Input is the function input that assumes binding b, every other field
// left to its default; an empty b leaves assumedBinding out too.
func Input(b scheduling.Binding) v1beta1.Input {
	if b == "" {
		return v1beta1.Input{}
	}
	return v1beta1.Input{AssumedBinding: new(v1beta1.AssumedBinding(b))}
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

// ledger is the ledger of the server the next call goes to; none without
// servers.
func (s *Servers) ledger() *assume.Ledger {
	if s == nil {
		return nil
	}
	l := s.ledgers[s.next%len(s.ledgers)]
	s.next++
	return l
}

// shown is the fleet a call reads, for the ledger to end the assumed
// placements it shows: each replica by namespace and name, indexed when
// first asked.
type shown struct {
	replicas []*v1alpha1.ModelReplica
	byName   map[[2]string]*v1alpha1.ModelReplica
}

// Shows implements assume.Fleet: the replica is in the fleet on the
// cluster, pinned to the pools.
func (s *shown) Shows(namespace, name, cluster string, pools []string) bool {
	r, ok := s.lookup(namespace, name)
	return ok && r.Spec.ClusterName == cluster && slices.Equal(r.Pools(), pools)
}

// lookup is the replica of the name in the fleet.
func (s *shown) lookup(namespace, name string) (*v1alpha1.ModelReplica, bool) {
	if s.byName == nil {
		s.byName = make(map[[2]string]*v1alpha1.ModelReplica, len(s.replicas))
		for _, r := range s.replicas {
			s.byName[[2]string{r.Metadata.Namespace, r.Metadata.Name}] = r
		}
	}
	r, ok := s.byName[[2]string{namespace, name}]
	return r, ok
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

// selectors are the compiled selectors the cache keeps; none without a
// cache.
func (c *Cache) compiled() *scheduling.Selectors {
	if c == nil {
		return nil
	}
	return c.selectors
}

// Reconcile implements Reconciler.
func (d Direct) Reconcile(dep *v1alpha1.ModelDeployment, clusters []*v1alpha1.InferenceCluster, replicas []*v1alpha1.ModelReplica, now time.Time) ([]*v1alpha1.ModelReplica, error) {
	out, _, err := d.reconcilePodNodes(dep, clusters, replicas, now)
	return out, err
}

// reconcilePodNodes reconciles, and says where the ledger assumed the
// claiming pods of each replica it composed anew bind.
func (d Direct) reconcilePodNodes(dep *v1alpha1.ModelDeployment, clusters []*v1alpha1.InferenceCluster, replicas []*v1alpha1.ModelReplica, now time.Time) ([]*v1alpha1.ModelReplica, replicaPodNodes, error) {
	settings, err := plan.Read(&d.Input)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reconcile %s: %w", dep.Metadata.Name, err)
	}
	cs, rs := d.Cache.observe(clusters, replicas, now, settings.ObservationMaxAge)
	planner := plan.Planner{Selectors: d.Cache.compiled(), Ledger: d.Servers.ledger()}
	fleet := &shown{replicas: replicas}
	out, err := planner.Plan(context.Background(), plan.Call{Deployment: dep, Settings: settings, Clusters: cs, Replicas: rs, Now: now, Shown: fleet, PodNodes: true})
	if err == nil && out.Kind == plan.InvalidSelector {
		err = out.Invalid
	}
	if err != nil {
		return nil, nil, fmt.Errorf("cannot schedule %s: %w", dep.Metadata.Name, err)
	}
	composed := make([]*v1alpha1.ModelReplica, 0, len(out.Plan.Replicas))
	podNodes := replicaPodNodes{}
	for _, p := range out.Plan.Replicas {
		if p.AsObserved {
			// Kept exactly as observed, as the function keeps it.
			if r, ok := fleet.lookup(dep.Metadata.Namespace, p.Name); ok {
				composed = append(composed, r)
			}
			continue
		}
		r := compose.Replica(dep, p)
		composed = append(composed, r)
		for _, e := range p.Engines {
			if e.PodNodes != nil {
				if podNodes[r.Metadata.Name] == nil {
					podNodes[r.Metadata.Name] = map[string][]scheduling.PodNode{}
				}
				podNodes[r.Metadata.Name][e.Name] = e.PodNodes
			}
		}
	}
	return composed, podNodes, nil
}
