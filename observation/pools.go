// Package observation reads what the cluster agent reports: each pool's
// observedNodes, observedAt and nodesByFreeDevices on an InferenceCluster,
// and each ModelReplica's PodsScheduled condition. It is the one place that
// knows these status field paths. A report it cannot use becomes a finding
// that names the object and the field, never a panic or an error.
package observation

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// Limits of a report, from the schema the agent publishes against.
const (
	maxBuckets       = 64
	maxFreePerBucket = 16
	maxCount         = scheduling.MaxCount
)

// The fields of a status.gpuPools[] entry that hold the agent's report. A
// reader of InferenceClusters passes them on, decoded and unjudged, in
// GPUPool's ObservedNodes, ObservedAt and NodesByFreeDevices.
const (
	FieldObservedNodes      = "observedNodes"
	FieldObservedAt         = "observedAt"
	FieldNodesByFreeDevices = "nodesByFreeDevices"
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
	observedAt, err := ParseTime(at)
	if err != nil {
		r.report = invalid(r.report, FieldObservedAt, fmt.Sprintf("%q is not an RFC 3339 time", at))
		return r
	}
	r.decided, r.published, r.observedAt = false, at, observedAt

	observedNodes, defect := count(p.ObservedNodes)
	if defect != "" {
		rep := invalid(r.report, FieldObservedNodes, defect)
		r.defect = &rep
		return r
	}
	buckets, field, defect := buckets(p, observedNodes)
	if defect != "" {
		rep := invalid(r.report, field, defect)
		r.defect = &rep
		return r
	}
	r.observation = &scheduling.PoolObservation{ObservedAt: observedAt, ObservedNodes: observedNodes, Buckets: buckets}
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

// count reads a non-negative whole number no larger than maxCount.
func count(v any) (int64, string) {
	var f float64
	switch n := v.(type) {
	case nil:
		return 0, "missing"
	case float64:
		f = n
	case int64:
		f = float64(n)
	case int:
		f = float64(n)
	default:
		return 0, fmt.Sprintf("%s is not a number", render(v))
	}
	switch {
	case f != math.Trunc(f):
		return 0, fmt.Sprintf("%v is not a whole number", f)
	case f < 0:
		return 0, fmt.Sprintf("%v is negative", f)
	case f > maxCount:
		return 0, fmt.Sprintf("%v is more than %d", f, maxCount)
	}
	return int64(f), ""
}

// render shows a value as the JSON it came from, keys in order, for a
// finding that quotes it.
func render(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// notBuckets is the defect of a histogram that is not a list of buckets.
const notBuckets = "not a list of {nodes, free} buckets"

// buckets reads and validates the histogram against the pool's devices. It
// returns the field and defect of the first problem found.
func buckets(p *v1alpha1.GPUPool, observedNodes int64) ([]scheduling.Bucket, string, string) {
	list, ok := p.NodesByFreeDevices.([]any)
	if !ok {
		return nil, FieldNodesByFreeDevices, notBuckets
	}
	if len(list) > maxBuckets {
		return nil, FieldNodesByFreeDevices, fmt.Sprintf("%d buckets, more than %d", len(list), maxBuckets)
	}
	out := make([]scheduling.Bucket, 0, len(list))
	var total int64
	for bi, v := range list {
		b, field, defect := bucket(v, p.Devices)
		if defect != "" {
			if field == "" {
				return nil, FieldNodesByFreeDevices, defect
			}
			return nil, fmt.Sprintf("%s[%d].%s", FieldNodesByFreeDevices, bi, field), defect
		}
		total += b.Nodes
		out = append(out, b)
	}
	if total > observedNodes {
		return nil, FieldNodesByFreeDevices, fmt.Sprintf("buckets hold %d nodes, more than observedNodes %d", total, observedNodes)
	}
	return out, "", ""
}

// bucket reads one bucket of the histogram. It returns the field, relative
// to the bucket (empty when the histogram as a whole is malformed), and
// defect of the first problem found.
func bucket(v any, devices []v1alpha1.Device) (scheduling.Bucket, string, string) {
	fields, isObject := v.(map[string]any)
	free, isList := fields["free"].([]any)
	if (!isObject && v != nil) || (!isList && fields["free"] != nil) {
		return scheduling.Bucket{}, "", notBuckets
	}
	nodes, defect := count(fields["nodes"])
	if defect != "" {
		return scheduling.Bucket{}, "nodes", defect
	}
	if len(free) > maxFreePerBucket {
		return scheduling.Bucket{}, "free", fmt.Sprintf("%d devices, more than %d", len(free), maxFreePerBucket)
	}
	b := scheduling.Bucket{Nodes: nodes, Free: make(map[string]int64, len(free))}
	for fi, fv := range free {
		ff, isObject := fv.(map[string]any)
		if !isObject && fv != nil {
			return scheduling.Bucket{}, "", notBuckets
		}
		// The field is named only when it is wrong: this runs for every
		// bucket of every pool of the fleet.
		field := func(sub string) string { return "free[" + strconv.Itoa(fi) + "]." + sub }
		name, _ := ff["name"].(string)
		if name == "" {
			return scheduling.Bucket{}, field("name"), "not a device name"
		}
		// The first device of a name is the one, as everywhere a pool's
		// devices are looked up by name.
		di := slices.IndexFunc(devices, func(d v1alpha1.Device) bool { return d.Name == name })
		switch {
		case di < 0:
			return scheduling.Bucket{}, field("name"), fmt.Sprintf("pool has no device %q", name)
		case !devices[di].IsDRA():
			return scheduling.Bucket{}, field("name"), fmt.Sprintf("device %q is not claimed through DRA", name)
		}
		if _, dup := b.Free[name]; dup {
			return scheduling.Bucket{}, field("name"), fmt.Sprintf("device %q is listed twice", name)
		}
		n, defect := count(ff["count"])
		if defect != "" {
			return scheduling.Bucket{}, field("count"), defect
		}
		perNode := int64(0)
		if c := devices[di].Count; c != nil {
			perNode = *c
		}
		if n > perNode {
			return scheduling.Bucket{}, field("count"), fmt.Sprintf("%d free %s is more than the %d a node has", n, name, perNode)
		}
		b.Free[name] = n
	}
	return b, "", ""
}
