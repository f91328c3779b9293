package main

import (
	"strings"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	fx "github.com/modelplaneai/fleet-scheduler/internal/fixture"
)

// replicaObject is a ModelReplica as generic JSON, to give any field any
// type.
func replicaObject(deployment, name string, engines, conditions any) map[string]any {
	return map[string]any{
		"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
		"metadata": map[string]any{"name": name, "namespace": fx.Namespace, "labels": map[string]any{
			"modelplane.ai/deployment": deployment, "modelplane.ai/replica-index": "0",
		}},
		"spec":   map[string]any{"clusterName": "a", "engines": engines},
		"status": map[string]any{"conditions": conditions},
	}
}

// TestRunFunctionUnreadableReplicas: which replicas that cannot be read
// fail the call, which are skipped with one warning, and in what order,
// whatever the fields the function no longer reads of settled replicas
// (found in review).
func TestRunFunctionUnreadableReplicas(t *testing.T) {
	observedAt := now.Add(-time.Minute)
	cluster := fx.Cluster("a").Pools(fx.Pool("default", 2).Devices(fx.GPU("gpu", 1, "80Gi")).
		Observed(observedAt, 2, fx.NodesFree(2, "gpu", 1)).Obj()).Obj()
	xr := fx.Deployment("m").Engines(fx.Standalone("main", fx.GPURequest(1))).Obj()
	badEngines := []any{map[string]any{"name": "main", "copies": "two", "members": []any{}}}
	scheduledBefore := []any{map[string]any{"type": "PodsScheduled", "status": "True", "lastTransitionTime": observedAt.Add(-time.Minute).Format(time.RFC3339)}}

	cases := map[string]struct {
		reason   string
		clusters []any
		replicas []any
		// want are the results of severity Fatal or Warning that name a
		// ModelReplica, by a part of their message each.
		want []string
		// wantSeverity is the severity of those results.
		wantSeverity fnv1.Severity
	}{
		"OwnUnreadableWithoutClusters": {
			reason:       "Our own replica that cannot be read fails the call even when there are no clusters, so it is never dropped.",
			replicas:     []any{replicaObject("m", "m-a-0", badEngines, nil)},
			want:         []string{"cannot read ModelReplica ml-team/m-a-0: spec.engines[0].copies"},
			wantSeverity: fnv1.Severity_SEVERITY_FATAL,
		},
		"FirstOwnUnreadableNamed": {
			reason:   "Of two own replicas that cannot be read, the first in the request is named.",
			clusters: []any{cluster},
			replicas: []any{
				replicaObject("m", "m-a-0", badEngines, nil),
				func() map[string]any {
					r := replicaObject("m", "m-a-1", []any{}, nil)
					r["metadata"].(map[string]any)["labels"].(map[string]any)["modelplane.ai/replica-index"] = 5.0
					return r
				}(),
			},
			want:         []string{"cannot read ModelReplica ml-team/m-a-0: spec.engines[0].copies"},
			wantSeverity: fnv1.Severity_SEVERITY_FATAL,
		},
		"OtherUnreadableOneWarning": {
			reason:       "Another deployment's replica the reports do not count, whose engines and conditions are both unreadable, is skipped with one warning, not one per defect.",
			clusters:     []any{cluster},
			replicas:     []any{replicaObject("other", "other-a-0", badEngines, "not a list")},
			want:         []string{"cannot read ModelReplica ml-team/other-a-0: spec.engines[0].copies"},
			wantSeverity: fnv1.Severity_SEVERITY_WARNING,
		},
		"OtherWithoutNamespaceNamed": {
			reason:   "A replica without a namespace is named without a slash.",
			clusters: []any{cluster},
			replicas: []any{func() map[string]any {
				r := replicaObject("other", "other-a-0", badEngines, nil)
				delete(r["metadata"].(map[string]any), "namespace")
				return r
			}()},
			want:         []string{"cannot read ModelReplica other-a-0: spec.engines[0].copies"},
			wantSeverity: fnv1.Severity_SEVERITY_WARNING,
		},
		"OtherSettledNotRead": {
			reason:   "Another deployment's replica every report counts charges nothing wherever it is pinned: its engines are not read, so not warned of.",
			clusters: []any{cluster},
			replicas: []any{replicaObject("other", "other-a-0", badEngines, scheduledBefore)},
		},
		"NullStatusIsNoStatus": {
			reason:   "A PodsScheduled condition with a null status is not scheduled, as one without a status: no warning.",
			clusters: []any{cluster},
			replicas: []any{replicaObject("other", "other-a-0", []any{}, []any{map[string]any{"type": "PodsScheduled", "status": nil}})},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rsp := run(t, request(t, xr, tc.clusters, tc.replicas))
			var got []string
			for _, r := range rsp.GetResults() {
				if strings.Contains(r.GetMessage(), "ModelReplica") || strings.Contains(r.GetMessage(), "status.conditions") {
					got = append(got, r.GetMessage())
					if r.GetSeverity() != tc.wantSeverity {
						t.Errorf("%s\nresult %q: severity %s, want %s", tc.reason, r.GetMessage(), r.GetSeverity(), tc.wantSeverity)
					}
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%s\nresults about replicas: %q, want %d, containing %q", tc.reason, got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("%s\nresult %d: %q, want it to contain %q", tc.reason, i, got[i], w)
				}
			}
		})
	}
}
