package observation

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// ConditionPodsScheduled is the ModelReplica condition relaying the agent's
// report that every pod of the replica is bound to a node.
const ConditionPodsScheduled = "PodsScheduled"

// ReplicaFinding is a PodsScheduled condition that could not be read. The
// replica is then treated as not yet counted by any histogram.
type ReplicaFinding struct {
	Namespace string
	Name      string
	Defect    string
}

func (f ReplicaFinding) String() string {
	return fmt.Sprintf("ModelReplica %s/%s: %s", f.Namespace, f.Name, f.Defect)
}

type rawCondition struct {
	Type               json.RawMessage `json:"type"`
	Status             json.RawMessage `json:"status"`
	LastTransitionTime json.RawMessage `json:"lastTransitionTime"`
}

// Replicas reads each replica's PodsScheduled condition.
func Replicas(objs []*v1alpha1.ModelReplica) ([]scheduling.Replica, []ReplicaFinding) {
	out := make([]scheduling.Replica, 0, len(objs))
	var findings []ReplicaFinding
	for _, o := range objs {
		r := scheduling.Replica{Object: o}
		since, defect := scheduledSince(o)
		if defect != "" {
			findings = append(findings, ReplicaFinding{Namespace: o.Metadata.Namespace, Name: o.Metadata.Name, Defect: defect})
		}
		r.ScheduledSince = since
		out = append(out, r)
	}
	return out, findings
}

// scheduledSince is when PodsScheduled became True, nil when it is not True.
func scheduledSince(o *v1alpha1.ModelReplica) (*time.Time, string) {
	if o.Status == nil || isAbsent(o.Status.Conditions) {
		return nil, ""
	}
	var conds []json.RawMessage
	if err := json.Unmarshal(o.Status.Conditions, &conds); err != nil {
		return nil, "status.conditions: not a list"
	}
	for i, raw := range conds {
		var c rawCondition
		if json.Unmarshal(raw, &c) != nil {
			continue
		}
		if typ, ok := jsonString(c.Type); !ok || typ != ConditionPodsScheduled {
			continue
		}
		status, ok := jsonString(c.Status)
		if !ok {
			return nil, fmt.Sprintf("status.conditions[%d].status: not a string", i)
		}
		if status != "True" {
			return nil, ""
		}
		field := fmt.Sprintf("status.conditions[%d].lastTransitionTime", i)
		if isAbsent(c.LastTransitionTime) {
			return nil, ""
		}
		s, ok := jsonString(c.LastTransitionTime)
		if !ok {
			return nil, field + ": not a string"
		}
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return nil, fmt.Sprintf("%s: %q is not an RFC 3339 time", field, s)
		}
		return &t, ""
	}
	return nil, ""
}

// jsonString reads a JSON string: one without escapes directly, any other
// through encoding/json.
func jsonString(raw json.RawMessage) (string, bool) {
	t := bytes.TrimSpace(raw)
	if len(t) >= 2 && t[0] == '"' && t[len(t)-1] == '"' && bytes.IndexByte(t[1:len(t)-1], '\\') < 0 && bytes.IndexByte(t[1:len(t)-1], '"') < 0 {
		return string(t[1 : len(t)-1]), true
	}
	var s string
	if err := json.Unmarshal(t, &s); err != nil {
		return "", false
	}
	return s, true
}
