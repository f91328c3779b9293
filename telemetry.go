package main

import (
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/compose"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/internal/metrics"
	"github.com/modelplaneai/fleet-scheduler/internal/plan"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// telemetry is what a server tells on-call of its calls
// (docs/operations.md): a log line per call, a line per invalid pool
// report once per version of its cluster, and the metrics. The zero
// telemetry logs nothing and counts nothing.
type telemetry struct {
	log logging.Logger
	// ledger is whether the log has the per-pool ledger of each call
	// (--debug): building it costs a line per pool.
	ledger bool
	// metrics are nil when the server exports none.
	metrics *metrics.Metrics

	mu sync.Mutex
	// warned is, by cluster and pool, the cluster's resourceVersion and
	// the defect last logged: an agent's report of a new version comes
	// with a new resourceVersion of its cluster.
	warned map[[2]string]string
}

// summary is what one call did, filled in as it goes.
type summary struct {
	req   *fnv1.RunFunctionRequest
	xr    *v1alpha1.ModelDeployment
	fleet *fleet.Fleet
	// now is the call's time, and maxAge its observationMaxAge.
	now    time.Time
	maxAge time.Duration
	// observed are the composed resources the request observed.
	observed map[string]*fnv1.Resource
	// planned is a call that planned, and outcome what it decided.
	planned bool
	outcome plan.Outcome
}

// name is the XR's namespace/name: as read, or as the request carries it
// when the call failed before reading it.
func (s *summary) name() string {
	if s.xr != nil {
		return s.xr.Metadata.Namespace + "/" + s.xr.Metadata.Name
	}
	meta := s.req.GetObserved().GetComposite().GetResource().GetFields()["metadata"].GetStructValue().GetFields()
	ns, name := meta["namespace"].GetStringValue(), meta["name"].GetStringValue()
	if name == "" {
		return ""
	}
	return ns + "/" + name
}

// Log line keys and outcomes (docs/operations.md#the-log).
const (
	outcomeAsked           = "asked"
	outcomePlaced          = "placed"
	outcomeNoClusters      = "noClusters"
	outcomeInvalidSelector = "invalidSelector"
	outcomeFatal           = "fatal"
	outcomeError           = "error"
)

// called logs a call and counts it. err is the call's error, for an
// error or Fatal result; rsp is nil for an error.
func (t *telemetry) called(s *summary, rsp *fnv1.RunFunctionResponse, err error, took time.Duration, at time.Time) {
	if t == nil {
		return
	}
	kv := []any{}
	if xr := s.name(); xr != "" {
		kv = append(kv, "xr", xr)
	}
	result, outcome := metrics.OK, outcomeAsked
	switch {
	case rsp == nil:
		result, outcome = metrics.Error, outcomeError
	case err != nil:
		result, outcome = metrics.Fatal, outcomeFatal
	case s.planned:
		switch s.outcome.Kind {
		case plan.NoClusters:
			outcome = outcomeNoClusters
		case plan.InvalidSelector:
			outcome = outcomeInvalidSelector
		case plan.Placed:
			outcome = outcomePlaced
		}
	}
	kv = append(kv, "outcome", outcome)
	rec := metrics.Call{Result: result, Duration: took, OnlyAsked: outcome == outcomeAsked, At: at}
	if s.planned && err == nil {
		n := count(s, rsp)
		kv = append(kv, "wanted", n.wanted, "placed", n.placed, "kept", n.kept, "dropped", n.dropped,
			"replaced", n.replaced, "unplaced", n.unplaced)
		if n.reason != "" {
			kv = append(kv, "reason", n.reason)
		}
		kv = append(kv, "wholeNode", wholeNodeByReason(s.fleet.Pools), "assumed", s.outcome.Assumed)
		if s.xr != nil {
			rec.Deployment = s.xr.Metadata.Namespace + "/" + s.xr.Metadata.Name
			rec.Unplaced, rec.Replaced = n.unplaced, n.replaced
			rec.PlacedAnew, rec.BeyondWholeNode = beyondWholeNode(s.outcome)
			if t.metrics != nil {
				rec.Pools, rec.Free = pools(s), free(s)
			}
		}
	}
	if err != nil {
		kv = append(kv, "error", err.Error())
	}
	kv = append(kv, "duration", took.String())
	t.logger().Info("Called", kv...)
	if s.planned && err == nil {
		t.warnInvalid(s.fleet)
		if t.ledger {
			t.logLedger(s)
		}
	}
	if t.metrics != nil {
		t.metrics.Record(rec)
	}
}

// counts are a planned call's replicas, as its log line counts them.
type counts struct {
	wanted                                    int64
	placed, kept, dropped, replaced, unplaced int
	reason                                    string
}

// count counts what the call composed of its plan (or of what it kept, for
// an outcome without one): placed are the
// ModelReplicas the response composes, kept those of them it did not
// place anew, dropped those it observed and no longer composes, and the
// reason the first of the shortfall's.
func count(s *summary, rsp *fnv1.RunFunctionResponse) counts {
	var n counts
	desired := rsp.GetDesired().GetResources()
	for k := range desired {
		if compose.IsReplicaKey(k) {
			n.placed++
		}
	}
	for k := range s.observed {
		if _, ok := desired[k]; !ok && compose.IsReplicaKey(k) {
			n.dropped++
		}
	}
	p := s.outcome.Plan
	if s.outcome.Kind != plan.Placed || p == nil {
		// Nothing new placed: the deployment is short of what it asks for
		// by what the response keeps.
		n.wanted = max(s.xr.Spec.Replicas, 0)
		n.kept = n.placed
		n.unplaced = max(int(n.wanted)-n.placed, 0)
		return n
	}
	fresh := 0
	for _, r := range p.Replicas {
		if r.New {
			fresh++
		}
	}
	n.wanted, n.replaced = p.Wanted, len(p.Moves)
	n.kept = max(n.placed-fresh, 0)
	n.unplaced = max(int(p.Wanted)-n.placed, 0)
	if p.Shortfall != nil && len(p.Shortfall.Clusters) > 0 {
		v := p.Shortfall.Clusters[0]
		n.reason = v.Cluster + ": " + v.Reason.String()
	}
	return n
}

// beyondWholeNode names (cluster/index) the replicas the plan places
// anew, and of them those whole-node accounting would have left unplaced:
// the last, as the plan sorts them, as many as it composes beyond whole
// nodes. Which ones is a convention; that the same plan names the same
// ones is what counting each placement once needs.
func beyondWholeNode(o plan.Outcome) (anew, beyond []string) {
	if o.Plan == nil {
		return nil, nil
	}
	for _, r := range o.Plan.Replicas {
		if r.New {
			anew = append(anew, r.Cluster+"/"+strconv.Itoa(r.Index))
		}
	}
	return anew, anew[max(len(anew)-o.BeyondWholeNode, 0):]
}

// wholeNodeByReason counts the pools of Ready clusters on whole-node
// accounting, by why.
func wholeNodeByReason(reports []observation.PoolReport) map[string]int {
	out := map[string]int{}
	for _, r := range reports {
		if reason := wholeNodeReason(r); reason != "" && r.ClusterReady {
			out[reason]++
		}
	}
	return out
}

// wholeNodeReason is the metrics' reason a pool is on whole-node
// accounting; empty for a usable report.
func wholeNodeReason(r observation.PoolReport) string {
	switch r.State {
	case observation.Missing:
		return metrics.ReasonMissing
	case observation.Stale:
		return metrics.ReasonStale
	case observation.Invalid:
		return metrics.ReasonInvalid
	case observation.Usable:
	}
	return ""
}

// pools are the pools a call read, as the metrics count them, with the
// time of each report that read as one.
func pools(s *summary) iter.Seq[metrics.Pool] {
	return func(yield func(metrics.Pool) bool) {
		clusters := make(map[string]scheduling.Cluster, len(s.fleet.Clusters))
		for _, c := range s.fleet.Clusters {
			if c.Object != nil {
				clusters[c.Object.Metadata.Name] = c
			}
		}
		for _, r := range s.fleet.Pools {
			if !yield(poolOf(s, r, clusters[r.Cluster])) {
				return
			}
		}
	}
}

// poolOf is a pool as the metrics count it, of its cluster c.
func poolOf(s *summary, r observation.PoolReport, c scheduling.Cluster) metrics.Pool {
	p := metrics.Pool{Cluster: r.Cluster, Pool: r.Pool, WholeNode: wholeNodeReason(r), Ready: r.ClusterReady}
	switch r.State {
	case observation.Usable:
		p.ObservedAt = r.ExpiresAt.Add(-s.maxAge)
		if o := c.Observed[r.Pool]; o != nil && c.Object != nil {
			p.Free = deviceCounts(o, c.Object.Status.GPUPools, r.Pool)
		}
	case observation.Stale:
		p.ObservedAt = s.now.Add(-r.Age)
	case observation.Missing, observation.Invalid:
	}
	return p
}

// deviceCounts are, for each device of the pool that a report counts
// (claimed through DRA; the first of a name, as the report was read), a
// usable report's free devices over all its nodes, 0 where no bucket has
// one free, and how many the nodes it observed have (each the count its
// pool's entry of gpuPools gives), sorted by name.
func deviceCounts(o *scheduling.PoolObservation, gpuPools []v1alpha1.GPUPool, pool string) []metrics.DeviceCount {
	var devices []v1alpha1.Device
	if i := slices.IndexFunc(gpuPools, func(p v1alpha1.GPUPool) bool { return p.Name == pool }); i >= 0 {
		devices = gpuPools[i].Devices
	}
	out := make([]metrics.DeviceCount, 0, len(devices))
	for _, d := range devices {
		if !d.IsDRA() || slices.ContainsFunc(out, func(c metrics.DeviceCount) bool { return c.Device == d.Name }) {
			continue
		}
		c := metrics.DeviceCount{Device: d.Name}
		for _, b := range o.Buckets {
			c.Count += b.Nodes * b.Free[d.Name]
		}
		if d.Count != nil {
			// Held at the bound every count is, as the scheduler holds it:
			// a count of 2^62 would overflow the product.
			c.Total = o.ObservedNodes * min(max(*d.Count, 0), scheduling.MaxCount)
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b metrics.DeviceCount) int { return strings.Compare(a.Device, b.Device) })
	return out
}

// free is, of each pool the call built a ledger of, the most devices of
// each kind free on one node once it placed its replicas, summed by GPU
// model only when the metrics are scraped.
func free(s *summary) iter.Seq[metrics.PoolFree] {
	if s.outcome.Plan == nil || len(s.outcome.Plan.Capacity) == 0 {
		return nil
	}
	return func(yield func(metrics.PoolFree) bool) {
		for _, c := range s.outcome.Plan.Capacity {
			if !yield(metrics.PoolFree{Cluster: c.Pool.Cluster, Pool: c.Pool.Pool, Devices: c.Devices, Largest: c.Largest}) {
				return
			}
		}
	}
}

// warnInvalid logs each invalid pool report the first time a call reads
// it, and again only once its cluster has changed and it is still invalid.
func (t *telemetry) warnInvalid(fl *fleet.Fleet) {
	if fl == nil {
		return
	}
	var versions map[string]string
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range fl.Pools {
		k := [2]string{r.Cluster, r.Pool}
		if r.State != observation.Invalid {
			delete(t.warned, k)
			continue
		}
		if versions == nil {
			versions = make(map[string]string, len(fl.Clusters))
			for _, c := range fl.Clusters {
				versions[c.Object.Metadata.Name] = c.Object.Metadata.ResourceVersion
			}
		}
		v := versions[r.Cluster] + "\x00" + r.Defect
		if t.warned[k] == v {
			continue
		}
		if t.warned == nil {
			t.warned = map[[2]string]string{}
		}
		t.warned[k] = v
		t.logger().Info("Warning: invalid pool report, using whole-node accounting",
			"cluster", r.Cluster, "pool", r.Pool, "resourceVersion", versions[r.Cluster], "defect", r.Defect)
	}
	// A pool this fleet does not have (its cluster deleted, or the pool
	// removed) is forgotten, so that what is kept stays the fleet's size.
	// A call that read no cluster says nothing of which are gone.
	if len(t.warned) == 0 || len(fl.Clusters) == 0 {
		return
	}
	pools := make(map[[2]string]bool, len(fl.Pools))
	for _, r := range fl.Pools {
		pools[[2]string{r.Cluster, r.Pool}] = true
	}
	maps.DeleteFunc(t.warned, func(k [2]string, _ string) bool { return !pools[k] })
}

// logLedger logs, at debug, what each pool had left once the call placed
// its replicas.
func (t *telemetry) logLedger(s *summary) {
	if s.outcome.Plan == nil {
		return
	}
	xr := s.xr.Metadata.Namespace + "/" + s.xr.Metadata.Name
	for _, c := range s.outcome.Plan.Capacity {
		groups := make([]string, 0, len(c.Groups))
		for _, g := range c.Groups {
			free := make([]string, len(g.Free))
			for j, n := range g.Free {
				free[j] = fmt.Sprintf("%s=%d", c.Devices[j], n)
			}
			groups = append(groups, fmt.Sprintf("%dx[%s]", g.Nodes, strings.Join(free, ",")))
		}
		t.logger().Debug("Pool ledger", "xr", xr, "cluster", c.Pool.Cluster, "pool", c.Pool.Pool,
			"wholeNode", c.WholeNode, "steered", c.Steered, "saturated", c.Saturated, "free", strings.Join(groups, " "))
	}
}

// capacity is how much the telemetry reads of what each pool had left
// once a call placed: the debug log's ledger, the metrics' largest free
// shapes, or nothing.
func (t *telemetry) capacity() scheduling.Capacity {
	switch {
	case t == nil:
		return scheduling.CapacityNone
	case t.ledger:
		return scheduling.CapacityGroups
	case t.metrics != nil:
		return scheduling.CapacityLargest
	}
	return scheduling.CapacityNone
}

// comparesWholeNode is whether calls say what whole-node accounting would
// have left unplaced: for the metrics, the only reader of it.
func (t *telemetry) comparesWholeNode() bool {
	return t != nil && t.metrics != nil
}

func (t *telemetry) logger() logging.Logger {
	if t.log == nil {
		return logging.NewNopLogger()
	}
	return t.log
}
