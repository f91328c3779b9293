// Package caller is Crossplane's side of a composition function's calls,
// for the fleet simulator: it turns the simulated fleet into the
// RunFunctionRequests Crossplane would send a function serving over gRPC,
// answers each iteration's requirements from the fleet as Crossplane's
// required-resources fetcher does, and reads the ModelReplicas the last
// iteration desires. It counts the bytes of every request, so that a run
// says what its calls cost on the wire beside what they placed.
package caller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// MaxIterations is how many times Crossplane calls a function for one
// step before it gives up on requirements that keep changing.
const MaxIterations = 5

// Caller calls a function for the simulator's reconciles. It is a
// sim.Reconciler.
type Caller struct {
	// Client reaches the function.
	Client fnv1.FunctionRunnerServiceClient
	// Input is the function input of the Composition's step; nil for none.
	Input *structpb.Struct
	// Calls are the calls made so far, one per reconcile.
	Calls []Call
}

// Call is what one reconcile cost: its iterations, and the bytes of the
// requests Crossplane sent for it.
type Call struct {
	Deployment string
	Iterations int
	// Narrow is whether the last iteration asked for the narrow requests
	// rather than every ModelReplica.
	Narrow bool
	// Bytes is the size of the last iteration's request, the one that
	// carried the fleet; AllBytes that of every iteration's.
	Bytes, AllBytes int
}

// Reconcile implements sim.Reconciler: it calls the function until its
// requirements settle, as Crossplane does, and returns the ModelReplicas
// the last response desires. The function reads its own clock.
func (c *Caller) Reconcile(d *v1alpha1.ModelDeployment, clusters []*v1alpha1.InferenceCluster, replicas []*v1alpha1.ModelReplica, _ time.Time) ([]*v1alpha1.ModelReplica, error) {
	fleet, err := newFleet(clusters, replicas)
	if err != nil {
		return nil, err
	}
	xr, err := structOf(d)
	if err != nil {
		return nil, err
	}
	observed, err := composed(d, replicas)
	if err != nil {
		return nil, err
	}
	call := Call{Deployment: d.Metadata.Namespace + "/" + d.Metadata.Name}
	var asked *fnv1.Requirements
	var required map[string]*fnv1.Resources
	// Crossplane passes each iteration's context on to the next: the
	// function marks there that it asked for the whole fleet.
	var pipelineContext *structpb.Struct
	for call.Iterations < MaxIterations {
		req := &fnv1.RunFunctionRequest{
			Meta:              &fnv1.RequestMeta{Tag: strconv.Itoa(call.Iterations)},
			Observed:          &fnv1.State{Composite: &fnv1.Resource{Resource: xr}, Resources: observed},
			Input:             c.Input,
			RequiredResources: required,
			Context:           pipelineContext,
		}
		call.Iterations++
		call.Bytes = proto.Size(req)
		call.AllBytes += call.Bytes
		rsp, err := c.Client.RunFunction(context.Background(), req)
		if err != nil {
			return nil, fmt.Errorf("cannot call the function for %s: %w", call.Deployment, err)
		}
		for _, r := range rsp.GetResults() {
			if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
				return nil, fmt.Errorf("cannot reconcile %s: the function returned a Fatal result: %s", call.Deployment, r.GetMessage())
			}
		}
		if asked != nil && proto.Equal(asked, rsp.GetRequirements()) {
			_, all := required["all-replicas"]
			call.Narrow = !all
			c.Calls = append(c.Calls, call)
			return desiredReplicas(rsp)
		}
		asked, pipelineContext = rsp.GetRequirements(), rsp.GetContext()
		required = map[string]*fnv1.Resources{}
		for name, sel := range asked.GetResources() {
			required[name] = fleet.selected(sel)
		}
	}
	return nil, fmt.Errorf("cannot reconcile %s: its requirements changed on each of %d iterations", call.Deployment, MaxIterations)
}

// fleet is the simulated fleet as Crossplane's cache holds it: each object
// as a Struct, with a uid and a resourceVersion as an API server gives
// them, for the function's caches and its test of real objects.
type fleet struct {
	objects []object
}

type object struct {
	kind, namespace, name string
	labels                map[string]string
	s                     *structpb.Struct
}

func newFleet(clusters []*v1alpha1.InferenceCluster, replicas []*v1alpha1.ModelReplica) (*fleet, error) {
	f := &fleet{}
	for _, c := range clusters {
		o := *c
		if err := f.add(v1alpha1.KindInferenceCluster, "", &o.Metadata, &o); err != nil {
			return nil, err
		}
	}
	for _, r := range replicas {
		o := *r
		if err := f.add(v1alpha1.KindModelReplica, o.Metadata.Namespace, &o.Metadata, &o); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// add stamps a copy of an object, whose metadata is m, and adds it to the
// fleet as Crossplane sends it: in namespace, "" for a cluster-scoped one.
func (f *fleet) add(kind, namespace string, m *v1alpha1.ObjectMeta, o any) error {
	stamp(m, kind)
	s, err := structOf(o)
	if err != nil {
		return err
	}
	f.objects = append(f.objects, object{kind: kind, namespace: namespace, name: m.Name, labels: m.Labels, s: s})
	return nil
}

// stamp gives an object the uid it lacks, from its identity, and a
// resourceVersion that changes whenever the object does, from its content.
func stamp(m *v1alpha1.ObjectMeta, kind string) {
	if m.UID == "" {
		sum := sha256.Sum256([]byte(kind + "/" + m.Namespace + "/" + m.Name))
		m.UID = hex.EncodeToString(sum[:16])
	}
	m.ResourceVersion = ""
}

// structOf is an object as Crossplane sends it; an object's
// resourceVersion, when stamp cleared it, is the hash of its content.
func structOf(obj any) (*structpb.Struct, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("cannot encode an object of the fleet: %w", err)
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("cannot encode an object of the fleet: %w", err)
	}
	if md := s.GetFields()["metadata"].GetStructValue(); md != nil && md.GetFields()["resourceVersion"] == nil {
		sum := sha256.Sum256(b)
		md.Fields["resourceVersion"] = structpb.NewStringValue(hex.EncodeToString(sum[:8]))
	}
	return s, nil
}

// selected are the objects a requirement selects, in the fleet's order:
// by kind, by name or by every label given, in the namespace given (any,
// when none is).
func (f *fleet) selected(sel *fnv1.ResourceSelector) *fnv1.Resources {
	out := &fnv1.Resources{}
	for _, o := range f.objects {
		if o.kind != sel.GetKind() || (sel.Namespace != nil && sel.GetNamespace() != o.namespace) {
			continue
		}
		switch m := sel.GetMatch().(type) {
		case *fnv1.ResourceSelector_MatchName:
			if m.MatchName != o.name {
				continue
			}
		case *fnv1.ResourceSelector_MatchLabels:
			if !matches(m.MatchLabels.GetLabels(), o.labels) {
				continue
			}
		}
		out.Items = append(out.Items, &fnv1.Resource{Resource: o.s})
	}
	return out
}

func matches(want, labels map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// composed are the deployment's replicas as the observed composed
// resources of its XR, by the keys the function composes them under.
func composed(d *v1alpha1.ModelDeployment, replicas []*v1alpha1.ModelReplica) (map[string]*fnv1.Resource, error) {
	out := map[string]*fnv1.Resource{}
	for _, r := range replicas {
		if r.Metadata.Namespace != d.Metadata.Namespace || r.Metadata.Labels[v1alpha1.LabelDeployment] != d.Metadata.Name {
			continue
		}
		s, err := structOf(r)
		if err != nil {
			return nil, err
		}
		key := "replica-" + r.Spec.ClusterName + "-" + r.Metadata.Labels[v1alpha1.LabelReplicaIndex]
		out[key] = &fnv1.Resource{Resource: s}
	}
	return out, nil
}

// desiredReplicas are the ModelReplicas a response desires, by key.
func desiredReplicas(rsp *fnv1.RunFunctionResponse) ([]*v1alpha1.ModelReplica, error) {
	resources := rsp.GetDesired().GetResources()
	var out []*v1alpha1.ModelReplica
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(resources)) {
		if !strings.HasPrefix(key, "replica-") {
			continue
		}
		b, err := protojson.Marshal(resources[key].GetResource())
		if err != nil {
			errs = append(errs, fmt.Errorf("cannot read desired %s: %w", key, err))
			continue
		}
		r := &v1alpha1.ModelReplica{}
		if err := json.Unmarshal(b, r); err != nil {
			errs = append(errs, fmt.Errorf("cannot read desired %s: %w", key, err))
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}
