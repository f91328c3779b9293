package relay

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

var agentTime = time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)

const (
	margin = 5 * time.Second
	maxAge = 5 * time.Minute
)

// inferenceCluster is the replica's cluster, its pool l4 reported at
// observedAt ("" for no report).
func inferenceCluster(t *testing.T, observedAt string) map[string]any {
	t.Helper()
	c := y(t, `
metadata: {name: eks}
status:
  providerConfigRef: {name: eks-kubeconfig}
  gpuPools: [{name: l4, nodes: 4}, {name: h100, nodes: 2, observedAt: "2026-10-20T20:06:00Z"}]
`)
	if observedAt != "" {
		mapAt(c, "status")["gpuPools"].([]any)[0].(map[string]any)["observedAt"] = observedAt
	}
	return c
}

// observedReplicaObservation is the ReplicaObservation Object with the
// agent's PodsScheduled (status, time), at generation 1.
func observedReplicaObservation(t *testing.T, status string, at time.Time) map[string]any {
	t.Helper()
	return y(t, fmt.Sprintf(`
spec: {providerConfigRef: {kind: ClusterProviderConfig, name: eks-kubeconfig}}
status:
  atProvider:
    manifest:
      metadata: {name: qwen-1a2b3, namespace: default, generation: 1}
      status:
        scheduledPods: 1
        conditions: [{type: PodsScheduled, status: "%s", reason: Agent, message: "1 of 1 pods are bound to a node", observedGeneration: 1, lastTransitionTime: "%s"}]
`, status, at.UTC().Format(time.RFC3339)))
}

func l4Replica() *fixture.ReplicaWrapper {
	return fixture.Replica("qwen", "eks", 0).Name("qwen-1a2b3").Engines(fixture.PinnedStandalone("main", "l4", fixture.Stamped(1)))
}

func TestRelayReplica(t *testing.T) {
	now := agentTime.Add(30 * time.Second)
	reported := agentTime.Add(-10 * time.Second).Format(time.RFC3339)
	type want struct {
		condition Condition
		object    bool
		ttl       time.Duration
	}
	cases := map[string]struct {
		reason string
		in     func(t *testing.T) ReplicaInput
		want   want
	}{
		"NoCluster": {
			reason: "without its cluster the replica's workload cluster cannot be reached",
			in:     func(*testing.T) ReplicaInput { return ReplicaInput{Replica: l4Replica().Obj()} },
			want:   want{condition: Condition{"PodsScheduled", "Unknown", ReasonWaitingForCluster, "InferenceCluster eks does not exist or has no status.providerConfigRef yet"}},
		},
		"AgentNotReporting": {
			reason: "no report of the replica's pool: the agent's kinds may not be served there, so nothing is composed (h100's report is another pool's)",
			in: func(t *testing.T) ReplicaInput {
				t.Helper()
				return ReplicaInput{Replica: l4Replica().Obj(), Cluster: inferenceCluster(t, "")}
			},
			want: want{condition: Condition{"PodsScheduled", "Unknown", ReasonAgentNotReporting, "no pool of the replica (l4) has a report from the cluster agent yet: its ReplicaObservation is created once one has"}},
		},
		"NotObservedYet": {
			reason: "a report of its pool: the ReplicaObservation is composed, Unknown until the agent counts",
			in: func(t *testing.T) ReplicaInput {
				t.Helper()
				return ReplicaInput{Replica: l4Replica().Obj(), Cluster: inferenceCluster(t, reported)}
			},
			want: want{condition: Condition{"PodsScheduled", "Unknown", ReasonNotObserved, "the cluster agent has not counted the replica's pods yet"}, object: true, ttl: maxAge - 40*time.Second},
		},
		"AgentFalse": {
			reason: "not bound: False at once, whatever the clocks",
			in: func(t *testing.T) ReplicaInput {
				t.Helper()
				return ReplicaInput{Replica: l4Replica().Obj(), Cluster: inferenceCluster(t, reported), Composed: map[string]map[string]any{KeyReplicaObservation: observedReplicaObservation(t, "False", agentTime)}}
			},
			want: want{condition: Condition{"PodsScheduled", "False", ReasonPodsNotBound, "1 of 1 pods are bound to a node"}, object: true, ttl: maxAge - 40*time.Second},
		},
		"AgentTruePastTheMargin": {
			reason: "bound, and this clock is past the agent's time by the margin",
			in: func(t *testing.T) ReplicaInput {
				t.Helper()
				return ReplicaInput{Replica: l4Replica().Obj(), Cluster: inferenceCluster(t, reported), Composed: map[string]map[string]any{KeyReplicaObservation: observedReplicaObservation(t, "True", agentTime)}}
			},
			want: want{condition: Condition{"PodsScheduled", "True", ReasonPodsBound, "1 of 1 pods are bound to a node, as the cluster agent saw at 2026-10-20T20:06:00Z"}, object: true, ttl: maxAge - 40*time.Second},
		},
		"AgentTrueWithinTheMargin": {
			reason: "bound 2s ago by the agent's clock: held Unknown (the replica has no PodsScheduled), called again when the margin has passed",
			in: func(t *testing.T) ReplicaInput {
				t.Helper()
				return ReplicaInput{Replica: l4Replica().Obj(), Cluster: inferenceCluster(t, reported), Composed: map[string]map[string]any{KeyReplicaObservation: observedReplicaObservation(t, "True", now.Add(-2*time.Second))}}
			},
			want: want{condition: Condition{
				"PodsScheduled", "Unknown", ReasonAwaitingClockMargin,
				"the cluster agent saw every pod bound at 2026-10-20T20:06:28Z; PodsScheduled turns True once this clock passes 2026-10-20T20:06:33Z (a margin of 5s for clock skew)",
			}, object: true, ttl: 3 * time.Second},
		},
		"AgentAheadOfThisClock": {
			reason: "the workload cluster's clock runs ahead: the agent's time is in this clock's future, so the hold lasts past it",
			in: func(t *testing.T) ReplicaInput {
				t.Helper()
				return ReplicaInput{Replica: l4Replica().Obj(), Cluster: inferenceCluster(t, reported), Composed: map[string]map[string]any{KeyReplicaObservation: observedReplicaObservation(t, "True", now.Add(20*time.Second))}}
			},
			want: want{condition: Condition{
				"PodsScheduled", "Unknown", ReasonAwaitingClockMargin,
				"the cluster agent saw every pod bound at 2026-10-20T20:06:50Z; PodsScheduled turns True once this clock passes 2026-10-20T20:06:55Z (a margin of 5s for clock skew)",
			}, object: true, ttl: 25 * time.Second},
		},
		"HeldFalseFromFalse": {
			reason: "a replica that was False stays False while held: no transition to re-stamp",
			in: func(t *testing.T) ReplicaInput {
				t.Helper()
				r := l4Replica().PodsScheduled("False", agentTime.Add(-time.Minute)).Obj()
				return ReplicaInput{Replica: r, Cluster: inferenceCluster(t, reported), Composed: map[string]map[string]any{KeyReplicaObservation: observedReplicaObservation(t, "True", now.Add(-time.Second))}}
			},
			want: want{condition: Condition{
				"PodsScheduled", "False", ReasonAwaitingClockMargin,
				"the cluster agent saw every pod bound at 2026-10-20T20:06:29Z; PodsScheduled turns True once this clock passes 2026-10-20T20:06:34Z (a margin of 5s for clock skew)",
			}, object: true, ttl: 4 * time.Second},
		},
		"TrueKept": {
			reason: "already True since the agent's time: kept within the margin (it was stamped after it)",
			in: func(t *testing.T) ReplicaInput {
				t.Helper()
				r := l4Replica().PodsScheduled("True", now.Add(-time.Second)).Obj()
				return ReplicaInput{Replica: r, Cluster: inferenceCluster(t, reported), Composed: map[string]map[string]any{KeyReplicaObservation: observedReplicaObservation(t, "True", now.Add(-2*time.Second))}}
			},
			want: want{condition: Condition{"PodsScheduled", "True", ReasonPodsBound, "1 of 1 pods are bound to a node, as the cluster agent saw at 2026-10-20T20:06:28Z"}, object: true, ttl: maxAge - 40*time.Second},
		},
		"TrueRestampedLate": {
			reason: "True since before the agent's newer time, first seen once the margin has passed: True with a message that names the newer time, so that Crossplane stamps it anew",
			in: func(t *testing.T) ReplicaInput {
				t.Helper()
				r := l4Replica().PodsScheduled("True", agentTime.Add(-time.Minute)).Obj()
				return ReplicaInput{Replica: r, Cluster: inferenceCluster(t, reported), Composed: map[string]map[string]any{KeyReplicaObservation: observedReplicaObservation(t, "True", agentTime.Add(10*time.Second))}}
			},
			want: want{condition: Condition{"PodsScheduled", "True", ReasonPodsBound, "1 of 1 pods are bound to a node, as the cluster agent saw at 2026-10-20T20:06:10Z"}, object: true, ttl: maxAge - 40*time.Second},
		},
		"TrueRestamped": {
			reason: "True since before the agent's newer time (a flip the relay did not see): False until the margin passes, to re-stamp",
			in: func(t *testing.T) ReplicaInput {
				t.Helper()
				r := l4Replica().PodsScheduled("True", agentTime).Obj()
				return ReplicaInput{Replica: r, Cluster: inferenceCluster(t, reported), Composed: map[string]map[string]any{KeyReplicaObservation: observedReplicaObservation(t, "True", now.Add(-time.Second))}}
			},
			want: want{condition: Condition{
				"PodsScheduled", "False", ReasonAwaitingClockMargin,
				"the cluster agent saw every pod bound at 2026-10-20T20:06:29Z; PodsScheduled turns True once this clock passes 2026-10-20T20:06:34Z (a margin of 5s for clock skew)",
			}, object: true, ttl: 4 * time.Second},
		},
		"AgentSilent": {
			reason: "the pool's newest report is older than maxAge: the agent's count may be too, so neither counted nor stuck",
			in: func(t *testing.T) ReplicaInput {
				t.Helper()
				return ReplicaInput{Replica: l4Replica().Obj(), Cluster: inferenceCluster(t, now.Add(-maxAge).Format(time.RFC3339)), Composed: map[string]map[string]any{KeyReplicaObservation: observedReplicaObservation(t, "False", agentTime)}}
			},
			want: want{condition: Condition{"PodsScheduled", "Unknown", ReasonAgentSilent, "the cluster agent's newest report of the replica's pools (l4) is older than 5m0s: its count of the replica's pods may be too"}, object: true},
		},
		"ObjectKeptWithoutReports": {
			reason: "a composed ReplicaObservation is kept when its pool loses its report (provider config from the Object itself)",
			in: func(t *testing.T) ReplicaInput {
				t.Helper()
				return ReplicaInput{Replica: l4Replica().Obj(), Composed: map[string]map[string]any{KeyReplicaObservation: observedReplicaObservation(t, "True", agentTime)}}
			},
			want: want{condition: Condition{"PodsScheduled", "Unknown", ReasonAgentSilent, "the cluster agent's newest report of the replica's pools (l4) is older than 5m0s: its count of the replica's pods may be too"}, object: true},
		},
		"OlderGeneration": {
			reason: "the agent counted an earlier spec of the ReplicaObservation",
			in: func(t *testing.T) ReplicaInput {
				t.Helper()
				o := observedReplicaObservation(t, "True", agentTime)
				mapAt(o, "status", "atProvider", "manifest", "metadata")["generation"] = 2.0
				return ReplicaInput{Replica: l4Replica().Obj(), Cluster: inferenceCluster(t, reported), Composed: map[string]map[string]any{KeyReplicaObservation: o}}
			},
			want: want{condition: Condition{"PodsScheduled", "Unknown", ReasonNotObserved, "the cluster agent has not counted the replica's pods since its ReplicaObservation changed"}, object: true, ttl: maxAge - 40*time.Second},
		},
		"AgentUnknown": {
			reason: "the agent's Unknown, with its reason and message",
			in: func(t *testing.T) ReplicaInput {
				t.Helper()
				o := observedReplicaObservation(t, "Unknown", agentTime)
				c := mapAt(o, "status", "atProvider", "manifest", "status")["conditions"].([]any)[0].(map[string]any)
				c["reason"], c["message"] = "NamespaceNotWatched", "not watched"
				return ReplicaInput{Replica: l4Replica().Obj(), Cluster: inferenceCluster(t, reported), Composed: map[string]map[string]any{KeyReplicaObservation: o}}
			},
			want: want{condition: Condition{"PodsScheduled", "Unknown", "NamespaceNotWatched", "not watched"}, object: true, ttl: maxAge - 40*time.Second},
		},
		"BadTime": {
			reason: "an agent time that does not parse names the field",
			in: func(t *testing.T) ReplicaInput {
				t.Helper()
				o := observedReplicaObservation(t, "True", agentTime)
				mapAt(o, "status", "atProvider", "manifest", "status")["conditions"].([]any)[0].(map[string]any)["lastTransitionTime"] = "yesterday"
				return ReplicaInput{Replica: l4Replica().Obj(), Cluster: inferenceCluster(t, reported), Composed: map[string]map[string]any{KeyReplicaObservation: o}}
			},
			want: want{condition: Condition{"PodsScheduled", "Unknown", ReasonInvalidObservation, `the ReplicaObservation's PodsScheduled lastTransitionTime "yesterday": not an RFC 3339 time`}, object: true, ttl: maxAge - 40*time.Second},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := tc.in(t)
			in.Now, in.Margin, in.MaxAge = now, margin, maxAge
			got := Replica(in)
			if diff := cmp.Diff(tc.want.condition, got.Condition); diff != "" {
				t.Errorf("%s\nCondition: -want, +got:\n%s", tc.reason, diff)
			}
			if _, ok := got.Resources[KeyReplicaObservation]; ok != tc.want.object {
				t.Errorf("%s\nthe ReplicaObservation composed: want %t, got %t", tc.reason, tc.want.object, ok)
			}
			if got.TTL != tc.want.ttl {
				t.Errorf("%s\nTTL: want %s, got %s", tc.reason, tc.want.ttl, got.TTL)
			}
		})
	}
}

func TestReplicaObservation(t *testing.T) {
	r := fixture.Replica("qwen", "eks", 0).Name("qwen-1a2b3").Engines(
		fixture.PinnedStandalone("main", "l4", fixture.Stamped(1)),
		fixture.PinnedGang("big", "h100", 3, fixture.Stamped(8)),
	).Obj()
	r.Spec.Engines[0].Copies = new(int64(2))
	in := ReplicaInput{Replica: r, Cluster: inferenceCluster(t, agentTime.Format(time.RFC3339)), Now: agentTime, Margin: margin, MaxAge: maxAge}
	got := Replica(in).Resources[KeyReplicaObservation]
	want := y(t, `
apiVersion: kubernetes.m.crossplane.io/v1alpha1
kind: Object
metadata: {namespace: ml-team}
spec:
  watch: true
  providerConfigRef: {kind: ClusterProviderConfig, name: eks-kubeconfig}
  forProvider:
    manifest:
      apiVersion: agent.modelplane.ai/v1alpha1
      kind: ReplicaObservation
      metadata: {name: qwen-1a2b3, namespace: default}
      spec:
        selectors:
        - matchLabels: {modelplane.ai/workload: qwen-1a2b3-main-1d4fc}
        - matchLabels: {leaderworkerset.sigs.k8s.io/name: qwen-1a2b3-big-ee171}
        pods: 6
        replicaNamespace: ml-team
`)
	// pods: 2 copies of main, and the gang's leader and 3 workers;
	// replicaNamespace: the ModelReplica's, in the control plane.
	if diff := cmp.Diff(want, asJSON(t, got), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("the ReplicaObservation's Object: -want, +got:\n%s", diff)
	}
}

// asJSON is v as decoded JSON: numbers float64, as y reads them.
func asJSON(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSkewedClocks runs the relay with three clocks: Crossplane's, which
// stamps PodsScheduled's lastTransitionTime (rounded down to the second,
// as conditions are) at the first call, every 100ms, at which the relay
// returns True; the agent's, ahead of Crossplane's by agentAhead; and the
// relay's own, ahead of Crossplane's by relayAhead. The stamp is safe when
// it is not earlier than the agent's time: a report the agent took before
// the pods bound then never reads as counting them
// (docs/spec.md#the-counted-rule). Waiting on its own clock covers any
// skew of the agent's; the margin covers the relay's clock running ahead
// of Crossplane's by up to the margin less the second of rounding.
func TestSkewedClocks(t *testing.T) {
	cases := map[string]struct {
		reason                 string
		agentAhead, relayAhead time.Duration
		safe                   bool
	}{
		"AgentAhead":               {reason: "the workload cluster's clock ahead: the relay waits until its clock passes the agent's time", agentAhead: 30 * time.Second, safe: true},
		"AgentBehind":              {reason: "the workload cluster's clock behind: the relay turns True at once", agentAhead: -30 * time.Second, safe: true},
		"AgentFarAhead":            {reason: "an hour ahead: the replica is counted an hour late, never early", agentAhead: time.Hour, safe: true},
		"RelayBehind":              {reason: "a relay behind Crossplane only waits longer", agentAhead: 30 * time.Second, relayAhead: -30 * time.Second, safe: true},
		"RelayAheadWithinMargin":   {reason: "a relay ahead of Crossplane by the margin less the rounding second", agentAhead: 30 * time.Second, relayAhead: margin - time.Second, safe: true},
		"RelayAheadPastMargin":     {reason: "a relay ahead by more than that: stamped before the agent's time", agentAhead: 30 * time.Second, relayAhead: margin + time.Second, safe: false},
		"RelayFarAheadAgentBehind": {reason: "a relay far ahead is safe only while the agent's clock is behind Crossplane's", agentAhead: -2 * time.Minute, relayAhead: time.Minute, safe: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			early := false
			for frac := time.Duration(0); frac < time.Second; frac += 250 * time.Millisecond {
				bound := agentTime.Add(frac)     // by Crossplane's clock
				seen := bound.Add(tc.agentAhead) // by the agent's
				agentLTT := seen.Truncate(time.Second)
				o := observedReplicaObservation(t, "True", agentLTT)
				flipped := false
				var step time.Duration
				for now := bound; now.Before(bound.Add(2 * time.Hour)); now = now.Add(step) {
					got := Replica(ReplicaInput{
						Replica: l4Replica().Obj(), Cluster: inferenceCluster(t, seen.Format(time.RFC3339)),
						Composed: map[string]map[string]any{KeyReplicaObservation: o},
						Now:      now.Add(tc.relayAhead), Margin: margin, MaxAge: 3 * time.Hour,
					})
					if got.Condition.Status != "True" {
						// Called again every 100ms, or within 500ms of
						// when the relay asked to be.
						step = max(100*time.Millisecond, got.TTL-500*time.Millisecond)
						continue
					}
					flipped = true
					if now.Truncate(time.Second).Before(agentLTT) {
						early = true
					}
					break
				}
				if !flipped {
					t.Fatalf("PodsScheduled never turned True within 2h of the agent's time")
				}
			}
			if early == tc.safe {
				t.Errorf("%s\nagent ahead %s, relay ahead %s, margin %s: stamped before the agent's time: want %t, got %t", tc.reason, tc.agentAhead, tc.relayAhead, margin, !tc.safe, early)
			}
		})
	}
}
