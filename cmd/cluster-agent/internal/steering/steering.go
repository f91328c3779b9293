// Package steering is the cluster agent's steering (docs/spec.md#steering,
// docs/cluster-agent.md#steering): while the agent leads, it keeps the
// pools it steers on its own Pod for the admission policy, decides which
// node each claiming pod the policy holds binds to (agent.Steer, in the
// order the function's ledger charges the pods), releases each pod with
// one update that pins it there, deletes a pinned pod whose node was taken
// meanwhile, and says for each pool whether steering is in force.
package steering

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/modelplaneai/fleet-scheduler/agent"
	"github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	fsv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/cluster"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/controller"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/metrics"
)

// LabelLWSGroupKey is the label LeaderWorkerSet (v0.9) puts on every pod
// of one group, leader and workers: a hash unique to the group.
const LabelLWSGroupKey = "leaderworkerset.sigs.k8s.io/group-key"

// restoreSteering is what a PolicyNotFound or PolicyNotAsShipped message
// asks for, by how the agent was installed
// (docs/cluster-agent.md#honest-status). With the chart, only the release
// may restore them: Helm v4's uninstall leaves out an object its release
// does not own, such as one applied again by hand.
const restoreSteering = "helm upgrade the agent's release at its chart --version with --reuse-values --set steering.enabled=true " +
	"(with Helm v4 also --server-side=true --force-conflicts); where the relay's agentRelease installs it, " +
	"set steering.enabled in agentRelease.values; where it was installed from deploy/cluster-agent/, apply deploy/cluster-agent/steering/ again"

// markRetry is how long after a failed patch of its own Pod the agent
// tries again.
const markRetry = 10 * time.Second

// Config are steering's bounds and the agent's own Pod.
type Config struct {
	// Window is how often the held pods of every pool are decided, each
	// pool's together: a pod waits at most this long for the others that
	// arrive with it.
	Window time.Duration
	// MaxHold is the longest a pod is held: past it, it is released
	// unpinned, whatever else.
	MaxHold time.Duration
	// GangWait is how long a LeaderWorkerSet group's held pods wait for
	// the rest of the group (its size annotation) before those present
	// are decided.
	GangWait time.Duration
	// ReplicaWait is how long a held pod that no ReplicaObservation
	// selects waits for one before it is decided as unknown (last).
	ReplicaWait time.Duration
	// PinTimeout is how long after its release a pinned pod that is not
	// bound is counted as taking its node; past it, the pod is deleted if
	// its node no longer has its claim free.
	PinTimeout time.Duration
	// ReportPeriod is how long a claiming pod bound without the agent's
	// decision keeps its pool from being reported Steered.
	ReportPeriod time.Duration
	// PodNamespace and PodName name the agent's own Pod (the downward
	// API's POD_NAMESPACE and POD_NAME); empty when it has none.
	PodNamespace, PodName string
	// AdmissionPolicies is whether the cluster serves
	// admissionregistration.k8s.io/v1 MutatingAdmissionPolicies.
	AdmissionPolicies bool
}

// Counts gives a pool's schedulable nodes with their free devices, as its
// report counts them (controller.Pools).
type Counts interface {
	SteerNodes(ctx context.Context, u *unstructured.Unstructured) ([]controller.SteerNode, string, error)
}

// Steerer steers the pools whose spec asks for it. Reconcile and Unmark
// run on one goroutine (the leader's steering loop); Status may be called
// from another.
type Steerer struct {
	cfg     Config
	cluster *cluster.Cluster
	counts  Counts
	client  kubernetes.Interface
	clock   clock.PassiveClock
	log     logr.Logger
	metrics *metrics.Metrics
	// start starts the informers of the steering policy and its binding.
	start func()
	// changed, if set, is called when what Status says may have changed
	// other than with the cluster's objects (the pools the agent's Pod
	// lists).
	changed func()

	mu sync.Mutex // guards the fields Status reads below
	// marked are the pools the agent's Pod lists, as last written.
	marked map[string]bool
	// markErr is why the agent's Pod could not be annotated.
	markErr error
	// labels are the agent's Pod's, from the last patch of it.
	labels map[string]string
	// failed is, by pool, the last failure to release a held pod.
	failed map[string]failure
	// stopping is set once the agent shuts down (Stop).
	stopping bool

	// annotation is the value last written to the agent's Pod; nil when
	// unknown.
	annotation *string
	retryMark  time.Time
	// inflight are the pods released pinned and not yet counted on their
	// node, by UID.
	inflight map[types.UID]*inflight
	// released are the pods released, by UID, with the resourceVersion
	// they were released from: until the cache shows the release, the
	// pod is not decided again.
	released map[types.UID]string
	sizers   map[string]sizer
	replicas map[string]replica
	gauged   map[string]bool
}

// failure is a failed release.
type failure struct {
	at  time.Time
	err error
}

// inflight is a pod released pinned to a node whose claim the node's
// count does not show yet.
type inflight struct {
	namespace, name, pool, node string
	claim                       []int64
	claims                      []string // the pod's ResourceClaims' names
	gang                        string
	at                          time.Time
}

// sizer is a pool's ClaimSizer, for the generation of its spec.
type sizer struct {
	generation int64
	sizer      *agent.ClaimSizer
	err        error
}

// replica is a ReplicaObservation read, for its resourceVersion.
type replica struct {
	rv        string
	namespace string
	selectors []labels.Selector // nil for one that cannot be read or is empty
}

// New returns the steerer. start starts the informers of the steering
// policy and its binding (cluster.StartSteering); changed, if not nil, is
// called when the pools the agent's Pod lists change.
func New(cfg Config, c *cluster.Cluster, counts Counts, client kubernetes.Interface, clk clock.PassiveClock, log logr.Logger, m *metrics.Metrics, start, changed func()) *Steerer {
	return &Steerer{
		cfg: cfg, cluster: c, counts: counts, client: client, clock: clk, log: log, metrics: m, start: start, changed: changed,
		marked: map[string]bool{}, failed: map[string]failure{}, inflight: map[types.UID]*inflight{},
		released: map[types.UID]string{}, sizers: map[string]sizer{}, replicas: map[string]replica{}, gauged: map[string]bool{},
	}
}

// Run steers every window until ctx is done (leadership ends), then clears
// the pools from the agent's Pod and the steering metrics.
func (s *Steerer) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Window)
	defer t.Stop()
	defer func() {
		// Leading ended: no new pod may be held for this replica. The
		// next leader releases those held.
		stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		s.Unmark(stop)
		for pool := range s.gauged {
			s.metrics.SteeringHeld.DeleteLabelValues(pool)
			s.metrics.SteeringOldest.DeleteLabelValues(pool)
		}
		clear(s.gauged)
	}()
	for {
		s.Reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Reconcile steers once: it keeps the agent's Pod listing the pools that
// can be steered, decides and releases the held pods of each pool, and
// deletes the pinned pods whose node was taken.
func (s *Steerer) Reconcile(ctx context.Context) {
	now := s.clock.Now()
	enabled := map[string]*unstructured.Unstructured{}
	for _, u := range s.cluster.PoolObservations() {
		if controller.SteeringEnabled(u) {
			enabled[u.GetName()] = u
		}
	}
	if len(enabled) > 0 && s.start != nil {
		s.start()
	}
	s.mark(ctx, now, s.steerable(now, enabled), len(enabled) > 0)

	all := s.cluster.HeldPods()
	held := map[string][]*corev1.Pod{}
	for _, p := range all {
		if p.DeletionTimestamp != nil || s.released[p.UID] == p.ResourceVersion {
			continue
		}
		pool := p.Spec.NodeSelector[fsv1alpha1.LabelPool]
		held[pool] = append(held[pool], p)
	}
	s.forgetReleased(all)
	pinned := s.cluster.PinnedPods()

	pools := map[string]bool{}
	for pool := range held {
		pools[pool] = true
	}
	for pool := range pinned {
		pools[pool] = true
	}
	for _, f := range s.inflight {
		pools[f.pool] = true
	}
	for _, pool := range slices.Sorted(maps.Keys(pools)) {
		if ctx.Err() != nil {
			return
		}
		s.steer(ctx, now, pool, enabled[pool], held[pool], pinned[pool])
	}
	s.gauge(now, enabled, all)
}

// steer decides and releases one pool's held pods, after counting the
// pods released pinned and not yet counted as taking their nodes, and
// deleting those whose node was taken.
func (s *Steerer) steer(ctx context.Context, now time.Time, pool string, u *unstructured.Unstructured, held, pinned []*corev1.Pod) {
	if u == nil {
		why := fmt.Sprintf("no PoolObservation %s asks for steering (spec.steering %s)", pool, v1alpha1.SteeringEnabled)
		if pool == "" {
			why = "the pod has no " + fsv1alpha1.LabelPool + " nodeSelector"
		}
		s.forgetPool(pool)
		for _, p := range held {
			s.release(ctx, now, p, pool, agent.Decision{Reason: why}, metrics.OutcomeUnpinned, nil)
		}
		return
	}
	nodes, _, err := s.counts.SteerNodes(ctx, u)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		s.forgetPool(pool)
		why := fmt.Sprintf("pool %s cannot be counted: %v", pool, err)
		for _, p := range held {
			s.release(ctx, now, p, pool, agent.Decision{Reason: why}, metrics.OutcomeUnpinned, nil)
		}
		return
	}
	sz, err := s.sizer(u)
	if err != nil {
		s.forgetPool(pool)
		why := fmt.Sprintf("PoolObservation %s: spec: %v", pool, err)
		for _, p := range held {
			s.release(ctx, now, p, pool, agent.Decision{Reason: why}, metrics.OutcomeUnpinned, nil)
		}
		return
	}
	byName := make(map[string]*controller.SteerNode, len(nodes))
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	s.pins(ctx, now, pool, sz, byName, pinned)
	s.decide(ctx, now, pool, sz, nodes, held)
}

// pins takes the claims of the pods released pinned to a node, and not
// counted there yet, off their nodes' free counts, and deletes a pinned
// pod still not bound PinTimeout after its release whose node no longer
// has its claim free. A pinned pod this replica did not release (it
// started leading since) counts from when it first saw it.
func (s *Steerer) pins(ctx context.Context, now time.Time, pool string, sz *agent.ClaimSizer, nodes map[string]*controller.SteerNode, pinned []*corev1.Pod) {
	for _, p := range pinned {
		if _, ok := s.inflight[p.UID]; ok {
			continue
		}
		claims, names, missing := s.claimsOf(p)
		if missing != "" {
			continue
		}
		claim, err := sz.Size(ctx, claims...)
		if err != nil {
			continue
		}
		s.inflight[p.UID] = &inflight{namespace: p.Namespace, name: p.Name, pool: pool, node: p.Annotations[v1alpha1.AnnotationSteeredTo], claim: claim, claims: names, gang: gangOf(p), at: now}
	}
	var aged []types.UID
	for _, uid := range slices.Sorted(maps.Keys(s.inflight)) {
		f := s.inflight[uid]
		if f.pool != pool {
			continue
		}
		p := s.cluster.Pod(f.namespace, f.name)
		if p == nil || p.UID != uid || p.DeletionTimestamp != nil {
			delete(s.inflight, uid)
			continue
		}
		n := nodes[f.node]
		if n != nil && counted(n.Key, p.Namespace, f.claims) {
			delete(s.inflight, uid)
			continue
		}
		if n != nil {
			take(n.Free, f.claim, -1)
		}
		switch {
		case now.Sub(f.at) < s.cfg.PinTimeout:
		case p.Spec.NodeName != "":
			// Bound, and its node's count never showed its claims:
			// counted by now, or never (another node).
			if n != nil {
				take(n.Free, f.claim, 1)
			}
			delete(s.inflight, uid)
		default:
			aged = append(aged, uid)
		}
	}
	for _, uid := range aged {
		f := s.inflight[uid]
		n := nodes[f.node]
		if n != nil {
			// Its own claim back: does the node have it free without it?
			take(n.Free, f.claim, 1)
			if covers(n.Free, f.claim) {
				take(n.Free, f.claim, -1)
				continue
			}
		}
		p := s.cluster.Pod(f.namespace, f.name)
		delete(s.inflight, uid)
		s.delete(ctx, p, pool, f.node)
	}
}

// counted is whether a node's count was counted with every claim of the
// pod holding devices there.
func counted(key, namespace string, claims []string) bool {
	for _, c := range claims {
		if !cluster.KeyHolds(key, namespace, c) {
			return false
		}
	}
	return len(claims) > 0
}

// delete deletes a pinned pod that cannot bind, on the condition that it
// has not changed since it was read (its UID and resourceVersion): its
// controller makes it again, and the policy holds the new one.
func (s *Steerer) delete(ctx context.Context, p *corev1.Pod, pool, node string) {
	err := s.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID, ResourceVersion: &p.ResourceVersion}})
	switch {
	case err == nil:
		s.metrics.SteeringDecisions.WithLabelValues(pool, metrics.OutcomeDeleted).Inc()
		s.log.Info("Deleted a pinned pod whose node no longer has its claim free, for its controller to make it again", "pod", key(p), "pool", pool, "node", node, "pinTimeout", s.cfg.PinTimeout.String())
	case kerrors.IsConflict(err) || kerrors.IsNotFound(err):
		s.log.V(1).Info("A pinned pod changed before it could be deleted; reading it again", "pod", key(p), "error", err.Error())
	default:
		s.log.Info("Cannot delete a pinned pod whose node no longer has its claim free", "pod", key(p), "pool", pool, "error", err.Error())
	}
}

// candidate is a held pod ready to be decided.
type candidate struct {
	pod    *corev1.Pod
	steer  agent.SteerPod
	claims []string
}

// decide decides the pool's held pods that are ready (their claims exist,
// their replica is known or waited for, their group is whole or waited
// for) and releases them: those that fit a node pinned to it, the others
// unpinned. A pod held MaxHold is released unpinned.
func (s *Steerer) decide(ctx context.Context, now time.Time, pool string, sz *agent.ClaimSizer, nodes []controller.SteerNode, held []*corev1.Pod) {
	var ready []candidate
	waiting := map[string]bool{} // gangs with a member not ready yet
	for _, p := range held {
		age := now.Sub(p.CreationTimestamp.Time)
		if age >= s.cfg.MaxHold {
			s.release(ctx, now, p, pool, agent.Decision{Reason: fmt.Sprintf("held %s, the longest a pod may be (--steering-max-hold)", s.cfg.MaxHold)}, metrics.OutcomeTimeout, nil)
			continue
		}
		gang := gangOf(p)
		claims, names, missing := s.claimsOf(p)
		if missing != "" {
			s.log.V(2).Info("A held pod waits for its claim", "pod", key(p), "claim", missing)
			waiting[gang] = true
			continue
		}
		claim, err := sz.Size(ctx, claims...)
		if err != nil {
			s.release(ctx, now, p, pool, agent.Decision{Reason: agent.UnpinnedClaim + ": " + err.Error()}, metrics.OutcomeUnpinned, nil)
			continue
		}
		charge, known := s.charge(p)
		if !known && age < s.cfg.ReplicaWait {
			waiting[gang] = true
			continue
		}
		ready = append(ready, candidate{pod: p, steer: agent.SteerPod{Name: key(p), Claim: claim, Charge: charge, Gang: gang}, claims: names})
	}

	// A group's pods wait for the rest of the group, up to GangWait from
	// its oldest held pod; then those ready are decided, and the others,
	// later, avoid the nodes these were sent to.
	avoid := map[string][]string{}
	oldest := map[string]time.Time{}
	for _, p := range held {
		if g := gangOf(p); g != "" && (oldest[g].IsZero() || p.CreationTimestamp.Before(&metav1.Time{Time: oldest[g]})) {
			oldest[g] = p.CreationTimestamp.Time
		}
	}
	ready = slices.DeleteFunc(ready, func(c candidate) bool {
		g := c.steer.Gang
		if g == "" {
			return false
		}
		if _, ok := avoid[g]; !ok {
			members, taken := s.group(c.pod)
			avoid[g] = taken
			size, _ := strconv.Atoi(c.pod.Annotations[cluster.AnnotationLWSSize])
			if members < size || waiting[g] {
				waiting[g] = true
			}
		}
		return waiting[g] && now.Sub(oldest[g]) < s.cfg.GangWait
	})
	if len(ready) == 0 {
		return
	}

	state := make([]agent.SteerNode, len(nodes))
	for i, n := range nodes {
		state[i] = agent.SteerNode{Name: n.Name, Free: n.Free}
	}
	pods := make([]agent.SteerPod, len(ready))
	byName := make(map[string]candidate, len(ready))
	for i, c := range ready {
		pods[i] = c.steer
		byName[c.steer.Name] = c
	}
	// Every claim the sizer sized has one count per DRA device of the pool.
	devices := len(pods[0].Claim)
	for _, d := range decideInOrder(devices, state, pods, avoid) {
		c := byName[d.Pod]
		outcome := metrics.OutcomePinned
		if d.Node == "" {
			outcome = metrics.OutcomeUnpinned
		}
		s.release(ctx, now, c.pod, pool, d, outcome, &c)
	}
}

// decideInOrder decides the pods, in the ledger's charge order
// (agent.SortSteerPods), with agent.Steer: each run of pods in that order
// on the nodes as the runs before left them, a gang some of whose pods
// were sent to nodes before on the other nodes only.
func decideInOrder(devices int, state []agent.SteerNode, pods []agent.SteerPod, avoid map[string][]string) []agent.Decision {
	agent.SortSteerPods(pods)
	var out []agent.Decision
	for len(pods) > 0 {
		g := pods[0].Gang
		n := 1
		if len(avoid[g]) > 0 {
			for n < len(pods) && pods[n].Gang == g {
				n++
			}
		} else {
			for n < len(pods) && len(avoid[pods[n].Gang]) == 0 {
				n++
			}
		}
		var nodes []agent.SteerNode
		for _, s := range state {
			if g == "" || !slices.Contains(avoid[g], s.Name) {
				nodes = append(nodes, s)
			}
		}
		d, after := agent.Steer(devices, nodes, pods[:n])
		out = append(out, d...)
		for _, a := range after {
			for i := range state {
				if state[i].Name == a.Name {
					state[i].Free = a.Free
				}
			}
		}
		pods = pods[n:]
	}
	return out
}

// group counts the live pods of the pod's LeaderWorkerSet group that the
// cache holds, and names the nodes its pods were sent to: bound there,
// released pinned there, or in flight there.
func (s *Steerer) group(p *corev1.Pod) (int, []string) {
	name, gkey := p.Labels[fsv1alpha1.LabelLWSName], p.Labels[LabelLWSGroupKey]
	members := 0
	var nodes []string
	for _, m := range s.cluster.LabelledPods(p.Namespace, LabelLWSGroupKey, gkey) {
		if m.Labels[fsv1alpha1.LabelLWSName] != name || m.DeletionTimestamp != nil {
			continue
		}
		members++
		switch {
		case m.Spec.NodeName != "":
			nodes = append(nodes, m.Spec.NodeName)
		case m.Annotations[v1alpha1.AnnotationSteeredTo] != "":
			nodes = append(nodes, m.Annotations[v1alpha1.AnnotationSteeredTo])
		}
	}
	g := gangOf(p)
	for _, f := range s.inflight {
		if f.gang == g {
			nodes = append(nodes, f.node)
		}
	}
	slices.Sort(nodes)
	return members, slices.Compact(nodes)
}

// release releases a held pod with one update, conditioned on the
// resourceVersion the cache holds (a replica that lost the lead, or read
// an older pod, gets a conflict and never steers a pod twice): the gate
// removed, the pod pinned to the decision's node (a required node
// affinity term on metadata.name, ANDed into each term it already has),
// and AnnotationSteeredTo set to the node, or empty when it is released
// unpinned, whose reason is logged. c is the candidate it was decided as,
// nil for a pod released without a decision of Steer.
func (s *Steerer) release(ctx context.Context, now time.Time, p *corev1.Pod, pool string, d agent.Decision, outcome string, c *candidate) {
	next := p.DeepCopy()
	next.Spec.SchedulingGates = slices.DeleteFunc(next.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == v1alpha1.SchedulingGate })
	if len(next.Spec.SchedulingGates) == 0 {
		next.Spec.SchedulingGates = nil
	}
	if d.Node != "" {
		Pin(next, d.Node)
	}
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[v1alpha1.AnnotationSteeredTo] = d.Node
	_, err := s.client.CoreV1().Pods(p.Namespace).Update(ctx, next, metav1.UpdateOptions{FieldManager: controller.FieldManager})
	switch {
	case err == nil:
	case kerrors.IsConflict(err) || kerrors.IsNotFound(err):
		s.log.V(1).Info("A held pod changed before it could be released; reading it again", "pod", key(p), "error", err.Error())
		return
	default:
		s.mu.Lock()
		s.failed[pool] = failure{at: now, err: err}
		s.mu.Unlock()
		s.log.Info("Cannot release a held pod; retrying", "pod", key(p), "pool", pool, "error", err.Error())
		return
	}
	s.released[p.UID] = p.ResourceVersion
	s.metrics.SteeringDecisions.WithLabelValues(pool, outcome).Inc()
	held := now.Sub(p.CreationTimestamp.Time).String()
	if d.Node == "" {
		s.log.Info("Released a held pod unpinned", "pod", key(p), "pool", pool, "reason", d.Reason, "outcome", outcome, "held", held)
		return
	}
	s.log.V(1).Info("Released a held pod pinned to a node", "pod", key(p), "pool", pool, "node", d.Node, "held", held)
	if c != nil {
		s.inflight[p.UID] = &inflight{namespace: p.Namespace, name: p.Name, pool: pool, node: d.Node, claim: c.steer.Claim, claims: c.claims, gang: c.steer.Gang, at: now}
	}
}

// Pin narrows the pod to the node: a required node affinity term
// matching the field metadata.name In [node], or, where the pod already
// has required node affinity, that requirement added to each of its
// terms (a held pod may be narrowed so, and only so).
func Pin(p *corev1.Pod, node string) {
	req := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	if p.Spec.Affinity.NodeAffinity == nil {
		p.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := p.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{req}}}}
		return
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		terms[i].MatchFields = append(terms[i].MatchFields, req)
	}
}

// claimsOf returns the pod's ResourceClaims and their names, or which one
// is missing: a claim made from a template exists once the resourceclaim
// controller made it and recorded it in the pod's status.
func (s *Steerer) claimsOf(p *corev1.Pod) ([]*resourcev1.ResourceClaim, []string, string) {
	var out []*resourcev1.ResourceClaim
	var names []string
	for _, rc := range p.Spec.ResourceClaims {
		var name string
		switch {
		case rc.ResourceClaimName != nil:
			name = *rc.ResourceClaimName
		default:
			i := slices.IndexFunc(p.Status.ResourceClaimStatuses, func(st corev1.PodResourceClaimStatus) bool { return st.Name == rc.Name })
			if i < 0 {
				return nil, nil, rc.Name + " (not made from its template yet)"
			}
			if p.Status.ResourceClaimStatuses[i].ResourceClaimName == nil {
				// No claim was needed for it.
				continue
			}
			name = *p.Status.ResourceClaimStatuses[i].ResourceClaimName
		}
		c := s.cluster.ResourceClaim(p.Namespace, name)
		if c == nil {
			return nil, nil, name + " (not in the cache yet)"
		}
		out = append(out, c)
		names = append(names, name)
	}
	return out, names, ""
}

// charge is where the function's ledger charges the pod: the
// ReplicaObservation of its namespace (by name, the first) one of whose
// selectors selects it, and the index of the first such selector (the
// engine); false when none does.
func (s *Steerer) charge(p *corev1.Pod) (agent.ChargeOrder, bool) {
	set := labels.Set(p.Labels)
	for _, u := range s.cluster.ReplicaObservations(p.Namespace) {
		r := s.replica(u)
		for i, sel := range r.selectors {
			if sel != nil && sel.Matches(set) {
				return agent.ChargeOrder{Known: true, Namespace: r.namespace, Replica: u.GetName(), Engine: i}, true
			}
		}
	}
	return agent.ChargeOrder{}, false
}

// replica reads a ReplicaObservation's selectors, once per
// resourceVersion. An empty selector selects no pod here (it would select
// every pod of the namespace).
func (s *Steerer) replica(u *unstructured.Unstructured) replica {
	k := u.GetNamespace() + "/" + u.GetName()
	if r, ok := s.replicas[k]; ok && r.rv == u.GetResourceVersion() {
		return r
	}
	if len(s.replicas) > 4096 {
		clear(s.replicas)
	}
	r := replica{rv: u.GetResourceVersion()}
	if ro, err := cluster.ReplicaObservationOf(u); err == nil {
		r.namespace = ro.Spec.ReplicaNamespace
		for i := range ro.Spec.Selectors {
			sel := &ro.Spec.Selectors[i]
			var out labels.Selector
			if len(sel.MatchLabels) > 0 || len(sel.MatchExpressions) > 0 {
				out, _ = metav1.LabelSelectorAsSelector(sel)
			}
			r.selectors = append(r.selectors, out)
		}
	}
	s.replicas[k] = r
	return r
}

// sizer returns the pool's ClaimSizer, made anew when its spec changed.
func (s *Steerer) sizer(u *unstructured.Unstructured) (*agent.ClaimSizer, error) {
	if z, ok := s.sizers[u.GetName()]; ok && z.generation == u.GetGeneration() {
		return z.sizer, z.err
	}
	z := sizer{generation: u.GetGeneration()}
	po, err := cluster.PoolObservationOf(u)
	if err == nil {
		z.sizer, err = agent.NewClaimSizer(agent.Pool{Name: po.Name, Devices: po.Spec.Devices})
	}
	z.err = err
	s.sizers[u.GetName()] = z
	return z.sizer, z.err
}

// forgetPool forgets the pods in flight of a pool that is not steered.
func (s *Steerer) forgetPool(pool string) {
	maps.DeleteFunc(s.inflight, func(_ types.UID, f *inflight) bool { return f.pool == pool })
}

// forgetReleased forgets the released pods that the cache shows released
// (or gone).
func (s *Steerer) forgetReleased(all []*corev1.Pod) {
	if len(s.released) == 0 {
		return
	}
	held := map[types.UID]string{}
	for _, p := range all {
		held[p.UID] = p.ResourceVersion
	}
	maps.DeleteFunc(s.released, func(uid types.UID, rv string) bool { return held[uid] != rv })
}

// steerable are the pools the agent's Pod lists for the policy to hold:
// those whose spec asks for steering and where steering can work (the
// cluster serves the policy's API, the policy and its binding are as
// shipped, the pool is reported, and no release failed within MaxHold).
func (s *Steerer) steerable(now time.Time, enabled map[string]*unstructured.Unstructured) []string {
	if !s.cfg.AdmissionPolicies || s.policyProblem() != nil {
		return nil
	}
	var out []string
	for name, u := range enabled {
		if !synced(u) {
			continue
		}
		s.mu.Lock()
		f, failed := s.failed[name]
		s.mu.Unlock()
		if failed && now.Sub(f.at) < s.cfg.MaxHold {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// policyProblem says why the steering policy and its binding are not as
// shipped, with the Steering condition's reason; nil when they are.
func (s *Steerer) policyProblem() *problem {
	p, b, ok := s.cluster.SteeringPolicy()
	if !ok {
		return &problem{v1alpha1.ReasonPolicyNotFound, fmt.Sprintf("cannot read the MutatingAdmissionPolicy and MutatingAdmissionPolicyBinding %s yet (steering's role lets the agent read them): %s", v1alpha1.SteeringPolicy, restoreSteering)}
	}
	if p == nil || b == nil {
		return &problem{v1alpha1.ReasonPolicyNotFound, fmt.Sprintf("%s: %s", agent.CheckSteeringPolicy(p, b, agent.SteeringAgent{Namespace: s.cfg.PodNamespace}), restoreSteering)}
	}
	s.mu.Lock()
	own := s.labels
	s.mu.Unlock()
	if err := agent.CheckSteeringPolicy(p, b, agent.SteeringAgent{Namespace: s.cfg.PodNamespace, Labels: own}); err != nil {
		return &problem{v1alpha1.ReasonPolicyNotAsShipped, fmt.Sprintf("%v: %s", err, restoreSteering)}
	}
	return nil
}

// problem is why a pool is not steered: a reason of the Steering
// condition and a message.
type problem struct{ reason, message string }

// synced is whether the PoolObservation's status says Synced True.
func synced(u *unstructured.Unstructured) bool {
	po, err := cluster.PoolObservationOf(u)
	return err == nil && meta.IsStatusConditionTrue(po.Status.Conditions, v1alpha1.ConditionSynced)
}

// mark keeps the pools on the agent's own Pod (AnnotationSteeredPools,
// comma-separated): patched when they change, and again after a failure.
// While no pool asks for steering it only clears the annotation, once:
// an agent that steers nothing need not be allowed to patch its Pod.
func (s *Steerer) mark(ctx context.Context, now time.Time, pools []string, asked bool) {
	value := strings.Join(pools, ",")
	if s.annotation != nil && *s.annotation == value || now.Before(s.retryMark) {
		return
	}
	var patched map[string]string
	err := s.patchOwn(ctx, value, &patched)
	s.mu.Lock()
	before := s.marked
	s.marked, s.markErr = map[string]bool{}, err
	if err == nil {
		for _, p := range pools {
			s.marked[p] = true
		}
		s.labels = patched
	}
	changed := !maps.Equal(before, s.marked)
	s.mu.Unlock()
	switch {
	case err != nil && !asked:
		s.annotation = &value
		s.log.V(1).Info("Cannot clear the steered pools from the agent's own Pod; no pool asks for steering", "error", err.Error())
	case err != nil:
		s.annotation, s.retryMark = nil, now.Add(markRetry)
		s.log.Info("Cannot list the steered pools on the agent's own Pod; the policy holds none of their pods", "error", err.Error())
	default:
		s.annotation = &value
		s.log.Info("Steering", "pools", pools)
	}
	if changed && s.changed != nil {
		s.changed()
	}
}

// Unmark removes the steered pools from the agent's own Pod: no new pod
// is held for this replica. Best effort: an agent that cannot is not
// leading, and the next leader releases what is held.
func (s *Steerer) Unmark(ctx context.Context) {
	if s.annotation != nil && *s.annotation == "" {
		return
	}
	var patched map[string]string
	err := s.patchOwn(ctx, "", &patched)
	s.mu.Lock()
	s.marked = map[string]bool{}
	if err == nil {
		s.labels = patched
	}
	s.mu.Unlock()
	s.annotation = nil
	if err == nil {
		empty := ""
		s.annotation = &empty
		return
	}
	if s.cfg.PodName != "" {
		s.log.Info("Cannot clear the steered pools from the agent's own Pod", "error", err.Error())
	}
}

// patchOwn sets the steered pools annotation of the agent's own Pod
// (removes it for ""), and returns the Pod's labels.
func (s *Steerer) patchOwn(ctx context.Context, value string, labels *map[string]string) error {
	if s.cfg.PodName == "" || s.cfg.PodNamespace == "" {
		return fmt.Errorf("the agent does not know its own Pod: set POD_NAME and POD_NAMESPACE from the downward API")
	}
	var v any
	if value != "" {
		v = value
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.AnnotationSteeredPools: v}}})
	if err != nil {
		return fmt.Errorf("cannot encode the patch of Pod %s/%s: %w", s.cfg.PodNamespace, s.cfg.PodName, err)
	}
	p, err := s.client.CoreV1().Pods(s.cfg.PodNamespace).Patch(ctx, s.cfg.PodName, types.MergePatchType, body, metav1.PatchOptions{FieldManager: controller.FieldManager})
	if err != nil {
		return fmt.Errorf("cannot annotate the agent's own Pod %s/%s: %w", s.cfg.PodNamespace, s.cfg.PodName, err)
	}
	*labels = p.Labels
	return nil
}

// Stop has Status say, from now on, that the agent stopped
// (v1alpha1.ReasonAgentStopped): called as the agent shuts down while it
// leads.
func (s *Steerer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
}

// Status says whether the pool is steered, for the pools reconciler
// (controller.Steering): ReasonSteered while the cluster serves the
// policy's API, the policy and its binding are as shipped, the agent's
// Pod lists the pool, no release of its pods failed within MaxHold, and no
// claiming pod of the pool bound without the agent's decision within
// ReportPeriod; otherwise the first of these that fails, and what to do.
func (s *Steerer) Status(pool string, observed bool) (string, string) {
	now := s.clock.Now()
	s.mu.Lock()
	stopping := s.stopping
	s.mu.Unlock()
	if stopping {
		return v1alpha1.ReasonAgentStopped, "the agent that steered the pool shut down; the next leader reports it again"
	}
	if !s.cfg.AdmissionPolicies {
		return v1alpha1.ReasonAdmissionPolicyUnsupported, "the cluster does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicies, which hold the pods the agent steers: steering needs Kubernetes 1.36 or later"
	}
	if !observed {
		return v1alpha1.ReasonPoolNotObserved, "the pool is not reported (see the Synced condition): the agent steers by the counts of its report"
	}
	if p := s.policyProblem(); p != nil {
		return p.reason, p.message
	}
	s.mu.Lock()
	marked, markErr := s.marked[pool], s.markErr
	f, failed := s.failed[pool]
	s.mu.Unlock()
	switch {
	case !marked && markErr != nil:
		return v1alpha1.ReasonAgentPodNotMarked, fmt.Sprintf("%v; the agent needs patch of its own Pod (deploy/cluster-agent/steering/)", markErr)
	case failed && now.Sub(f.at) < s.cfg.MaxHold:
		return v1alpha1.ReasonReleaseFailed, fmt.Sprintf("at %s the agent could not release a held pod of the pool: %v; it needs update and delete of Pods in its pod namespaces (deploy/cluster-agent/steering/)", f.at.UTC().Format(time.RFC3339), f.err)
	case !marked:
		return v1alpha1.ReasonAgentPodNotMarked, "the agent's Pod does not list the pool for the policy yet"
	}
	var last *corev1.Pod
	var lastAt time.Time
	for _, p := range s.cluster.ClaimingPods(pool) {
		if p.Spec.NodeName == "" {
			continue
		}
		if _, decided := p.Annotations[v1alpha1.AnnotationSteeredTo]; decided {
			continue
		}
		if at := boundAt(p); now.Sub(at) < s.cfg.ReportPeriod && (last == nil || at.After(lastAt)) {
			last, lastAt = p, at
		}
	}
	if last != nil {
		return v1alpha1.ReasonBoundUnsteered, fmt.Sprintf("pod %s bound to node %s at %s without the agent's decision (was it created before the pool was steered, or by another scheduler?); the pool is Steered again once none has for %s", key(last), last.Spec.NodeName, lastAt.UTC().Format(time.RFC3339), s.cfg.ReportPeriod)
	}
	return v1alpha1.ReasonSteered, "the agent decides the node of each claiming pod of the pool, by the rule the function accounts it with"
}

// boundAt is when the pod bound: its PodScheduled condition's time, or
// its creation where it has none.
func boundAt(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return p.CreationTimestamp.Time
}

// gauge sets the held pods and the oldest hold (since creation: the gate
// is added as the pod is created) of each pool with held pods or whose
// spec asks for steering; a pool neither loses its series.
func (s *Steerer) gauge(now time.Time, enabled map[string]*unstructured.Unstructured, all []*corev1.Pod) {
	type hold struct {
		n      int
		oldest time.Duration
	}
	pools := map[string]*hold{}
	for p := range enabled {
		pools[p] = &hold{}
	}
	for _, p := range all {
		if p.DeletionTimestamp != nil {
			continue
		}
		pool := p.Spec.NodeSelector[fsv1alpha1.LabelPool]
		h := pools[pool]
		if h == nil {
			h = &hold{}
			pools[pool] = h
		}
		h.n++
		h.oldest = max(h.oldest, now.Sub(p.CreationTimestamp.Time))
	}
	for pool, h := range pools {
		s.metrics.SteeringHeld.WithLabelValues(pool).Set(float64(h.n))
		s.metrics.SteeringOldest.WithLabelValues(pool).Set(h.oldest.Seconds())
		s.gauged[pool] = true
	}
	for pool := range s.gauged {
		if pools[pool] == nil {
			s.metrics.SteeringHeld.DeleteLabelValues(pool)
			s.metrics.SteeringOldest.DeleteLabelValues(pool)
			delete(s.gauged, pool)
		}
	}
}

// gangOf names the pod's LeaderWorkerSet group, "" for a pod of none.
func gangOf(p *corev1.Pod) string {
	name, g := p.Labels[fsv1alpha1.LabelLWSName], p.Labels[LabelLWSGroupKey]
	if name == "" || g == "" {
		return ""
	}
	return p.Namespace + "/" + name + "/" + g
}

func key(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// take adds sign times the claim to free.
func take(free, claim []int64, sign int64) {
	for i := range min(len(free), len(claim)) {
		free[i] += sign * claim[i]
	}
}

// covers is whether free has the claim.
func covers(free, claim []int64) bool {
	if len(free) != len(claim) {
		return false
	}
	for i := range claim {
		if free[i] < claim[i] {
			return false
		}
	}
	return true
}
