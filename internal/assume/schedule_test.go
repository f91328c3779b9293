package assume

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/fixture"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

func TestSchedule(t *testing.T) {
	// One pool of one node, on whole-node accounting: room for one
	// replica.
	c := fx.Cluster("c1").Pools(fx.Pool("p", 1).Devices(fx.GPU("gpu", 8, "80Gi")).Obj()).Obj()
	c.Metadata.UID = "uid-c1"
	clusters, _ := observation.Clusters([]*v1alpha1.InferenceCluster{c}, at, 5*time.Minute)
	uids := map[string]string{"uid-c1": "c1"}
	snapshot := func(name string) scheduling.Snapshot {
		d := fx.Deployment(name).Replicas(1).Engines(fx.Standalone("main", fx.GPURequest(1))).Obj()
		return scheduling.Snapshot{Deployment: d, Clusters: clusters, Now: at}
	}
	deployment := func(name string) Deployment {
		return Deployment{UID: "uid-" + name, Namespace: fx.Namespace, Name: name}
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	type want struct {
		// placed is how many replicas b's call places, and assumed how
		// many placements the ledger holds after it.
		placed, assumed int
	}
	cases := map[string]struct {
		reason string
		// ctx is a's call's context.
		ctx  context.Context
		want want
	}{
		"AnotherCallSeesThePlacement": {
			reason: "b's call, reading the same fleet after a's, is charged what a placed: the one node is taken.",
			ctx:    context.Background(),
			want:   want{placed: 0, assumed: 1},
		},
		"ACallWhoseCallerWentRecordsNothing": {
			reason: "a's caller has gone, so a's response will not be applied: b's call gets the node.",
			ctx:    cancelled,
			want:   want{placed: 1, assumed: 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			l := New(DefaultTTL)
			if _, err := l.Schedule(tc.ctx, deployment("a"), uids, shown{}, snapshot("a")); err != nil {
				t.Fatal(err)
			}
			plan, err := l.Schedule(context.Background(), deployment("b"), uids, shown{}, snapshot("b"))
			if err != nil {
				t.Fatal(err)
			}
			got := want{placed: len(plan.Replicas), assumed: l.Len()}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nSchedule(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
