package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"

	"github.com/modelplaneai/fleet-scheduler/agent"
	"github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/cluster"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/metrics"
)

// Pools writes each PoolObservation's status: the pool's report, or
// Synced False with why. It keeps each node's count between rounds and
// recounts a node only when an object it is counted from changed.
type Pools struct {
	cluster *cluster.Cluster
	writer  Writer
	proven  func() time.Time
	clock   clock.PassiveClock
	log     logr.Logger
	metrics *metrics.Metrics
	// heartbeat is how old a published observedAt may get before it is
	// published again, newer, with the same report.
	heartbeat time.Duration

	// steering, if set, says whether each pool whose spec asks for
	// steering is steered (the Steering condition and status.binding).
	steering Steering

	// mu guards state: the steerer reads the nodes' counts (SteerNodes)
	// from its own goroutine.
	mu    sync.Mutex
	state map[string]*poolState
	// changed is, by pool, when a changed report was last published: with
	// an observedAt from before the change, which it is published again
	// with as soon as a time after it is proven.
	changed map[string]time.Time
}

// Steering says whether a pool whose spec asks for steering is steered
// (docs/spec.md#steering): the pools reconciler writes what it says.
type Steering interface {
	// Status returns v1alpha1.ReasonSteered while the pool is steered,
	// and otherwise another reason of the Steering condition and a
	// message saying what to do. observed is whether the pool is
	// reported (Synced True).
	Status(pool string, observed bool) (reason, message string)
}

// poolState is what is kept of a pool between rounds.
type poolState struct {
	// key is of what its Counter was made from: the PoolObservation's
	// generation and its DeviceClasses' resourceVersions.
	key     string
	counter *agent.Counter
	// err is why no Counter could be made, with the condition's reason.
	err    error
	reason string
	nodes  map[string]*nodeState
}

// nodeState is a node's last count and the key of what it was counted
// from (cluster.NodeView).
type nodeState struct {
	key  string
	free agent.NodeFree
	err  error
	// reason is the condition's reason for err.
	reason string
}

// NewPools returns the pools' reconciler.
func NewPools(c *cluster.Cluster, w Writer, proven func() time.Time, clk clock.PassiveClock, log logr.Logger, m *metrics.Metrics, heartbeat time.Duration) *Pools {
	return &Pools{cluster: c, writer: w, proven: proven, clock: clk, log: log, metrics: m, heartbeat: heartbeat, state: map[string]*poolState{}, changed: map[string]time.Time{}}
}

// WithSteering has the reconciler write the Steering condition and
// status.binding of the pools whose spec asks for steering, as s says.
func (p *Pools) WithSteering(s Steering) *Pools {
	p.steering = s
	return p
}

// Reconcile reconciles every PoolObservation once. One that cannot be
// written is retried on the next round; it never stops the others.
func (p *Pools) Reconcile(ctx context.Context) {
	proven := p.proven()
	seen := map[string]bool{}
	for _, u := range p.cluster.PoolObservations() {
		seen[u.GetName()] = true
		if err := p.reconcile(ctx, u, proven); err != nil {
			p.log.Info("Cannot write the status of a PoolObservation; retrying", "poolObservation", u.GetName(), "error", err.Error())
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for name := range p.state {
		if !seen[name] {
			delete(p.state, name)
			delete(p.changed, name)
			p.metrics.PoolSynced.DeleteLabelValues(name)
		}
	}
}

// reconcile computes one pool's status and writes it when it changed or
// when its observedAt is a heartbeat old.
func (p *Pools) reconcile(ctx context.Context, u *unstructured.Unstructured, proven time.Time) error {
	name := u.GetName()
	started := p.clock.Now()
	want, reason, err := p.status(ctx, u, proven)
	p.metrics.BuildSeconds.WithLabelValues(name).Observe(p.clock.Since(started).Seconds())
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		p.metrics.PoolSynced.WithLabelValues(name).Set(0)
		p.metrics.Errors.WithLabelValues(v1alpha1.KindPoolObservation, reason).Inc()
		p.log.V(1).Info("Cannot observe a pool", "poolObservation", name, "reason", reason, "error", err.Error())
		return p.write(ctx, u, p.withSteering(u, failed(u, reason, err), false))
	}
	p.metrics.PoolSynced.WithLabelValues(name).Set(1)
	if want == nil {
		// Nothing is proven yet: no report can say as of when it is.
		return nil
	}
	return p.write(ctx, u, p.withSteering(u, want, true))
}

// withSteering adds to the status what steering says of the pool when its
// spec asks for steering: binding Steered and Steering True while it is
// steered, Steering False with why otherwise. A spec that does not ask
// for it gets neither (write removes a Steering condition left over).
func (p *Pools) withSteering(u *unstructured.Unstructured, s *v1alpha1.PoolObservationStatus, observed bool) *v1alpha1.PoolObservationStatus {
	if p.steering == nil || !SteeringEnabled(u) {
		return s
	}
	reason, msg := p.steering.Status(u.GetName(), observed)
	c := metav1.Condition{Type: v1alpha1.ConditionSteering, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: u.GetGeneration()}
	if reason == v1alpha1.ReasonSteered {
		c.Status = metav1.ConditionTrue
		s.Binding = v1alpha1.BindingSteered
	}
	s.Conditions = append(s.Conditions, c)
	return s
}

// SteeringEnabled is whether the PoolObservation's spec asks for
// steering.
func SteeringEnabled(u *unstructured.Unstructured) bool {
	v, _, _ := unstructured.NestedString(u.Object, "spec", "steering")
	return v1alpha1.Steering(v) == v1alpha1.SteeringEnabled
}

// StepDown writes, for each pool this replica reported steered, Steering
// False (v1alpha1.ReasonAgentStopped) and no binding: called as the agent
// shuts down while it still leads, so that no report says Steered while
// no agent holds the pool's pods. The next leader writes its own.
func (p *Pools) StepDown(ctx context.Context, message string) {
	for _, u := range p.cluster.PoolObservations() {
		have, err := cluster.PoolObservationOf(u)
		if err != nil || have.Status.Binding == "" && !meta.IsStatusConditionTrue(have.Status.Conditions, v1alpha1.ConditionSteering) {
			continue
		}
		next := have.Status
		next.Binding = ""
		meta.SetStatusCondition(&next.Conditions, metav1.Condition{
			Type: v1alpha1.ConditionSteering, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAgentStopped,
			Message: message, ObservedGeneration: u.GetGeneration(), LastTransitionTime: metav1.NewTime(p.clock.Now()),
		})
		if err := p.writer.WriteStatus(ctx, v1alpha1.PoolObservationResource, u, &next); err != nil {
			p.log.Info("Cannot write that the pool is no longer steered", "poolObservation", u.GetName(), "error", err.Error())
		}
	}
}

// status computes the pool's status: its report as of proven, or an error
// (naming the object and the field) with the condition's reason. A nil
// status and no error: nothing is proven yet.
func (p *Pools) status(ctx context.Context, u *unstructured.Unstructured, proven time.Time) (*v1alpha1.PoolObservationStatus, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, counted, reason, err := p.count(ctx, u, true)
	if err != nil {
		return nil, reason, err
	}
	if proven.IsZero() {
		return nil, "", nil
	}
	r, err := st.counter.Report(counted, proven)
	if err != nil {
		return nil, v1alpha1.ReasonCannotCount, fmt.Errorf("PoolObservation %s: %w", u.GetName(), err)
	}
	return reportStatus(u, r), "", nil
}

// SteerNode is a schedulable node of a pool as the steerer decides on it:
// its free devices, as the pool's report counts them, and the key of what
// they were counted from (cluster.NodeView).
type SteerNode struct {
	agent.SteerNode

	Key string
}

// SteerNodes returns the pool's schedulable nodes (those its report
// counts) with their free devices now, counting again the nodes whose
// objects changed since they were counted, in the order of the pool's DRA
// devices; an error, with the Synced condition's reason, when the pool
// cannot be counted.
func (p *Pools) SteerNodes(ctx context.Context, u *unstructured.Unstructured) ([]SteerNode, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, counted, reason, err := p.count(ctx, u, false)
	if err != nil {
		return nil, reason, err
	}
	out := make([]SteerNode, 0, len(counted))
	for _, n := range counted {
		if n.LeftOut != "" {
			continue
		}
		free := make([]int64, len(n.Free))
		for i, f := range n.Free {
			free[i] = f.Count
		}
		out = append(out, SteerNode{SteerNode: agent.SteerNode{Name: n.Node, Free: free}, Key: st.nodes[n.Node].key})
	}
	return out, "", nil
}

// count counts the pool's nodes, again only those whose objects changed,
// and returns the pool's state and every node's count; an error, with the
// Synced condition's reason, when it cannot. record is whether the nodes
// counted go to the metrics: a report's rounds do, steering's do not. The
// caller holds p.mu.
func (p *Pools) count(ctx context.Context, u *unstructured.Unstructured, record bool) (*poolState, []agent.NodeFree, string, error) {
	po, err := cluster.PoolObservationOf(u)
	if err != nil {
		return nil, nil, v1alpha1.ReasonInvalidSpec, err
	}
	pool, err := poolOf(po)
	if err != nil {
		return nil, nil, v1alpha1.ReasonInvalidSpec, fmt.Errorf("PoolObservation %s: %w", po.Name, err)
	}
	st := p.poolState(po, pool)
	if st.err != nil {
		return nil, nil, st.reason, st.err
	}

	var counted []agent.NodeFree
	seen := map[string]bool{}
	recounted := 0
	for _, n := range p.cluster.Nodes() {
		if !st.counter.Selects(n) {
			continue
		}
		seen[n.Name] = true
		nv, key := p.cluster.NodeView(n)
		ns := st.nodes[n.Name]
		if ns == nil || ns.key != key {
			ns = &nodeState{key: key}
			if err := checkAllocations(nv); err != nil {
				ns.err, ns.reason = fmt.Errorf("PoolObservation %s: %w", po.Name, err), v1alpha1.ReasonInvalidObject
			} else if ns.free, err = st.counter.Node(ctx, nv); err != nil {
				ns.err, ns.reason = fmt.Errorf("PoolObservation %s: %w", po.Name, err), v1alpha1.ReasonCannotCount
			}
			if ctx.Err() != nil {
				// Cancelled, not failed: count it again next time.
				return nil, nil, "", ctx.Err()
			}
			st.nodes[n.Name] = ns
			recounted++
		}
		if ns.err != nil {
			return nil, nil, ns.reason, ns.err
		}
		counted = append(counted, ns.free)
	}
	for name := range st.nodes {
		if !seen[name] {
			delete(st.nodes, name)
		}
	}
	if record {
		p.metrics.NodesCounted.WithLabelValues(po.Name, "recounted").Add(float64(recounted))
		p.metrics.NodesCounted.WithLabelValues(po.Name, "reused").Add(float64(len(counted) - recounted))
	}
	return st, counted, "", nil
}

// poolState returns the pool's kept state, made anew when the pool's spec
// or any of its DeviceClasses changed.
func (p *Pools) poolState(po *v1alpha1.PoolObservation, pool agent.Pool) *poolState {
	classes := p.cluster.DeviceClasses()
	byName := map[string]string{}
	for _, c := range classes {
		byName[c.Name] = c.ResourceVersion
	}
	var key strings.Builder
	fmt.Fprintf(&key, "%d", po.Generation)
	var missing error
	for i, d := range pool.Devices {
		if !d.IsDRA() {
			continue
		}
		rv, ok := byName[d.DeviceClassName]
		fmt.Fprintf(&key, "|%s@%s", d.DeviceClassName, rv)
		if !ok && d.DeviceClassName != "" && missing == nil {
			missing = fmt.Errorf("PoolObservation %s: spec.devices[%d].deviceClassName: the cluster has no DeviceClass %q", po.Name, i, d.DeviceClassName)
		}
	}
	if st := p.state[po.Name]; st != nil && st.key == key.String() {
		return st
	}
	st := &poolState{key: key.String(), nodes: map[string]*nodeState{}}
	p.state[po.Name] = st
	if missing != nil {
		st.err, st.reason = missing, v1alpha1.ReasonDeviceClassNotFound
		return st
	}
	c, err := agent.NewCounter(pool, classes)
	if err != nil {
		st.reason = v1alpha1.ReasonInvalidSpec
		if strings.Contains(err.Error(), ": DeviceClass ") {
			st.reason = v1alpha1.ReasonInvalidObject
		}
		st.err = fmt.Errorf("PoolObservation %s: spec: %w", po.Name, err)
		return st
	}
	st.counter = c
	return st
}

// poolOf reads the pool of a PoolObservation.
func poolOf(po *v1alpha1.PoolObservation) (agent.Pool, error) {
	pool := agent.Pool{Name: po.Name, Devices: po.Spec.Devices, Tolerations: po.Spec.Tolerations}
	if len(po.Spec.NodeSelector) > 0 {
		sel, err := labels.ValidatedSelectorFromSet(po.Spec.NodeSelector)
		if err != nil {
			return agent.Pool{}, fmt.Errorf("spec.nodeSelector: %w", err)
		}
		pool.Nodes = sel
	}
	return pool, nil
}

// reportStatus is the status publishing the report, Synced True.
func reportStatus(u *unstructured.Unstructured, r agent.Report) *v1alpha1.PoolObservationStatus {
	at := metav1.NewTime(r.ObservedAt)
	buckets := r.NodesByFreeDevices
	s := &v1alpha1.PoolObservationStatus{ObservedNodes: &r.ObservedNodes, ObservedAt: &at, NodesByFreeDevices: &buckets, Devices: r.Devices}
	schedulable := int64(0)
	for _, b := range buckets {
		schedulable += b.Nodes
	}
	msg := fmt.Sprintf("%d of %d nodes can take a new pod", schedulable, r.ObservedNodes)
	if len(r.LeftOut) > 0 {
		names := slices.Sorted(maps.Keys(r.LeftOut))
		parts := make([]string, 0, 5)
		for _, n := range names[:min(5, len(names))] {
			parts = append(parts, n+": "+r.LeftOut[n])
		}
		if len(names) > 5 {
			parts = append(parts, fmt.Sprintf("%d more", len(names)-5))
		}
		msg += "; left out: " + strings.Join(parts, ", ")
	}
	s.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionSynced, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonObserved, Message: msg, ObservedGeneration: u.GetGeneration()}}
	return s
}

// failed is the status of a pool the agent cannot observe: Synced False
// with why, and none of the report's fields.
func failed(u *unstructured.Unstructured, reason string, err error) *v1alpha1.PoolObservationStatus {
	return &v1alpha1.PoolObservationStatus{Conditions: []metav1.Condition{{
		Type: v1alpha1.ConditionSynced, Status: metav1.ConditionFalse, Reason: reason, Message: err.Error(), ObservedGeneration: u.GetGeneration(),
	}}}
}

// write writes the status when it differs from the object's, or when a
// newer time is proven and either the object's observedAt is a heartbeat
// old or it is from before the report last changed (a changed report is
// published at once, with the newest time proven then, and again with the
// first proven after the change: the function counts a replica bound
// before observedAt as in the report). It never writes an observedAt older
// than the object's: after a leader hand-over, this replica's proven time
// may be behind the last leader's, and its report is then not proven as of
// that time yet.
func (p *Pools) write(ctx context.Context, u *unstructured.Unstructured, want *v1alpha1.PoolObservationStatus) error {
	have, err := cluster.PoolObservationOf(u)
	if err != nil {
		// The whole object could not be read; so the status is rewritten.
		have = &v1alpha1.PoolObservation{}
	}
	old := have.Status
	if want.ObservedAt != nil && old.ObservedAt != nil && want.ObservedAt.Before(old.ObservedAt) {
		p.log.V(1).Info("Not publishing: this replica's view is proven only as of an older time than the published report's", "poolObservation", u.GetName(), "proven", want.ObservedAt.UTC(), "published", old.ObservedAt.UTC())
		return nil
	}
	name := u.GetName()
	same := sameReport(old, *want)
	if same {
		if want.ObservedAt == nil || !old.ObservedAt.Before(want.ObservedAt) {
			return nil
		}
		changed, ok := p.changed[name]
		catchUp := ok && !old.ObservedAt.After(changed) && want.ObservedAt.After(changed)
		if !catchUp && p.clock.Since(old.ObservedAt.Time) < p.heartbeat {
			return nil
		}
	}
	// have was decoded anew from the cache: it is this call's to change.
	next := &old
	next.ObservedNodes, next.ObservedAt, next.NodesByFreeDevices = want.ObservedNodes, want.ObservedAt, want.NodesByFreeDevices
	next.Binding, next.Devices = want.Binding, want.Devices
	for _, c := range want.Conditions {
		c.LastTransitionTime = metav1.NewTime(p.clock.Now())
		meta.SetStatusCondition(&next.Conditions, c)
	}
	if meta.FindStatusCondition(want.Conditions, v1alpha1.ConditionSteering) == nil {
		meta.RemoveStatusCondition(&next.Conditions, v1alpha1.ConditionSteering)
	}
	if err := p.writer.WriteStatus(ctx, v1alpha1.PoolObservationResource, u, next); err != nil {
		return err
	}
	if same {
		delete(p.changed, name)
	} else {
		p.changed[name] = p.clock.Now()
	}
	observedAt := "none"
	if want.ObservedAt != nil {
		p.metrics.PublishedAge.Observe(p.clock.Since(want.ObservedAt.Time).Seconds())
		observedAt = want.ObservedAt.UTC().Format(time.RFC3339Nano)
	}
	p.log.V(1).Info("Published a pool's status", "poolObservation", name, "observedAt", observedAt, "changed", !same)
	return nil
}

// sameReport is whether two statuses publish the same report and
// condition, whatever their observedAt and transition times.
func sameReport(a, b v1alpha1.PoolObservationStatus) bool {
	if !equality.Semantic.DeepEqual(a.ObservedNodes, b.ObservedNodes) || !equality.Semantic.DeepEqual(a.NodesByFreeDevices, b.NodesByFreeDevices) || a.Binding != b.Binding ||
		!slices.Equal(a.Devices, b.Devices) {
		return false
	}
	if (meta.FindStatusCondition(a.Conditions, v1alpha1.ConditionSteering) == nil) != (meta.FindStatusCondition(b.Conditions, v1alpha1.ConditionSteering) == nil) {
		return false
	}
	if (a.ObservedAt == nil) != (b.ObservedAt == nil) {
		return false
	}
	for _, c := range b.Conditions {
		have := meta.FindStatusCondition(a.Conditions, c.Type)
		if have == nil || have.Status != c.Status || have.Reason != c.Reason || have.Message != c.Message || have.ObservedGeneration != c.ObservedGeneration {
			return false
		}
	}
	return true
}
