package relay

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/poolreport"
)

// FuzzRelayCluster feeds PoolObservation statuses of any shape through
// Cluster: it never panics, every field the earlier steps wrote
// other than the report stays as it was, what it relays is within the
// InferenceCluster schema's bounds, and a pool's entry says binding
// Steered exactly when the relayed report does: a stale Steered the
// earlier steps carried never stays.
func FuzzRelayCluster(f *testing.F) {
	for _, s := range []string{
		l4Report,
		l4Report + "binding: Steered\n",
		`{"observedNodes": 1, "observedAt": "x", "nodesByFreeDevices": [{"nodes": 1, "free": [{"name": "gpu", "count": 1.5}]}], "binding": "Steered"}`,
		`{"observedNodes": 0, "observedAt": "x", "nodesByFreeDevices": [], "binding": "steered"}`,
		`{"observedNodes": -1}`, `[]`, `null`, `{"nodesByFreeDevices": {"a": 1}}`, `{"binding": "Steered"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, status []byte) {
		var v any
		if json.Unmarshal(status, &v) != nil {
			return
		}
		o := map[string]any{"status": map[string]any{"atProvider": map[string]any{"manifest": map[string]any{"status": v}}}}
		// The earlier steps' entries carry a Steered from before.
		in := ClusterInput{DesiredStatus: steeredBefore(t), Composed: map[string]map[string]any{
			KeyCRDPoolObservations: crd(t, "True"), KeyCRDReplicaObservations: crd(t, "True"), KeyPool("l4"): o,
		}}
		out := Cluster(in)
		before := steeredBefore(t)["gpuPools"].([]any)
		after := out.Status["gpuPools"].([]any)
		statusOf, _ := v.(map[string]any)
		for i := range before {
			entry := after[i].(map[string]any)
			rest := copyMap(entry)
			relayed := map[string]any{}
			for _, f := range append(agentv1alpha1.ReportFields[:], agentv1alpha1.FieldBinding) {
				if v, ok := rest[f]; ok {
					relayed[f] = v
				}
				delete(rest, f)
			}
			delete(before[i].(map[string]any), agentv1alpha1.FieldBinding)
			if diff := cmp.Diff(before[i], rest); diff != "" {
				t.Fatalf("pool %d: fields other than the report changed: -before, +after:\n%s", i, diff)
			}
			_, reported := relayed[agentv1alpha1.FieldObservedAt]
			wantSteered := i == 0 && reported && statusOf[agentv1alpha1.FieldBinding] == agentv1alpha1.BindingSteered
			if _, steered := relayed[agentv1alpha1.FieldBinding]; steered != wantSteered {
				t.Fatalf("pool %d: binding relayed %t, want %t (the PoolObservation's %#v, report relayed %t)", i, steered, wantSteered, statusOf[agentv1alpha1.FieldBinding], reported)
			}
			if len(relayed) > 0 {
				got, err := poolreport.Relayable(relayed)
				if err != nil {
					t.Fatalf("pool %d: relayed a report outside the schema's bounds: %v", i, err)
				}
				if diff := cmp.Diff(relayed, got); diff != "" {
					t.Fatalf("pool %d: relayed what the relay would not relay again: -relayed, +again:\n%s", i, diff)
				}
			}
		}
	})
}

// FuzzRelayReplica feeds agent conditions of any shape through
// Replica: it never panics, and never turns PodsScheduled True before
// its clock has passed the agent's time by the margin, unless the replica
// was True since that time already.
func FuzzRelayReplica(f *testing.F) {
	f.Add(`{"type": "PodsScheduled", "status": "True", "lastTransitionTime": "2026-10-20T20:06:28Z"}`, int64(30))
	f.Add(`{"type": "PodsScheduled", "status": "True", "lastTransitionTime": "2026-10-20T20:06:28z", "observedGeneration": "x"}`, int64(-5))
	f.Add(`{"type": "PodsScheduled", "status": 1}`, int64(0))
	f.Fuzz(func(t *testing.T, cond string, offset int64) {
		var c any
		if json.Unmarshal([]byte(cond), &c) != nil {
			return
		}
		o := map[string]any{"status": map[string]any{"atProvider": map[string]any{"manifest": map[string]any{
			"metadata": map[string]any{"generation": 1.0},
			"status":   map[string]any{"conditions": []any{c}},
		}}}}
		now := agentTime.Add(time.Duration(offset) * time.Second)
		out := Replica(ReplicaInput{
			Replica: l4Replica().Obj(), Cluster: inferenceCluster(t, agentTime.Format(time.RFC3339)),
			Composed: map[string]map[string]any{KeyReplicaObservation: o},
			Now:      now, Margin: margin, MaxAge: maxAge,
		})
		if out.Condition.Status != "True" {
			return
		}
		m, _ := c.(map[string]any)
		lt, _ := m["lastTransitionTime"].(string)
		at, err := poolreport.ParseTime(lt)
		if err != nil {
			t.Fatalf("True from an agent time that does not parse: %q", lt)
		}
		if now.Before(at.Add(margin)) {
			t.Fatalf("True at %s, before the agent's time %s plus the margin", now, at)
		}
	})
}
