package steering

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/metrics"
)

// TestDecide checks which node each held pod is sent to, and when it is
// decided: in the ledger's charge order (the ReplicaObservations'), a
// batch together, gangs on distinct nodes once whole or waited for.
func TestDecide(t *testing.T) {
	type args struct {
		nodes []any
		objs  []any
		// after is how long after t0 the round runs.
		after time.Duration
	}
	cases := map[string]struct {
		reason string
		args   args
		want   map[string]string
	}{
		"LedgerOrder": {
			reason: "Free {2,3}, pods A=2, B=1, C=2 of replicas ns/a, ns/b, ns/c all fit in the ledger's order (A, B, C), though B arrived first: decided in one batch by the ReplicaObservations' replicaNamespace and name.",
			args: args{
				nodes: []any{"n1", 2, "n2", 3},
				objs: []any{
					replicaObservation("c", "ml", "wc"), replicaObservation("a", "ml", "wa"), replicaObservation("b", "ml", "wb"),
					held("pod-b", "wb").created(t0.Add(-3 * time.Second)).obj(), held("pod-a", "wa").created(t0.Add(-2 * time.Second)).obj(), held("pod-c", "wc").created(t0.Add(-time.Second)).obj(),
					claimOf("pod-a", 2), claimOf("pod-b", 1), claimOf("pod-c", 2),
				},
			},
			want: map[string]string{"pod-a": "n1", "pod-b": "n2", "pod-c": "n2"},
		},
		"ReplicaNamespaceFirst": {
			reason: "The control plane namespace orders before the replica's name: replica z of namespace a is charged before replica a of namespace b.",
			args: args{
				nodes: []any{"n1", 2},
				objs: []any{
					replicaObservation("a", "b", "wa"), replicaObservation("z", "a", "wz"),
					held("pod-a", "wa").obj(), held("pod-z", "wz").obj(), claimOf("pod-a", 2), claimOf("pod-z", 2),
				},
			},
			want: map[string]string{"pod-z": "n1", "pod-a": ""},
		},
		"UnknownWaits": {
			reason: "A pod no ReplicaObservation selects waits for one, up to --steering-replica-wait.",
			args: args{
				nodes: []any{"n1", 8},
				objs:  []any{held("pod-x", "wx").obj(), claimOf("pod-x", 1)},
				after: 4 * time.Second,
			},
			want: map[string]string{},
		},
		"UnknownLast": {
			reason: "Past --steering-replica-wait it is decided, after every known pod.",
			args: args{
				nodes: []any{"n1", 2},
				objs: []any{
					replicaObservation("a", "ml", "wa"),
					held("pod-x", "wx").obj(), held("pod-a", "wa").created(t0.Add(time.Second)).obj(), claimOf("pod-x", 2), claimOf("pod-a", 2),
				},
				after: 5 * time.Second,
			},
			want: map[string]string{"pod-a": "n1", "pod-x": ""},
		},
		"ClaimNotMade": {
			reason: "A pod whose claim the resourceclaim controller has not made yet waits.",
			args: args{
				nodes: []any{"n1", 8},
				objs:  []any{replicaObservation("a", "ml", "wa"), held("pod-a", "wa").noClaimYet().obj()},
			},
			want: map[string]string{},
		},
		"ClaimNotInCache": {
			reason: "So does one whose claim the cache does not hold yet.",
			args: args{
				nodes: []any{"n1", 8},
				objs:  []any{replicaObservation("a", "ml", "wa"), held("pod-a", "wa").obj()},
			},
			want: map[string]string{},
		},
		"NoNode": {
			reason: "A pod that fits no node is released unpinned.",
			args: args{
				nodes: []any{"n1", 1},
				objs:  []any{replicaObservation("a", "ml", "wa"), held("pod-a", "wa").obj(), claimOf("pod-a", 2)},
			},
			want: map[string]string{"pod-a": ""},
		},
		"GangWaits": {
			reason: "LeaderCreated: a group of 3 with 2 pods present waits for the third, up to --steering-gang-wait.",
			args: args{
				nodes: []any{"n1", 8, "n2", 8, "n3", 8},
				objs: []any{
					lwsObservation("a", "ml", "lws"),
					held("lws-0", "").gang("lws", "g0", 3).obj(), held("lws-0-1", "").gang("lws", "g0", 3).obj(),
					claimOf("lws-0", 8), claimOf("lws-0-1", 8),
				},
				after: 4 * time.Second,
			},
			want: map[string]string{},
		},
		"GangWaited": {
			reason: "Past --steering-gang-wait, the pods present are decided.",
			args: args{
				nodes: []any{"n1", 8, "n2", 8, "n3", 8},
				objs: []any{
					lwsObservation("a", "ml", "lws"),
					held("lws-0", "").gang("lws", "g0", 3).obj(), held("lws-0-1", "").gang("lws", "g0", 3).obj(),
					claimOf("lws-0", 8), claimOf("lws-0-1", 8),
				},
				after: 5 * time.Second,
			},
			want: map[string]string{"lws-0": "n1", "lws-0-1": "n2"},
		},
		"GangWhole": {
			reason: "The whole group is decided together on distinct nodes.",
			args: args{
				nodes: []any{"n1", 8, "n2", 8, "n3", 8},
				objs: []any{
					lwsObservation("a", "ml", "lws"),
					held("lws-0", "").gang("lws", "g0", 3).obj(), held("lws-0-1", "").gang("lws", "g0", 3).obj(), held("lws-0-2", "").gang("lws", "g0", 3).obj(),
					claimOf("lws-0", 8), claimOf("lws-0-1", 8), claimOf("lws-0-2", 8),
				},
			},
			want: map[string]string{"lws-0": "n1", "lws-0-1": "n2", "lws-0-2": "n3"},
		},
		"GangNotWhole": {
			reason: "A group that fits only on fewer distinct nodes than it has pods is released unpinned, all of it.",
			args: args{
				nodes: []any{"n1", 8, "n2", 4},
				objs: []any{
					lwsObservation("a", "ml", "lws"),
					held("lws-0", "").gang("lws", "g0", 2).obj(), held("lws-0-1", "").gang("lws", "g0", 2).obj(),
					claimOf("lws-0", 8), claimOf("lws-0-1", 8),
				},
			},
			want: map[string]string{"lws-0": "", "lws-0-1": ""},
		},
		"LeaderReadyLeader": {
			reason: "LeaderReady: only the leader of a group of 3 is there; past --steering-gang-wait it is decided alone.",
			args: args{
				nodes: []any{"n1", 8, "n2", 4},
				objs:  []any{lwsObservation("a", "ml", "lws"), held("lws-0", "").gang("lws", "g0", 3).obj(), claimOf("lws-0", 4)},
				after: 5 * time.Second,
			},
			want: map[string]string{"lws-0": "n2"},
		},
		"LeaderReadyWorkers": {
			reason: "Its workers, held once the leader is Ready, avoid the node the leader was sent to, though it fits them best.",
			args: args{
				nodes: []any{"n1", 8, "n2", 4, "n3", 8},
				objs: []any{
					lwsObservation("a", "ml", "lws"),
					held("lws-0", "").gang("lws", "g0", 3).released("n2").bound("n2", t0).obj(),
					held("lws-0-1", "").gang("lws", "g0", 3).created(t0.Add(20 * time.Second)).obj(), held("lws-0-2", "").gang("lws", "g0", 3).created(t0.Add(20 * time.Second)).obj(),
					claimOf("lws-0-1", 4), claimOf("lws-0-2", 4),
				},
				after: 21 * time.Second,
			},
			want: map[string]string{"lws-0-1": "n1", "lws-0-2": "n3"},
		},
		"MaxHold": {
			reason: "A pod held --steering-max-hold is released unpinned, whatever else (here: its claim is not made yet).",
			args: args{
				nodes: []any{"n1", 8},
				objs:  []any{held("pod-a", "wa").noClaimYet().obj()},
				after: 30 * time.Second,
			},
			want: map[string]string{"pod-a": ""},
		},
		"NotSteered": {
			reason: "A held pod of a pool whose spec does not ask for steering is released unpinned at once.",
			args: args{
				nodes: []any{"n1", 8},
				objs: []any{
					replicaObservation("a", "ml", "wa"), func() any { p := held("pod-a", "wa").obj(); p.Spec.NodeSelector["modelplane.ai/pool"] = "l4"; return p }(),
					claimOf("pod-a", 1),
				},
			},
			want: map[string]string{"pod-a": ""},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.setNodes(pool, tc.args.nodes...)
			e.add(poolObservation(pool, v1alpha1.SteeringEnabled), poolObservation("l4", v1alpha1.SteeringDisabled))
			e.shipped()
			e.add(tc.args.objs...)
			e.clock.SetTime(t0.Add(tc.args.after))
			e.steerer().Reconcile(t.Context())
			if diff := cmp.Diff(tc.want, e.decided()); diff != "" {
				t.Errorf("\n%s\npods released (pod: node): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestRelease checks the one update that releases a held pod: the gate
// gone and no other, the pod pinned by a required matchFields term (ANDed
// into the terms it has), the annotation, and the cached resourceVersion.
func TestRelease(t *testing.T) {
	other := corev1.PodSchedulingGate{Name: "example.com/other"}
	cases := map[string]struct {
		reason string
		pod    func(*corev1.Pod)
		want   func(*corev1.Pod)
	}{
		"NoAffinity": {
			reason: "A v0.3 pod has no affinity: it gets one required term, matchFields metadata.name In [node].",
			want: func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}}},
				}}}
			},
		},
		"Required": {
			reason: "A pod with required node affinity gets the field ANDed into each of its terms; other gates stay.",
			pod: func(p *corev1.Pod) {
				p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, other)
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{
						{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
						{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}},
					},
				}}}
			},
			want: func(p *corev1.Pod) {
				pin := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}
				p.Spec.SchedulingGates = []corev1.PodSchedulingGate{other}
				terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
				terms[0].MatchFields = []corev1.NodeSelectorRequirement{pin}
				terms[1].MatchFields = []corev1.NodeSelectorRequirement{pin}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.setNodes(pool, "n1", 8)
			pod := held("pod-a", "wa").obj()
			if tc.pod != nil {
				tc.pod(pod)
			}
			e.add(poolObservation(pool, v1alpha1.SteeringEnabled), replicaObservation("a", "ml", "wa"), pod, claimOf("pod-a", 1))
			e.steerer().Reconcile(t.Context())
			want := pod.DeepCopy()
			if tc.want != nil {
				tc.want(want)
			}
			if tc.pod == nil {
				want.Spec.SchedulingGates = nil
			}
			want.Annotations = map[string]string{v1alpha1.AnnotationSteeredTo: "n1"}
			if len(e.updates) != 1 {
				t.Fatalf("\n%s\n%d updates, want 1", tc.reason, len(e.updates))
			}
			if diff := cmp.Diff(want, e.updates[0]); diff != "" {
				t.Errorf("\n%s\nthe update: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestReleaseConflict checks that a release refused as a conflict (the pod
// changed, or another replica released it) is neither counted nor in
// flight, and that a failed release keeps the pool off the agent's Pod.
func TestReleaseConflict(t *testing.T) {
	e := newEnv(t)
	e.setNodes(pool, "n1", 8)
	e.shipped()
	e.add(poolObservation(pool, v1alpha1.SteeringEnabled), replicaObservation("a", "ml", "wa"), held("pod-a", "wa").obj(), claimOf("pod-a", 1))
	e.conflict = true
	s := e.steerer()
	s.Reconcile(t.Context())
	if got := testutil.ToFloat64(e.metrics.SteeringDecisions.WithLabelValues(pool, metrics.OutcomePinned)); got != 0 {
		t.Errorf("%v pinned decisions counted after a conflict, want 0", got)
	}
	if len(s.inflight) != 0 {
		t.Errorf("%d pods in flight after a conflict, want 0", len(s.inflight))
	}
	if reason, _ := s.Status(pool, true); reason != v1alpha1.ReasonSteered {
		t.Errorf("a conflict is no failure: Steering %s, want %s", reason, v1alpha1.ReasonSteered)
	}

	e.conflict, e.fail = false, kerrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "pod-a", errors.New("RBAC"))
	s.Reconcile(t.Context())
	if reason, msg := s.Status(pool, true); reason != v1alpha1.ReasonReleaseFailed || !strings.Contains(msg, "forbidden") {
		t.Errorf("after a forbidden release: Steering %s (%s), want %s", reason, msg, v1alpha1.ReasonReleaseFailed)
	}
	s.Reconcile(t.Context())
	if got := ownAnnotation(t, e); got != "" {
		t.Errorf("the agent's Pod lists %q after a failed release, want none", got)
	}
	e.clock.Step(e.cfg.MaxHold)
	e.fail = nil
	s.Reconcile(t.Context())
	if got := ownAnnotation(t, e); got != pool {
		t.Errorf("the agent's Pod lists %q a hold bound after the failure, want %s", got, pool)
	}
}

func ownAnnotation(t *testing.T, e *env) string {
	t.Helper()
	p, err := e.client.CoreV1().Pods(agentNS).Get(t.Context(), agentName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Annotations[v1alpha1.AnnotationSteeredPools]
}

// TestBatchAndInFlight checks that pods released pinned count as taking
// their node until the node's count shows their claim, that a round does
// not decide a pod again before the cache shows its release, and that the
// metrics say what was decided.
func TestBatchAndInFlight(t *testing.T) {
	e := newEnv(t)
	e.setNodes(pool, "n1", 4, "n2", 8)
	e.add(poolObservation(pool, v1alpha1.SteeringEnabled), replicaObservation("a", "ml", "wa"),
		held("pod-a", "wa").obj(), held("pod-b", "wa").obj(), claimOf("pod-a", 4), claimOf("pod-b", 4))
	s := e.steerer()
	s.Reconcile(t.Context())
	if diff := cmp.Diff(map[string]string{"pod-a": "n1", "pod-b": "n2"}, e.decided()); diff != "" {
		t.Fatalf("the first batch: -want, +got:\n%s", diff)
	}

	// The cache has not seen the releases yet: nothing is decided again.
	s.Reconcile(t.Context())
	if len(e.updates) != 2 {
		t.Fatalf("%d updates, want the 2 of the first round: a pod was decided twice", len(e.updates))
	}

	// pod-a's and pod-b's claims are not counted yet: pod-c (4) fits
	// only what n2 has left after pod-b.
	e.applyUpdates()
	e.add(held("pod-c", "wa").obj(), claimOf("pod-c", 4))
	s.Reconcile(t.Context())
	if got := e.decided()["pod-c"]; got != "n2" {
		t.Errorf("pod-c pinned to %q, want n2: n1's 4 are pod-a's, in flight", got)
	}

	// n1's count now shows pod-a's claim (and 0 free): it is no longer
	// in flight.
	e.counts.nodes[pool][0].Free = []int64{0}
	e.counts.nodes[pool][0].Key = "n1|c:default/pod-a-gpu@2"
	s.Reconcile(t.Context())
	for _, f := range s.inflight {
		if f.name == "pod-a" {
			t.Errorf("pod-a still in flight once n1's count shows its claim")
		}
	}
	if got := testutil.ToFloat64(e.metrics.SteeringDecisions.WithLabelValues(pool, metrics.OutcomePinned)); got != 3 {
		t.Errorf("%v pinned decisions counted, want 3", got)
	}
}

// TestRetakenPin checks that a pinned pod not bound --steering-pin-timeout
// after its release is deleted when its node no longer has its claim
// free, and left to wait while it has.
func TestRetakenPin(t *testing.T) {
	e := newEnv(t)
	e.setNodes(pool, "n1", 4)
	e.add(poolObservation(pool, v1alpha1.SteeringEnabled), held("pod-a", "wa").released("n1").obj(), claimOf("pod-a", 4))
	s := e.steerer()
	s.Reconcile(t.Context())
	e.clock.Step(e.cfg.PinTimeout)
	s.Reconcile(t.Context())
	if len(e.deletes) != 0 {
		t.Fatalf("deleted %v though n1 still has its claim free", e.deletes)
	}
	e.setNodes(pool, "n1", 2)
	s.Reconcile(t.Context())
	if diff := cmp.Diff([]string{"default/pod-a"}, e.deletes); diff != "" {
		t.Errorf("deleted: -want, +got:\n%s", diff)
	}
	if got := testutil.ToFloat64(e.metrics.SteeringDecisions.WithLabelValues(pool, metrics.OutcomeDeleted)); got != 1 {
		t.Errorf("%v deletions counted, want 1", got)
	}
}

// TestMetrics checks the held pods and the oldest hold, and the timeout
// outcome.
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	e.setNodes(pool, "n1", 8)
	e.add(poolObservation(pool, v1alpha1.SteeringEnabled), held("pod-a", "wa").created(t0.Add(-10*time.Second)).noClaimYet().obj(), held("pod-b", "wb").noClaimYet().obj())
	s := e.steerer()
	s.Reconcile(t.Context())
	if got := testutil.ToFloat64(e.metrics.SteeringHeld.WithLabelValues(pool)); got != 2 {
		t.Errorf("held pods %v, want 2", got)
	}
	if got := testutil.ToFloat64(e.metrics.SteeringOldest.WithLabelValues(pool)); got != 10 {
		t.Errorf("oldest held %vs, want 10", got)
	}
	e.clock.Step(20 * time.Second)
	s.Reconcile(t.Context())
	if got := testutil.ToFloat64(e.metrics.SteeringDecisions.WithLabelValues(pool, metrics.OutcomeTimeout)); got != 1 {
		t.Errorf("%v timeouts, want 1 (pod-a, held 30s)", got)
	}
}

// TestStatus checks each reason of the Steering condition.
func TestStatus(t *testing.T) {
	type args struct {
		cfg      func(*Config)
		objs     []any
		observed bool
		noPolicy bool
		policy   func(*Steerer, *env)
	}
	cases := map[string]struct {
		reason string
		args   args
		want   string
	}{
		"Steered": {
			reason: "Policy as shipped, the pool on the agent's Pod, no pod bound unsteered: Steered.",
			args:   args{observed: true, objs: []any{held("old", "wa").bound("n1", t0.Add(-time.Minute)).obj(), held("mine", "wa").released("n1").bound("n1", t0).obj()}},
			want:   v1alpha1.ReasonSteered,
		},
		"Unsupported": {
			reason: "A cluster without MutatingAdmissionPolicies (older than 1.36) is never Steered.",
			args:   args{observed: true, cfg: func(c *Config) { c.AdmissionPolicies = false }},
			want:   v1alpha1.ReasonAdmissionPolicyUnsupported,
		},
		"NotObserved": {
			reason: "A pool not reported cannot be steered.",
			want:   v1alpha1.ReasonPoolNotObserved,
		},
		"NoPolicy": {
			reason: "Without the policy and binding nothing is held.",
			args:   args{observed: true, noPolicy: true},
			want:   v1alpha1.ReasonPolicyNotFound,
		},
		"Modified": {
			reason: "A policy that differs from what is shipped in an essential field is not trusted.",
			args: args{observed: true, policy: func(_ *Steerer, e *env) {
				p := policy()
				p.Spec.FailurePolicy = nil
				e.add(p)
			}},
			want: v1alpha1.ReasonPolicyNotAsShipped,
		},
		"NoOwnPod": {
			reason: "An agent that does not know its Pod cannot list the pool for the policy.",
			args:   args{observed: true, cfg: func(c *Config) { c.PodName = "" }},
			want:   v1alpha1.ReasonAgentPodNotMarked,
		},
		"BoundUnsteered": {
			reason: "A claiming pod bound without the agent's decision in the last report period.",
			args:   args{observed: true, objs: []any{held("old", "wa").bound("n1", t0.Add(-10*time.Second)).obj()}},
			want:   v1alpha1.ReasonBoundUnsteered,
		},
		"Stopped": {
			reason: "An agent that shuts down says so.",
			args:   args{observed: true, policy: func(s *Steerer, _ *env) { s.Stop() }},
			want:   v1alpha1.ReasonAgentStopped,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			if tc.args.cfg != nil {
				tc.args.cfg(&e.cfg)
			}
			e.setNodes(pool, "n1", 8)
			if !tc.args.noPolicy {
				e.shipped()
			}
			u := poolObservation(pool, v1alpha1.SteeringEnabled)
			e.add(u)
			e.add(tc.args.objs...)
			s := e.steerer()
			if tc.args.policy != nil {
				tc.args.policy(s, e)
			}
			s.Reconcile(t.Context())
			got, msg := s.Status(pool, tc.args.observed)
			if got != tc.want {
				t.Errorf("\n%s\nStatus: %s (%s), want %s", tc.reason, got, msg, tc.want)
			}
		})
	}
}

// TestMark checks the leader's own Pod: it lists the steered pools while
// leading, and none once Unmark ran.
func TestMark(t *testing.T) {
	e := newEnv(t)
	e.setNodes(pool, "n1", 8)
	e.shipped()
	e.add(poolObservation(pool, v1alpha1.SteeringEnabled), poolObservation("a100", v1alpha1.SteeringEnabled), poolObservation("l4", v1alpha1.SteeringDisabled))
	s := e.steerer()
	s.Reconcile(t.Context())
	if got := ownAnnotation(t, e); got != "a100,h100" {
		t.Errorf("the agent's Pod lists %q, want a100,h100", got)
	}
	s.Unmark(t.Context())
	p, err := e.client.CoreV1().Pods(agentNS).Get(t.Context(), agentName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Annotations[v1alpha1.AnnotationSteeredPools]; ok {
		t.Errorf("the agent's Pod still has %s after Unmark", v1alpha1.AnnotationSteeredPools)
	}
	if reason, _ := s.Status(pool, true); reason != v1alpha1.ReasonAgentPodNotMarked {
		t.Errorf("Steering %s after Unmark, want %s", reason, v1alpha1.ReasonAgentPodNotMarked)
	}
}
