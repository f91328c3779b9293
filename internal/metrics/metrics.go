// Package metrics is what the function tells Prometheus, prefixed
// fleet_scheduler_: its calls by result and their duration; the replicas
// whole-node accounting would have left unplaced; by deployment,
// the replicas it could not place and its re-placements; by pool, how old
// its report is, how it is accounted, its free and all its devices as
// reported, and the most devices of one name (a pool's device, a GPU model as a rule)
// free on one node. docs/operations.md#metrics lists each with its cardinality.
//
// A call records what it decided (Record); the series of a deployment or a
// pool that no call has read for StaleAfter are dropped at the next scrape,
// so that a deployment deleted, or served by another function pod, leaves
// no value behind that stays forever.
package metrics

import (
	"cmp"
	"iter"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StaleAfter is how long a deployment's or a pool's series outlive the
// last call that read it. Crossplane calls every deployment at least every
// response TTL, a minute at most; a deployment not called for ten is
// deleted, paused, or served by another pod.
const StaleAfter = 10 * time.Minute

// Result is how a call ended.
type Result string

// The results of a call.
const (
	// OK is a response that is not Fatal.
	OK Result = "ok"
	// Fatal is a response with a Fatal result: Crossplane applies nothing.
	Fatal Result = "fatal"
	// Error is a call that returned an error, its caller gone.
	Error Result = "error"
)

// How a pool is accounted, the mode label of fleet_scheduler_pool_accounting.
const (
	ModeFreeDevices = "free-devices"
	ModeWholeNode   = "whole-node"
)

// The reasons a pool is on whole-node accounting.
const (
	ReasonMissing = "missing"
	ReasonStale   = "stale"
	ReasonInvalid = "invalid"
)

// Call is what one call decided, as the metrics count it.
type Call struct {
	Result   Result
	Duration time.Duration
	// OnlyAsked is a call's first iteration, which only asked for the
	// fleet: counted, its duration (microseconds) not observed.
	OnlyAsked bool
	// At is when the call ended.
	At time.Time

	// Deployment is the XR's namespace/name; empty when the call did not
	// read its fleet (it asked for it, or was Fatal), and then nothing
	// below is recorded.
	Deployment string
	// Unplaced is how many wanted replicas it did not compose, and
	// Replaced how many it re-placed.
	Unplaced, Replaced int
	// PlacedAnew names (cluster/index) the replicas it placed anew, and
	// BeyondWholeNode those of them whole-node accounting would have left
	// unplaced. Until Crossplane shows a replica composed, every call
	// places it anew: it is counted by the first, and again only once a
	// call no longer placed it anew.
	PlacedAnew, BeyondWholeNode []string
	// Pools are the pools it read, and Free what those it built a ledger
	// of had left; no Free when it built none (it placed and re-placed
	// nothing). Each is read once, within Record: a call yields them as it
	// reads its own, so that telling them costs no copy.
	Pools iter.Seq[Pool]
	Free  iter.Seq[PoolFree]
}

// Pool is one pool as a call read it.
type Pool struct {
	Cluster, Pool string
	// WholeNode is the reason the pool is on whole-node accounting, one of
	// the Reason constants; empty for a usable report. Only the pools of
	// Ready clusters count.
	WholeNode string
	Ready     bool
	// ObservedAt is its report's time; zero when it has none that reads.
	ObservedAt time.Time
	// Free are its free devices of each kind over all its nodes, as its
	// usable report says; nil when it has none. Record keeps the slice:
	// never change it.
	Free []DeviceCount
}

// DeviceCount is a count of devices of one name: Count free of Total.
type DeviceCount struct {
	Device       string
	Count, Total int64
}

// PoolFree is what a pool had left once a call placed its replicas.
type PoolFree struct {
	Cluster, Pool string
	// Largest is the most devices of each device name free on one of its
	// nodes: Largest[i] of Devices[i]. Record copies Largest, and keeps
	// Devices: never change it.
	Devices []string
	Largest []int64
}

// Metrics are a server's metrics. Register them on its registry.
type Metrics struct {
	calls    *prometheus.CounterVec
	duration prometheus.Histogram
	beyond   prometheus.Counter

	unplaced, lastCall, replacements *prometheus.Desc
	wholeNode, reportAge, largest    *prometheus.Desc
	poolFree, poolDevices            *prometheus.Desc
	accounting, assumed              *prometheus.Desc

	now  func() time.Time
	held func(time.Time) int

	mu          sync.Mutex
	deployments map[string]*deployment
	pools       map[[2]string]*pool
}

type deployment struct {
	unplaced     int
	replacements int
	at           time.Time
	// beyond are the replicas counted beyond whole nodes that its last
	// call placed anew.
	beyond map[string]bool
}

type pool struct {
	wholeNode  string
	ready      bool
	observedAt time.Time
	free       []DeviceCount
	// devices and largest are kept from the last call that built a
	// ledger, and summed by model only at a scrape.
	devices   []string
	largest   []int64
	largestAt time.Time
	at        time.Time
}

// durationBuckets are the call duration histogram's buckets, in seconds:
// from a call of a small fleet (milliseconds) to Crossplane's reconcile
// timeout of two minutes, which every call of a reconcile shares.
func durationBuckets() []float64 {
	return []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 90, 120}
}

// New returns a server's metrics, read at scrape time with now. held, when
// not nil, is how many assumed placements the server holds at a time.
func New(now func() time.Time, held func(time.Time) int) *Metrics {
	const ns = "fleet_scheduler"
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "calls_total",
			Help: "RunFunction calls by result: ok, fatal (a Fatal result: Crossplane applies nothing), error (the caller had gone).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "call_duration_seconds",
			Help:    "How long a call took, of every call but a first iteration that only asks for the fleet.",
			Buckets: durationBuckets(),
		}),
		beyond: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "replicas_beyond_whole_node_total",
			Help: "Replicas calls placed that whole-node accounting would have left unplaced (what free-device accounting saved), each placement counted once, by the first call that placed it.",
		}),
		unplaced: prometheus.NewDesc(ns+"_replicas_unplaced",
			"Replicas a deployment wants that its last call on this server did not compose; 0 once placed.", []string{"deployment"}, nil),
		lastCall: prometheus.NewDesc(ns+"_deployment_last_call_timestamp_seconds",
			"When this server last answered a call of the deployment, to tell a fresh value from one another pod has since replaced.", []string{"deployment"}, nil),
		replacements: prometheus.NewDesc(ns+"_replacements_total",
			"Replicas of the deployment re-placed because their pods stayed unscheduled.", []string{"deployment"}, nil),
		wholeNode: prometheus.NewDesc(ns+"_pools_whole_node",
			"Pools of Ready clusters on whole-node accounting, by why: missing, stale or invalid report.", []string{"reason"}, nil),
		reportAge: prometheus.NewDesc(ns+"_pool_report_age_seconds",
			"How old the pool's report (its observedAt) is now.", []string{"cluster", "pool"}, nil),
		largest: prometheus.NewDesc(ns+"_largest_free_devices",
			"The most devices of a name (the pool's device, as a rule a GPU model) free on one node of any pool, once the last call that placed a replica there had placed it.", []string{"model"}, nil),
		poolFree: prometheus.NewDesc(ns+"_pool_free_devices",
			"Free devices of a kind over all the pool's nodes, as its usable report says; none for a pool on whole-node accounting.", []string{"cluster", "pool", "device"}, nil),
		poolDevices: prometheus.NewDesc(ns+"_pool_devices",
			"Devices of a kind the pool's observed nodes have (observedNodes times the device's count per node), as its usable report says; none for a pool on whole-node accounting.", []string{"cluster", "pool", "device"}, nil),
		accounting: prometheus.NewDesc(ns+"_pool_accounting",
			"1 for how the pool is accounted: free-devices (a usable report) or whole-node.", []string{"cluster", "pool", "mode"}, nil),
		assumed: prometheus.NewDesc(ns+"_assumed_placements",
			"Placements this server composed that the fleet does not show yet, charged to other deployments' calls.", nil, nil),
		now:         now,
		held:        held,
		deployments: map[string]*deployment{},
		pools:       map[[2]string]*pool{},
	}
	for _, r := range []Result{OK, Fatal, Error} {
		m.calls.WithLabelValues(string(r))
	}
	return m
}

// Record counts a call.
func (m *Metrics) Record(c Call) {
	m.calls.WithLabelValues(string(c.Result)).Inc()
	if !c.OnlyAsked {
		m.duration.Observe(c.Duration.Seconds())
	}
	if c.Deployment == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.deployments[c.Deployment]
	if d == nil {
		d = &deployment{}
		m.deployments[c.Deployment] = d
	}
	// A replica this call did not place anew was composed, or dropped:
	// placed anew later, it is another placement.
	maps.DeleteFunc(d.beyond, func(r string, _ bool) bool { return !slices.Contains(c.PlacedAnew, r) })
	for _, r := range c.BeyondWholeNode {
		if !d.beyond[r] {
			m.beyond.Inc()
		}
		if d.beyond == nil {
			d.beyond = map[string]bool{}
		}
		d.beyond[r] = true
	}
	d.unplaced, d.at = c.Unplaced, c.At
	d.replacements += c.Replaced
	if c.Pools != nil {
		for p := range c.Pools {
			s := m.pool(p.Cluster, p.Pool)
			s.wholeNode, s.ready, s.observedAt, s.free, s.at = p.WholeNode, p.Ready, p.ObservedAt, p.Free, c.At
		}
	}
	if c.Free != nil {
		for f := range c.Free {
			s := m.pool(f.Cluster, f.Pool)
			s.devices, s.largest, s.largestAt, s.at = f.Devices, append(s.largest[:0], f.Largest...), c.At, c.At
		}
	}
}

// pool is the series of a pool, new or kept. Call it with m.mu held.
func (m *Metrics) pool(cluster, name string) *pool {
	k := [2]string{cluster, name}
	s := m.pools[k]
	if s == nil {
		s = &pool{}
		m.pools[k] = s
	}
	return s
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.calls.Describe(ch)
	m.duration.Describe(ch)
	m.beyond.Describe(ch)
	for _, d := range []*prometheus.Desc{m.unplaced, m.lastCall, m.replacements, m.wholeNode, m.reportAge, m.largest, m.poolFree, m.poolDevices, m.accounting, m.assumed} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: it drops what went stale, then
// reports the rest.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.calls.Collect(ch)
	m.duration.Collect(ch)
	m.beyond.Collect(ch)
	now := m.now()
	if m.held != nil {
		ch <- prometheus.MustNewConstMetric(m.assumed, prometheus.GaugeValue, float64(m.held(now)))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	maps.DeleteFunc(m.deployments, func(_ string, d *deployment) bool { return now.Sub(d.at) > StaleAfter })
	maps.DeleteFunc(m.pools, func(_ [2]string, p *pool) bool { return now.Sub(p.at) > StaleAfter })
	for name, d := range m.deployments {
		ch <- prometheus.MustNewConstMetric(m.unplaced, prometheus.GaugeValue, float64(d.unplaced), name)
		ch <- prometheus.MustNewConstMetric(m.lastCall, prometheus.GaugeValue, float64(d.at.UnixMilli())/1000, name)
		ch <- prometheus.MustNewConstMetric(m.replacements, prometheus.CounterValue, float64(d.replacements), name)
	}
	wholeNode := map[string]int{ReasonMissing: 0, ReasonStale: 0, ReasonInvalid: 0}
	largest := map[string]int64{}
	for k, p := range m.pools {
		if p.ready && p.wholeNode != "" {
			wholeNode[p.wholeNode]++
		}
		if !p.observedAt.IsZero() {
			ch <- prometheus.MustNewConstMetric(m.reportAge, prometheus.GaugeValue, now.Sub(p.observedAt).Seconds(), k[0], k[1])
		}
		mode := ModeFreeDevices
		if p.wholeNode != "" {
			mode = ModeWholeNode
		}
		ch <- prometheus.MustNewConstMetric(m.accounting, prometheus.GaugeValue, 1, k[0], k[1], mode)
		if p.wholeNode == "" {
			for _, f := range p.free {
				ch <- prometheus.MustNewConstMetric(m.poolFree, prometheus.GaugeValue, float64(f.Count), k[0], k[1], f.Device)
				ch <- prometheus.MustNewConstMetric(m.poolDevices, prometheus.GaugeValue, float64(f.Total), k[0], k[1], f.Device)
			}
		}
		if now.Sub(p.largestAt) <= StaleAfter {
			for i, model := range p.devices[:min(len(p.devices), len(p.largest))] {
				largest[model] = max(largest[model], p.largest[i])
			}
		}
	}
	for _, reason := range slices.Sorted(maps.Keys(wholeNode)) {
		ch <- prometheus.MustNewConstMetric(m.wholeNode, prometheus.GaugeValue, float64(wholeNode[reason]), reason)
	}
	for _, model := range slices.SortedFunc(maps.Keys(largest), cmp.Compare) {
		ch <- prometheus.MustNewConstMetric(m.largest, prometheus.GaugeValue, float64(largest[model]), model)
	}
}
