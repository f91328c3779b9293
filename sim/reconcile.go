package sim

import (
	"fmt"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
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
// scheduling.Schedule, then a ModelReplica per placement named and built as
// the function composes it (contract section 3).
type Direct struct {
	// MaxAge is observationMaxAge; zero means the default 5m.
	MaxAge time.Duration
	// Binding is the function input's assumedBinding.
	Binding scheduling.Binding
}

// DefaultMaxAge is the function's default observationMaxAge.
const DefaultMaxAge = 5 * time.Minute

// Reconcile implements Reconciler.
func (d Direct) Reconcile(dep *v1alpha1.ModelDeployment, clusters []*v1alpha1.InferenceCluster, replicas []*v1alpha1.ModelReplica, now time.Time) ([]*v1alpha1.ModelReplica, error) {
	maxAge := d.MaxAge
	if maxAge == 0 {
		maxAge = DefaultMaxAge
	}
	cs, _ := observation.Clusters(clusters, now, maxAge)
	rs, _ := observation.Replicas(replicas)
	plan, err := scheduling.Schedule(scheduling.Snapshot{Deployment: dep, Clusters: cs, Replicas: rs, Options: scheduling.Options{Binding: d.Binding}})
	if err != nil {
		return nil, fmt.Errorf("cannot schedule %s: %w", dep.Metadata.Name, err)
	}
	out := make([]*v1alpha1.ModelReplica, 0, len(plan.Replicas))
	for _, p := range plan.Replicas {
		out = append(out, compose.Replica(dep, p))
	}
	return out, nil
}
