package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/response"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/input/v1beta1"
	"github.com/modelplaneai/fleet-scheduler/internal/relay"
)

// requiredCluster is the required resource a ModelReplica's call asks for:
// its InferenceCluster, by name.
const requiredCluster = "cluster"

// Function is the relay.
type Function struct {
	fnv1.UnimplementedFunctionRunnerServiceServer

	log    logging.Logger
	now    func() time.Time
	margin time.Duration
}

// RunFunction relays for the XR of the call, an InferenceCluster or a
// ModelReplica. Whatever the earlier steps of the pipeline desired is kept:
// the relay adds Objects, the pools' reports and one condition.
func (f *Function) RunFunction(_ context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	rsp := response.To(req, response.DefaultTTL)
	if rsp.GetDesired() == nil {
		rsp.Desired = &fnv1.State{}
	}
	xr := req.GetObserved().GetComposite().GetResource().AsMap()
	apiVersion, _ := xr["apiVersion"].(string)
	kind, _ := xr["kind"].(string)
	var err error
	var said []any
	switch {
	case apiVersion == v1alpha1.APIVersion && kind == v1alpha1.KindInferenceCluster:
		said, err = f.cluster(req, rsp, xr)
	case apiVersion == v1alpha1.APIVersion && kind == v1alpha1.KindModelReplica:
		said, err = f.replica(req, rsp, xr)
	default:
		err = fmt.Errorf("cannot relay for a %s %s: the relay is a step of InferenceCluster and ModelReplica Compositions", apiVersion, kind)
	}
	// One line per call at Info: what a platform engineer reads to see the
	// relay working, without --debug.
	keys := append([]any{"xr", name(xr), "kind", kind}, said...)
	if err != nil {
		response.Fatal(rsp, err)
		f.log.Info("Cannot relay", append(keys, "error", err.Error())...)
		return rsp, nil
	}
	f.log.Info("Relayed", keys...)
	return rsp, nil
}

// cluster relays the pools' reports of an InferenceCluster, and says what
// it did, as keys and values for the call's log line.
func (f *Function) cluster(req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse, xr map[string]any) ([]any, error) {
	in := relay.ClusterInput{Observed: xr, Composed: observedComposed(req), Desired: desiredComposed(req)}
	in.AgentRelease, in.AgentReleaseErr = agentRelease(req.GetInput())
	if s, ok := req.GetDesired().GetComposite().GetResource().AsMap()["status"].(map[string]any); ok {
		in.DesiredStatus = s
	}
	out := relay.Cluster(in)
	if out.Status != nil {
		if err := setDesiredStatus(rsp, out.Status); err != nil {
			return nil, err
		}
	}
	if err := setResources(rsp, out.Resources); err != nil {
		return nil, err
	}
	for _, w := range out.Warnings {
		response.Warning(rsp, errors.New(w))
	}
	setCondition(rsp, out.Condition)
	return []any{"condition", out.Condition.Reason, "warnings", len(out.Warnings)}, nil
}

// replica relays a ModelReplica's PodsScheduled, and says what it did, as
// keys and values for the call's log line.
func (f *Function) replica(req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse, xr map[string]any) ([]any, error) {
	r := &v1alpha1.ModelReplica{}
	b, err := json.Marshal(xr)
	if err != nil {
		return nil, fmt.Errorf("cannot read the ModelReplica: %w", err)
	}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("cannot read ModelReplica %s: %w", name(xr), err)
	}
	rsp.Requirements = &fnv1.Requirements{Resources: map[string]*fnv1.ResourceSelector{
		requiredCluster: {ApiVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindInferenceCluster, Match: &fnv1.ResourceSelector_MatchName{MatchName: r.Spec.ClusterName}},
	}}
	got, resolved := req.GetRequiredResources()[requiredCluster]
	if !resolved {
		// Crossplane calls again once it has fetched the cluster.
		return []any{"asked", requiredCluster}, nil
	}
	maxAge, err := observationMaxAge(req.GetInput())
	if err != nil {
		return nil, err
	}
	in := relay.ReplicaInput{Replica: r, Composed: observedComposed(req), Now: f.now(), Margin: f.margin, MaxAge: maxAge}
	if items := got.GetItems(); len(items) > 0 {
		in.Cluster = items[0].GetResource().AsMap()
	}
	out := relay.Replica(in)
	if err := setResources(rsp, out.Resources); err != nil {
		return nil, err
	}
	setCondition(rsp, out.Condition)
	if out.TTL > 0 && out.TTL < response.DefaultTTL {
		// Whole seconds, rounded up: never called before the margin passed.
		rsp.Meta.Ttl = durationpb.New(max(time.Second, out.TTL.Truncate(time.Second)+time.Second))
	}
	return []any{"status", out.Condition.Status, "reason", out.Condition.Reason, "ttl", rsp.GetMeta().GetTtl().AsDuration().String()}, nil
}

// observationMaxAge is how old the newest report of a replica's pools may
// be for its PodsScheduled to be relayed: the observationMaxAge of the
// relay step's input, which is fleet-scheduler's own Input kind, with the
// function's default and bounds. One setting, read the same way by both
// (docs/spec.md#the-relay): the Composition that holds the one holds the
// other beside it.
func observationMaxAge(input *structpb.Struct) (time.Duration, error) {
	v, set, err := inputField(input, "observationMaxAge")
	if err != nil {
		return 0, err
	}
	if !set {
		return time.ParseDuration(v1beta1.DefaultObservationMaxAge)
	}
	s, _ := v.(string)
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("cannot read the relay's input: observationMaxAge: %v must be a duration such as 5m or 90s", render(v))
	case d < v1beta1.MinObservationMaxAge || d > v1beta1.MaxObservationMaxAge:
		return 0, fmt.Errorf("cannot read the relay's input: observationMaxAge: %s must be between %s and %s", s, v1beta1.MinObservationMaxAge, v1beta1.MaxObservationMaxAge)
	}
	return d, nil
}

// agentRelease is the agentRelease of the relay step's input, which is
// fleet-scheduler's own Input kind; nil when there is no input or it sets
// none.
func agentRelease(input *structpb.Struct) (*v1beta1.AgentRelease, error) {
	v, set, err := inputField(input, "agentRelease")
	if err != nil || !set {
		return nil, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("cannot read the relay's input: agentRelease: %w", err)
	}
	r := &v1beta1.AgentRelease{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("cannot read the relay's input: agentRelease %s: %w", render(v), err)
	}
	return r, nil
}

// inputField is a field of the relay step's input, which must be
// fleet-scheduler's own Input kind; not set when there is no input.
func inputField(input *structpb.Struct, field string) (any, bool, error) {
	in := input.AsMap()
	if len(in) == 0 {
		return nil, false, nil
	}
	apiVersion, _ := in["apiVersion"].(string)
	kind, _ := in["kind"].(string)
	if apiVersion != v1beta1.APIVersion || kind != v1beta1.Kind {
		return nil, false, fmt.Errorf("cannot read the relay's input: it is a %s %s, want fleet-scheduler's %s %s", apiVersion, kind, v1beta1.APIVersion, v1beta1.Kind)
	}
	v, set := in[field]
	return v, set, nil
}

// render shows a value of the input as the JSON it came from.
func render(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func name(xr map[string]any) string {
	meta, _ := xr["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	n, _ := meta["name"].(string)
	if ns == "" {
		return n
	}
	return ns + "/" + n
}

// observedComposed are the call's observed composed resources, by key.
func observedComposed(req *fnv1.RunFunctionRequest) map[string]map[string]any {
	out := map[string]map[string]any{}
	for key, r := range req.GetObserved().GetResources() {
		out[key] = r.GetResource().AsMap()
	}
	return out
}

// desiredComposed are the composed resources the earlier steps desire,
// by key.
func desiredComposed(req *fnv1.RunFunctionRequest) map[string]map[string]any {
	out := map[string]map[string]any{}
	for key, r := range req.GetDesired().GetResources() {
		out[key] = r.GetResource().AsMap()
	}
	return out
}

// setDesiredStatus replaces the desired XR's status.
func setDesiredStatus(rsp *fnv1.RunFunctionResponse, status map[string]any) error {
	s, err := structpb.NewValue(status)
	if err != nil {
		return fmt.Errorf("cannot write the status: %w", err)
	}
	if rsp.GetDesired().GetComposite() == nil {
		rsp.Desired.Composite = &fnv1.Resource{}
	}
	if rsp.GetDesired().GetComposite().GetResource() == nil {
		rsp.Desired.Composite.Resource = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	rsp.Desired.Composite.Resource.Fields["status"] = s
	return nil
}

// setResources adds composed resources, each ready: an unready one would
// keep the XR from being Ready, and fleet-scheduler places nothing on a
// cluster that is not.
func setResources(rsp *fnv1.RunFunctionResponse, resources map[string]map[string]any) error {
	if rsp.Desired.Resources == nil {
		rsp.Desired.Resources = map[string]*fnv1.Resource{}
	}
	for key, m := range resources {
		s, err := structpb.NewStruct(m)
		if err != nil {
			return fmt.Errorf("cannot compose %s: %w", key, err)
		}
		rsp.Desired.Resources[key] = &fnv1.Resource{Resource: s, Ready: fnv1.Ready_READY_TRUE}
	}
	return nil
}

func setCondition(rsp *fnv1.RunFunctionResponse, c relay.Condition) {
	var o *response.ConditionOption
	switch c.Status {
	case "True":
		o = response.ConditionTrue(rsp, c.Type, c.Reason)
	case "False":
		o = response.ConditionFalse(rsp, c.Type, c.Reason)
	default:
		o = response.ConditionUnknown(rsp, c.Type, c.Reason)
	}
	if c.Message != "" {
		o = o.WithMessage(c.Message)
	}
	o.TargetComposite()
}
