// Package compose builds what the function composes for a placement: the
// ModelReplica, its ModelEndpoint, their names, keys and labels, as
// Modelplane v0.3 derives them, encoded as the protobuf Structs a response
// carries; and reads what it needs of the composed resources observed. It
// is shared by the function and the fleet simulator, and knows nothing of
// the SDK.
package compose

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// Names of a replica's resources, as Modelplane v0.3 derives them: a
// DNS-label-safe handle whose hash hides the cluster and index.
const (
	dnsLabelMax = 63
	hashLen     = 5
)

// ReplicaKey is the composed-resource key of a placement's ModelReplica.
func ReplicaKey(p scheduling.Placement) string {
	return fmt.Sprintf("%s%s-%d", replicaKeyPrefix, p.Cluster, p.Index)
}

// EndpointKey is the composed-resource key of a placement's ModelEndpoint.
func EndpointKey(p scheduling.Placement) string {
	return fmt.Sprintf("%s%s-%d", endpointKeyPrefix, p.Cluster, p.Index)
}

// ReplicaName is <prefix>-<hash>: the first five hex characters of the
// SHA-256 of <deployment>-<cluster>-<index>, after the deployment name cut to
// fit a DNS label.
func ReplicaName(deployment, cluster string, index int) string {
	sum := sha256.Sum256([]byte(deployment + "-" + cluster + "-" + strconv.Itoa(index)))
	prefix := deployment[:min(len(deployment), dnsLabelMax-hashLen-1)]
	return strings.TrimRight(prefix, "-") + "-" + hex.EncodeToString(sum[:])[:hashLen]
}

// Labels are the template's labels, then the cluster's placement labels,
// then the labels Modelplane manages, which win.
func Labels(xr *v1alpha1.ModelDeployment, p scheduling.Placement) map[string]string {
	labels := map[string]string{}
	maps.Copy(labels, xr.Spec.Template.Metadata.Labels)
	maps.Copy(labels, p.ClusterLabels)
	labels[v1alpha1.LabelDeployment] = xr.Metadata.Name
	labels[v1alpha1.LabelCluster] = p.Cluster
	labels[v1alpha1.LabelReplicaIndex] = strconv.Itoa(p.Index)
	return labels
}

// Replica builds the ModelReplica of one placement: the deployment's
// engines with each member's pool and resolved device requests.
func Replica(xr *v1alpha1.ModelDeployment, p scheduling.Placement) *v1alpha1.ModelReplica {
	spec := xr.Spec.Template.Spec
	r := &v1alpha1.ModelReplica{
		TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindModelReplica},
		Metadata: v1alpha1.ObjectMeta{
			Name:      ReplicaName(xr.Metadata.Name, p.Cluster, p.Index),
			Namespace: xr.Metadata.Namespace,
			Labels:    Labels(xr, p),
		},
		Spec: v1alpha1.ModelReplicaSpec{
			ClusterName: p.Cluster,
			Serving:     spec.Serving,
		},
	}
	r.Metadata.Labels[v1alpha1.LabelCounted] = strconv.FormatBool(p.Counted)
	if spec.ModelCacheRef != nil {
		r.Spec.ModelCacheRef = &v1alpha1.LocalRef{Name: spec.ModelCacheRef.Name}
	}
	if p.Replacement != nil {
		// What the function remembers of moving the replica, read back
		// from the observed replica on the next call.
		r.Metadata.Annotations = map[string]string{v1alpha1.AnnotationReplacement: p.Replacement.String()}
	}
	for _, ep := range p.Engines {
		var e *v1alpha1.Engine
		for i := range spec.Engines {
			if spec.Engines[i].Name == ep.Name {
				e = &spec.Engines[i]
				break
			}
		}
		if e == nil {
			continue
		}
		re := v1alpha1.ReplicaEngine{Name: e.Name, Copies: e.Copies, Phase: e.Phase}
		for i, mp := range ep.Members {
			if i >= len(e.Members) {
				break
			}
			m := e.Members[i]
			re.Members = append(re.Members, v1alpha1.ReplicaMember{
				Role:           mp.Role,
				NodePoolName:   mp.Pool,
				DeviceRequests: mp.DeviceRequests,
				Worker:         m.Worker,
				Template:       m.Template,
			})
		}
		r.Spec.Engines = append(r.Spec.Engines, re)
	}
	return r
}

// Endpoint builds the ModelEndpoint routing to a placement through its
// cluster's gateway.
func Endpoint(xr *v1alpha1.ModelDeployment, p scheduling.Placement) *v1alpha1.ModelEndpoint {
	name := ReplicaName(xr.Metadata.Name, p.Cluster, p.Index)
	rewrite := "/" + xr.Metadata.Namespace + "/" + name + "/"
	return &v1alpha1.ModelEndpoint{
		TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindModelEndpoint},
		Metadata: v1alpha1.ObjectMeta{Name: name, Namespace: xr.Metadata.Namespace, Labels: Labels(xr, p)},
		Spec:     v1alpha1.ModelEndpointSpec{URL: "http://" + p.Gateway + rewrite + "v1", RewritePath: rewrite},
	}
}
