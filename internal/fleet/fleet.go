// Package fleet reads the fleet a RunFunctionRequest carries, its
// InferenceClusters and ModelReplicas, straight off the protobuf wire
// (package wire), field by field: a request can carry tens of thousands of
// replicas, and only a few of their fields matter to the scheduler (pod
// templates, the bulk of a replica, are never read). A field of the wrong
// type is an error that names it. A Reader keeps what it read of each
// object across calls, for as long as the object is unchanged.
//
// What a call asks Crossplane for is decided here too, the reader's
// policy (require.go): the required-resources handshake, narrowed to the
// deployment's own replicas and those no report counts where a Narrowing
// says it is safe (narrow.go).
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

	// Warnings are the objects that could not be read, and what is made
	// of them.
	Warnings []string

	// Unlabelled is how many of the replicas read carry no counted label
	// (composed by Modelplane v0.3, or by a version of this function before
	// it), and Fixtures how many of the clusters and replicas read carry
	// no uid or resourceVersion, as a render fixture's objects do: a fleet
	// may be read narrowly only once a whole one of API objects has been
	// read with none unlabelled, and never while a cluster carried is a
	// fixture (docs/spec.md#narrow-requests).
	Unlabelled, Fixtures int

	// all are every replica read, and shown indexes them by name, made
	// when first asked.
	all   []entry
	shown map[[2]string]*entry
}

// Shows reports whether the fleet holds the replica namespace/name on
// cluster, its engines pinned to pools (in engine order) where they were
// read: a replica every report counts, whose engines were not read, on its
// cluster is shown whatever its pools.
func (fl *Fleet) Shows(namespace, name, cluster string, pools []string) bool {
	if fl.shown == nil {
		fl.shown = make(map[[2]string]*entry, len(fl.all))
		for i := range fl.all {
			o := fl.all[i].replica.Object
			fl.shown[[2]string{o.Metadata.Namespace, o.Metadata.Name}] = &fl.all[i]
		}
	}
	e, ok := fl.shown[[2]string{namespace, name}]
	if !ok || e.replica.Object.Spec.ClusterName != cluster {
		return false
	}
	if e.spec != nil {
		// Its engines were never read: no report has lost it.
		return true
	}
	return slices.Equal(e.replica.Object.Pools(), pools)
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
// now: ReadClusters, then ReadReplicas. Nothing one object holds stops the rest from being read: an
// InferenceCluster that does not read takes no new replicas, and the
// deployment's replicas on it are kept as observed; a ModelReplica that
// does not read is the deployment's, kept as observed, or another's,
// charged conservatively (scheduling.Replica.Unreadable). Each is a
// warning that names the object and the field. The error is for items the
// wire does not frame.
func (r *Reader) Read(clusters, replicas Items, xr *v1alpha1.ModelDeployment, now time.Time, maxAge time.Duration) (*Fleet, error) {
	fl, err := r.ReadClusters(clusters, now, maxAge)
	if err != nil {
		return nil, err
	}
	return fl, r.ReadReplicas(fl, replicas, xr)
}

// ReadClusters reads the InferenceClusters, and judges their pool reports
// at now: a fleet without replicas yet. An InferenceCluster that does not
// read takes no new replicas, and is warned of.
func (r *Reader) ReadClusters(clusters Items, now time.Time, maxAge time.Duration) (*Fleet, error) {
	var sr structReader
	out := &Fleet{}
	read, unreadable, err := r.readClusters(&sr, clusters, out)
	if err != nil {
		return nil, err
	}
	out.Clusters, out.Pools = observation.Judge(read, now, maxAge)
	out.Clusters = append(out.Clusters, unreadable...)
	return out, nil
}

// ReadReplicas reads the fleet's ModelReplicas for a deployment into a
// fleet ReadClusters read. A ModelReplica that does not read is the
// deployment's, kept as observed, or another's, charged conservatively
// (scheduling.Replica.Unreadable), and is warned of.
func (r *Reader) ReadReplicas(out *Fleet, replicas Items, xr *v1alpha1.ModelDeployment) error {
	var sr structReader
	names := make(map[string]bool, len(out.Clusters))
	for _, c := range out.Clusters {
		names[c.Object.Metadata.Name] = true
	}
	entries, err := r.readReplicas(&sr, replicas, xr, names, out)
	if err != nil {
		return err
	}
	if len(out.Clusters) == 0 {
		// With no cluster there is nothing to charge: no engine is read, and
		// only the replicas that did not read are kept, to stay as observed.
		for _, e := range entries {
			if e.replica.Unreadable != "" {
				out.Replicas = append(out.Replicas, e.replica)
			}
		}
		return nil
	}
	out.Replicas, out.Findings = out.readPins(entries)
	out.all = entries
	return nil
}

// readClusters reads every InferenceCluster with its pool reports. One that
// does not read is returned by name with its defect, and warned of.
func (r *Reader) readClusters(sr *structReader, items Items, fl *Fleet) ([]*observation.ClusterReports, []scheduling.Cluster, error) {
	cache := r.clusterCache()
	call := cache.begin()
	var read []*observation.ClusterReports
	var unreadable []scheduling.Cluster
	for {
		item, ok, err := items.Next()
		if err != nil {
			return nil, nil, fmt.Errorf("cannot read the InferenceClusters: %w", err)
		}
		if !ok {
			return read, unreadable, nil
		}
		c, err := sr.readCluster(item, cache, call)
		if len(sr.cacheKey) == 0 {
			fl.Fixtures++
		}
		if err == nil {
			read = append(read, c)
			continue
		}
		name := nameOf(item)
		if name == "" {
			fl.Warnings = append(fl.Warnings, fmt.Sprintf("cannot read an InferenceCluster whose name does not read: %v; it is left out", err))
			continue
		}
		fl.Warnings = append(fl.Warnings, fmt.Sprintf("cannot read InferenceCluster %s: %v; it takes no new replicas, and this deployment's replicas on it stay as observed", name, err))
		unreadable = append(unreadable, scheduling.Cluster{
			Object:     &v1alpha1.InferenceCluster{Metadata: v1alpha1.ObjectMeta{Name: name}},
			Unreadable: err.Error(),
		})
	}
}

// readReplicas reads the fleet's ModelReplicas as they come off the wire.
// The deployment's own are kept whatever their cluster's reports say, so
// their engines are read now. Another deployment's replica on none of the
// clusters can be charged nowhere, and is left out as it is read: a fleet
// can carry a million of them (scheduling.Schedule would leave them out
// too, once it had held them all).
func (r *Reader) readReplicas(sr *structReader, items Items, xr *v1alpha1.ModelDeployment, clusters map[string]bool, fl *Fleet) ([]entry, error) {
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
			fl.count(observed.labelled, observed.real)
			if !observed.ours(xr) && !clusters[observed.cluster] {
				continue
			}
			e = entry{observed: observed, replica: observed.replica, spec: spec}
			if observed.ours(xr) {
				e.replica.Object, err = sr.withPins(e.replica.Object, spec)
				e.spec = nil
			}
		}
		if err != nil {
			e = fl.unreadableReplica(sr, item, xr, err)
			_, labelled := e.replica.Object.Metadata.Labels[v1alpha1.LabelCounted]
			fl.count(labelled, true)
		}
		entries = append(entries, e)
	}
}

// count counts a replica read: whether it carries the counted label, and
// whether it is an API object.
func (fl *Fleet) count(labelled, apiObject bool) {
	if !labelled {
		fl.Unlabelled++
	}
	if !apiObject {
		fl.Fixtures++
	}
}

// unreadableReplica is a replica that did not read whole, as far as it
// read: the deployment's is kept as observed; another's is charged as not
// scheduled on the pools its engines are pinned to, or a whole node of
// every pool of its cluster where its engines do not read; one whose
// cluster does not read cannot be charged anywhere. Each is warned of.
func (fl *Fleet) unreadableReplica(sr *structReader, item []byte, xr *v1alpha1.ModelDeployment, err error) entry {
	rep, clusterRead, enginesRead := sr.partialReplica(item)
	name := objectName(rep.Metadata.Namespace, rep.Metadata.Name)
	var what string
	switch {
	case scheduling.Ours(xr, rep.Metadata.Namespace, rep.Metadata.Labels[v1alpha1.LabelDeployment], rep.Metadata.DeletionTimestamp != nil):
		what = "it is this deployment's, and stays as observed until it reads"
	case !clusterRead:
		what = "its cluster does not read either, so it cannot be charged to any pool"
	case enginesRead:
		what = "it is charged as not scheduled on the pools it is pinned to"
	default:
		what = "its pools do not read, so it is charged a whole node of every pool of " + rep.Spec.ClusterName
	}
	fl.Warnings = append(fl.Warnings, fmt.Sprintf("cannot read ModelReplica %s: %v; %s", name, err, what))
	return entry{replica: scheduling.Replica{Object: rep, Unreadable: err.Error()}}
}

// withPins is a replica with its engines read from its spec: a copy, as
// the replica read may be shared through the cache.
func (r *structReader) withPins(rep *v1alpha1.ModelReplica, spec wire.Object) (*v1alpha1.ModelReplica, error) {
	withPins := *rep
	return &withPins, r.readPins(spec, &withPins)
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
	for i := range entries {
		e := &entries[i]
		if e.observed != nil && e.observed.finding != nil {
			findings = append(findings, *e.observed.finding)
		}
		// Our own replicas' engines are read already, and so is what
		// could be read of a replica that did not read whole.
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
			// Its engines do not read: charged a whole node of every pool of
			// its cluster.
			name := objectName(rep.Object.Metadata.Namespace, rep.Object.Metadata.Name)
			fl.Warnings = append(fl.Warnings, fmt.Sprintf("cannot read ModelReplica %s: %v; its pools do not read, so it is charged a whole node of every pool of %s", name, err, rep.Object.Spec.ClusterName))
			rep = scheduling.Replica{Object: rep.Object, Unreadable: err.Error()}
		} else {
			rep.Object = withPins
		}
		// Read now, as the scheduler will see it.
		e.replica, e.spec = rep, nil
		kept = append(kept, rep)
	}
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
