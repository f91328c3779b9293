package fleet

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/wiretest"
	"github.com/modelplaneai/fleet-scheduler/internal/wire"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// now is the clock of every test read.
var now = time.Date(2026, 10, 20, 20, 8, 0, 0, time.UTC)

// readRequest is what a call reads: a deployment and its fleet, as
// Crossplane sends them.
type readRequest struct {
	xr       *v1alpha1.ModelDeployment
	clusters [][]byte
	replicas [][]byte
}

func request(t *testing.T, xr *v1alpha1.ModelDeployment, clusters, replicas []any) readRequest {
	t.Helper()
	return readRequest{xr: xr, clusters: wireObjects(t, clusters...), replicas: wireObjects(t, replicas...)}
}

// wireObjects are objects as Structs on the wire, as a request carries them.
func wireObjects(t *testing.T, objs ...any) [][]byte {
	t.Helper()
	out := make([][]byte, 0, len(objs))
	for _, o := range objs {
		out = append(out, wiretest.Marshalled(t, wiretest.StructOf(t, o)))
	}
	return out
}

// items hands out Structs on the wire, as a request's items.
type items [][]byte

func (it *items) Next() ([]byte, bool, error) {
	if len(*it) == 0 {
		return nil, false, nil
	}
	b := (*it)[0]
	*it = (*it)[1:]
	return b, true, nil
}

// readAt reads a request at a time with r: a nil *Reader reads as a
// server's first call does, with nothing cached.
func readAt(t *testing.T, r *Reader, req readRequest, at time.Time) *Fleet {
	t.Helper()
	clusters, replicas := items(req.clusters), items(req.replicas)
	fl, err := r.Read(&clusters, &replicas, req.xr, at, 5*time.Minute)
	if err != nil {
		t.Fatalf("Read(...): %v", err)
	}
	return fl
}

func read(t *testing.T, r *Reader, req readRequest) *Fleet {
	t.Helper()
	return readAt(t, r, req, now)
}

// placed is how many new replicas the scheduler places on a fleet read.
func placed(t *testing.T, req readRequest, fl *Fleet) int {
	t.Helper()
	plan, err := scheduling.Schedule(scheduling.Snapshot{Deployment: req.xr, Clusters: fl.Clusters, Replicas: fl.Replicas})
	if err != nil {
		t.Fatalf("Schedule(...): %v", err)
	}
	n := 0
	for _, p := range plan.Replicas {
		if p.New {
			n++
		}
	}
	return n
}

// versioned gives a replica the uid and resourceVersion the API server
// would.
func versioned(r *v1alpha1.ModelReplica, uid, resourceVersion string) *v1alpha1.ModelReplica {
	r.Metadata.UID, r.Metadata.ResourceVersion = uid, resourceVersion
	return r
}

func TestRead(t *testing.T) {
	observedAt := now.Add(-time.Minute)
	// A cluster whose one pool's report is usable, and one with none.
	observed := fx.Cluster("a").Pools(fx.Pool("default", 2).Devices(fx.GPU("gpu", 1, "80Gi")).Observed(observedAt, 2, fx.NodesFree(1, "gpu", 1)).Obj()).Obj()
	unobserved := fx.Cluster("b").Obj()
	xr := fx.Deployment("m").Obj()
	settled := fx.Replica("other", "a", 0).PodsScheduled("True", observedAt.Add(-time.Minute)).Obj()
	unsettled := fx.Replica("other", "a", 1).PodsScheduled("True", observedAt.Add(time.Second)).Obj()
	elsewhere := fx.Replica("other", "b", 0).PodsScheduled("True", observedAt.Add(-time.Minute)).Obj()
	ours := fx.Replica("m", "a", 0).PodsScheduled("True", observedAt.Add(-time.Minute)).Obj()
	unreadableTime := fx.Replica("other", "b", 1).Conditions(v1alpha1.Condition{Type: "PodsScheduled", Status: "True", LastTransitionTime: "soon"}).Obj()
	badEngines := func(name string) map[string]any {
		r := wiretest.StructOf(t, fx.Replica("other", "b", 2).Name(name).Conditions(v1alpha1.Condition{Type: "PodsScheduled", Status: "True", LastTransitionTime: "soon"}).Obj()).AsMap()
		r["spec"].(map[string]any)["engines"] = "none"
		return r
	}

	type want struct {
		// replicas are the names of the replicas for the scheduler, each
		// with the engines read unless it is unreadable.
		replicas []string
		// unreadable are those of them that did not read whole.
		unreadable []string
		// unreadableClusters are the clusters that did not read.
		unreadableClusters []string
		findings           []string
		warnings           int
		err                bool
	}
	cases := map[string]struct {
		reason   string
		clusters []any
		replicas []any
		want     want
	}{
		"SettledLeftOut": {
			reason:   "Another deployment's replica every pool report of its cluster counts is left out; one scheduled after the report, and one on a cluster without reports, are read with their engines.",
			clusters: []any{observed, unobserved},
			replicas: []any{settled, unsettled, elsewhere},
			want:     want{replicas: []string{unsettled.Metadata.Name, elsewhere.Metadata.Name}},
		},
		"OursAlwaysKept": {
			reason:   "The deployment's own replica is kept with its engines, settled or not.",
			clusters: []any{observed},
			replicas: []any{ours},
			want:     want{replicas: []string{ours.Metadata.Name}},
		},
		"FindingKept": {
			reason:   "A PodsScheduled time that does not read is a finding, and the replica is charged as unscheduled.",
			clusters: []any{observed, unobserved},
			replicas: []any{unreadableTime},
			want:     want{replicas: []string{unreadableTime.Metadata.Name}, findings: []string{unreadableTime.Metadata.Name}},
		},
		"UnreadableEnginesChargedWholeNodes": {
			reason:   "Another deployment's replica whose engines do not read is kept for the scheduler to charge conservatively, with a warning; its finding stays.",
			clusters: []any{observed, unobserved},
			replicas: []any{badEngines("bad")},
			want:     want{replicas: []string{"bad"}, unreadable: []string{"bad"}, findings: []string{"bad"}, warnings: 1},
		},
		"NoClustersNoPins": {
			reason:   "With no cluster nothing can be charged: no engine is read, so none fails; only what did not read on its own is kept.",
			replicas: []any{badEngines("bad"), unsettled},
		},
		"OursUnreadableKept": {
			reason:   "The deployment's own replica that does not read is kept, by what did read, to stay as observed: never an error.",
			clusters: []any{observed},
			replicas: []any{func() map[string]any {
				r := wiretest.StructOf(t, ours).AsMap()
				r["spec"].(map[string]any)["clusterName"] = 7.0
				return r
			}()},
			want: want{replicas: []string{ours.Metadata.Name}, unreadable: []string{ours.Metadata.Name}, warnings: 1},
		},
		"UnreadableClusterKeptByName": {
			reason: "A cluster whose Ready status is a boolean is kept by name with its defect, and warned of; the others read.",
			clusters: []any{func() map[string]any {
				c := wiretest.StructOf(t, unobserved).AsMap()
				c["status"].(map[string]any)["conditions"].([]any)[0].(map[string]any)["status"] = true
				return c
			}(), observed},
			replicas: []any{unsettled},
			want:     want{replicas: []string{unsettled.Metadata.Name}, unreadableClusters: []string{"b: status.conditions[0].status: cannot use a boolean as a string"}, warnings: 1},
		},
		"OnNoClusterLeftOut": {
			reason:   "Another deployment's replica on none of the clusters charges nothing anywhere: left out as it is read, and its finding with it. The deployment's own is kept.",
			clusters: []any{observed},
			replicas: []any{
				fx.Replica("other", "gone", 0).Conditions(v1alpha1.Condition{Type: "PodsScheduled", Status: "True", LastTransitionTime: "soon"}).Obj(),
				fx.Replica("m", "gone", 1).Obj(),
			},
			want: want{replicas: []string{fx.Replica("m", "gone", 1).Obj().Metadata.Name}},
		},
		"GarbageObjectWarned": {
			reason: "An item that is not a Struct at all is a replica of no name, cluster or deployment: warned of, and charged nowhere.",
			want:   want{replicas: []string{""}, unreadable: []string{""}, warnings: 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clusters, replicas := items(wireObjects(t, tc.clusters...)), items(wireObjects(t, tc.replicas...))
			if name == "GarbageObjectWarned" {
				replicas = items{{0xff}}
			}
			fl, err := (*Reader)(nil).Read(&clusters, &replicas, xr, now, 5*time.Minute)
			var got want
			got.err = err != nil
			if fl != nil {
				for _, r := range fl.Replicas {
					if r.Unreadable != "" {
						got.unreadable = append(got.unreadable, r.Object.Metadata.Name)
					} else if len(r.Object.Spec.Engines) == 0 {
						t.Errorf("%s\nRead(...): replica %s without its engines", tc.reason, r.Object.Metadata.Name)
					}
					got.replicas = append(got.replicas, r.Object.Metadata.Name)
				}
				for _, c := range fl.Clusters {
					if c.Unreadable != "" {
						got.unreadableClusters = append(got.unreadableClusters, c.Object.Metadata.Name+": "+c.Unreadable)
					}
				}
				for _, f := range fl.Findings {
					got.findings = append(got.findings, f.Name)
				}
				got.warnings = len(fl.Warnings)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nRead(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// failingItems are items the wire does not frame.
type failingItems struct{}

func (failingItems) Next() ([]byte, bool, error) { return nil, false, wire.ErrTruncated }

func TestReadFramingError(t *testing.T) {
	// Items the wire does not frame are an error: nothing of the fleet can
	// be trusted, and the call says so.
	for _, which := range []string{"clusters", "replicas"} {
		clusters, replicas := Items(&items{}), Items(&items{})
		if which == "clusters" {
			clusters = failingItems{}
		} else {
			replicas = failingItems{}
		}
		if _, err := (*Reader)(nil).Read(clusters, replicas, fx.Deployment("m").Obj(), now, time.Minute); err == nil {
			t.Errorf("Read(...) of %s the wire does not frame: want an error, got none", which)
		}
	}
}
