package relay

import (
	"fmt"
	"slices"
	"time"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/poolreport"
)

// KeyReplicaObservation is the key of a ModelReplica's ReplicaObservation
// Object.
const KeyReplicaObservation = "replica-observation"

// Reasons of the PodsScheduled condition the relay sets on a ModelReplica.
// PodsBound and PodsNotBound are the agent's; a reason the agent gives an
// Unknown status is relayed as it is.
const (
	ReasonPodsBound           = "PodsBound"
	ReasonPodsNotBound        = "PodsNotBound"
	ReasonAwaitingClockMargin = "AwaitingClockMargin"
	ReasonNotObserved         = "NotObserved"
	ReasonAgentNotReporting   = "AgentNotReporting"
	ReasonAgentSilent         = "AgentSilent"
	ReasonWaitingForCluster   = "WaitingForCluster"
	ReasonInvalidObservation  = "InvalidObservation"
)

// ReplicaInput is what the relay reads of a ModelReplica's call.
type ReplicaInput struct {
	Replica *v1alpha1.ModelReplica
	// Cluster is the replica's InferenceCluster; nil when there is none.
	Cluster map[string]any
	// Composed are the observed composed resources, by key.
	Composed map[string]map[string]any
	// Now is the relay's clock.
	Now time.Time
	// Margin is how far past the agent's time the relay's clock must be
	// before PodsScheduled turns True: it covers how far the relay's clock
	// may run ahead of the clock Crossplane stamps conditions with, plus
	// the second conditions are rounded to.
	Margin time.Duration
	// MaxAge is how old the newest report of the replica's pools may be
	// for the agent to count as reporting: the function's
	// observationMaxAge.
	MaxAge time.Duration
}

// ReplicaOutput is what the relay adds to a ModelReplica's call.
type ReplicaOutput struct {
	// Resources are the Objects to compose, by key. All are ready.
	Resources map[string]map[string]any
	Condition Condition
	// TTL, when positive, is how soon the relay must be called again: when
	// PodsScheduled may turn True, or the reports go stale.
	TTL time.Duration
}

// Replica composes a ModelReplica's ReplicaObservation and relays the
// agent's PodsScheduled onto it (docs/spec.md#podsscheduled). The
// ReplicaObservation is composed once a pool of the replica has a report
// from the agent (so its kinds are served there), and kept from then on.
//
// Crossplane stamps the condition's lastTransitionTime with its own clock,
// the agent stamps its own with the workload cluster's. So the relay turns
// PodsScheduled True only once its clock has passed the agent's time by
// Margin; until then it holds the status the replica has (False where it
// was True), and asks to be called when the margin has passed. A relayed
// True is re-stamped when the agent's time is later than it (the agent saw
// the pods unbound and bound again): its message names the agent's time,
// and Crossplane stamps a condition anew when its message changes, also
// when the relay is first called after the margin has passed and so
// never held it False. PodsScheduled is Unknown while nothing
// is observed, and while the reports of the replica's pools are older than
// MaxAge (the agent may be gone: neither counted nor stuck).
func Replica(in ReplicaInput) ReplicaOutput {
	out := ReplicaOutput{Resources: map[string]map[string]any{}}
	r := in.Replica
	unknown := func(reason, message string) ReplicaOutput {
		out.Condition = Condition{Type: agentv1alpha1.ConditionPodsScheduled, Status: "Unknown", Reason: reason, Message: message}
		return out
	}
	observed, exists := in.Composed[KeyReplicaObservation]
	pc := stringAt(in.Cluster, "status", "providerConfigRef", "name")
	if pc == "" {
		pc = stringAt(observed, "spec", "providerConfigRef", "name")
	}
	if pc == "" {
		return unknown(ReasonWaitingForCluster, fmt.Sprintf("InferenceCluster %s does not exist or has no status.providerConfigRef yet", r.Spec.ClusterName))
	}
	reported, newest := poolReports(in.Cluster, r.Pools())
	if !exists && !reported {
		return unknown(ReasonAgentNotReporting, fmt.Sprintf("no pool of the replica (%s) has a report from the cluster agent yet: its ReplicaObservation is created once one has", joinSorted(r.Pools())))
	}
	out.Resources[KeyReplicaObservation] = object(r.Metadata.Namespace, pc, replicaObservation(r), false)

	staleAt := newest.Add(in.MaxAge)
	if !reported || !in.Now.Before(staleAt) {
		return unknown(ReasonAgentSilent, fmt.Sprintf("the cluster agent's newest report of the replica's pools (%s) is older than %s: its count of the replica's pods may be too", joinSorted(r.Pools()), in.MaxAge))
	}
	out.TTL = staleAt.Sub(in.Now)

	manifest := observedManifest(observed)
	agent := condition(manifest, agentv1alpha1.ConditionPodsScheduled)
	if agent == nil {
		return unknown(ReasonNotObserved, "the cluster agent has not counted the replica's pods yet")
	}
	if gen, ok := agent["observedGeneration"]; ok {
		want, _ := poolreport.WholeNumber(mapAt(manifest, "metadata")["generation"], 1<<53)
		if got, _ := poolreport.WholeNumber(gen, 1<<53); got < want {
			return unknown(ReasonNotObserved, "the cluster agent has not counted the replica's pods since its ReplicaObservation changed")
		}
	}
	status, _ := agent["status"].(string)
	reason, _ := agent["reason"].(string)
	message, _ := agent["message"].(string)
	switch status {
	case "False":
		out.Condition = Condition{Type: agentv1alpha1.ConditionPodsScheduled, Status: "False", Reason: ReasonPodsNotBound, Message: message}
		return out
	case "True":
	default:
		if reason == "" {
			reason = ReasonNotObserved
		}
		return unknown(reason, message)
	}

	lt, _ := agent["lastTransitionTime"].(string)
	at, err := poolreport.ParseTime(lt)
	if err != nil {
		return unknown(ReasonInvalidObservation, fmt.Sprintf("the ReplicaObservation's PodsScheduled lastTransitionTime %q: %v", lt, err))
	}
	current, currentAt := currentPodsScheduled(r)
	switch {
	case current == "True" && !currentAt.Before(at):
		// Already True since the agent's time or later: keep it.
	case !in.Now.Before(at.Add(in.Margin)):
	default:
		hold := "Unknown"
		if current == "True" || current == "False" {
			hold = "False"
		}
		until := at.Add(in.Margin)
		out.TTL = min(out.TTL, until.Sub(in.Now))
		out.Condition = Condition{
			Type: agentv1alpha1.ConditionPodsScheduled, Status: hold, Reason: ReasonAwaitingClockMargin,
			Message: fmt.Sprintf("the cluster agent saw every pod bound at %s; PodsScheduled turns True once this clock passes %s (a margin of %s for clock skew)",
				at.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339), in.Margin),
		}
		return out
	}
	out.Condition = Condition{
		Type: agentv1alpha1.ConditionPodsScheduled, Status: "True", Reason: ReasonPodsBound,
		Message: fmt.Sprintf("%s, as the cluster agent saw at %s", message, at.UTC().Format(time.RFC3339)),
	}
	return out
}

// poolReports says whether any of the pools has a report in the cluster's
// status, and the newest observedAt among those of the pools that read.
func poolReports(cluster map[string]any, pools []string) (bool, time.Time) {
	entries, _ := mapAt(cluster, "status")["gpuPools"].([]any)
	reported := false
	var newest time.Time
	for _, e := range entries {
		m, _ := e.(map[string]any)
		name, _ := m["name"].(string)
		at, ok := m[agentv1alpha1.FieldObservedAt].(string)
		if !ok || at == "" || !contains(pools, name) {
			continue
		}
		reported = true
		if t, err := poolreport.ParseTime(at); err == nil && t.After(newest) {
			newest = t
		}
	}
	return reported, newest
}

func contains(ss []string, s string) bool {
	return slices.Contains(ss, s)
}

// currentPodsScheduled is the replica's own PodsScheduled status and time,
// as the relay last set it.
func currentPodsScheduled(r *v1alpha1.ModelReplica) (string, time.Time) {
	if r.Status == nil {
		return "", time.Time{}
	}
	conds, _ := r.Status.Conditions.([]any)
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != agentv1alpha1.ConditionPodsScheduled {
			continue
		}
		s, _ := m["status"].(string)
		lt, _ := m["lastTransitionTime"].(string)
		at, err := poolreport.ParseTime(lt)
		if err != nil {
			return "", time.Time{}
		}
		return s, at
	}
	return "", time.Time{}
}

// replicaObservation is the ReplicaObservation of a replica
// (docs/spec.md#replicaobservation): in v0.3's namespace, named as the
// replica, selecting each engine's pods by the label v0.3 or
// LeaderWorkerSet puts on them, counting every pod its engines run, and
// naming the replica's namespace in the control plane, which a steering
// agent orders held pods by as the function's ledger charges them
// (docs/spec.md#steering).
func replicaObservation(r *v1alpha1.ModelReplica) map[string]any {
	selectors := make([]any, 0, len(r.Spec.Engines))
	var pods int64
	for _, e := range r.Spec.Engines {
		label := v1alpha1.LabelWorkload
		if e.Gang() {
			label = v1alpha1.LabelLWSName
		}
		selectors = append(selectors, map[string]any{"matchLabels": map[string]any{label: v1alpha1.WorkloadName(r.Metadata.Name, e.Name)}})
		copies := e.CopyCount()
		for _, m := range e.Members {
			n := int64(1)
			if m.Role == v1alpha1.RoleWorker && m.Worker != nil {
				n = max(m.Worker.Nodes, 0)
			}
			pods += copies * n
		}
	}
	return map[string]any{
		"apiVersion": agentv1alpha1.Group + "/" + agentv1alpha1.Version, "kind": agentv1alpha1.KindReplicaObservation,
		"metadata": map[string]any{"name": r.Metadata.Name, "namespace": v1alpha1.WorkloadNamespace},
		"spec":     map[string]any{"selectors": selectors, "pods": pods, "replicaNamespace": r.Metadata.Namespace},
	}
}
