package observation

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

func TestReplicas(t *testing.T) {
	scheduledAt := now.Add(-2 * time.Minute)
	withConditions := func(raw string) *v1alpha1.ModelReplica {
		r := fixture.Replica("llm", "a", 0).Obj()
		r.Status = &v1alpha1.ModelReplicaStatus{Conditions: decoded(raw)}
		return r
	}
	type want struct {
		since    []*time.Time
		findings []ReplicaFinding
	}
	cases := map[string]struct {
		reason string
		args   []*v1alpha1.ModelReplica
		want   want
	}{
		"None": {
			reason: "No replicas, nothing read.",
			want:   want{since: []*time.Time{}},
		},
		"ScheduledTrue": {
			reason: "PodsScheduled True carries the time it became True.",
			args:   []*v1alpha1.ModelReplica{fixture.Replica("llm", "a", 0).PodsScheduled("True", scheduledAt).Obj()},
			want:   want{since: []*time.Time{&scheduledAt}},
		},
		"ScheduledFalse": {
			reason: "PodsScheduled False means not counted by any histogram.",
			args:   []*v1alpha1.ModelReplica{fixture.Replica("llm", "a", 0).PodsScheduled("False", scheduledAt).Obj()},
			want:   want{since: []*time.Time{nil}},
		},
		"ScheduledUnknown": {
			reason: "PodsScheduled Unknown is not True.",
			args:   []*v1alpha1.ModelReplica{fixture.Replica("llm", "a", 0).PodsScheduled("Unknown", scheduledAt).Obj()},
			want:   want{since: []*time.Time{nil}},
		},
		"ConditionAbsent": {
			reason: "A replica whose agent has not reported has no PodsScheduled condition.",
			args: []*v1alpha1.ModelReplica{fixture.Replica("llm", "a", 0).Conditions(
				v1alpha1.Condition{Type: "Ready", Status: "True", LastTransitionTime: nowRFC},
			).Obj()},
			want: want{since: []*time.Time{nil}},
		},
		"AmongOtherConditions": {
			reason: "PodsScheduled is found wherever it is in the list.",
			args: []*v1alpha1.ModelReplica{fixture.Replica("llm", "a", 0).Conditions(
				v1alpha1.Condition{Type: "Ready", Status: "False", LastTransitionTime: nowRFC},
				v1alpha1.Condition{Type: "PodsScheduled", Status: "True", LastTransitionTime: scheduledAt.Format(time.RFC3339)},
			).Obj()},
			want: want{since: []*time.Time{&scheduledAt}},
		},
		"TrueWithoutTime": {
			reason: "PodsScheduled True without a time cannot be compared with observedAt, so the replica is charged.",
			args:   []*v1alpha1.ModelReplica{withConditions(`[{"type":"PodsScheduled","status":"True"}]`)},
			want:   want{since: []*time.Time{nil}},
		},
		"LowerCaseTime": {
			reason: "A lastTransitionTime with a lower-case t and z is RFC 3339: the replica's pods are counted from then.",
			args:   []*v1alpha1.ModelReplica{withConditions(`[{"type":"PodsScheduled","status":"True","lastTransitionTime":"` + strings.ToLower(scheduledAt.Format(time.RFC3339)) + `"}]`)},
			want:   want{since: []*time.Time{&scheduledAt}},
		},
		"GarbageTime": {
			reason: "An unreadable lastTransitionTime is a finding, and the replica is charged.",
			args:   []*v1alpha1.ModelReplica{withConditions(`[{"type":"Ready","status":"True"},{"type":"PodsScheduled","status":"True","lastTransitionTime":"a while ago"}]`)},
			want: want{
				since: []*time.Time{nil},
				findings: []ReplicaFinding{{
					Namespace: fixture.Namespace, Name: "llm-a-0",
					Defect: `status.conditions[1].lastTransitionTime: "a while ago" is not an RFC 3339 time`,
				}},
			},
		},
		"NumericTime": {
			reason: "A lastTransitionTime that is a number is a finding.",
			args:   []*v1alpha1.ModelReplica{withConditions(`[{"type":"PodsScheduled","status":"True","lastTransitionTime":1792526760}]`)},
			want: want{
				since: []*time.Time{nil},
				findings: []ReplicaFinding{{
					Namespace: fixture.Namespace, Name: "llm-a-0",
					Defect: "status.conditions[0].lastTransitionTime: not a string",
				}},
			},
		},
		"GarbageTimeWhenFalse": {
			reason: "The time of a False condition is read too (how long the pods wait), so garbage there is a finding; the replica is charged, and not judged stuck.",
			args:   []*v1alpha1.ModelReplica{withConditions(`[{"type":"PodsScheduled","status":"False","lastTransitionTime":"a while ago"}]`)},
			want: want{
				since:    []*time.Time{nil},
				findings: []ReplicaFinding{{Namespace: fixture.Namespace, Name: "llm-a-0", Defect: `status.conditions[0].lastTransitionTime: "a while ago" is not an RFC 3339 time`}},
			},
		},
		"ConditionsNotAList": {
			reason: "Conditions that are not a list are a finding.",
			args:   []*v1alpha1.ModelReplica{withConditions(`{"type":"PodsScheduled","status":"True"}`)},
			want: want{
				since:    []*time.Time{nil},
				findings: []ReplicaFinding{{Namespace: fixture.Namespace, Name: "llm-a-0", Defect: "status.conditions: not a list"}},
			},
		},
		"ConditionsNull": {
			reason: "Null conditions are no conditions.",
			args:   []*v1alpha1.ModelReplica{withConditions(`null`)},
			want:   want{since: []*time.Time{nil}},
		},
		"ConditionNotAnObject": {
			reason: "A condition that is not an object is skipped; a good PodsScheduled after it is still read.",
			args: []*v1alpha1.ModelReplica{withConditions(`["junk",{"type":"PodsScheduled","status":"True","lastTransitionTime":"` +
				scheduledAt.Format(time.RFC3339) + `"}]`)},
			want: want{since: []*time.Time{&scheduledAt}},
		},
		"NoStatus": {
			reason: "A replica just created has no status.",
			args:   []*v1alpha1.ModelReplica{fixture.Replica("llm", "a", 0).Obj()},
			want:   want{since: []*time.Time{nil}},
		},
		"EmptyStatus": {
			reason: "A status without conditions has no PodsScheduled.",
			args: []*v1alpha1.ModelReplica{func() *v1alpha1.ModelReplica {
				r := fixture.Replica("llm", "a", 0).Obj()
				r.Status = &v1alpha1.ModelReplicaStatus{}
				return r
			}()},
			want: want{since: []*time.Time{nil}},
		},
		"SeveralInOrder": {
			reason: "Every replica is read, in input order, and a finding names its replica.",
			args: []*v1alpha1.ModelReplica{
				fixture.Replica("llm", "b", 0).PodsScheduled("True", scheduledAt).Obj(),
				withConditions(`true`),
				fixture.Replica("other", "a", 3).Namespace("team-b").Obj(),
			},
			want: want{
				since:    []*time.Time{&scheduledAt, nil, nil},
				findings: []ReplicaFinding{{Namespace: fixture.Namespace, Name: "llm-a-0", Defect: "status.conditions: not a list"}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, findings := Replicas(tc.args)
			since := make([]*time.Time, len(got))
			for i, r := range got {
				if r.Object != tc.args[i] {
					t.Errorf("\n%s\nReplicas(...)[%d].Object is not the input replica", tc.reason, i)
				}
				since[i] = r.ScheduledSince
			}
			if diff := cmp.Diff(tc.want.since, since); diff != "" {
				t.Errorf("\n%s\nReplicas(...): -want ScheduledSince, +got ScheduledSince:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.findings, findings); diff != "" {
				t.Errorf("\n%s\nReplicas(...): -want findings, +got findings:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestReplicaFindingString(t *testing.T) {
	f := ReplicaFinding{Namespace: "ml-team", Name: "llm-3f2a1", Defect: "status.conditions: not a list"}
	want := "ModelReplica ml-team/llm-3f2a1: status.conditions: not a list"
	if diff := cmp.Diff(want, f.String()); diff != "" {
		t.Errorf("String(): -want, +got:\n%s", diff)
	}
}

// TestReplicasWrongTypedPodsScheduled: a PodsScheduled condition whose fields
// have the wrong JSON types is bad input, which docs/spec.md#bad-input says must give a
// warning. The exact wording is the implementation's; it must name the
// condition.
func TestReplicasWrongTypedPodsScheduled(t *testing.T) {
	cases := map[string]string{
		"StatusBool":   `[{"type":"PodsScheduled","status":true,"lastTransitionTime":"2026-10-20T20:00:00Z"}]`,
		"TypeNumber":   `[{"type":"PodsScheduled","status":"True","lastTransitionTime":"2026-10-20T20:00:00Z"},{"type":7}]`,
		"StatusObject": `[{"type":"PodsScheduled","status":{"value":"True"}}]`,
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			r := fixture.Replica("llm", "a", 0).Obj()
			r.Status = &v1alpha1.ModelReplicaStatus{Conditions: decoded(raw)}
			got, findings := Replicas([]*v1alpha1.ModelReplica{r})
			if name == "TypeNumber" {
				// The PodsScheduled condition itself is good and comes first.
				if got[0].ScheduledSince == nil {
					t.Errorf("Replicas(%s): ScheduledSince is nil, want the good condition's time", raw)
				}
				return
			}
			if got[0].ScheduledSince != nil {
				t.Errorf("Replicas(%s): ScheduledSince = %v, want nil for an unreadable condition", raw, got[0].ScheduledSince)
			}
			if len(findings) != 1 || !strings.Contains(findings[0].Defect, "status.conditions[0]") {
				t.Errorf("Replicas(%s): findings = %v, want one naming status.conditions[0]", raw, findings)
			}
		})
	}
}

// decoded is JSON text as the function reads it out of a request.
func decoded(raw string) any {
	var v any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		panic(err) // The tests' JSON is written by hand.
	}
	return v
}

func TestReplicaWaitAndReadiness(t *testing.T) {
	at := now.Add(-20 * time.Minute)
	type want struct {
		unscheduledSince *time.Time
		ready, deleting  bool
	}
	cases := map[string]struct {
		reason string
		args   *v1alpha1.ModelReplica
		want   want
	}{
		"Unscheduled": {
			reason: "PodsScheduled False carries since when the pods wait.",
			args:   fixture.Replica("llm", "a", 0).PodsScheduled("False", at).Obj(),
			want:   want{unscheduledSince: &at},
		},
		"UnknownIsNotUnscheduled": {
			reason: "Only an explicit False counts: Unknown says nothing of the pods.",
			args:   fixture.Replica("llm", "a", 0).PodsScheduled("Unknown", at).Obj(),
		},
		"NoConditionIsNotUnscheduled": {
			reason: "No PodsScheduled condition (every replica without an agent) is not unscheduled.",
			args:   fixture.Replica("llm", "a", 0).Obj(),
		},
		"Ready": {
			reason: "A Ready condition of status True makes the replica Ready, wherever it is in the list.",
			args: fixture.Replica("llm", "a", 0).Conditions(
				v1alpha1.Condition{Type: "PodsScheduled", Status: "False", LastTransitionTime: at.Format(time.RFC3339)},
				v1alpha1.Condition{Type: "Ready", Status: "True"},
			).Obj(),
			want: want{unscheduledSince: &at, ready: true},
		},
		"Deleting": {
			reason: "A replica with a deletionTimestamp is being deleted.",
			args: func() *v1alpha1.ModelReplica {
				r := fixture.Replica("llm", "a", 0).Obj()
				r.Metadata.DeletionTimestamp = new(now.Format(time.RFC3339))
				return r
			}(),
			want: want{deleting: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, finding := Replica(tc.args)
			if finding != nil {
				t.Errorf("%s\nReplica(...): unexpected finding %v", tc.reason, finding)
			}
			got := want{unscheduledSince: r.UnscheduledSince, ready: r.Ready, deleting: r.Deleting}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nReplica(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
