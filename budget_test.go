package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/internal/compose"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

// TestRunFunctionResponseBudget: a response larger than Crossplane accepts
// is not composed whole: a Fatal result that says so, and nothing desired.
// One just under the limit is composed.
func TestRunFunctionResponseBudget(t *testing.T) {
	// Labels are copied into every replica: 600 KB of them, in 8 replicas,
	// are more than 4 MiB; in 6 they are less.
	labels := map[string]string{"blob": strings.Repeat("x", 600_000)}
	clusters := []any{fx.Cluster("a").Pools(fx.Pool("default", 8).Devices(fx.GPU("gpu", 1, "141Gi")).Obj()).Obj()}
	cases := map[string]struct {
		reason   string
		replicas int64
		fatal    string
		composed int
	}{
		"OverTheLimit": {
			reason:   "Eight replicas of 600 KB of labels each are over 4 MiB: Fatal at the seventh, and nothing desired.",
			replicas: 8,
			fatal:    "cannot compose replica-a-6: the response would be over the 4 MiB Crossplane accepts from a function (4205670 bytes composed so far)",
		},
		"UnderTheLimit": {
			reason:   "Six are under it, and composed.",
			replicas: 6,
			composed: 6,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rsp := run(t, request(t, fx.Deployment("m").Replicas(tc.replicas).Labels(labels).Obj(), clusters, nil))
			fatal := ""
			for _, r := range rsp.GetResults() {
				if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
					fatal = r.GetMessage()
				}
			}
			if diff := cmp.Diff(tc.fatal, fatal); diff != "" {
				t.Errorf("%s\nRunFunction(...) Fatal result: -want, +got:\n%s", tc.reason, diff)
			}
			if got := composedReplicas(rsp); got != tc.composed {
				t.Errorf("%s\nRunFunction(...): %d replicas composed, want %d", tc.reason, got, tc.composed)
			}
		})
	}
}

// TestRunFunctionResponseBudgetCountsKeptReplicas: replicas kept exactly
// as observed (the deployment's own that do not read) count against the
// response's size as composed ones do: 8 of them with 600 KB of labels
// each are over 4 MiB, a Fatal result, and nothing desired.
func TestRunFunctionResponseBudgetCountsKeptReplicas(t *testing.T) {
	clusters := []any{fx.Cluster("a").Pools(fx.Pool("default", 8).Devices(fx.GPU("gpu", 1, "141Gi")).Obj()).Obj()}
	badEngines := []any{map[string]any{"name": "main", "copies": "two", "members": []any{}}}
	blob := strings.Repeat("x", 600_000)
	var replicas []any
	observed := map[string]*fnv1.Resource{}
	for i := range 8 {
		name := compose.ReplicaName("m", "a", i)
		r := replicaObject("m", name, "a", badEngines, nil)
		r["metadata"].(map[string]any)["labels"].(map[string]any)["modelplane.ai/replica-index"] = strconv.Itoa(i)
		replicas = append(replicas, r)
		obs := toStruct(t, fx.Replica("m", "a", i).Name(name).Obj()).AsMap()
		obs["metadata"].(map[string]any)["labels"].(map[string]any)["blob"] = blob
		o, err := structpb.NewStruct(obs)
		if err != nil {
			t.Fatal(err)
		}
		observed[fmt.Sprintf("replica-a-%d", i)] = &fnv1.Resource{Resource: o}
	}
	req := request(t, fx.Deployment("m").Replicas(8).Obj(), clusters, replicas)
	req.Observed.Resources = observed
	rsp := run(t, req)
	fatal := ""
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			fatal = r.GetMessage()
		}
	}
	if !strings.Contains(fatal, "the response would be over the 4 MiB Crossplane accepts from a function") {
		t.Errorf("RunFunction(...) with 8 kept replicas of 600 KB: Fatal result %q, want one saying the response is over 4 MiB", fatal)
	}
	if n := len(rsp.GetDesired().GetResources()); n != 0 {
		t.Errorf("RunFunction(...) over the budget: %d resources desired, want none", n)
	}
}
