package observation

import (
	"fmt"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// ConditionPodsScheduled is the ModelReplica condition relaying the agent's
// report that every pod of the replica is bound to a node.
const ConditionPodsScheduled = "PodsScheduled"

// PodsScheduledFields are the fields of a PodsScheduled condition Replica
// reads. A reader of ModelReplicas may decode only these of only that
// condition, and keep each where the conditions list has it.
var PodsScheduledFields = [...]string{"type", "status", "lastTransitionTime"} //nolint:gochecknoglobals // A constant list; Go has no constant arrays.

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

// Replicas reads each replica's PodsScheduled condition.
func Replicas(objs []*v1alpha1.ModelReplica) ([]scheduling.Replica, []ReplicaFinding) {
	out := make([]scheduling.Replica, 0, len(objs))
	var findings []ReplicaFinding
	for _, o := range objs {
		r, finding := Replica(o)
		if finding != nil {
			findings = append(findings, *finding)
		}
		out = append(out, r)
	}
	return out, findings
}

// Replica reads one replica's PodsScheduled condition: a finding, not nil,
// when it cannot.
func Replica(o *v1alpha1.ModelReplica) (scheduling.Replica, *ReplicaFinding) {
	since, defect := scheduledSince(o)
	r := scheduling.Replica{Object: o, ScheduledSince: since}
	if defect != "" {
		return r, &ReplicaFinding{Namespace: o.Metadata.Namespace, Name: o.Metadata.Name, Defect: defect}
	}
	return r, nil
}

// scheduledSince is when PodsScheduled became True, nil when it is not True.
func scheduledSince(o *v1alpha1.ModelReplica) (*time.Time, string) {
	if o.Status == nil || o.Status.Conditions == nil {
		return nil, ""
	}
	conds, ok := o.Status.Conditions.([]any)
	if !ok {
		return nil, "status.conditions: not a list"
	}
	for i, v := range conds {
		// Anything but an object of type PodsScheduled is another
		// condition, not this one malformed.
		c, _ := v.(map[string]any)
		if typ, _ := c["type"].(string); typ != ConditionPodsScheduled {
			continue
		}
		// A null status is no status, as an omitted one.
		status, ok := c["status"].(string)
		if !ok && c["status"] != nil {
			return nil, fmt.Sprintf("status.conditions[%d].status: not a string", i)
		}
		if status != "True" || c["lastTransitionTime"] == nil {
			return nil, ""
		}
		// The field is named only when it is wrong: this runs for every
		// replica of the fleet.
		s, ok := c["lastTransitionTime"].(string)
		if !ok {
			return nil, fmt.Sprintf("status.conditions[%d].lastTransitionTime: not a string", i)
		}
		t, err := ParseTime(s)
		if err != nil {
			return nil, fmt.Sprintf("status.conditions[%d].lastTransitionTime: %q is not an RFC 3339 time", i, s)
		}
		return &t, ""
	}
	return nil, ""
}
