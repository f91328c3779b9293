package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/response"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/input/v1beta1"
	"github.com/modelplaneai/fleet-scheduler/internal/compose"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// Names of the required resources; a Composition's render fixtures use them.
const (
	requiredClusters = "clusters"
	requiredReplicas = "all-replicas"
	requiredCache    = "cache"
)

// Function places a ModelDeployment's replicas on a fleet of GPU clusters.
type Function struct {
	fnv1.UnimplementedFunctionRunnerServiceServer

	log logging.Logger
	now func() time.Time
}

// RunFunction reads the XR and the fleet, schedules, and writes the replicas,
// endpoints, status and conditions. Bad input is a Fatal result, never an
// error: Crossplane then keeps everything as it was.
func (f *Function) RunFunction(_ context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	rsp := response.To(req, response.DefaultTTL)
	ensureDesired(rsp)

	opts, err := readInput(req)
	if err != nil {
		response.Fatal(rsp, err)
		return rsp, nil
	}
	xr, err := decodeStruct[v1alpha1.ModelDeployment](req.GetObserved().GetComposite().GetResource(), "ModelDeployment")
	if err != nil {
		response.Fatal(rsp, err)
		return rsp, nil
	}
	if err := validateXR(xr); err != nil {
		response.Fatal(rsp, err)
		return rsp, nil
	}
	f.logger().Debug("Running function", "xr", xr.Metadata.Namespace+"/"+xr.Metadata.Name, "tag", req.GetMeta().GetTag())

	fleet, err := readFleet(req, rsp, xr)
	if err != nil {
		response.Fatal(rsp, err)
		return rsp, nil
	}
	if fleet == nil {
		// Crossplane calls again once it has fetched what we require.
		return rsp, nil
	}
	// The scheduler is pure and takes no context: DRA's CEL cost limit bounds
	// every evaluation, and a pass is milliseconds.
	if err := f.compose(req, rsp, xr, fleet, opts); err != nil { //nolint:contextcheck // See above.
		response.Fatal(rsp, err)
	}
	return rsp, nil
}

// ensureDesired makes sure the response has a desired state to write into,
// whatever the request carried.
func ensureDesired(rsp *fnv1.RunFunctionResponse) {
	if rsp.GetDesired() == nil {
		rsp.Desired = &fnv1.State{}
	}
	if rsp.GetDesired().GetComposite() == nil {
		rsp.Desired.Composite = &fnv1.Resource{}
	}
	if rsp.GetDesired().GetComposite().GetResource() == nil {
		rsp.Desired.Composite.Resource = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	if rsp.Desired.Composite.Resource.Fields == nil {
		rsp.Desired.Composite.Resource.Fields = map[string]*structpb.Value{}
	}
	if rsp.Desired.Resources == nil {
		rsp.Desired.Resources = map[string]*fnv1.Resource{}
	}
}

func (f *Function) logger() logging.Logger {
	if f.log == nil {
		return logging.NewNopLogger()
	}
	return f.log
}

func (f *Function) clock() time.Time {
	if f.now == nil {
		return time.Now()
	}
	return f.now()
}

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
	clusters []*v1alpha1.InferenceCluster
	replicas []*v1alpha1.ModelReplica
	// cacheRef is the referenced ModelCache, nil when none is referenced.
	cacheRef *v1alpha1.LocalRef
	// cacheFound is whether the referenced ModelCache exists.
	cacheFound bool
	// warnings are replicas of other deployments that could not be read.
	warnings []string
}

// readFleet asks for the required resources, the same on every call, and
// reads them once Crossplane has resolved them. A nil fleet means not yet.
func readFleet(req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse, xr *v1alpha1.ModelDeployment) (*fleet, error) {
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
	for _, item := range clusters.GetItems() {
		c, err := readCluster(item.GetResource())
		if err != nil {
			return nil, fmt.Errorf("cannot read InferenceCluster %s: %w", nameOf(item.GetResource()), err)
		}
		out.clusters = append(out.clusters, c)
	}
	for _, item := range replicas.GetItems() {
		r, err := readReplica(item.GetResource())
		if err != nil {
			err = fmt.Errorf("cannot read ModelReplica %s: %w", nameOf(item.GetResource()), err)
			// Our own replica must be read, or it would be dropped. Another
			// deployment's cannot be charged; say so and go on.
			if isOurs(item.GetResource(), xr) {
				return nil, err
			}
			out.warnings = append(out.warnings, err.Error()+"; its capacity is not accounted")
			continue
		}
		out.replicas = append(out.replicas, r)
	}
	return out, nil
}

// clusterSelector asks for every InferenceCluster with the labels; none
// means every cluster.
func clusterSelector(labels map[string]string) *fnv1.ResourceSelector {
	return &fnv1.ResourceSelector{
		ApiVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindInferenceCluster,
		Match: &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: labels}},
	}
}

// nameOf reads namespace/name of an object for error messages.
func nameOf(s *structpb.Struct) string {
	md := s.GetFields()["metadata"].GetStructValue().GetFields()
	name := md["name"].GetStringValue()
	if ns := md["namespace"].GetStringValue(); ns != "" {
		return ns + "/" + name
	}
	return name
}

func isOurs(s *structpb.Struct, xr *v1alpha1.ModelDeployment) bool {
	md := s.GetFields()["metadata"].GetStructValue().GetFields()
	return md["namespace"].GetStringValue() == xr.Metadata.Namespace &&
		md["labels"].GetStructValue().GetFields()[v1alpha1.LabelDeployment].GetStringValue() == xr.Metadata.Name
}

// compose schedules and writes everything the response carries.
func (f *Function) compose(req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse, xr *v1alpha1.ModelDeployment, fl *fleet, opts options) error {
	warn(rsp, fl.warnings)
	retainOnly := setCacheCondition(rsp, fl)
	if len(fl.clusters) == 0 {
		response.ConditionFalse(rsp, condReplicasScheduled, reasonNoClusters)
		response.Warning(rsp, errors.New("No InferenceClusters found")) //nolint:staticcheck // Modelplane v0.3's warning, word for word.
		rsp.Desired.Composite.Ready = fnv1.Ready_READY_FALSE
		return nil
	}

	now := f.clock()
	clusters, pools := observation.Clusters(fl.clusters, now, opts.maxAge)
	replicas, findings := observation.Replicas(fl.replicas)
	warnObservations(rsp, pools, findings)

	plan, err := scheduling.Schedule(scheduling.Snapshot{
		Deployment: xr,
		Clusters:   clusters,
		Replicas:   replicas,
		Options:    scheduling.Options{Binding: opts.binding, RetainOnly: retainOnly},
	})
	if invalid, ok := errors.AsType[*scheduling.InvalidSelectorError](err); ok {
		return keepObserved(req, rsp, invalid)
	}
	if err != nil {
		return fmt.Errorf("cannot schedule replicas: %w", err)
	}

	observed := req.GetObserved().GetResources()
	if err := writeComposed(rsp, xr, plan, observed); err != nil {
		return err
	}
	setPlanConditions(rsp, plan, observed, len(fl.clusters))
	setCapacityObserved(rsp, pools)
	setTTL(rsp, pools, now)
	return nil
}

// writeComposed writes a ModelReplica per placement, a ModelEndpoint per
// placement that is Ready on a cluster with a gateway, and the XR's status.
func writeComposed(rsp *fnv1.RunFunctionResponse, xr *v1alpha1.ModelDeployment, plan *scheduling.Plan, observed map[string]*fnv1.Resource) error {
	ready := 0
	for _, p := range plan.Replicas {
		r, err := toResource(compose.Replica(xr, p))
		if err != nil {
			return err
		}
		if isReady(observed[compose.ReplicaKey(p)]) {
			r.Ready = fnv1.Ready_READY_TRUE
			ready++
		}
		rsp.Desired.Resources[compose.ReplicaKey(p)] = r
		if p.Gateway == "" || !isReady(observed[compose.ReplicaKey(p)]) {
			continue
		}
		e, err := toResource(compose.Endpoint(xr, p))
		if err != nil {
			return err
		}
		if isReady(observed[compose.EndpointKey(p)]) {
			e.Ready = fnv1.Ready_READY_TRUE
		}
		rsp.Desired.Resources[compose.EndpointKey(p)] = e
	}
	if err := writeStatus(rsp, len(plan.Replicas), ready); err != nil {
		return err
	}
	if len(plan.Replicas) == 0 {
		// An XR with nothing composed would otherwise read as ready.
		rsp.Desired.Composite.Ready = fnv1.Ready_READY_FALSE
	}
	return nil
}

func toResource(obj any) (*fnv1.Resource, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("cannot encode a composed resource: %w", err)
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("cannot encode a composed resource: %w", err)
	}
	return &fnv1.Resource{Resource: s}, nil
}

// isReady reads an observed composed resource's Ready condition.
func isReady(r *fnv1.Resource) bool {
	conds := r.GetResource().GetFields()["status"].GetStructValue().GetFields()["conditions"].GetListValue().GetValues()
	for _, c := range conds {
		f := c.GetStructValue().GetFields()
		if f["type"].GetStringValue() == "Ready" {
			return f["status"].GetStringValue() == "True"
		}
	}
	return false
}

// keepObserved answers a nodeSelector that does not compile: nothing new is
// placed and nothing moves, so every replica and endpoint stays desired as
// observed, and the condition names the engine, member and request.
func keepObserved(req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse, invalid *scheduling.InvalidSelectorError) error {
	msg := "Invalid nodeSelector CEL expression: " + invalid.Error()
	response.ConditionFalse(rsp, condReplicasScheduled, reasonInvalidNodeSelector).WithMessage(msg)
	response.Warning(rsp, errors.New(msg))
	rsp.Desired.Composite.Ready = fnv1.Ready_READY_FALSE
	keys := make([]string, 0, len(req.GetObserved().GetResources()))
	for k := range req.GetObserved().GetResources() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	total, ready := 0, 0
	for _, k := range keys {
		if !strings.HasPrefix(k, "replica-") && !strings.HasPrefix(k, "endpoint-") {
			continue
		}
		observed := req.GetObserved().GetResources()[k]
		desired := &fnv1.Resource{Resource: desiredFromObserved(observed.GetResource())}
		if isReady(observed) {
			desired.Ready = fnv1.Ready_READY_TRUE
		}
		rsp.Desired.Resources[k] = desired
		if strings.HasPrefix(k, "replica-") {
			total++
			if isReady(observed) {
				ready++
			}
		}
	}
	return writeStatus(rsp, total, ready)
}

// writeStatus writes the XR's status.replicas.
func writeStatus(rsp *fnv1.RunFunctionResponse, total, ready int) error {
	s, err := structpb.NewValue(map[string]any{"replicas": map[string]any{"total": total, "ready": ready}})
	if err != nil {
		return fmt.Errorf("cannot write the ModelDeployment status: %w", err)
	}
	rsp.Desired.Composite.Resource.Fields["status"] = s
	return nil
}

// desiredFromObserved keeps what we compose of an object: its type, name,
// namespace, labels and spec.
func desiredFromObserved(s *structpb.Struct) *structpb.Struct {
	out := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, k := range []string{"apiVersion", "kind", "spec"} {
		if v, ok := s.GetFields()[k]; ok {
			out.Fields[k] = v
		}
	}
	md := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, k := range []string{"name", "namespace", "labels"} {
		if v, ok := s.GetFields()["metadata"].GetStructValue().GetFields()[k]; ok {
			md.Fields[k] = v
		}
	}
	out.Fields["metadata"] = structpb.NewStructValue(md)
	return out
}

// setTTL asks to be called again no later than when the freshest-but-expiring
// usable observation goes stale, so a silent agent is noticed.
func setTTL(rsp *fnv1.RunFunctionResponse, pools []observation.PoolReport, now time.Time) {
	ttl := response.DefaultTTL
	for _, p := range pools {
		if p.State == observation.Usable {
			ttl = min(ttl, max(p.ExpiresAt.Sub(now), time.Second))
		}
	}
	rsp.Meta.Ttl = durationpb.New(ttl)
}
