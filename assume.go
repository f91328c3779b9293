package main

import (
	"context"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/assume"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// schedule plans the deployment's replicas. Where the server keeps assumed
// placements and the call takes part (CONTRACT 4.6), reading what other
// calls placed, planning, and recording what this one places is one
// critical section; a call whose caller has gone assumes nothing.
func (f *Function) schedule(ctx context.Context, s scheduling.Snapshot, fl *fleet.Fleet) (*scheduling.Plan, error) {
	// The scheduler is pure and takes no context: DRA's CEL cost limit
	// bounds every evaluation, and a pass is milliseconds.
	d, uids, ok := assumes(s.Deployment, fl)
	if f.assumed == nil || !ok {
		return scheduling.Schedule(s) //nolint:contextcheck // See above.
	}
	return f.assumed.Schedule(ctx, d, uids, fl, s)
}

// assumes says whether a call takes part in assumed placements: only one
// whose XR and clusters carry uids, as real API objects do (render fixtures
// don't, so no fixture sees another's). It returns the deployment and the
// clusters' names by uid.
func assumes(xr *v1alpha1.ModelDeployment, fl *fleet.Fleet) (assume.Deployment, map[string]string, bool) {
	d := assume.Deployment{UID: xr.Metadata.UID, Namespace: xr.Metadata.Namespace, Name: xr.Metadata.Name}
	uids := make(map[string]string, len(fl.Clusters))
	for _, c := range fl.Clusters {
		if c.Unreadable != "" {
			continue
		}
		if c.Object.Metadata.UID == "" {
			return d, nil, false
		}
		uids[c.Object.Metadata.UID] = c.Object.Metadata.Name
	}
	return d, uids, d.UID != "" && len(uids) > 0
}
