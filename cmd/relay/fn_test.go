package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rtlogging "github.com/crossplane/crossplane-runtime/v2/pkg/logging"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/internal/fnflags"
)

func st(t *testing.T, s string) *structpb.Struct {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	out, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func fn() *Function {
	now := time.Date(2026, 10, 20, 20, 6, 30, 0, time.UTC)
	return &Function{log: logging.NewNopLogger(), now: func() time.Time { return now }, margin: 5 * time.Second}
}

func TestRunFunctionInferenceCluster(t *testing.T) {
	req := &fnv1.RunFunctionRequest{
		Observed: &fnv1.State{
			Composite: &fnv1.Resource{Resource: st(t, `{apiVersion: modelplane.ai/v1alpha1, kind: InferenceCluster, metadata: {name: eks}}`)},
			Resources: map[string]*fnv1.Resource{
				"agent-crd-poolobservations":    {Resource: st(t, `status: {atProvider: {manifest: {status: {conditions: [{type: Established, status: "True"}]}}}}`)},
				"agent-crd-replicaobservations": {Resource: st(t, `status: {atProvider: {manifest: {status: {conditions: [{type: Established, status: "True"}]}}}}`)},
				"pool-observation-l4":           {Resource: st(t, `status: {atProvider: {manifest: {status: {observedNodes: 1, observedAt: "2026-10-20T20:06:00Z", nodesByFreeDevices: [{nodes: 1, free: [{name: gpu, count: 4}]}], binding: Steered}}}}`)},
			},
		},
		Desired: &fnv1.State{
			Composite: &fnv1.Resource{Resource: st(t, `
apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
status:
  providerConfigRef: {name: eks-kubeconfig}
  gpuPools: [{name: l4, nodes: 2, devices: [{name: gpu, driver: gpu.nvidia.com, count: 4}]}]
`)},
			Resources: map[string]*fnv1.Resource{"serving-stack": {Resource: st(t, `{apiVersion: modelplane.ai/v1alpha1, kind: ServingStack}`), Ready: fnv1.Ready_READY_TRUE}},
		},
	}
	rsp, err := fn().RunFunction(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus := st(t, `
providerConfigRef: {name: eks-kubeconfig}
gpuPools: [{name: l4, nodes: 2, devices: [{name: gpu, driver: gpu.nvidia.com, count: 4}], observedNodes: 1, observedAt: "2026-10-20T20:06:00Z", nodesByFreeDevices: [{nodes: 1, free: [{name: gpu, count: 4}]}], binding: Steered}]
poolReports: {pools: 1, reported: 1, oldestObservedAt: "2026-10-20T20:06:00Z"}
`)
	if diff := cmp.Diff(wantStatus, rsp.GetDesired().GetComposite().GetResource().GetFields()["status"].GetStructValue(), protocmp.Transform()); diff != "" {
		t.Errorf("the desired status: the earlier step's, with l4's report and its binding, and the reports summed: -want, +got:\n%s", diff)
	}
	var keys []string
	for k, r := range rsp.GetDesired().GetResources() {
		keys = append(keys, k)
		if r.GetReady() != fnv1.Ready_READY_TRUE {
			t.Errorf("desired resource %s is not marked ready", k)
		}
	}
	if diff := cmp.Diff([]string{"agent-crd-poolobservations", "agent-crd-replicaobservations", "pool-observation-l4", "serving-stack"}, keys, cmp.Transformer("sort", sortStrings)); diff != "" {
		t.Errorf("desired resources, the earlier step's kept: -want, +got:\n%s", diff)
	}
	want := []*fnv1.Condition{{Type: "PoolsObserved", Status: fnv1.Status_STATUS_CONDITION_TRUE, Reason: "AllPoolsReported", Target: fnv1.Target_TARGET_COMPOSITE.Enum()}}
	if diff := cmp.Diff(want, rsp.GetConditions(), protocmp.Transform()); diff != "" {
		t.Errorf("conditions: -want, +got:\n%s", diff)
	}
}

func sortStrings(in []string) []string {
	out := append([]string(nil), in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestRunFunctionModelReplica(t *testing.T) {
	replica := `
apiVersion: modelplane.ai/v1alpha1
kind: ModelReplica
metadata: {name: qwen-1a2b3, namespace: ml-team}
spec:
  clusterName: eks
  engines: [{name: main, members: [{role: Standalone, nodePoolName: l4, deviceRequests: [{name: gpu, deviceClassName: gpu.nvidia.com, count: 1}]}]}]
`
	requirements := &fnv1.Requirements{Resources: map[string]*fnv1.ResourceSelector{
		"cluster": {ApiVersion: "modelplane.ai/v1alpha1", Kind: "InferenceCluster", Match: &fnv1.ResourceSelector_MatchName{MatchName: "eks"}},
	}}
	t.Run("asks for its cluster first", func(t *testing.T) {
		req := &fnv1.RunFunctionRequest{Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: st(t, replica)}}}
		rsp, err := fn().RunFunction(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(requirements, rsp.GetRequirements(), protocmp.Transform()); diff != "" {
			t.Errorf("requirements: -want, +got:\n%s", diff)
		}
		if len(rsp.GetConditions()) > 0 || len(rsp.GetDesired().GetResources()) > 0 {
			t.Errorf("before the cluster is resolved: want no condition and nothing composed, got %v and %v", rsp.GetConditions(), rsp.GetDesired().GetResources())
		}
	})
	t.Run("holds True for the margin, asking to be called when it has passed", func(t *testing.T) {
		req := &fnv1.RunFunctionRequest{
			Observed: &fnv1.State{
				Composite: &fnv1.Resource{Resource: st(t, replica)},
				Resources: map[string]*fnv1.Resource{"replica-observation": {Resource: st(t, `
status: {atProvider: {manifest: {metadata: {generation: 1}, status: {conditions: [{type: PodsScheduled, status: "True", reason: PodsBound, observedGeneration: 1, lastTransitionTime: "2026-10-20T20:06:28Z"}]}}}}`)}},
			},
			RequiredResources: map[string]*fnv1.Resources{"cluster": {Items: []*fnv1.Resource{{Resource: st(t, `
metadata: {name: eks}
status: {providerConfigRef: {name: eks-kubeconfig}, gpuPools: [{name: l4, observedAt: "2026-10-20T20:06:20Z"}]}`)}}}},
		}
		rsp, err := fn().RunFunction(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		c := rsp.GetConditions()
		if len(c) != 1 || c[0].GetType() != "PodsScheduled" || c[0].GetStatus() != fnv1.Status_STATUS_CONDITION_UNKNOWN || c[0].GetReason() != "AwaitingClockMargin" {
			t.Errorf("want PodsScheduled Unknown AwaitingClockMargin, got %v", c)
		}
		// The agent's time 20:06:28 plus 5s is 3s after now: called again
		// in 4s (whole seconds, rounded up).
		if got := rsp.GetMeta().GetTtl().AsDuration(); got != 4*time.Second {
			t.Errorf("TTL: want 4s, got %s", got)
		}
		if r := rsp.GetDesired().GetResources()["replica-observation"]; r == nil || r.GetReady() != fnv1.Ready_READY_TRUE {
			t.Errorf("want the ReplicaObservation composed and ready, got %v", r)
		}
	})
}

func TestRunFunctionOtherKind(t *testing.T) {
	req := &fnv1.RunFunctionRequest{Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: st(t, `{apiVersion: example.org/v1, kind: Other}`)}}}
	rsp, err := fn().RunFunction(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	r := rsp.GetResults()
	if len(r) != 1 || r[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL || r[0].GetMessage() != "cannot relay for a example.org/v1 Other: the relay is a step of InferenceCluster and ModelReplica Compositions" {
		t.Errorf("want one Fatal result naming the kind, got %v", r)
	}
}

func TestObservationMaxAge(t *testing.T) {
	type want struct {
		d   time.Duration
		err string
	}
	cases := map[string]struct {
		reason string
		input  string
		want   want
	}{
		"NoInput": {
			reason: "A step without input relays with the function's default.",
			want:   want{d: 5 * time.Minute},
		},
		"NoField": {
			reason: "fleet-scheduler's Input without observationMaxAge: the default.",
			input:  `{apiVersion: scheduler.fn.modelplane.ai/v1beta1, kind: Input}`,
			want:   want{d: 5 * time.Minute},
		},
		"Set": {
			reason: "The relay reads the field as the function does.",
			input:  `{apiVersion: scheduler.fn.modelplane.ai/v1beta1, kind: Input, observationMaxAge: 90m}`,
			want:   want{d: 90 * time.Minute},
		},
		"OtherKind": {
			reason: "An input of another kind is refused, named.",
			input:  `{apiVersion: relay.example/v1, kind: Config, observationMaxAge: 5m}`,
			want:   want{err: "cannot read the relay's input: it is a relay.example/v1 Config, want fleet-scheduler's scheduler.fn.modelplane.ai/v1beta1 Input"},
		},
		"NotADuration": {
			reason: "A value that is not a duration is refused, quoted.",
			input:  `{apiVersion: scheduler.fn.modelplane.ai/v1beta1, kind: Input, observationMaxAge: 300}`,
			want:   want{err: "cannot read the relay's input: observationMaxAge: 300 must be a duration such as 5m or 90s"},
		},
		"TooShort": {
			reason: "The function's bounds hold for the relay too.",
			input:  `{apiVersion: scheduler.fn.modelplane.ai/v1beta1, kind: Input, observationMaxAge: 1m}`,
			want:   want{err: "cannot read the relay's input: observationMaxAge: 1m must be between 3m0s and 24h0m0s"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var in *structpb.Struct
			if tc.input != "" {
				in = st(t, tc.input)
			}
			d, err := observationMaxAge(in)
			got := want{d: d}
			if err != nil {
				got = want{err: err.Error()}
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nobservationMaxAge(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestShippedCompositionsAgree holds the relay's step in the shipped
// ModelReplica Composition to the function's in the example ModelDeployment
// Composition: both judge a report's age by the same observationMaxAge.
func TestShippedCompositionsAgree(t *testing.T) {
	stepInput := func(path, function string) *structpb.Struct {
		t.Helper()
		b, err := os.ReadFile(filepath.Clean(path))
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Spec struct {
				Pipeline []struct {
					FunctionRef struct {
						Name string `json:"name"`
					} `json:"functionRef"`
					Input map[string]any `json:"input"`
				} `json:"pipeline"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(b, &c); err != nil {
			t.Fatalf("cannot read %s: %v", path, err)
		}
		for _, s := range c.Spec.Pipeline {
			if s.FunctionRef.Name == function {
				in, err := structpb.NewStruct(s.Input)
				if err != nil {
					t.Fatal(err)
				}
				return in
			}
		}
		t.Fatalf("%s: no step of function %s", path, function)
		return nil
	}
	relayAge, err := observationMaxAge(stepInput("../../deploy/relay/modelreplicas-composition.yaml", "fleet-scheduler-relay"))
	if err != nil {
		t.Fatal(err)
	}
	fnAge, err := observationMaxAge(stepInput("../../example/composition.yaml", "fleet-scheduler"))
	if err != nil {
		t.Fatal(err)
	}
	if relayAge != fnAge {
		t.Errorf("the relay's observationMaxAge is %s, the function's %s: they must agree", relayAge, fnAge)
	}
}

// lines records what a Function logs at Info.
type lines struct{ info []string }

func (l *lines) Info(msg string, keysAndValues ...any) {
	l.info = append(l.info, fmt.Sprint(append([]any{msg}, keysAndValues...)...))
}
func (l *lines) Debug(string, ...any)               {}
func (l *lines) WithValues(...any) rtlogging.Logger { return l }

// TestRunFunctionLogsOneLine: every call, whatever its XR and however it
// ends, logs one line at Info naming the XR, so that the relay is seen
// working without --debug.
func TestRunFunctionLogsOneLine(t *testing.T) {
	cases := map[string]struct {
		reason string
		xr     string
		want   string
	}{
		"InferenceCluster": {
			reason: "A cluster's call: relayed, with its condition.",
			xr:     `{apiVersion: modelplane.ai/v1alpha1, kind: InferenceCluster, metadata: {name: eks}}`,
			want:   "Relayed",
		},
		"ModelReplicaAsks": {
			reason: "A replica's first call asks for its cluster: said so.",
			xr:     `{apiVersion: modelplane.ai/v1alpha1, kind: ModelReplica, metadata: {name: r, namespace: ml-team}, spec: {clusterName: eks}}`,
			want:   "Relayed",
		},
		"OtherKind": {
			reason: "A call it cannot relay for: the error, at Info too.",
			xr:     `{apiVersion: example.org/v1, kind: Other, metadata: {name: o}}`,
			want:   "Cannot relay",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			l := &lines{}
			f := fn()
			f.log = l
			if _, err := f.RunFunction(context.Background(), &fnv1.RunFunctionRequest{Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: st(t, tc.xr)}}}); err != nil {
				t.Fatal(err)
			}
			if len(l.info) != 1 || !strings.HasPrefix(l.info[0], tc.want) || !strings.Contains(l.info[0], "xr") {
				t.Errorf("%s\nlogged at Info: %q; want one line starting %q and naming the xr", tc.reason, l.info, tc.want)
			}
		})
	}
}

func TestCLIValidate(t *testing.T) {
	serving := fnflags.Template{Network: "tcp", Address: ":9443", Insecure: true, MetricsAddress: ":8080"}
	cases := map[string]struct {
		reason   string
		template fnflags.Template
		margin   time.Duration
		want     string
	}{
		"Negative":       {reason: "A negative margin would turn PodsScheduled True before the agent's time: refused, naming the flag.", template: serving, margin: -time.Second, want: `invalid --clock-skew-margin "-1s"`},
		"Zero":           {reason: "No margin: allowed, for clocks known to agree.", template: serving, margin: 0},
		"Default":        {reason: "The default.", template: serving, margin: 5 * time.Second},
		"MetricsOnGRPC":  {reason: "The relay checks the template's flags as the function does: metrics on the gRPC port could not listen.", template: fnflags.Template{Network: "tcp", Address: ":9443", Insecure: true, MetricsAddress: ":9443"}, margin: 5 * time.Second, want: "invalid --metrics-address"},
		"NoCertificates": {reason: "Without --insecure the relay needs Crossplane's certificates, and says so before it listens.", template: fnflags.Template{Network: "tcp", Address: ":9443"}, margin: 5 * time.Second, want: "--tls-server-certs-dir (or TLS_SERVER_CERTS_DIR) is required"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := (&CLI{Template: tc.template, ClockSkewMargin: tc.margin}).Validate()
			if got := fmt.Sprint(err); (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(got, tc.want)) {
				t.Errorf("%s\nValidate(): %v, want an error containing %q", tc.reason, err, tc.want)
			}
		})
	}
}

func TestRunFunctionAgentRelease(t *testing.T) {
	call := func(t *testing.T, input string) *fnv1.RunFunctionRequest {
		t.Helper()
		req := &fnv1.RunFunctionRequest{
			Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: st(t, `{apiVersion: modelplane.ai/v1alpha1, kind: InferenceCluster, metadata: {name: eks}}`)}},
			Desired: &fnv1.State{
				Composite: &fnv1.Resource{Resource: st(t, `{apiVersion: modelplane.ai/v1alpha1, kind: InferenceCluster, status: {providerConfigRef: {name: eks-kubeconfig}, gpuPools: []}}`)},
				Resources: map[string]*fnv1.Resource{"cluster-provider-config-kubernetes": {Resource: st(t, `
apiVersion: kubernetes.m.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: eks-kubeconfig}
spec: {credentials: {source: Secret, secretRef: {namespace: modelplane-system, name: eks, key: kubeconfig}}}`)}},
			},
		}
		if input != "" {
			req.Input = st(t, input)
		}
		return req
	}
	cases := map[string]struct {
		reason   string
		input    string
		release  bool
		warnings []string
	}{
		"NoInput": {
			reason: "the InferenceCluster step of v0.1.0's Composition has no input: nothing is installed",
		},
		"NoAgentRelease": {
			reason: "an input without agentRelease installs nothing",
			input:  `{apiVersion: scheduler.fn.modelplane.ai/v1beta1, kind: Input, observationMaxAge: 5m}`,
		},
		"AgentRelease": {
			reason:  "agentRelease composes the Release and its provider config, ready",
			input:   `{apiVersion: scheduler.fn.modelplane.ai/v1beta1, kind: Input, agentRelease: {chart: "oci://registry.example.com/acme/charts/cluster-agent", version: 0.1.0, values: {replicas: 1}}}`,
			release: true,
		},
		"WrongType": {
			reason:   "a field of the wrong type is a warning naming it, and the reports are still relayed",
			input:    `{apiVersion: scheduler.fn.modelplane.ai/v1beta1, kind: Input, agentRelease: {chart: "oci://registry.example.com/acme/charts/cluster-agent", version: 0.1.0, plainHTTP: "yes"}}`,
			warnings: []string{`the cluster agent's Release is not composed: cannot read the relay's input: agentRelease {"chart":"oci://registry.example.com/acme/charts/cluster-agent","plainHTTP":"yes","version":"0.1.0"}: json: cannot unmarshal string into Go struct field AgentRelease.plainHTTP of type bool`},
		},
		"WrongKind": {
			reason:   "an input of another kind is a warning",
			input:    `{apiVersion: example.org/v1, kind: Other, agentRelease: {}}`,
			warnings: []string{"the cluster agent's Release is not composed: cannot read the relay's input: it is a example.org/v1 Other, want fleet-scheduler's scheduler.fn.modelplane.ai/v1beta1 Input"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rsp, err := fn().RunFunction(context.Background(), call(t, tc.input))
			if err != nil {
				t.Fatal(err)
			}
			var warnings []string
			for _, r := range rsp.GetResults() {
				if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
					t.Errorf("%s\nRunFunction(...): fatal %q", tc.reason, r.GetMessage())
				}
				if r.GetSeverity() == fnv1.Severity_SEVERITY_WARNING {
					warnings = append(warnings, r.GetMessage())
				}
			}
			if diff := cmp.Diff(tc.warnings, warnings); diff != "" {
				t.Errorf("%s\nRunFunction(...): -want warnings, +got:\n%s", tc.reason, diff)
			}
			r, pc := rsp.GetDesired().GetResources()["agent-release"], rsp.GetDesired().GetResources()["agent-release-provider-config"]
			if got := r != nil && pc != nil; got != tc.release {
				t.Fatalf("%s\nRunFunction(...): Release and provider config composed: %t, want %t", tc.reason, got, tc.release)
			}
			if !tc.release {
				return
			}
			if r.GetReady() != fnv1.Ready_READY_TRUE || pc.GetReady() != fnv1.Ready_READY_TRUE {
				t.Errorf("%s\nRunFunction(...): the Release and its provider config must be marked ready", tc.reason)
			}
			values := r.GetResource().AsMap()["spec"].(map[string]any)["forProvider"].(map[string]any)["values"]
			if diff := cmp.Diff(map[string]any{"replicas": float64(1), "namespace": map[string]any{"create": false}}, values); diff != "" {
				t.Errorf("%s\nRunFunction(...): the Release's values: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
