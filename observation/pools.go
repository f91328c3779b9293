// Package observation reads what the cluster agent reports: each pool's
// observedNodes, observedAt, nodesByFreeDevices and binding on an
// InferenceCluster, and each ModelReplica's PodsScheduled condition. It is
// the one place that knows these status field paths. A report it cannot
// use becomes a finding that names the object and the field, never a
// panic or an error.
package observation

import (
	"fmt"
	"slices"
	"time"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/poolreport"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// The fields of a status.gpuPools[] entry that hold the agent's report. A
// reader of InferenceClusters passes them on, decoded and unjudged, in
// GPUPool's ObservedNodes, ObservedAt, NodesByFreeDevices and Binding.
const (
	FieldObservedNodes      = agentv1alpha1.FieldObservedNodes
	FieldObservedAt         = agentv1alpha1.FieldObservedAt
	FieldNodesByFreeDevices = agentv1alpha1.FieldNodesByFreeDevices
	FieldBinding            = agentv1alpha1.FieldBinding
)

// State is whether a pool's report can be used for free-device accounting.
type State string

// The states of a pool's report.
const (
	// Usable: present, valid and fresh.
	Usable State = "Usable"
	// Missing: the agent published no report for the pool.
	Missing State = "Missing"
	// Stale: the last report is older than the maximum age.
	Stale State = "Stale"
	// Invalid: the report is malformed; Defect says how.
	Invalid State = "Invalid"
)

// PoolReport is the verdict on one pool's report.
type PoolReport struct {
	Cluster string
	Pool    string
	State   State

	// ClusterReady is whether the pool's cluster is Ready.
	ClusterReady bool

	// Age is how old the report is, for Stale.
	Age time.Duration

	// Defect names the field and what is wrong with it, for Invalid.
	Defect string

	// ExpiresAt is when a Usable report goes stale.
	ExpiresAt time.Time

	// BindingDefect names the binding field and what is wrong with it,
	// whatever the report's state; empty when it is absent or Steered. A
	// binding that does not read is ignored: the report is judged, and a
	// usable one used, as if it had none.
	BindingDefect string

	// DeviceDefects name the pool's device attributes and capacities that
	// DRA's CEL cannot read, whatever the report's state. Shared by every
	// judgement of the same ClusterReports: read it, never change it.
	DeviceDefects []string
}

// Reason renders why a pool is on whole-node accounting.
func (r PoolReport) Reason() string {
	switch r.State {
	case Missing:
		return "no observation"
	case Stale:
		return fmt.Sprintf("observation stale for %s", r.Age.Round(time.Second))
	case Invalid:
		return "invalid observation: " + r.Defect
	case Usable:
	}
	return "usable"
}

// Clusters judges every pool report of every cluster at now, and returns the
// clusters with their usable observations for the scheduler, and a report
// per pool in input order.
func Clusters(objs []*v1alpha1.InferenceCluster, now time.Time, maxAge time.Duration) ([]scheduling.Cluster, []PoolReport) {
	read := make([]*ClusterReports, 0, len(objs))
	for _, o := range objs {
		read = append(read, ReadCluster(o))
	}
	return Judge(read, now, maxAge)
}

// ClusterReports are a cluster's pool reports read and checked, all but
// against the clock. Reading them is most of the cost of judging them, and
// depends on the cluster alone: a caller that keeps an unchanged cluster
// across calls can keep its reports with it, and Judge them at any time.
// They are shared, never changed.
type ClusterReports struct {
	object *v1alpha1.InferenceCluster
	pools  []poolReading
}

// Object is the cluster the reports were read of.
func (c *ClusterReports) Object() *v1alpha1.InferenceCluster { return c.object }

// ReadCluster reads a cluster's pool reports.
func ReadCluster(o *v1alpha1.InferenceCluster) *ClusterReports {
	ready := scheduling.ClusterReady(o)
	c := &ClusterReports{object: o, pools: make([]poolReading, 0, len(o.Status.GPUPools))}
	for i := range o.Status.GPUPools {
		p := &o.Status.GPUPools[i]
		r := readPool(p)
		r.report.Cluster, r.report.ClusterReady = o.Metadata.Name, ready
		for _, d := range p.Devices {
			for _, defect := range scheduling.DeviceDefects(d) {
				r.report.DeviceDefects = append(r.report.DeviceDefects, fmt.Sprintf("devices[%s].%s", d.Name, defect))
			}
		}
		r.report.DeviceDefects = slices.Clip(r.report.DeviceDefects)
		c.pools = append(c.pools, r)
	}
	return c
}

// Judge judges the read clusters' pool reports at now, as Clusters does.
func Judge(read []*ClusterReports, now time.Time, maxAge time.Duration) ([]scheduling.Cluster, []PoolReport) {
	clusters := make([]scheduling.Cluster, 0, len(read))
	var reports []PoolReport
	for _, rc := range read {
		c := scheduling.Cluster{Object: rc.object, Observed: make(map[string]*scheduling.PoolObservation, len(rc.pools))}
		for _, r := range rc.pools {
			obs, rep := r.at(now, maxAge)
			if obs != nil {
				if _, dup := c.Observed[rep.Pool]; !dup {
					c.Observed[rep.Pool] = obs
				}
			}
			reports = append(reports, rep)
		}
		clusters = append(clusters, c)
	}
	return clusters, reports
}

// Pool judges one pool's report at now. It returns the observation when the
// report is usable, and the verdict either way.
func Pool(p *v1alpha1.GPUPool, now time.Time, maxAge time.Duration) (*scheduling.PoolObservation, PoolReport) {
	return readPool(p).at(now, maxAge)
}

// poolReading is a pool's report read, every check that does not depend on
// the clock made, in the order Pool makes them: those before the report's
// time is compared with the clock decide the verdict whatever the time;
// those after it (defect), only for a report not from the future.
type poolReading struct {
	report  PoolReport
	decided bool
	// published is the report's time as published; observedAt as read.
	published  string
	observedAt time.Time
	// defect is the report Invalid, when a check after the clock's failed.
	defect      *PoolReport
	observation *scheduling.PoolObservation
}

func readPool(p *v1alpha1.GPUPool) poolReading {
	r := poolReading{report: PoolReport{Pool: p.Name}, decided: true}
	// The binding is read apart from the counts: they are right whatever
	// it says, so a binding that does not read costs the pool its steering,
	// never its report.
	steered, defect := poolreport.Binding(p.Binding)
	if defect != "" {
		r.report.BindingDefect = FieldBinding + ": " + defect
	}
	const missing = "missing while the pool's other observation fields are set"
	switch {
	case p.ObservedNodes == nil && p.NodesByFreeDevices == nil:
		// The agent publishes neither for a pool it has not reported on or
		// cannot observe, whether or not it stamps observedAt.
		r.report.State = Missing
		return r
	case p.ObservedAt == nil:
		r.report = invalid(r.report, FieldObservedAt, missing)
		return r
	case p.ObservedNodes == nil:
		r.report = invalid(r.report, FieldObservedNodes, missing)
		return r
	case p.NodesByFreeDevices == nil:
		r.report = invalid(r.report, FieldNodesByFreeDevices, missing)
		return r
	}

	at, ok := p.ObservedAt.(string)
	if !ok {
		r.report = invalid(r.report, FieldObservedAt, "not a string")
		return r
	}
	observedAt, err := poolreport.ParseTime(at)
	if err != nil {
		r.report = invalid(r.report, FieldObservedAt, fmt.Sprintf("%q is not an RFC 3339 time", at))
		return r
	}
	r.decided, r.published, r.observedAt = false, at, observedAt

	observedNodes, defect := poolreport.Count(p.ObservedNodes)
	if defect != "" {
		rep := invalid(r.report, FieldObservedNodes, defect)
		r.defect = &rep
		return r
	}
	read, field, defect := poolreport.Histogram(p.NodesByFreeDevices, p.Devices, observedNodes)
	if defect != "" {
		rep := invalid(r.report, field, defect)
		r.defect = &rep
		return r
	}
	buckets := make([]scheduling.Bucket, len(read))
	for i, b := range read {
		buckets[i] = scheduling.Bucket{Nodes: b.Nodes, Free: b.Free}
	}
	r.observation = &scheduling.PoolObservation{ObservedAt: observedAt, ObservedNodes: observedNodes, Buckets: buckets, Steered: steered}
	return r
}

// at judges the read report at now.
func (r poolReading) at(now time.Time, maxAge time.Duration) (*scheduling.PoolObservation, PoolReport) {
	rep := r.report
	switch {
	case r.decided:
		return nil, rep
	case r.observedAt.Sub(now) > maxAge:
		return nil, invalid(rep, FieldObservedAt, fmt.Sprintf("%s is %s in the future", r.published, r.observedAt.Sub(now).Round(time.Second)))
	case r.defect != nil:
		rep.State, rep.Defect = r.defect.State, r.defect.Defect
		return nil, rep
	}
	if age := now.Sub(r.observedAt); age > maxAge {
		rep.State, rep.Age = Stale, age
		return nil, rep
	}
	rep.State, rep.ExpiresAt = Usable, r.observedAt.Add(maxAge)
	return r.observation, rep
}

func invalid(rep PoolReport, field, defect string) PoolReport {
	rep.State, rep.Defect = Invalid, field+": "+defect
	return rep
}
