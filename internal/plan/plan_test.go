package plan

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/assume"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

var at = time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)

// nothingShown is a fleet that holds none of the assumed placements.
type nothingShown struct{}

func (nothingShown) Shows(string, string, string, []string) bool { return false }

// oneNode is a cluster with one pool of one 8-GPU node on whole-node
// accounting, with a uid as an API server gives it: room for one
// claiming replica.
func oneNode(uid string) []scheduling.Cluster {
	c := fx.Cluster("c1").Pools(fx.Pool("p", 1).Devices(fx.GPU("gpu", 8, "80Gi")).Obj()).Obj()
	c.Metadata.UID = uid
	clusters, _ := observation.Clusters([]*v1alpha1.InferenceCluster{c}, at, 5*time.Minute)
	return clusters
}

// call is a call of deployment name (with a uid) wanting one one-GPU
// replica on clusters.
func call(name string, clusters []scheduling.Cluster) Call {
	d := fx.Deployment(name).Replicas(1).Engines(fx.Standalone("main", fx.GPURequest(1))).Obj()
	d.Metadata.UID = "uid-" + name
	return Call{Deployment: d, Settings: Defaults(), Clusters: clusters, Now: at, Shown: nothingShown{}}
}

func TestPlan(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	invalid := call("a", oneNode("uid-c1"))
	invalid.Deployment = fx.Deployment("a").Engines(fx.Standalone("main", fx.Request("gpu", 1, "device.driver =="))).Obj()
	kept := call("a", nil)
	kept.Replicas = []scheduling.Replica{{Object: fx.Replica("a", "gone", 0).Obj(), Unreadable: "spec.engines: cannot use a JSON string as an array"}}
	retainOnly := call("a", oneNode("uid-c1"))
	retainOnly.CacheUnresolved = true

	type want struct {
		kind   Kind
		placed int
		err    error
	}
	cases := map[string]struct {
		reason string
		ctx    context.Context
		call   Call
		want   want
	}{
		"Placed": {
			reason: "A call with a cluster that has room places its replica.",
			ctx:    context.Background(),
			call:   call("a", oneNode("uid-c1")),
			want:   want{kind: Placed, placed: 1},
		},
		"NoClusters": {
			reason: "A call that selected no cluster keeps those of the deployment's replicas that did not read as observed.",
			ctx:    context.Background(),
			call:   kept,
			want:   want{kind: NoClusters, placed: 1},
		},
		"InvalidSelector": {
			reason: "A nodeSelector that does not compile is an outcome, not an error.",
			ctx:    context.Background(),
			call:   invalid,
			want:   want{kind: InvalidSelector},
		},
		"CacheUnresolved": {
			reason: "With its ModelCache unresolved, a deployment places nothing new.",
			ctx:    context.Background(),
			call:   retainOnly,
			want:   want{kind: Placed},
		},
		"CallerGone": {
			reason: "A call whose caller has gone is not scheduled: the context's error.",
			ctx:    cancelled,
			call:   call("a", oneNode("uid-c1")),
			want:   want{err: context.Canceled},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			out, err := Planner{}.Plan(tc.ctx, tc.call)
			got := want{kind: out.Kind, err: err}
			if out.Plan != nil {
				got.placed = len(out.Plan.Replicas)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{}), cmpopts.EquateErrors()); diff != "" {
				t.Errorf("%s\nPlan(...): -want, +got:\n%s", tc.reason, diff)
			}
			if (out.Kind == InvalidSelector) != (out.Invalid != nil) {
				t.Errorf("%s\nPlan(...): kind %v with Invalid %v", tc.reason, out.Kind, out.Invalid)
			}
		})
	}
}

func TestPlanAssumedPlacements(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	type want struct {
		// placed is how many replicas b's call places, and assumed how
		// many placements the ledger holds after it.
		placed, assumed int
	}
	cases := map[string]struct {
		reason string
		// ctx is a's call's context, and uid its cluster's.
		ctx  context.Context
		uid  string
		want want
	}{
		"AnotherCallSeesThePlacement": {
			reason: "b's call, reading the same fleet after a's, is charged what a placed: the one node is taken.",
			ctx:    context.Background(),
			uid:    "uid-c1",
			want:   want{placed: 0, assumed: 1},
		},
		"ACallWhoseCallerWentRecordsNothing": {
			reason: "a's caller has gone once it has planned, so a's response will not be applied: b's call gets the node.",
			ctx:    &cancelAfterPlanning{Context: cancelled},
			uid:    "uid-c1",
			want:   want{placed: 1, assumed: 1},
		},
		"ObjectsWithoutUIDsTakeNoPart": {
			reason: "Clusters without uids (render fixtures) neither record nor see assumed placements.",
			ctx:    context.Background(),
			want:   want{placed: 1, assumed: 0},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := Planner{Ledger: assume.New(assume.DefaultTTL)}
			if _, err := p.Plan(tc.ctx, call("a", oneNode(tc.uid))); err != nil {
				t.Fatal(err)
			}
			out, err := p.Plan(context.Background(), call("b", oneNode(tc.uid)))
			if err != nil {
				t.Fatal(err)
			}
			got := want{placed: len(out.Plan.Replicas), assumed: p.Ledger.Len()}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nPlan(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// cancelAfterPlanning is a context whose caller goes while the call is
// planned: not done when planning starts, done when it ends.
type cancelAfterPlanning struct {
	context.Context

	asked int
}

func (c *cancelAfterPlanning) Err() error {
	c.asked++
	if c.asked == 1 {
		return nil
	}
	return c.Context.Err()
}
