package fleet

import (
	"maps"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// The required-resources handshake (docs/spec.md#required-resources): each
// iteration of a call says what it needs, and Crossplane calls again with
// it. What a call asks for is this reader's policy: every ModelReplica of
// the fleet or, where a Narrowing says it is safe, only the deployment's
// own and those no report counts (docs/spec.md#narrow-requests).

// Names of the required resources; a Composition's render fixtures use
// them (docs/spec.md#required-resources).
const (
	RequiredClusters = "clusters"
	RequiredReplicas = "all-replicas"
	RequiredCache    = "cache"

	// RequiredOwnReplicas and RequiredUncountedReplicas are a narrow
	// call's replicas: the deployment's own, and every one no report
	// counts (docs/spec.md#narrow-requests).
	RequiredOwnReplicas       = "own-replicas"
	RequiredUncountedReplicas = "uncounted-replicas"
)

// Selector is one required resource as Crossplane is asked for it: the
// object of a kind with a name, or, without a name, every one with the
// labels (none: every one of the kind); in a namespace, or in any.
type Selector struct {
	Kind      string
	Name      string
	Labels    map[string]string
	Namespace *string
}

// Carried is what one iteration of a call carries of the required
// resources, as Crossplane resolved them.
type Carried interface {
	// Items are the items of a required resource, and whether the
	// iteration carries it (perhaps with none).
	Items(name string) (Items, bool)
	// ModelCache is the ModelCache of a name the iteration carries as
	// RequiredCache, decoded: false when it does not carry RequiredCache,
	// nil when Crossplane found none.
	ModelCache(name string) (*v1alpha1.ModelCache, bool, error)
}

// Iteration is one iteration of a call: its deployment, what it carries,
// and the time and maximum report age to judge the pool reports by.
type Iteration struct {
	Deployment *v1alpha1.ModelDeployment
	Carried    Carried
	// AskedWhole is whether an earlier iteration of the call asked for the
	// whole fleet, as the context it passed on says. What an iteration
	// carries does not say it: Crossplane v2.4 seeds a call's first
	// iteration with what the deployment's last call required, and keeps
	// those in every iteration of the call.
	AskedWhole bool
	Now        time.Time
	MaxAge     time.Duration
}

// CacheReference is what the deployment's ModelCache reference resolved
// to.
type CacheReference struct {
	// Ref is the reference, nil when the deployment makes none.
	Ref *v1alpha1.LocalRef
	// Found is whether the referenced ModelCache exists.
	Found bool
	// ClusterLabels are the labels its clusterSelector adds to the
	// deployment's.
	ClusterLabels map[string]string
}

// Unresolved is whether a cache is referenced that does not exist: with
// its footprint unknown, a new replica could land where it never stages.
func (c CacheReference) Unresolved() bool { return c.Ref != nil && !c.Found }

// Asked is what an iteration asks Crossplane for and, once Crossplane has
// resolved it, what it reads of it.
type Asked struct {
	// Selectors are the required resources to ask for, by name.
	Selectors map[string]Selector
	// Resolved is whether the iteration carries all of them: only then is
	// the fleet read; until then Crossplane calls again once it has them.
	Resolved bool
	Cache    CacheReference

	reader    *Reader
	narrowing *Narrowing
	it        Iteration
	narrow    bool
	// clusters are the InferenceClusters the iteration carries, read
	// before deciding what to ask for, or the error that stopped them.
	clusters    *Fleet
	clustersErr error
}

// Require asks for the required resources of an iteration: narrowly only
// where n says so for the clusters it carries. What it asks for depends
// on the clusters, so those it carries are read first, with r.
func Require(r *Reader, n *Narrowing, it Iteration) (*Asked, error) {
	items, carried := it.Carried.Items(RequiredClusters)
	clusters, readErr := r.ReadClusters(items, it.Now, it.MaxAge)
	ask := Ask{Deployment: it.Deployment.Metadata.UID, WentFull: it.AskedWhole || readErr != nil, Now: it.Now}
	if carried && clusters != nil {
		ask.Carried, ask.Clusters, ask.Fixtures = true, clusters.Clusters, clusters.Fixtures
	}
	a := &Asked{reader: r, narrowing: n, it: it, narrow: n.Narrow(ask), clusters: clusters, clustersErr: readErr}
	return a, a.require()
}

// require asks for the fleet and the deployment's ModelCache, and notes
// whether the iteration carries them. The replicas asked for are every
// one of the fleet or, for a narrow call, the deployment's own and those
// no report counts.
func (a *Asked) require() error {
	xr := a.it.Deployment
	spec := xr.Spec.Template.Spec
	a.Selectors = replicaSelectors(xr, a.narrow)
	labels := map[string]string{}
	if spec.ClusterSelector != nil {
		maps.Copy(labels, spec.ClusterSelector.MatchLabels)
	}
	if spec.ModelCacheRef != nil {
		a.Cache.Ref = spec.ModelCacheRef
		ns := xr.Metadata.Namespace
		a.Selectors[RequiredCache] = Selector{Kind: v1alpha1.KindModelCache, Name: spec.ModelCacheRef.Name, Namespace: &ns}
		cache, carried, err := a.it.Carried.ModelCache(spec.ModelCacheRef.Name)
		switch {
		case !carried:
			// Ask for the clusters too, as on every call, so Crossplane
			// fetches everything in one round.
			a.Selectors[RequiredClusters] = clusterSelector(labels)
			return nil
		case err != nil:
			return err
		case cache != nil:
			a.Cache.Found = true
			if cache.Spec.ClusterSelector != nil {
				a.Cache.ClusterLabels = cache.Spec.ClusterSelector.MatchLabels
				maps.Copy(labels, cache.Spec.ClusterSelector.MatchLabels)
			}
		}
	}
	a.Selectors[RequiredClusters] = clusterSelector(labels)
	a.Resolved = a.carries(RequiredClusters)
	if a.narrow {
		a.Resolved = a.Resolved && a.carries(RequiredOwnReplicas) && a.carries(RequiredUncountedReplicas)
	} else {
		a.Resolved = a.Resolved && a.carries(RequiredReplicas)
	}
	return nil
}

// Whole is whether the iteration asks for the whole fleet.
func (a *Asked) Whole() bool { return !a.narrow }

func (a *Asked) carries(name string) bool {
	_, ok := a.it.Carried.Items(name)
	return ok
}

// Read reads the fleet a resolved iteration carries, and records for the
// deployment's next calls what it read: a narrow call reads its own
// replicas and those no report counts, each once.
func (a *Asked) Read() (*Fleet, error) {
	if a.clustersErr != nil {
		return nil, a.clustersErr
	}
	fl := a.clusters
	var replicas Items
	if a.narrow {
		own, _ := a.it.Carried.Items(RequiredOwnReplicas)
		uncounted, _ := a.it.Carried.Items(RequiredUncountedReplicas)
		replicas = Union(own, uncounted)
	} else {
		replicas, _ = a.it.Carried.Items(RequiredReplicas)
	}
	xr := a.it.Deployment
	if err := a.reader.ReadReplicas(fl, replicas, xr); err != nil {
		return nil, err
	}
	if !a.narrow {
		a.narrowing.ReadWhole(xr.Metadata.UID, fl.Unlabelled, fl.Fixtures, a.it.Now)
	}
	a.narrowing.Answered(xr.Metadata.UID, fl.Clusters)
	return fl, nil
}

// replicaSelectors ask for every ModelReplica of the fleet or, narrowly,
// for the deployment's own (by its label, in its namespace) and for every
// one labelled not counted, in any namespace.
func replicaSelectors(xr *v1alpha1.ModelDeployment, narrow bool) map[string]Selector {
	if !narrow {
		return map[string]Selector{RequiredReplicas: {Kind: v1alpha1.KindModelReplica}}
	}
	ns := xr.Metadata.Namespace
	return map[string]Selector{
		RequiredOwnReplicas:       {Kind: v1alpha1.KindModelReplica, Labels: map[string]string{v1alpha1.LabelDeployment: xr.Metadata.Name}, Namespace: &ns},
		RequiredUncountedReplicas: {Kind: v1alpha1.KindModelReplica, Labels: map[string]string{v1alpha1.LabelCounted: "false"}},
	}
}

// clusterSelector asks for every InferenceCluster with the labels; none
// means every cluster.
func clusterSelector(labels map[string]string) Selector {
	return Selector{Kind: v1alpha1.KindInferenceCluster, Labels: labels}
}
