package assume

import (
	"context"

	"github.com/modelplaneai/fleet-scheduler/internal/compose"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// Schedule plans a call's replicas in the ledger's critical section:
// reading what other deployments' calls placed into the snapshot's
// assumed placements, planning, and recording what this call places. A
// call whose context is done by the time it has planned records nothing:
// its caller has gone, so its response will not be applied. clusters are
// the call's clusters' names by uid. The server and the fleet simulator
// both schedule through it, so the simulator measures the server's
// sequence, not a copy of it.
func (l *Ledger) Schedule(ctx context.Context, d Deployment, clusters map[string]string, fl Fleet, s scheduling.Snapshot) (*scheduling.Plan, error) {
	l.Lock()
	defer l.Unlock()
	for _, r := range l.Assumed(d, clusters, fl, s.Now) {
		s.Assumed = append(s.Assumed, scheduling.Replica{Object: r})
	}
	// The scheduler is pure and takes no context: DRA's CEL cost limit
	// bounds every evaluation, and a pass is milliseconds.
	plan, err := scheduling.Schedule(s) //nolint:contextcheck // See above.
	if err != nil || ctx.Err() != nil {
		return plan, err
	}
	l.Record(d, Entries(s, plan, clusters))
	return plan, nil
}

// Entries are the placements a plan makes that the fleet does not show
// yet: its new and re-placed replicas, as composed, without their pod
// templates (charging reads none). clusters are the clusters' names by
// uid.
func Entries(s scheduling.Snapshot, plan *scheduling.Plan, clusters map[string]string) []Entry {
	byName := make(map[string]string, len(clusters))
	for uid, name := range clusters {
		byName[name] = uid
	}
	var out []Entry
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
		out = append(out, Entry{Replica: r, ClusterUID: byName[p.Cluster], At: s.Now})
	}
	return out
}
