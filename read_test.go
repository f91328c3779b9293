package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

func TestRunFunctionFatal(t *testing.T) {
	xr := fx.Deployment("m").Obj()
	input := func(s string) *structpb.Struct {
		st := &structpb.Struct{}
		if err := protojson.Unmarshal([]byte(s), st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	badXR := toStruct(t, xr)
	badXR.Fields["spec"].GetStructValue().Fields["replicas"] = structpb.NewStringValue("three")
	hugeXR := toStruct(t, xr)
	hugeXR.Fields["metadata"].GetStructValue().Fields["annotations"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"blob": structpb.NewStringValue(strings.Repeat("x", maxXRBytes)),
	}})

	cases := map[string]struct {
		reason string
		req    *fnv1.RunFunctionRequest
		want   string
	}{
		"UnparseableDuration": {
			reason: "An observationMaxAge that is not a duration is Fatal and names the field.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, xr, nil, nil)
				r.Input = input(`{"apiVersion":"scheduler.fn.modelplane.ai/v1beta1","kind":"Input","observationMaxAge":"five minutes"}`)
				return r
			}(),
			want: `invalid Function input: observationMaxAge: Invalid value: "five minutes": must be a duration such as 5m or 90s`,
		},
		"NegativeDuration": {
			reason: "A negative observationMaxAge is out of range.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, xr, nil, nil)
				r.Input = input(`{"apiVersion":"scheduler.fn.modelplane.ai/v1beta1","kind":"Input","observationMaxAge":"-1m"}`)
				return r
			}(),
			want: `invalid Function input: observationMaxAge: Invalid value: "-1m": must be between 3m and 24h`,
		},
		"UnknownBinding": {
			reason: "An unknown assumedBinding is Fatal and names the field and the supported values.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, xr, nil, nil)
				r.Input = input(`{"apiVersion":"scheduler.fn.modelplane.ai/v1beta1","kind":"Input","assumedBinding":"Random"}`)
				return r
			}(),
			want: `invalid Function input: assumedBinding: Unsupported value: "Random": supported values: "MostFree", "LeastFree"`,
		},
		"UnparseableReplaceAfter": {
			reason: "A replaceUnscheduledAfter that is not a duration is Fatal and names the field.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, xr, nil, nil)
				r.Input = input(`{"apiVersion":"scheduler.fn.modelplane.ai/v1beta1","kind":"Input","replaceUnscheduledAfter":"soon"}`)
				return r
			}(),
			want: `invalid Function input: replaceUnscheduledAfter: Invalid value: "soon": must be a duration such as 15m or 1h, or 0s to turn re-placing off`,
		},
		"NegativeReplaceAfter": {
			reason: "A negative replaceUnscheduledAfter is out of range.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, xr, nil, nil)
				r.Input = input(`{"apiVersion":"scheduler.fn.modelplane.ai/v1beta1","kind":"Input","replaceUnscheduledAfter":"-5m"}`)
				return r
			}(),
			want: `invalid Function input: replaceUnscheduledAfter: Invalid value: "-5m": must be 0s, or between 1m and 24h`,
		},
		"TinyObservationMaxAge": {
			reason: "observationMaxAge 1ns, which would make every pool stale, is out of range.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, xr, nil, nil)
				r.Input = input(`{"apiVersion":"scheduler.fn.modelplane.ai/v1beta1","kind":"Input","observationMaxAge":"1ns"}`)
				return r
			}(),
			want: `invalid Function input: observationMaxAge: Invalid value: "1ns": must be between 3m and 24h`,
		},
		"MisspelledField": {
			reason: "A misspelled field is Fatal, named, with the field it likely means, rather than silently ignored.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, xr, nil, nil)
				r.Input = input(`{"apiVersion":"scheduler.fn.modelplane.ai/v1beta1","kind":"Input","observationMaxage":"10m"}`)
				return r
			}(),
			want: `invalid Function input: observationMaxage: Forbidden: not a field of the function input; did you mean observationMaxAge?`,
		},
		"UnknownFields": {
			reason: "Every unknown field is named, sorted, and so is every value out of range, after them.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, xr, nil, nil)
				r.Input = input(`{"apiVersion":"scheduler.fn.modelplane.ai/v1beta1","kind":"Input","spreadPolicy":"Pack","maxSkew":1,"observationMaxAge":"1s"}`)
				return r
			}(),
			want: `invalid Function input: [maxSkew: Forbidden: not a field of the function input (a Composition written for a newer fleet-scheduler? docs/operations.md#upgrades), ` +
				`spreadPolicy: Forbidden: not a field of the function input (a Composition written for a newer fleet-scheduler? docs/operations.md#upgrades), ` +
				`observationMaxAge: Invalid value: "1s": must be between 3m and 24h]`,
		},
		"WrongTypeAndWrongKind": {
			reason: "A field of the wrong type stopped the decoding, and the wrong kind beside it went unnamed; both are named.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, xr, nil, nil)
				r.Input = input(`{"apiVersion":"scheduler.fn.modelplane.ai/v1beta1","kind":"Inputs","observationMaxAge":5}`)
				return r
			}(),
			want: `invalid Function input: kind: Unsupported value: "Inputs": supported values: "Input"; cannot read Function input: observationMaxAge: cannot use a JSON number as string`,
		},
		"WrongKind": {
			reason: "A kind other than Input is Fatal and named.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, xr, nil, nil)
				r.Input = input(`{"apiVersion":"scheduler.fn.modelplane.ai/v1beta1","kind":"Inputs"}`)
				return r
			}(),
			want: `invalid Function input: kind: Unsupported value: "Inputs": supported values: "Input"`,
		},
		"WrongAPIVersion": {
			reason: "Another group or version is Fatal and named: its fields may mean something else.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, xr, nil, nil)
				r.Input = input(`{"apiVersion":"scheduler.fn.modelplane.ai/v1","kind":"Input"}`)
				return r
			}(),
			want: `invalid Function input: apiVersion: Unsupported value: "scheduler.fn.modelplane.ai/v1": supported values: "scheduler.fn.modelplane.ai/v1beta1"`,
		},
		"NoAPIVersionOrKind": {
			reason: "An input without apiVersion and kind (Crossplane requires both; a render fixture may leave them out) is Fatal and names both.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, xr, nil, nil)
				r.Input = input(`{"observationMaxAge":"10m"}`)
				return r
			}(),
			want: `invalid Function input: [apiVersion: Required value: must be "scheduler.fn.modelplane.ai/v1beta1", kind: Required value: must be "Input"]`,
		},
		"MetadataIsNotChecked": {
			reason: "The input's metadata is Kubernetes' object metadata; what a typed Input marshals to (creationTimestamp: null) reads.",
			req: func() *fnv1.RunFunctionRequest {
				r := request(t, xr, nil, nil)
				r.Input = input(`{"apiVersion":"scheduler.fn.modelplane.ai/v1beta1","kind":"Input","metadata":{"creationTimestamp":null},"assumedBinding":"Random"}`)
				return r
			}(),
			want: `invalid Function input: assumedBinding: Unsupported value: "Random": supported values: "MostFree", "LeastFree"`,
		},
		"WrongTypeInXR": {
			reason: "An XR field of the wrong type is Fatal and names the field.",
			req:    &fnv1.RunFunctionRequest{Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: badXR}}},
			want:   "cannot read ModelDeployment: spec.replicas: cannot use a JSON string as int64",
		},
		"DuplicateEngineNames": {
			reason: "Two engines of one name are refused, naming the field, rather than composed.",
			req: request(t, fx.Deployment("m").Engines(fx.Standalone("main", fx.GPURequest(1)), fx.Gang("main", 1, fx.GPURequest(1))).Obj(),
				[]any{fx.Cluster("a").Obj()}, nil),
			want: `invalid ModelDeployment: spec.template.spec.engines[1].name: Duplicate value: "main"`,
		},
		"TooManyReplicas": {
			reason: "More replicas than any response Crossplane accepts can compose are refused before they are scheduled.",
			req:    request(t, fx.Deployment("m").Replicas(maxReplicas+1).Obj(), []any{fx.Cluster("a").Obj()}, nil),
			want:   "invalid ModelDeployment: spec.replicas: Invalid value: 16385: must be at most 16384: no response Crossplane accepts (4 MiB) holds more ModelReplicas",
		},
		"XRLargerThanTheAPIServerStores": {
			reason: "An XR larger than any object the API server stores is refused before it is decoded.",
			req:    &fnv1.RunFunctionRequest{Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: hugeXR}}},
			want:   fmt.Sprintf("cannot read ModelDeployment: it is %d bytes, more than the 8 MiB of any the API server stores", proto.Size(hugeXR)),
		},
		"MissingXR": {
			reason: "A request without an observed XR is Fatal, not a panic.",
			req:    &fnv1.RunFunctionRequest{},
			want:   "cannot read ModelDeployment: it is missing from the request",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rsp := run(t, tc.req)
			want := []*fnv1.Result{result(fnv1.Severity_SEVERITY_FATAL, tc.want)}
			if diff := cmp.Diff(want, rsp.GetResults(), protocmp.Transform()); diff != "" {
				t.Errorf("%s\nRunFunction(...) results: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestReadInputLeavesAgentReleaseToTheRelay(t *testing.T) {
	cases := map[string]struct {
		reason string
		input  string
	}{
		"Valid": {
			reason: "the relay's agentRelease is not the function's to read",
			input:  `{"apiVersion":"scheduler.fn.modelplane.ai/v1beta1","kind":"Input","observationMaxAge":"10m","agentRelease":{"chart":"oci://registry.example.com/acme/charts/cluster-agent","version":"0.1.0"}}`,
		},
		"WrongTypes": {
			reason: "a mistake in agentRelease is the relay's Warning, never the function's Fatal: every ModelDeployment would place nothing",
			input:  `{"apiVersion":"scheduler.fn.modelplane.ai/v1beta1","kind":"Input","observationMaxAge":"10m","agentRelease":{"version":1.0,"plainHTTP":"yes","values":[1]}}`,
		},
		"NotAnObject": {
			reason: "an agentRelease that is not an object is the relay's to say too",
			input:  `{"apiVersion":"scheduler.fn.modelplane.ai/v1beta1","kind":"Input","observationMaxAge":"10m","agentRelease":"x"}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := &structpb.Struct{}
			if err := protojson.Unmarshal([]byte(tc.input), in); err != nil {
				t.Fatal(err)
			}
			before := proto.CloneOf(in)
			s, err := readInput(&fnv1.RunFunctionRequest{Input: in})
			if err != nil {
				t.Fatalf("%s\nreadInput(...): %v", tc.reason, err)
			}
			if s.ObservationMaxAge != 10*time.Minute {
				t.Errorf("%s\nreadInput(...): observationMaxAge %s, want the input's 10m", tc.reason, s.ObservationMaxAge)
			}
			if diff := cmp.Diff(before, in, protocmp.Transform()); diff != "" {
				t.Errorf("%s\nreadInput(...) changed the request's input: -before, +after:\n%s", tc.reason, diff)
			}
		})
	}
}
