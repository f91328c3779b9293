package live

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// labelCounted is the label the function composes every ModelReplica with
// (docs/spec.md#narrow-requests).
const labelCounted = "scheduler.fn.modelplane.ai/counted"

// The required resources of a call that reads the whole fleet, and of one
// that reads narrowly, as the function names them.
var (
	wholeFleet = []string{"all-replicas", "clusters"}
	narrowly   = []string{"clusters", "own-replicas", "uncounted-replicas"}
)

// narrowCalls: once every ModelReplica of the fleet carries the counted
// label, the deployment's calls go narrow (Crossplane answers own-replicas
// and uncounted-replicas, and the requests shrink), placements unchanged;
// a pool's report going stale sends them back to all-replicas. Asserted
// from what Crossplane sent, as the recorder between it and the function
// saw it.
func (cp *controlPlane) narrowCalls(t *testing.T, fl fleet) {
	t.Helper()
	before := uids(cp.replicasOf(t, namespace, deployment))
	cp.applyAll(t, asOf(t, fl.clusters, time.Now()))
	// Until now the other teams' replicas were Modelplane v0.3's, without
	// the label: every call read the whole fleet. Now they carry it, as
	// the function composes them, counted: their pods were scheduled days
	// before the reports.
	labelled := time.Now()
	for _, r := range asOf(t, fl.replicas, labelled) {
		labels := r.GetLabels()
		labels[labelCounted] = "true"
		r.SetLabels(labels)
		cp.apply(t, r)
	}
	poke := cp.poker(t)
	var full, narrow recordedCall
	eventually(t, 2*(defaultTTL+ttlJitter)+margin, "a narrow call", func() error {
		poke()
		calls := cp.recorder.since(labelled)
		for _, c := range calls {
			switch {
			case slices.Equal(c.required, wholeFleet):
				full = c
			case slices.Equal(c.required, narrowly) && full.bytes > 0:
				narrow = c
				return nil
			}
		}
		return fmt.Errorf("the calls since every replica was labelled carried %v", carried(calls))
	})
	t.Logf("a call read the whole fleet in %d bytes, then the next read narrowly in %d", full.bytes, narrow.bytes)
	if narrow.bytes >= full.bytes {
		t.Errorf("the narrow request is %d bytes, the whole fleet's %d", narrow.bytes, full.bytes)
	}
	cp.waitXR(t, converge, xrWant{conditions: map[string]conditionWant{
		"ReplicasScheduled": {status: "True", reason: "ReplicasCreated", message: "Scheduled 2 of 2 replicas"},
		"CapacityObserved":  {status: "True", reason: "AllPoolsObserved"},
	}, total: 2})
	harness.CheckKept(t, before, uids(cp.replicasOf(t, namespace, deployment)))

	// One pool's report goes stale: a replica it counted may not be counted
	// any more, and only the whole fleet shows it.
	clusters := asOf(t, fl.clusters, time.Now())
	for _, c := range clusters {
		if c.GetName() == "gke-us-central" {
			setObservedAt(t, c, "h100", time.Now().Add(-observationMaxAge-time.Minute))
		}
	}
	cp.applyAll(t, clusters)
	stale := time.Now()
	eventually(t, 2*(defaultTTL+ttlJitter)+margin, "calls that read the whole fleet again", func() error {
		poke()
		calls := cp.recorder.since(stale)
		// The call that saw the stale report read the fleet whole, and so
		// does its deployment's next, from its first iteration.
		answered := 0
		for _, c := range calls {
			if slices.Equal(c.required, narrowly) && answered > 0 {
				t.Fatalf("a call read narrowly after a whole read saw the stale report: %v", carried(calls))
			}
			if slices.Equal(c.required, wholeFleet) {
				answered++
			}
		}
		if answered < 2 {
			return fmt.Errorf("the calls since the report went stale carried %v", carried(calls))
		}
		return nil
	})
	harness.CheckKept(t, before, uids(cp.replicasOf(t, namespace, deployment)))

	// The agent reports again: the step after this one starts from every
	// report fresh.
	cp.applyAll(t, asOf(t, fl.clusters, time.Now()))
	eventually(t, 2*(defaultTTL+ttlJitter)+margin, "CapacityObserved True again", func() error {
		poke()
		if s := conditionStatus(cp.xr(t), "CapacityObserved"); s != "True" {
			return fmt.Errorf("CapacityObserved is %q", s)
		}
		return nil
	})
}

// poker returns poke: it changes an annotation of the XR, which Crossplane
// watches, so that it reconciles the XR soon rather than when the
// function's TTL runs out; at most every five seconds.
func (cp *controlPlane) poker(t *testing.T) func() {
	t.Helper()
	var last time.Time
	return func() {
		if time.Since(last) < 5*time.Second {
			return
		}
		last = time.Now()
		xr := harness.Object(apiVersion, "ModelDeployment", namespace, deployment)
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"test.fleet-scheduler/poked":%q}}}`, last.Format(time.RFC3339Nano))
		if err := cp.kube.Patch(t.Context(), xr, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatalf("cannot annotate ModelDeployment %s/%s: %v", namespace, deployment, err)
		}
	}
}

// carried are the required resources each call carried, for messages.
func carried(calls []recordedCall) [][]string {
	out := make([][]string, 0, len(calls))
	for _, c := range calls {
		out = append(out, c.required)
	}
	return out
}
