// Package fleet reads the fleet a RunFunctionRequest carries, its
// InferenceClusters and ModelReplicas, straight off the protobuf wire
// (package wire), field by field: a request can carry tens of thousands of
// replicas, and only a few of their fields matter to the scheduler (pod
// templates, the bulk of a replica, are never read). A field of the wrong
// type is an error that names it. A Reader keeps what it read of each
// object across calls, for as long as the object is unchanged.
//
// What the cluster agent reports (pool reports, PodsScheduled conditions)
// is only decoded here; package observation reads and judges it.
package fleet

import (
	"fmt"
	"slices"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/wire"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// Items are the Structs of a required resource's items, on the wire, one at
// a time: false when there is none left.
type Items interface {
	Next() ([]byte, bool, error)
}

// Fleet is the fleet as one call reads it, observed at the call's time.
type Fleet struct {
	// Clusters are the InferenceClusters with their usable pool reports,
	// and Pools the verdict on every pool's report, in input order.
	Clusters []scheduling.Cluster
	Pools    []observation.PoolReport

	// Replicas are the ModelReplicas the scheduler needs: every one of the
	// deployment's, and every other deployment's that some pool report
	// does not count yet, with their engines read.
	Replicas []scheduling.Replica

	// Findings are the PodsScheduled conditions of Replicas that could not
	// be read.
	Findings []observation.ReplicaFinding

	// Warnings are other deployments' replicas that could not be read.
	Warnings []string
}

// Reader reads fleets, keeping what it read of each InferenceCluster and
// ModelReplica for the next calls. A nil *Reader reads every object anew.
// It is safe for concurrent calls.
type Reader struct {
	clusters *clusterCache
	replicas *replicaCache
}

// NewReader returns a Reader with empty caches.
func NewReader() *Reader {
	return &Reader{clusters: newObjectCache[observation.ClusterReports](), replicas: newReplicaCache()}
}

func (r *Reader) clusterCache() *clusterCache {
	if r == nil {
		return nil
	}
	return r.clusters
}

func (r *Reader) replicaCache() *replicaCache {
	if r == nil {
		return nil
	}
	return r.replicas
}

// entry is one ModelReplica as read: observed, and its spec still on the
// wire until its engines are read.
type entry struct {
	observed *observedReplica
	replica  scheduling.Replica
	// spec is nil once the replica's engines are read.
	spec wire.Object
}

// Read reads the fleet for a deployment, and judges the pool reports at
// now. A cluster, or a replica of the deployment, that does not read is an
// error; another deployment's replica that does not read is a warning.
func (r *Reader) Read(clusters, replicas Items, xr *v1alpha1.ModelDeployment, now time.Time, maxAge time.Duration) (*Fleet, error) {
	var sr structReader
	read, err := r.readClusters(&sr, clusters)
	if err != nil {
		return nil, err
	}
	out := &Fleet{}
	entries, err := r.readReplicas(&sr, replicas, xr, out)
	if err != nil {
		return nil, err
	}
	out.Clusters, out.Pools = observation.Judge(read, now, maxAge)
	if len(out.Clusters) > 0 {
		// With no cluster there is nothing to charge: no engine is read.
		out.Replicas, out.Findings = out.readPins(entries)
	}
	return out, nil
}

// readClusters reads every InferenceCluster with its pool reports.
func (r *Reader) readClusters(sr *structReader, items Items) ([]*observation.ClusterReports, error) {
	cache := r.clusterCache()
	call := cache.begin()
	var out []*observation.ClusterReports
	for {
		item, ok, err := items.Next()
		if err != nil {
			return nil, fmt.Errorf("cannot read the InferenceClusters: %w", err)
		}
		if !ok {
			return out, nil
		}
		c, err := sr.readCluster(item, cache, call)
		if err != nil {
			return nil, fmt.Errorf("cannot read InferenceCluster %s: %w", nameOf(item), err)
		}
		out = append(out, c)
	}
}

// readReplicas reads the fleet's ModelReplicas as they come off the wire.
// The deployment's own are kept whatever their cluster's reports say, so
// their engines are read now, to fail the call in the order they came.
func (r *Reader) readReplicas(sr *structReader, items Items, xr *v1alpha1.ModelDeployment, fl *Fleet) ([]entry, error) {
	cache := r.replicaCache()
	call := cache.begin()
	var entries []entry
	for {
		item, ok, err := items.Next()
		if err != nil {
			return nil, fmt.Errorf("cannot read the ModelReplicas: %w", err)
		}
		if !ok {
			return entries, nil
		}
		observed, spec, err := sr.readReplica(item, cache, call)
		var e entry
		if err == nil {
			e = entry{observed: observed, replica: observed.replica, spec: spec}
			if observed.ours(xr) {
				e.replica.Object, err = sr.withPins(e.replica.Object, spec)
				e.spec = nil
			}
		}
		if err != nil {
			err = fmt.Errorf("cannot read ModelReplica %s: %w", nameOf(item), err)
			if isOurs(item, xr) {
				return nil, err
			}
			fl.Warnings = append(fl.Warnings, unaccounted(err))
			continue
		}
		entries = append(entries, e)
	}
}

// withPins is a replica with its engines read from its spec: a copy, as
// the replica read may be shared through the cache.
func (r *structReader) withPins(rep *v1alpha1.ModelReplica, spec wire.Object) (*v1alpha1.ModelReplica, error) {
	withPins := *rep
	return &withPins, r.readPins(spec, &withPins)
}

// unaccounted warns of another deployment's replica that cannot be read.
// Our own replica must be read, or it would be dropped; another's cannot
// be charged: say so and go on.
func unaccounted(err error) string {
	return err.Error() + "; its capacity is not accounted"
}

// readPins reads the engines (pins and stamped requests) of the other
// deployments' replicas the scheduler may charge: every one whose pods
// some pool report of its cluster does not count yet. The rest charge
// nothing wherever they are pinned (scheduling.CountedBefore): their
// engines are never read, and they are left out, as the scheduler would
// leave them out, before it has to walk them. A replica whose engines
// cannot be read is left out with a warning, and so are the findings about
// it. It returns the replicas for the scheduler and their findings, in the
// order they were read.
func (fl *Fleet) readPins(entries []entry) ([]scheduling.Replica, []observation.ReplicaFinding) {
	// A name two clusters share is left to the scheduler to resolve.
	named := make(map[string]int, len(fl.Clusters))
	for _, c := range fl.Clusters {
		named[c.Object.Metadata.Name]++
	}
	countedBefore := make(map[string]time.Time, len(fl.Clusters))
	for _, c := range fl.Clusters {
		if named[c.Object.Metadata.Name] > 1 {
			continue
		}
		if before, ok := scheduling.CountedBefore(c); ok {
			countedBefore[c.Object.Metadata.Name] = before
		}
	}
	var r structReader
	kept := make([]scheduling.Replica, 0, len(entries))
	var findings []observation.ReplicaFinding
	var dropped map[string]bool
	for _, e := range entries {
		if e.observed.finding != nil {
			findings = append(findings, *e.observed.finding)
		}
		// Our own replicas' engines are read already.
		if e.spec == nil {
			kept = append(kept, e.replica)
			continue
		}
		if before, settled := countedBefore[e.observed.cluster]; settled && e.observed.countedBy(before) {
			continue
		}
		rep := e.replica
		withPins, err := r.withPins(rep.Object, e.spec)
		if err != nil {
			name := objectName(rep.Object.Metadata.Namespace, rep.Object.Metadata.Name)
			fl.Warnings = append(fl.Warnings, unaccounted(fmt.Errorf("cannot read ModelReplica %s: %w", name, err)))
			if dropped == nil {
				dropped = map[string]bool{}
			}
			dropped[name] = true
			continue
		}
		rep.Object = withPins
		kept = append(kept, rep)
	}
	// Nor is anything found of the replicas left out said.
	findings = slices.DeleteFunc(findings, func(f observation.ReplicaFinding) bool { return dropped[objectName(f.Namespace, f.Name)] })
	return kept, findings
}

// metadataOf reads an object's name, namespace and deployment label, as
// far as they can be read, for messages about an object that cannot be.
func metadataOf(s []byte) (name, namespace, deployment string) {
	var r structReader
	md := r.object(wire.Object(s).Get("metadata"), "metadata")
	labels := r.object(md.Get("labels"), "labels")
	return r.str(md.Get(keyName), keyName), r.str(md.Get("namespace"), "namespace"), r.str(labels.Get(v1alpha1.LabelDeployment), "")
}

// nameOf reads namespace/name of an object for error messages.
func nameOf(s []byte) string {
	name, ns, _ := metadataOf(s)
	return objectName(ns, name)
}

// objectName is namespace/name, or name alone for a cluster-scoped object.
func objectName(namespace, name string) string {
	if namespace != "" {
		return namespace + "/" + name
	}
	return name
}

// isOurs is whether an object, as far as its metadata reads, is one of the
// deployment's replicas.
func isOurs(s []byte, xr *v1alpha1.ModelDeployment) bool {
	_, ns, deployment := metadataOf(s)
	return scheduling.Ours(xr, ns, deployment)
}
