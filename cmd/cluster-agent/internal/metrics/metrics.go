// Package metrics holds the cluster agent's Prometheus metrics.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the agent's metrics, registered in their own registry.
type Metrics struct {
	// Registry holds them, with the Go runtime's and the process's.
	Registry *prometheus.Registry

	// Writes counts status writes, by kind and result (ok, conflict,
	// error).
	Writes *prometheus.CounterVec
	// Errors counts reconciles that ended with the object's condition
	// False or Unknown for a reason, by kind and reason.
	Errors *prometheus.CounterVec
	// PoolSynced is 1 for a pool whose report is published, 0 for one
	// whose Synced is False.
	PoolSynced *prometheus.GaugeVec
	// BuildSeconds is how long a pool's report took to build, by pool.
	BuildSeconds *prometheus.HistogramVec
	// NodesCounted counts nodes recounted (their objects changed) and
	// reused, by pool.
	NodesCounted *prometheus.CounterVec
	// PublishedAge is how old observedAt was when written.
	PublishedAge prometheus.Histogram
	// Proofs counts the freshness proofs' steps, by kind and step.
	Proofs *prometheus.CounterVec
	// ProofLag is how old a proven time was when it was proven.
	ProofLag prometheus.Histogram
	// Leader is 1 while this replica is the leader.
	Leader prometheus.Gauge

	// SteeringHeld is how many pods the steering gate holds, by pool.
	SteeringHeld *prometheus.GaugeVec
	// SteeringOldest is how long the oldest of them has been held, by
	// pool.
	SteeringOldest *prometheus.GaugeVec
	// SteeringDecisions counts held pods released or deleted, by pool and
	// outcome.
	SteeringDecisions *prometheus.CounterVec
}

// The outcomes of SteeringDecisions.
const (
	// OutcomePinned: released pinned to the node decided.
	OutcomePinned = "pinned"
	// OutcomeUnpinned: released unpinned, as decided (it fitted no node,
	// its claim could not be sized, its pool is not steered).
	OutcomeUnpinned = "unpinned"
	// OutcomeTimeout: released unpinned because it was held the longest
	// a pod may be.
	OutcomeTimeout = "timeout"
	// OutcomeDeleted: a pinned pod deleted, its node's devices taken by
	// another pod, for its controller to make it again.
	OutcomeDeleted = "deleted"
)

// New registers the agent's metrics. syncedAt returns the newest proven
// time (zero before the first); the sync age is measured from it, or from
// the agent's start before the first.
func New(syncedAt func() time.Time) *Metrics {
	started := time.Now()
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		Writes: counterVec("cluster_agent_status_writes_total",
			"Status writes of PoolObservations and ReplicaObservations, by kind and result (ok, conflict, error).", "kind", "result"),
		Errors: counterVec("cluster_agent_report_errors_total",
			"Reconciles whose condition the agent set False or Unknown for a reason, by kind and reason.", "kind", "reason"),
		PoolSynced: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cluster_agent_pool_synced",
			Help: "1 for a pool whose report is published (Synced True), 0 for one the agent cannot observe.",
		}, []string{"pool"}),
		BuildSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cluster_agent_pool_build_seconds",
			Help:    "Time to build a pool's report, nodes recounted included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"pool"}),
		NodesCounted: counterVec("cluster_agent_nodes_counted_total",
			"Nodes whose free devices were counted, by pool and whether they were recounted (their objects changed) or reused.", "pool", "how"),
		PublishedAge: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cluster_agent_published_observed_at_age_seconds",
			Help:    "How old observedAt was when a PoolObservation's status was written.",
			Buckets: []float64{1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300},
		}),
		Proofs: counterVec("cluster_agent_sync_proofs_total",
			"Steps of the proofs of the view's time, by kind (empty for a whole round) and step.", "kind", "step"),
		ProofLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cluster_agent_sync_proof_lag_seconds",
			Help:    "How old a proven view time was when it was proven.",
			Buckets: []float64{0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 90, 120},
		}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cluster_agent_leader",
			Help: "1 while this replica holds the leader Lease and writes statuses.",
		}),
	}
	m.SteeringHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cluster_agent_steering_held_pods",
		Help: "Pods the steering gate holds, by the pool of their modelplane.ai/pool nodeSelector; written by the leader.",
	}, []string{"pool"})
	m.SteeringOldest = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cluster_agent_steering_oldest_held_seconds",
		Help: "Seconds since the oldest pod the steering gate holds was created (held since), by pool; 0 with none held; written by the leader.",
	}, []string{"pool"})
	m.SteeringDecisions = counterVec("cluster_agent_steering_decisions_total",
		"Held pods released or deleted by the steering agent, by pool and outcome (pinned, unpinned, timeout, deleted).", "pool", "outcome")
	age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "cluster_agent_sync_age_seconds",
		Help: "Seconds since the newest time the agent's view is proven complete as of (the observedAt it would publish now); since the agent started, before the first.",
	}, func() float64 {
		at := syncedAt()
		if at.IsZero() {
			at = started
		}
		return time.Since(at).Seconds()
	})
	r.MustRegister(m.Writes, m.Errors, m.PoolSynced, m.BuildSeconds, m.NodesCounted, m.PublishedAge, m.Proofs, m.ProofLag, m.Leader, age,
		m.SteeringHeld, m.SteeringOldest, m.SteeringDecisions,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// counterVec is a counter with labels.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}
