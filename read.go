package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/util/validation/field"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/input/v1beta1"
	"github.com/modelplaneai/fleet-scheduler/internal/codec"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/internal/plan"
)

// readRequest reads the function input and the XR.
func readRequest(req *fnv1.RunFunctionRequest) (plan.Settings, *v1alpha1.ModelDeployment, error) {
	settings, err := readInput(req)
	if err != nil {
		return settings, nil, err
	}
	xr, err := readXR(req)
	return settings, xr, err
}

// relayOnlyField is the input's field only the relay reads
// (v1beta1.Input.AgentRelease).
const relayOnlyField = "agentRelease"

// readInput reads the optional function input, every default applied.
// Errors name the field: a wrong apiVersion or kind, a field the input does
// not have (a newer Composition's, or a misspelling), a value out of range.
func readInput(req *fnv1.RunFunctionRequest) (plan.Settings, error) {
	if req.GetInput() == nil {
		return plan.Defaults(), nil
	}
	input := req.GetInput()
	if _, ok := input.GetFields()[relayOnlyField]; ok {
		// The relay's alone: its mistakes are the relay's Warnings, never a
		// reason for the function to place nothing.
		input = proto.CloneOf(input)
		delete(input.GetFields(), relayOnlyField)
	}
	form := checkInputForm(input)
	in, err := decodeStruct[v1beta1.Input](input, "Function input")
	switch {
	case err != nil && len(form) > 0:
		// One message names every error: the form's too, not only the
		// field of the wrong type that stopped the decoding.
		return plan.Defaults(), fmt.Errorf("%w; %w", plan.Invalid(form), err)
	case err != nil:
		return plan.Defaults(), err
	}
	s, errs := plan.Check(in)
	if len(form) > 0 {
		return plan.Defaults(), plan.Invalid(append(form, errs...))
	}
	return s, plan.Invalid(errs)
}

// inputFields are the top-level fields of the function input, by their
// JSON names, read off v1beta1.Input so that a field added there is known
// here.
var inputFields = jsonFields(reflect.TypeFor[v1beta1.Input]()) //nolint:gochecknoglobals // Computed once from a type; never changed.

// checkInputForm finds what is wrong with the input's form: its apiVersion
// and kind, and each top-level field it does not have. Its metadata is
// Kubernetes' object metadata, which nothing reads, and is not checked.
func checkInputForm(in *structpb.Struct) field.ErrorList {
	var errs field.ErrorList
	f := in.GetFields()
	for _, want := range []struct{ name, value string }{{"apiVersion", v1beta1.APIVersion}, {"kind", v1beta1.Kind}} {
		v, ok := f[want.name]
		switch {
		case !ok:
			errs = append(errs, field.Required(field.NewPath(want.name), fmt.Sprintf("must be %q", want.value)))
		case v.GetStringValue() != want.value:
			errs = append(errs, field.NotSupported(field.NewPath(want.name), v.GetStringValue(), []string{want.value}))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f)) {
		if slices.Contains(inputFields, name) {
			continue
		}
		detail := "not a field of the function input (a Composition written for a newer fleet-scheduler? docs/operations.md#upgrades)"
		for _, known := range inputFields {
			if strings.EqualFold(known, name) {
				detail = fmt.Sprintf("not a field of the function input; did you mean %s?", known)
			}
		}
		errs = append(errs, field.Forbidden(field.NewPath(name), detail))
	}
	return errs
}

// jsonFields are the JSON names of a struct type's fields, those of an
// inlined struct included.
func jsonFields(t reflect.Type) []string {
	var out []string
	for sf := range t.Fields() {
		name, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
		switch {
		case name == "-":
		case name == "" && strings.Contains(opts, "inline"):
			out = append(out, jsonFields(sf.Type)...)
		case name == "":
			out = append(out, sf.Name)
		default:
			out = append(out, name)
		}
	}
	return out
}

// readXR reads the observed ModelDeployment and refuses what the scheduler
// cannot work with.
func readXR(req *fnv1.RunFunctionRequest) (*v1alpha1.ModelDeployment, error) {
	if n := proto.Size(req.GetObserved().GetComposite().GetResource()); n > maxXRBytes {
		return nil, fmt.Errorf("cannot read ModelDeployment: it is %d bytes, more than the %d MiB of any the API server stores", n, maxXRBytes>>20)
	}
	xr, err := decodeStruct[v1alpha1.ModelDeployment](req.GetObserved().GetComposite().GetResource(), "ModelDeployment")
	if err != nil {
		return nil, err
	}
	return xr, validateXR(xr)
}

// maxXRBytes bounds the XR read. The API server takes at most 3 MiB of
// JSON of an object (MaxRequestBodyBytes, k8s.io/apiserver/pkg/server/
// config.go, which has no flag), and a Struct of strings is about the size
// of their JSON. Decoding one costs in proportion: an XR of a million
// labels, 17 MB, took 8 s to read, and its labels, copied into every
// replica, made a response Crossplane would refuse.
const maxXRBytes = 8 << 20

// maxReplicas is more replicas than a response Crossplane accepts can
// compose: a ModelReplica is at least 256 bytes (its name, labels, cluster
// and one engine's pin). Scheduling a million took 6 s before composing
// the first.
const maxReplicas = maxResponseBytes / 256

// validateXR refuses what the XRD would and the scheduler cannot work with:
// engines are known by name, so two of one name are an error.
func validateXR(xr *v1alpha1.ModelDeployment) error {
	if n := xr.Spec.Replicas; n > maxReplicas {
		err := field.Invalid(field.NewPath("spec", "replicas"), n, fmt.Sprintf("must be at most %d: no response Crossplane accepts (%d MiB) holds more ModelReplicas", maxReplicas, maxResponseBytes>>20))
		return fmt.Errorf("invalid ModelDeployment: %w", err)
	}
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

// carried is what a request carries of the required resources: its
// fleet's items, left on the wire by the request codec, and the
// deployment's ModelCache, decoded.
type carried struct{ req *fnv1.RunFunctionRequest }

func (c carried) Items(name string) (fleet.Items, bool) {
	got, ok := c.req.GetRequiredResources()[name]
	return codec.ItemsOf(got), ok
}

func (c carried) ModelCache(name string) (*v1alpha1.ModelCache, bool, error) {
	got, ok := c.req.GetRequiredResources()[fleet.RequiredCache]
	if items := got.GetItems(); len(items) > 0 {
		cache, err := decodeStruct[v1alpha1.ModelCache](items[0].GetResource(), "ModelCache "+name)
		return cache, ok, err
	}
	return nil, ok, nil
}
