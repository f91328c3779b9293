package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/response"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/compose"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/internal/plan"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// call is one call's state once its fleet is read: what it read, and what
// its planner decided.
type call struct {
	xr    *v1alpha1.ModelDeployment
	cache fleet.CacheReference
	fleet *fleet.Fleet
	now   time.Time
	// observed are the composed resources the request observed, by key.
	observed map[string]*fnv1.Resource
	outcome  plan.Outcome
}

// write writes a call into the response, whichever way it went: the
// composed resources, the XR's status and readiness, every condition the
// function owns (docs/spec.md#status-and-conditions), the warnings and
// events, and the TTL. Results come out in one order: the fleet's
// warnings, the cache's, the pool reports', then the outcome's own.
func write(rsp *fnv1.RunFunctionResponse, c call) error {
	warn(rsp, c.fleet.Warnings)
	setCacheCondition(rsp, c.cache)
	if c.outcome.Kind != plan.NoClusters {
		warnObservations(rsp, c.fleet.Pools, c.fleet.Findings)
	}
	var composed []composedReplica
	var err error
	if c.outcome.Kind == plan.InvalidSelector {
		composed, err = keepObserved(rsp, c.observed)
	} else {
		composed, err = writeComposed(rsp, c.xr, c.outcome.Plan, c.observed)
	}
	if err != nil {
		return err
	}
	switch c.outcome.Kind {
	case plan.NoClusters:
		response.Warning(rsp, errors.New("No InferenceClusters found")) //nolint:staticcheck // Modelplane v0.3's warning, word for word.
		rsp.Desired.Composite.Ready = fnv1.Ready_READY_FALSE
	case plan.InvalidSelector:
		response.Warning(rsp, errors.New(invalidSelectorMessage(c.outcome.Invalid)))
		rsp.Desired.Composite.Ready = fnv1.Ready_READY_FALSE
	case plan.Placed:
		warnMoves(rsp, c.xr, c.outcome.Plan.Moves)
		warnUnmatched(rsp, c.outcome.Plan.Shortfall)
		setTTL(rsp, c.fleet.Pools, c.now)
	}
	setScheduledCondition(rsp, c.outcome, composed, len(c.fleet.Clusters), c.xr, c.cache)
	setReadyCondition(rsp, len(composed), countReady(composed))
	setCapacityObserved(rsp, c.fleet)
	return nil
}

// writeComposed writes a ModelReplica per placement, a ModelEndpoint per
// placement that is Ready on a cluster with a gateway, and the XR's status.
// A placement kept as observed is written as observed.
func writeComposed(rsp *fnv1.RunFunctionResponse, xr *v1alpha1.ModelDeployment, plan *scheduling.Plan, observed map[string]*fnv1.Resource) ([]composedReplica, error) {
	var composed []composedReplica
	enc := compose.NewEncoder()
	budget := responseBudget{left: maxResponseBytes}
	for _, p := range plan.Replicas {
		if p.AsObserved {
			c, ok, err := keepAsObserved(rsp, p, observed, &budget)
			if err != nil {
				return nil, err
			}
			if ok {
				composed = append(composed, c)
			}
			continue
		}
		s, err := enc.Replica(compose.Replica(xr, p))
		if err != nil {
			return nil, err
		}
		r := &fnv1.Resource{Resource: s}
		if err := budget.spend(rsp, compose.ReplicaKey(p), r); err != nil {
			return nil, err
		}
		obs, wasObserved := observed[compose.ReplicaKey(p)]
		c := composedReplica{cluster: p.Cluster, observed: wasObserved, ready: isReady(obs)}
		if c.ready {
			r.Ready = fnv1.Ready_READY_TRUE
		}
		rsp.Desired.Resources[compose.ReplicaKey(p)] = r
		composed = append(composed, c)
		if p.Gateway == "" || !c.ready {
			continue
		}
		s, err = compose.Encode(compose.Endpoint(xr, p))
		if err != nil {
			return nil, err
		}
		e := &fnv1.Resource{Resource: s}
		if err := budget.spend(rsp, compose.EndpointKey(p), e); err != nil {
			return nil, err
		}
		if isReady(observed[compose.EndpointKey(p)]) {
			e.Ready = fnv1.Ready_READY_TRUE
		}
		rsp.Desired.Resources[compose.EndpointKey(p)] = e
	}
	if err := writeStatus(rsp, len(composed), countReady(composed)); err != nil {
		return nil, err
	}
	if len(composed) == 0 {
		// An XR with nothing composed would otherwise read as ready.
		rsp.Desired.Composite.Ready = fnv1.Ready_READY_FALSE
	}
	return composed, nil
}

// keepAsObserved writes a replica kept as observed, and its endpoint if it
// has one, exactly as they are observed, counting them against the
// response's budget as composed ones are. A replica this XR does not
// compose (none is observed of it) is not this XR's to keep: false.
func keepAsObserved(rsp *fnv1.RunFunctionResponse, p scheduling.Placement, observed map[string]*fnv1.Resource, budget *responseBudget) (composedReplica, bool, error) {
	key, obs := observedReplica(p, observed)
	if obs == nil {
		return composedReplica{}, false, nil
	}
	keep := func(key string, obs *fnv1.Resource) error {
		desired := asObserved(key, obs)
		if err := budget.spend(rsp, key, desired); err != nil {
			return err
		}
		rsp.Desired.Resources[key] = desired
		return nil
	}
	if err := keep(key, obs); err != nil {
		return composedReplica{}, false, err
	}
	if endpoint, ok := observed[compose.EndpointKeyOf(key)]; ok {
		if err := keep(compose.EndpointKeyOf(key), endpoint); err != nil {
			return composedReplica{}, false, err
		}
	}
	return composedReplica{cluster: p.Cluster, observed: true, ready: isReady(obs)}, true, nil
}

// observedReplica is the observed composed ModelReplica of a placement kept
// as observed: under its key, or, when its identity did not read, the one
// of its name.
func observedReplica(p scheduling.Placement, observed map[string]*fnv1.Resource) (string, *fnv1.Resource) {
	name := func(r *fnv1.Resource) string {
		return r.GetResource().GetFields()["metadata"].GetStructValue().GetFields()["name"].GetStringValue()
	}
	if key := compose.ReplicaKey(p); p.Cluster != "" && name(observed[key]) == p.Name {
		return key, observed[key]
	}
	for _, k := range slices.Sorted(maps.Keys(observed)) {
		if compose.IsReplicaKey(k) && name(observed[k]) == p.Name {
			return k, observed[k]
		}
	}
	return "", nil
}

// keepObserved writes every observed replica and endpoint desired as it
// is, and the XR's status counting them: for a nodeSelector that does not
// compile, nothing new is placed and nothing moves.
func keepObserved(rsp *fnv1.RunFunctionResponse, observed map[string]*fnv1.Resource) ([]composedReplica, error) {
	var composed []composedReplica
	for _, k := range slices.Sorted(maps.Keys(observed)) {
		if !compose.IsComposedKey(k) {
			continue
		}
		rsp.Desired.Resources[k] = asObserved(k, observed[k])
		if compose.IsReplicaKey(k) {
			composed = append(composed, composedReplica{observed: true, ready: isReady(observed[k])})
		}
	}
	return composed, writeStatus(rsp, len(composed), countReady(composed))
}

// asObserved is an observed composed resource, desired as it is; a
// ModelReplica is labelled not counted (compose.ReplicaFromObserved).
func asObserved(key string, obs *fnv1.Resource) *fnv1.Resource {
	desired := &fnv1.Resource{Resource: compose.DesiredFromObserved(obs.GetResource())}
	if compose.IsReplicaKey(key) {
		desired.Resource = compose.ReplicaFromObserved(obs.GetResource())
	}
	if isReady(obs) {
		desired.Ready = fnv1.Ready_READY_TRUE
	}
	return desired
}

// writeStatus writes the XR's status.replicas.
func writeStatus(rsp *fnv1.RunFunctionResponse, total, ready int) error {
	s, err := structpb.NewValue(map[string]any{"replicas": map[string]any{"total": total, "ready": ready}})
	if err != nil {
		return fmt.Errorf("cannot write the ModelDeployment status: %w", err)
	}
	rsp.Desired.Composite.Resource.Fields["status"] = s
	return nil
}

// isReady reads an observed composed resource's Ready condition.
func isReady(r *fnv1.Resource) bool { return compose.IsReady(r.GetResource()) }

// setTTL asks to be called again no later than when the freshest-but-expiring
// usable observation goes stale, so a silent agent is noticed
// (docs/spec.md#response-ttl).
func setTTL(rsp *fnv1.RunFunctionResponse, pools []observation.PoolReport, now time.Time) {
	ttl := response.DefaultTTL
	for _, p := range pools {
		if p.State == observation.Usable {
			ttl = min(ttl, max(p.ExpiresAt.Sub(now), time.Second))
		}
	}
	rsp.Meta.Ttl = durationpb.New(ttl)
}

// requirements are the required resources an iteration asks Crossplane
// for, as the response says them.
func requirements(selectors map[string]fleet.Selector) *fnv1.Requirements {
	out := &fnv1.Requirements{Resources: make(map[string]*fnv1.ResourceSelector, len(selectors))}
	for name, s := range selectors {
		rs := &fnv1.ResourceSelector{ApiVersion: v1alpha1.APIVersion, Kind: s.Kind, Namespace: s.Namespace}
		if s.Name != "" {
			rs.Match = &fnv1.ResourceSelector_MatchName{MatchName: s.Name}
		} else {
			rs.Match = &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: s.Labels}}
		}
		out.Resources[name] = rs
	}
	return out
}
