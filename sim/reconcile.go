package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
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
		out = append(out, ComposeReplica(dep, p))
	}
	return out, nil
}

// ReplicaName is the composed ModelReplica's name: the deployment name cut
// to 57 characters with trailing '-' removed, a '-', and the first five hex
// characters of the SHA-256 of <deployment>-<cluster>-<index>.
func ReplicaName(deployment, cluster string, index int) string {
	sum := sha256.Sum256([]byte(deployment + "-" + cluster + "-" + strconv.Itoa(index)))
	prefix := strings.TrimRight(deployment[:min(len(deployment), 57)], "-")
	return prefix + "-" + hex.EncodeToString(sum[:])[:5]
}

// ComposeReplica builds the ModelReplica of one placement as the function
// does: the deployment's engines, each member pinned to its pool with its
// resolved device requests.
func ComposeReplica(dep *v1alpha1.ModelDeployment, p scheduling.Placement) *v1alpha1.ModelReplica {
	spec := dep.Spec.Template.Spec
	labels := map[string]string{}
	maps.Copy(labels, dep.Spec.Template.Metadata.Labels)
	maps.Copy(labels, p.ClusterLabels)
	labels[v1alpha1.LabelDeployment] = dep.Metadata.Name
	labels[v1alpha1.LabelCluster] = p.Cluster
	labels[v1alpha1.LabelReplicaIndex] = strconv.Itoa(p.Index)
	r := &v1alpha1.ModelReplica{
		TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindModelReplica},
		Metadata: v1alpha1.ObjectMeta{Name: ReplicaName(dep.Metadata.Name, p.Cluster, p.Index), Namespace: dep.Metadata.Namespace, Labels: labels},
		Spec:     v1alpha1.ModelReplicaSpec{ClusterName: p.Cluster, Serving: spec.Serving, ModelCacheRef: spec.ModelCacheRef},
	}
	for _, ep := range p.Engines {
		for _, e := range spec.Engines {
			if e.Name != ep.Name {
				continue
			}
			re := v1alpha1.ReplicaEngine{Name: e.Name, Copies: e.Copies, Phase: e.Phase}
			for i, mp := range ep.Members {
				re.Members = append(re.Members, v1alpha1.ReplicaMember{
					Role: mp.Role, NodePoolName: mp.Pool, DeviceRequests: mp.DeviceRequests,
					Worker: e.Members[i].Worker, Template: e.Members[i].Template,
				})
			}
			r.Spec.Engines = append(r.Spec.Engines, re)
			break
		}
	}
	return r
}
