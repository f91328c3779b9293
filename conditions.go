package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/response"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/internal/plan"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// Condition types and reasons on the ModelDeployment, as Modelplane v0.3 sets
// them, plus CapacityObserved.
const (
	condReplicasScheduled  = "ReplicasScheduled"
	condReplicasReady      = "ReplicasReady"
	condModelCacheResolved = "ModelCacheResolved"
	condCapacityObserved   = "CapacityObserved"

	reasonNoClusters           = "NoClusters"
	reasonInsufficientCapacity = "InsufficientCapacity"
	reasonInvalidNodeSelector  = "InvalidNodeSelector"
	reasonReplicasCreated      = "ReplicasCreated"
	reasonScheduling           = "Scheduling"
	reasonNoReplicasScheduled  = "NoReplicasScheduled"
	reasonAllReplicasReady     = "AllReplicasReady"
	reasonModelStarting        = "ModelStarting"
	reasonCacheResolved        = "ModelCacheResolved"
	reasonCacheNotFound        = "ModelCacheNotFound"
	reasonNoCacheReferenced    = "NoModelCacheReferenced"
	reasonAllPoolsObserved     = "AllPoolsObserved"
	reasonWholeNodeFallback    = "WholeNodeFallback"
)

// setCacheCondition reports whether the referenced ModelCache resolved. A
// deployment that references none has nothing to wait for: True, so that
// a condition left by a reference since removed does not linger (Crossplane
// keeps a condition a function stops returning).
func setCacheCondition(rsp *fnv1.RunFunctionResponse, cache fleet.CacheReference) {
	switch {
	case cache.Ref == nil:
		response.ConditionTrue(rsp, condModelCacheResolved, reasonNoCacheReferenced).WithMessage("No ModelCache is referenced")
	case cache.Found:
		response.ConditionTrue(rsp, condModelCacheResolved, reasonCacheResolved)
	default:
		msg := fmt.Sprintf("ModelCache %s not found; holding replica placement", cache.Ref.Name)
		response.ConditionFalse(rsp, condModelCacheResolved, reasonCacheNotFound).WithMessage(msg)
		response.Warning(rsp, errors.New(msg))
	}
}

// warnObservations warns of every invalid pool report, binding that does
// not read and unreadable PodsScheduled condition, naming the object and
// the field.
// Warnings come out sorted, whatever order the objects arrived in.
func warnObservations(rsp *fnv1.RunFunctionResponse, pools []observation.PoolReport, findings []observation.ReplicaFinding) {
	var warnings []string
	for _, p := range pools {
		if p.State == observation.Invalid {
			warnings = append(warnings, fmt.Sprintf("InferenceCluster %s pool %s: invalid observation, using whole-node accounting: %s", p.Cluster, p.Pool, p.Defect))
		}
		for _, d := range p.DeviceDefects {
			warnings = append(warnings, fmt.Sprintf("InferenceCluster %s pool %s: %s; selectors that read it do not match the device", p.Cluster, p.Pool, d))
		}
		if p.BindingDefect != "" {
			warnings = append(warnings, fmt.Sprintf("InferenceCluster %s pool %s: %s; ignored, the pool is not accounted as steered", p.Cluster, p.Pool, p.BindingDefect))
		}
	}
	for _, f := range findings {
		warnings = append(warnings, fmt.Sprintf("%s; treating its pods as not yet counted by any observation", f))
	}
	warn(rsp, warnings)
}

// warn emits each warning, sorted, so results never depend on input order.
func warn(rsp *fnv1.RunFunctionResponse, warnings []string) {
	sort.Strings(warnings)
	for i, w := range warnings {
		if i == maxWarnings {
			response.Warning(rsp, fmt.Errorf("%d more warnings like the ones above are not shown", len(warnings)-maxWarnings))
			return
		}
		response.Warning(rsp, errors.New(w))
	}
}

// maxWarnings bounds the warnings of one kind a response carries:
// Crossplane makes each an event of the XR, and a fleet of a million
// replicas that do not read would otherwise be a million warnings, in a
// response larger than Crossplane accepts.
const maxWarnings = 100

// composedReplica is what a response composes of one replica.
type composedReplica struct {
	cluster string
	// observed is whether the replica was composed before, and is observed.
	observed, ready bool
}

// countReady is how many of the composed replicas are Ready.
func countReady(composed []composedReplica) int {
	n := 0
	for _, c := range composed {
		if c.ready {
			n++
		}
	}
	return n
}

// invalidSelectorMessage says which selector does not compile.
func invalidSelectorMessage(invalid *scheduling.InvalidSelectorError) string {
	return "Invalid nodeSelector CEL expression: " + invalid.Error()
}

// setScheduledCondition sets ReplicasScheduled from the outcome and what
// was composed of it, and emits the Normal event the first time replicas
// are placed.
func setScheduledCondition(rsp *fnv1.RunFunctionResponse, o plan.Outcome, composed []composedReplica, clusters int, xr *v1alpha1.ModelDeployment, cache fleet.CacheReference) {
	switch o.Kind {
	case plan.NoClusters:
		response.ConditionFalse(rsp, condReplicasScheduled, reasonNoClusters).WithMessage(noClustersMessage(xr, cache))
		return
	case plan.InvalidSelector:
		response.ConditionFalse(rsp, condReplicasScheduled, reasonInvalidNodeSelector).WithMessage(invalidSelectorMessage(o.Invalid))
		return
	case plan.Placed:
	}
	p := o.Plan
	anyObserved := false
	names := map[string]bool{}
	for _, c := range composed {
		names[c.cluster] = true
		anyObserved = anyObserved || c.observed
	}
	total := len(composed)
	short := ""
	if p.Shortfall != nil {
		short = p.Shortfall.String()
	}
	if w := p.Waiting; w.Replicas > 0 {
		short = join(fmt.Sprintf("%d %s for %s pods, the longest %s", w.Replicas, plural(w.Replicas, "replica waits", "replicas wait"), plural(w.Replicas, "its", "their"), w.Longest.Round(time.Second)), short)
	}

	switch {
	case total == 0:
		msg := fmt.Sprintf("0 of %d replicas scheduled (checked %d clusters)", p.Wanted, clusters)
		response.ConditionFalse(rsp, condReplicasScheduled, reasonInsufficientCapacity).WithMessage(join(msg, short))
	case anyObserved:
		msg := fmt.Sprintf("Scheduled %d of %d replicas", total, p.Wanted)
		response.ConditionTrue(rsp, condReplicasScheduled, reasonReplicasCreated).WithMessage(join(msg, short))
	default:
		c := response.ConditionFalse(rsp, condReplicasScheduled, reasonScheduling)
		if short != "" {
			c.WithMessage(join(fmt.Sprintf("Scheduled %d of %d replicas", total, p.Wanted), short))
		}
		response.Normalf(rsp, "Scheduled %d replicas across %d clusters: %s", total, len(names), strings.Join(slices.Sorted(maps.Keys(names)), ", "))
	}
}

// setReadyCondition sets ReplicasReady from how many replicas are composed
// and how many of them are Ready.
func setReadyCondition(rsp *fnv1.RunFunctionResponse, total, ready int) {
	switch {
	case total == 0:
		response.ConditionFalse(rsp, condReplicasReady, reasonNoReplicasScheduled)
	case ready == total:
		response.ConditionTrue(rsp, condReplicasReady, reasonAllReplicasReady).WithMessage(fmt.Sprintf("%d of %d ready", ready, total))
	default:
		response.ConditionFalse(rsp, condReplicasReady, reasonModelStarting).WithMessage(fmt.Sprintf("%d of %d ready", ready, total))
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// warnMoves emits a Warning per replica re-placed because its pods stayed
// unscheduled: which, how long it waited, from where and to where.
func warnMoves(rsp *fnv1.RunFunctionResponse, xr *v1alpha1.ModelDeployment, moves []scheduling.Move) {
	for _, m := range moves {
		to := "another cluster"
		if m.SameReplica {
			to = "another pool of its cluster"
		}
		response.Warning(rsp, fmt.Errorf("Re-placed ModelReplica %s/%s on %s: its pods were unscheduled for %s on %s; now on %s", //nolint:staticcheck // An event for people, capitalised as the others.
			xr.Metadata.Namespace, m.Name, to, m.Unscheduled.Round(time.Second), poolList(m.From), poolList(m.To)))
	}
}

// noClustersMessage echoes the selector that selected no InferenceCluster
// (docs/spec.md#status-and-conditions): a typo in a label is then plain.
func noClustersMessage(xr *v1alpha1.ModelDeployment, cache fleet.CacheReference) string {
	var parts []string
	if cs := xr.Spec.Template.Spec.ClusterSelector; cs != nil && len(cs.MatchLabels) > 0 {
		parts = append(parts, "clusterSelector.matchLabels "+labelList(cs.MatchLabels))
	}
	if len(cache.ClusterLabels) > 0 {
		parts = append(parts, fmt.Sprintf("ModelCache %s's clusterSelector.matchLabels %s", cache.Ref.Name, labelList(cache.ClusterLabels)))
	}
	if len(parts) == 0 {
		return "No InferenceCluster exists"
	}
	return "No InferenceCluster has every label of " + strings.Join(parts, " and ")
}

// labelList renders labels as key=value, sorted by key.
func labelList(labels map[string]string) string {
	out := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		out = append(out, k+"="+labels[k])
	}
	return "{" + strings.Join(out, ", ") + "}"
}

// warnUnmatched emits a Warning per request of the deployment that no
// pool's devices meet where its engine matched no pool, saying which
// selector and what the pools offer (docs/spec.md#a-selector-that-matches-no-pool).
func warnUnmatched(rsp *fnv1.RunFunctionResponse, sf *scheduling.Shortfall) {
	if sf == nil {
		return
	}
	warnings := make([]string, 0, len(sf.Unmatched))
	for _, u := range sf.Unmatched {
		warnings = append(warnings, "nodeSelector: "+u.String())
	}
	warn(rsp, warnings)
}

func poolList(pools []scheduling.PoolRef) string {
	out := make([]string, 0, len(pools))
	for _, p := range pools {
		out = append(out, p.String())
	}
	return strings.Join(out, ", ")
}

func join(msg, short string) string {
	if short == "" {
		return msg
	}
	return msg + "; " + short
}

// setCapacityObserved is True when every pool of every Ready cluster was
// accounted from a usable observation, and otherwise names the pools on
// whole-node accounting and why, and the clusters that do not read.
func setCapacityObserved(rsp *fnv1.RunFunctionResponse, fl *fleet.Fleet) {
	var fallback []string
	for _, p := range fl.Pools {
		if p.ClusterReady && p.State != observation.Usable {
			fallback = append(fallback, fmt.Sprintf("%s/%s (%s)", p.Cluster, p.Pool, p.Reason()))
		}
	}
	// A cluster that does not read may be Ready: its pools are not known,
	// let alone accounted.
	for _, c := range fl.Clusters {
		if c.Unreadable != "" {
			fallback = append(fallback, fmt.Sprintf("%s (does not read: %s)", c.Object.Metadata.Name, c.Unreadable))
		}
	}
	pools := fl.Pools
	switch {
	case len(fallback) > 0:
	case len(pools) == 0:
		response.ConditionTrue(rsp, condCapacityObserved, reasonAllPoolsObserved).
			WithMessage("No pool of a Ready cluster to account")
		return
	default:
		response.ConditionTrue(rsp, condCapacityObserved, reasonAllPoolsObserved).
			WithMessage("Every pool of every Ready cluster is accounted by free devices")
		return
	}
	sort.Strings(fallback)
	response.ConditionFalse(rsp, condCapacityObserved, reasonWholeNodeFallback).
		WithMessage("Whole-node accounting for " + strings.Join(fallback, ", "))
}
