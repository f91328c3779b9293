package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/util/validation/field"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/input/v1beta1"
	"github.com/modelplaneai/fleet-scheduler/internal/codec"
	"github.com/modelplaneai/fleet-scheduler/internal/wire"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// options is the validated function input.
type options struct {
	maxAge  time.Duration
	binding scheduling.Binding
}

// readInput reads and validates the optional Input. Errors name the field.
func readInput(req *fnv1.RunFunctionRequest) (options, error) {
	opts := options{binding: scheduling.Binding(v1beta1.DefaultAssumedBinding)}
	maxAge, _ := time.ParseDuration(v1beta1.DefaultObservationMaxAge)
	opts.maxAge = maxAge
	if req.GetInput() == nil {
		return opts, nil
	}
	in, err := decodeStruct[v1beta1.Input](req.GetInput(), "Function input")
	if err != nil {
		return opts, err
	}
	var errs field.ErrorList
	if in.ObservationMaxAge != nil {
		d, err := time.ParseDuration(*in.ObservationMaxAge)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(field.NewPath("observationMaxAge"), *in.ObservationMaxAge, "must be a duration such as 5m or 90s"))
		case d <= 0:
			errs = append(errs, field.Invalid(field.NewPath("observationMaxAge"), *in.ObservationMaxAge, "must be positive"))
		default:
			opts.maxAge = d
		}
	}
	if in.AssumedBinding != nil {
		switch b := *in.AssumedBinding; b {
		case v1beta1.AssumedBindingMostFree, v1beta1.AssumedBindingLeastFree:
			opts.binding = scheduling.Binding(b)
		default:
			errs = append(errs, field.NotSupported(field.NewPath("assumedBinding"), string(b), []string{string(v1beta1.AssumedBindingMostFree), string(v1beta1.AssumedBindingLeastFree)}))
		}
	}
	if len(errs) > 0 {
		return opts, fmt.Errorf("invalid Function input: %w", errs.ToAggregate())
	}
	return opts, nil
}

// readXR reads the observed ModelDeployment and refuses what the scheduler
// cannot work with.
func readXR(req *fnv1.RunFunctionRequest) (*v1alpha1.ModelDeployment, error) {
	xr, err := decodeStruct[v1alpha1.ModelDeployment](req.GetObserved().GetComposite().GetResource(), "ModelDeployment")
	if err != nil {
		return nil, err
	}
	return xr, validateXR(xr)
}

// validateXR refuses what the XRD would and the scheduler cannot work with:
// engines are known by name, so two of one name are an error.
func validateXR(xr *v1alpha1.ModelDeployment) error {
	seen := map[string]bool{}
	for i, e := range xr.Spec.Template.Spec.Engines {
		if seen[e.Name] {
			err := field.Duplicate(field.NewPath("spec", "template", "spec", "engines").Index(i).Child("name"), e.Name)
			return fmt.Errorf("invalid ModelDeployment: %w", err)
		}
		seen[e.Name] = true
	}
	return nil
}

// decodeStruct decodes a protobuf Struct into a typed object. The error names
// the field that did not decode.
func decodeStruct[T any](s *structpb.Struct, what string) (*T, error) {
	if s == nil {
		return nil, fmt.Errorf("cannot read %s: it is missing from the request", what)
	}
	b, err := protojson.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", what, err)
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", what, describeJSONError(err))
	}
	return out, nil
}

// describeJSONError turns a decode error into one that names the field path.
func describeJSONError(err error) error {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		return fmt.Errorf("%s: cannot use a JSON %s as %s", te.Field, te.Value, te.Type)
	}
	return err
}

// fleet is the resolved required resources.
type fleet struct {
	// clusters are read with their pool reports, or found in the cache so.
	clusters []*observation.ClusterReports
	// replicas are observed as they are read, or found in the cache so;
	// findings are what could not be observed of them.
	replicas []scheduling.Replica
	findings []observation.ReplicaFinding
	// observed are the replicas as read or cached, in the same order.
	observed []*observedReplica
	// specs are the replicas' specs, still on the wire: readPins reads the
	// engines of those the scheduler needs.
	specs []wire.Object
	// cacheRef is the referenced ModelCache, nil when none is referenced.
	cacheRef *v1alpha1.LocalRef
	// cacheFound is whether the referenced ModelCache exists.
	cacheFound bool
	// warnings are replicas of other deployments that could not be read.
	// readPins adds to them.
	warnings []string
}

// readFleet asks for the required resources, the same on every call, and
// reads them once Crossplane has resolved them. A nil fleet means not yet.
func readFleet(req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse, xr *v1alpha1.ModelDeployment, caches caches) (*fleet, error) {
	spec := xr.Spec.Template.Spec
	rsp.Requirements = &fnv1.Requirements{Resources: map[string]*fnv1.ResourceSelector{
		requiredReplicas: {ApiVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindModelReplica, Match: &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{}}},
	}}
	out := &fleet{}
	labels := map[string]string{}
	if spec.ClusterSelector != nil {
		maps.Copy(labels, spec.ClusterSelector.MatchLabels)
	}
	required := req.GetRequiredResources()
	if spec.ModelCacheRef != nil {
		out.cacheRef = spec.ModelCacheRef
		ns := xr.Metadata.Namespace
		rsp.Requirements.Resources[requiredCache] = &fnv1.ResourceSelector{
			ApiVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindModelCache,
			Match: &fnv1.ResourceSelector_MatchName{MatchName: spec.ModelCacheRef.Name}, Namespace: &ns,
		}
		got, resolved := required[requiredCache]
		if !resolved {
			// Ask for the clusters too, as on every call, so Crossplane
			// fetches everything in one round.
			rsp.Requirements.Resources[requiredClusters] = clusterSelector(labels)
			return nil, nil
		}
		if items := got.GetItems(); len(items) > 0 {
			cache, err := decodeStruct[v1alpha1.ModelCache](items[0].GetResource(), "ModelCache "+spec.ModelCacheRef.Name)
			if err != nil {
				return nil, err
			}
			out.cacheFound = true
			if cache.Spec.ClusterSelector != nil {
				maps.Copy(labels, cache.Spec.ClusterSelector.MatchLabels)
			}
		}
	}
	rsp.Requirements.Resources[requiredClusters] = clusterSelector(labels)
	clusters, okClusters := required[requiredClusters]
	replicas, okReplicas := required[requiredReplicas]
	if !okClusters || !okReplicas {
		return nil, nil
	}
	clusterItems, err := codec.All(clusters)
	if err != nil {
		return nil, fmt.Errorf("cannot read the InferenceClusters: %w", err)
	}
	var r structReader
	clusterCall := caches.clusters.begin()
	for _, item := range clusterItems {
		c, err := r.readCluster(item, caches.clusters, clusterCall)
		if err != nil {
			return nil, fmt.Errorf("cannot read InferenceCluster %s: %w", nameOf(item), err)
		}
		out.clusters = append(out.clusters, c)
	}
	if err := out.readReplicas(&r, replicas, xr, caches.replicas); err != nil {
		return nil, err
	}
	return out, nil
}

// readReplicas reads the fleet's ModelReplicas as they come off the wire,
// a batch at a time (see itemReader).
func (fl *fleet) readReplicas(r *structReader, replicas *fnv1.Resources, xr *v1alpha1.ModelDeployment, cache *replicaCache) error {
	call := cache.begin()
	items := codec.ItemsOf(replicas)
	for {
		item, ok, err := items.Next()
		if err != nil {
			return fmt.Errorf("cannot read the ModelReplicas: %w", err)
		}
		if !ok {
			return nil
		}
		observed, spec, err := r.readReplica(item, cache, call)
		var rep scheduling.Replica
		if err == nil {
			rep = observed.replica
		}
		// Our own replicas are kept, so their engines are always read, now,
		// to fail the call in the order the replicas came.
		if err == nil && observed.ours(xr) {
			rep.Object, err = r.withPins(rep.Object, spec)
			spec = nil
		}
		if err != nil {
			err = fmt.Errorf("cannot read ModelReplica %s: %w", nameOf(item), err)
			if isOurs(item, xr) {
				return err
			}
			fl.warnings = append(fl.warnings, unaccounted(err))
			continue
		}
		fl.replicas = append(fl.replicas, rep)
		fl.observed = append(fl.observed, observed)
		fl.specs = append(fl.specs, spec)
		if observed.finding != nil {
			fl.findings = append(fl.findings, *observed.finding)
		}
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
// deployments' replicas the scheduler may charge, in the order
// readFleet kept (it read our own): every one whose pods
// some pool report of its cluster does not count yet. The rest charge
// nothing wherever they are pinned (scheduling.CountedBefore): their
// engines are never read, and they are left out, as the scheduler would
// leave them out, before it has to walk them. A replica whose engines
// cannot be read is left out with a warning, and so are the findings about
// it.
func (fl *fleet) readPins(clusters []scheduling.Cluster, replicas []scheduling.Replica, findings []observation.ReplicaFinding) ([]scheduling.Replica, []observation.ReplicaFinding) {
	// A name two clusters share is left to the scheduler to resolve.
	named := make(map[string]int, len(clusters))
	for _, c := range clusters {
		named[c.Object.Metadata.Name]++
	}
	countedBefore := make(map[string]time.Time, len(clusters))
	for _, c := range clusters {
		if named[c.Object.Metadata.Name] > 1 {
			continue
		}
		if before, ok := scheduling.CountedBefore(c); ok {
			countedBefore[c.Object.Metadata.Name] = before
		}
	}
	var r structReader
	kept := make([]scheduling.Replica, 0, len(replicas))
	var dropped map[string]bool
	for i, rep := range replicas {
		// Our own replicas' engines are read already (a nil spec).
		if fl.specs[i] == nil {
			kept = append(kept, rep)
			continue
		}
		if before, settled := countedBefore[fl.observed[i].cluster]; settled && fl.observed[i].countedBy(before) {
			continue
		}
		withPins, err := r.withPins(rep.Object, fl.specs[i])
		if err != nil {
			name := objectName(rep.Object.Metadata.Namespace, rep.Object.Metadata.Name)
			fl.warnings = append(fl.warnings, unaccounted(fmt.Errorf("cannot read ModelReplica %s: %w", name, err)))
			if dropped == nil {
				dropped = map[string]bool{}
			}
			dropped[name] = true
			continue
		}
		rep.Object = withPins
		kept = append(kept, rep)
	}
	if dropped != nil {
		findings = slices.DeleteFunc(slices.Clone(findings), func(f observation.ReplicaFinding) bool { return dropped[objectName(f.Namespace, f.Name)] })
	}
	return kept, findings
}

// clusterSelector asks for every InferenceCluster with the labels; none
// means every cluster.
func clusterSelector(labels map[string]string) *fnv1.ResourceSelector {
	return &fnv1.ResourceSelector{
		ApiVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindInferenceCluster,
		Match: &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: labels}},
	}
}

//nolint:gochecknoglobals // Written, never read: a sink.

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

func isOurs(s []byte, xr *v1alpha1.ModelDeployment) bool {
	_, ns, deployment := metadataOf(s)
	return ns == xr.Metadata.Namespace && deployment == xr.Metadata.Name
}
