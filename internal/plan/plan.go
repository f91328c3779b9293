// Package plan is one call's path from decoded inputs to a plan: the
// function input's settings, read once (settings.go); whether the call
// takes part in assumed placements and, when it does, the ledger's
// critical section; the scheduling snapshot and the schedule call; and
// the outcome the response is written from. The function (fn.go) and the
// fleet simulator's direct path (sim.Direct) both plan through it, so the
// simulator measures the function's sequence, not a copy of it.
package plan

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/assume"
	"github.com/modelplaneai/fleet-scheduler/internal/compose"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// Planner is what a server keeps across calls to plan them. The zero
// Planner compiles every selector anew and assumes nothing.
type Planner struct {
	// Selectors keeps the deployments' compiled CEL selectors; nil
	// compiles them on every call.
	Selectors *scheduling.Selectors
	// Ledger holds the replicas this server composed recently that the
	// fleet does not show yet (docs/spec.md#assumed-placements); nil
	// assumes none.
	Ledger *assume.Ledger
}

// Call is one call's decoded inputs.
type Call struct {
	Deployment *v1alpha1.ModelDeployment
	Settings   Settings

	// CacheUnresolved is whether the deployment references a ModelCache
	// that does not exist: with its footprint unknown, a new replica could
	// land where the model is never staged, so the deployment's replicas
	// are kept and none is placed.
	CacheUnresolved bool

	// Clusters and Replicas are the fleet, observed at Now.
	Clusters []scheduling.Cluster
	Replicas []scheduling.Replica
	Now      time.Time

	// Shown tells which assumed placements the call's fleet already
	// holds; only read when the call takes part in assumed placements.
	Shown assume.Fleet

	// Capacity is how much the plan says of what each pool had left, for
	// the server's metrics and debug log; none costs nothing.
	Capacity scheduling.Capacity

	// PodNodes has the plan say where the ledger assumed each new
	// engine's claiming pods bind (scheduling.Options.PodNodes), for the
	// fleet simulator.
	PodNodes bool

	// CompareWholeNode has the outcome say how many replicas whole-node
	// accounting would have left unplaced (Outcome.BeyondWholeNode), for
	// the server's metrics: a second pass of a call that places anew.
	CompareWholeNode bool
}

// Kind is which way a call went.
type Kind int

// The ways a call goes.
const (
	// Placed is a call whose fleet was scheduled.
	Placed Kind = iota
	// NoClusters is a call that selected no InferenceCluster: the
	// deployment's replicas are kept as observed.
	NoClusters
	// InvalidSelector is a call whose deployment has a nodeSelector that
	// does not compile: nothing is placed and nothing moves
	// (docs/spec.md#invalid-node-selectors).
	InvalidSelector
)

// Outcome is what one call decided, the one value its response is written
// from.
type Outcome struct {
	Kind Kind
	// Plan holds the placements; for NoClusters, the replicas kept as
	// observed; nil for InvalidSelector.
	Plan *scheduling.Plan
	// Invalid names the engine, member and request whose selector does not
	// compile (InvalidSelector).
	Invalid *scheduling.InvalidSelectorError
	// Assumed is how many placements of other calls, not in the fleet yet,
	// the call charged (docs/spec.md#assumed-placements).
	Assumed int
	// BeyondWholeNode is how many more replicas the plan composes than
	// whole-node accounting would have (Call.CompareWholeNode).
	BeyondWholeNode int
}

// Plan plans one call. The error is for a call that could not be planned,
// and is the context's once the caller has gone; a nodeSelector that does
// not compile is an Outcome, not an error.
func (p Planner) Plan(ctx context.Context, c Call) (Outcome, error) {
	if len(c.Clusters) == 0 {
		return Outcome{Kind: NoClusters, Plan: &scheduling.Plan{Replicas: scheduling.AsObserved(c.Deployment, c.Replicas)}}, nil
	}
	if err := ctx.Err(); err != nil {
		return Outcome{}, fmt.Errorf("cannot schedule replicas: the caller has gone: %w", err)
	}
	s := scheduling.Snapshot{
		Deployment: c.Deployment,
		Clusters:   c.Clusters,
		Replicas:   c.Replicas,
		Options: scheduling.Options{
			Binding:                 c.Settings.AssumedBinding,
			RetainOnly:              c.CacheUnresolved,
			Selectors:               p.Selectors,
			ReplaceUnscheduledAfter: c.Settings.ReplaceUnscheduledAfter,
			Capacity:                c.Capacity,
			PodNodes:                c.PodNodes,
		},
		Now: c.Now,
	}
	plan, err := p.schedule(ctx, c, &s)
	if invalid, ok := errors.AsType[*scheduling.InvalidSelectorError](err); ok {
		return Outcome{Kind: InvalidSelector, Invalid: invalid, Assumed: len(s.Assumed)}, nil
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("cannot schedule replicas: %w", err)
	}
	out := Outcome{Kind: Placed, Plan: plan, Assumed: len(s.Assumed)}
	if c.CompareWholeNode {
		// Outside the ledger's critical section: it records nothing.
		if out.BeyondWholeNode, err = scheduling.BeyondWholeNode(s, plan); err != nil { //nolint:contextcheck // As in schedule.
			return Outcome{}, fmt.Errorf("cannot compare with whole-node accounting: %w", err)
		}
	}
	return out, nil
}

// schedule runs the scheduler, with the assumed placements it charged
// added to s. Where the server keeps assumed placements
// and the call takes part, reading what other calls placed, planning and
// recording what this one places is one critical section
// (docs/spec.md#assumed-placements). A call whose caller has gone by the
// time it has planned records nothing: its response will not be applied.
func (p Planner) schedule(ctx context.Context, c Call, s *scheduling.Snapshot) (*scheduling.Plan, error) {
	d, clusters, ok := c.assumes()
	if p.Ledger == nil || !ok {
		return scheduling.Schedule(*s) //nolint:contextcheck // The scheduler is pure: DRA's CEL cost limit bounds every evaluation.
	}
	p.Ledger.Lock()
	defer p.Ledger.Unlock()
	for _, r := range p.Ledger.Assumed(d, clusters, c.Shown, s.Now) {
		s.Assumed = append(s.Assumed, scheduling.Replica{Object: r})
	}
	plan, err := scheduling.Schedule(*s) //nolint:contextcheck // As above.
	if err != nil || ctx.Err() != nil {
		return plan, err
	}
	p.Ledger.Record(d, entries(*s, plan, clusters))
	return plan, nil
}

// assumes says whether the call takes part in assumed placements: only
// one whose XR and readable clusters carry uids, as real API objects do
// (render fixtures don't, so no fixture sees another's). It returns the
// deployment and the clusters' names by uid.
func (c Call) assumes() (assume.Deployment, map[string]string, bool) {
	xr := c.Deployment.Metadata
	d := assume.Deployment{UID: xr.UID, Namespace: xr.Namespace, Name: xr.Name}
	uids := make(map[string]string, len(c.Clusters))
	for _, cl := range c.Clusters {
		if cl.Unreadable != "" {
			continue
		}
		if cl.Object.Metadata.UID == "" {
			return d, nil, false
		}
		uids[cl.Object.Metadata.UID] = cl.Object.Metadata.Name
	}
	return d, uids, d.UID != "" && len(uids) > 0
}

// entries are the placements a plan makes that the fleet does not show
// yet: its new and re-placed replicas, as composed, without their pod
// templates (charging reads none). clusters are the clusters' names by
// uid.
func entries(s scheduling.Snapshot, plan *scheduling.Plan, clusters map[string]string) []assume.Entry {
	byName := make(map[string]string, len(clusters))
	for uid, name := range clusters {
		byName[name] = uid
	}
	var out []assume.Entry
	for _, p := range plan.Replicas {
		if !p.New && !p.Moved {
			continue
		}
		r := compose.Replica(s.Deployment, p)
		for ei := range r.Spec.Engines {
			for mi := range r.Spec.Engines[ei].Members {
				r.Spec.Engines[ei].Members[mi].Template = nil
			}
		}
		out = append(out, assume.Entry{Replica: r, ClusterUID: byName[p.Cluster], At: s.Now})
	}
	return out
}
