package observation

import (
	"fmt"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/poolreport"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// The ModelReplica conditions Replica reads: PodsScheduled relays the
// agent's report that every pod of the replica is bound to a node (or not,
// since when); Ready is the replica's own.
const (
	ConditionPodsScheduled = "PodsScheduled"
	ConditionReady         = "Ready"
)

// ConditionTypes are the types of the conditions Replica reads, and
// ConditionFields the fields of each. A reader of ModelReplicas may decode
// only these, and keep each where the conditions list has it.
var (
	ConditionTypes  = [...]string{ConditionPodsScheduled, ConditionReady} //nolint:gochecknoglobals // A constant list; Go has no constant arrays.
	ConditionFields = [...]string{"type", "status", "lastTransitionTime"} //nolint:gochecknoglobals // A constant list; Go has no constant arrays.
)

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

// Replica reads one replica's conditions: a finding, not nil, when its
// PodsScheduled condition cannot be read.
func Replica(o *v1alpha1.ModelReplica) (scheduling.Replica, *ReplicaFinding) {
	c, defect := readConditions(o)
	r := scheduling.Replica{Object: o, ScheduledSince: c.scheduledSince, UnscheduledSince: c.unscheduledSince, Ready: c.ready}
	r.Deleting = o.Metadata.DeletionTimestamp != nil
	if defect != "" {
		return r, &ReplicaFinding{Namespace: o.Metadata.Namespace, Name: o.Metadata.Name, Defect: defect}
	}
	return r, nil
}

// conditions is what a replica's conditions say: since when its pods are
// all scheduled (PodsScheduled True), or since when they are not
// (PodsScheduled False), each nil when it does not say or carries no
// usable time; and whether the replica is Ready.
type conditions struct {
	scheduledSince, unscheduledSince *time.Time
	ready                            bool
}

// readConditions reads PodsScheduled and Ready. Only a PodsScheduled it
// cannot read is a defect: Ready is the replica's own, and only True of it
// counts.
func readConditions(o *v1alpha1.ModelReplica) (conditions, string) {
	var out conditions
	if o.Status == nil || o.Status.Conditions == nil {
		return out, ""
	}
	conds, ok := o.Status.Conditions.([]any)
	if !ok {
		return out, "status.conditions: not a list"
	}
	defect := ""
	seen := false
	for i, v := range conds {
		// Anything but an object of a type read is another condition, not
		// this one malformed.
		c, _ := v.(map[string]any)
		typ, _ := c["type"].(string)
		status, isString := c["status"].(string)
		switch {
		case typ == ConditionReady:
			out.ready = out.ready || status == "True"
			continue
		case typ != ConditionPodsScheduled || seen:
			continue
		}
		// The first PodsScheduled condition is the one.
		seen = true
		// A null status is no status, as an omitted one.
		if !isString && c["status"] != nil {
			defect = fmt.Sprintf("status.conditions[%d].status: not a string", i)
			continue
		}
		if (status != "True" && status != "False") || c["lastTransitionTime"] == nil {
			continue
		}
		// The field is named only when it is wrong: this runs for every
		// replica of the fleet.
		s, isString := c["lastTransitionTime"].(string)
		if !isString {
			defect = fmt.Sprintf("status.conditions[%d].lastTransitionTime: not a string", i)
			continue
		}
		t, err := poolreport.ParseTime(s)
		if err != nil {
			defect = fmt.Sprintf("status.conditions[%d].lastTransitionTime: %q is not an RFC 3339 time", i, s)
			continue
		}
		if status == "True" {
			out.scheduledSince = &t
		} else {
			out.unscheduledSince = &t
		}
	}
	return out, defect
}
