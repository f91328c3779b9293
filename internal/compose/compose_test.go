package compose

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

func TestReplicaName(t *testing.T) {
	cases := map[string]struct {
		reason     string
		deployment string
		p          scheduling.Placement
		want       string
	}{
		"Short": {
			reason:     "The name is the deployment's, then the SHA-256 of deployment-cluster-index cut to 5 hex characters.",
			deployment: "qwen3-8b", p: scheduling.Placement{Cluster: "a", Index: 0},
			want: "qwen3-8b-03a63",
		},
		"Long": {
			reason:     "A long deployment name is cut to 57 characters and loses its trailing dashes.",
			deployment: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-x", p: scheduling.Placement{Cluster: "c", Index: 3},
			want: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-be81c",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ReplicaName(tc.deployment, tc.p.Cluster, tc.p.Index)); diff != "" {
				t.Errorf("%s\nreplicaName(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
