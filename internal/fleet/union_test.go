package fleet

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

// labelled is a replica with the counted label.
func labelled(r *v1alpha1.ModelReplica, counted string) *v1alpha1.ModelReplica {
	r.Metadata.Labels[v1alpha1.LabelCounted] = counted
	return r
}

// TestUnion: a narrow call reads this deployment's replicas, then every
// uncounted one it did not read yet, each once.
func TestUnion(t *testing.T) {
	mine := labelled(fx.Replica("m", "a", 0).Obj(), "false")
	mineCounted := labelled(fx.Replica("m", "a", 1).Obj(), "true")
	other := labelled(fx.Replica("o", "a", 0).Obj(), "false")
	otherNamespace := labelled(fx.Replica("m", "a", 0).Namespace("elsewhere").Obj(), "false")
	nameless := map[string]any{"metadata": map[string]any{"name": 7}}
	cases := map[string]struct {
		reason         string
		own, uncounted []any
		wantNames      []string
		wantUnreadable int
	}{
		"EachOnce": {
			reason:    "This deployment's uncounted replica comes in both lists, and is read once.",
			own:       []any{mine, mineCounted},
			uncounted: []any{other, mine},
			wantNames: []string{"ml-team/m-a-0", "ml-team/m-a-1", "ml-team/o-a-0"},
		},
		"SameNameOtherNamespace": {
			reason:    "A replica of the same name in another namespace is another replica.",
			own:       []any{mine},
			uncounted: []any{otherNamespace, mine},
			wantNames: []string{"ml-team/m-a-0", "elsewhere/m-a-0"},
		},
		"NamelessByBytes": {
			reason:         "Copies of an item whose name does not read are known by their bytes: read once, and warned of once.",
			own:            []any{nameless},
			uncounted:      []any{nameless},
			wantUnreadable: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			own, uncounted := items(wireObjects(t, tc.own...)), items(wireObjects(t, tc.uncounted...))
			got := Union(&own, &uncounted)
			var names []string
			unreadable := 0
			for {
				item, ok, err := got.Next()
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				name, ns, _ := metadataOf(item)
				if name == "" {
					unreadable++
					continue
				}
				names = append(names, ns+"/"+name)
			}
			if diff := cmp.Diff(tc.wantNames, names, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nUnion(...): -want, +got:\n%s", tc.reason, diff)
			}
			if unreadable != tc.wantUnreadable {
				t.Errorf("%s\nUnion(...): %d items without a name, want %d", tc.reason, unreadable, tc.wantUnreadable)
			}
		})
	}
}

// TestReadCountsLabels: a fleet read whole says how many of its replicas
// carry no counted label, and how many no uid; those of other deployments
// on no cluster of the call, and those that do not read, count too.
func TestReadCountsLabels(t *testing.T) {
	xr := fx.Deployment("m").Obj()
	fixtureCluster := fx.Cluster("a").Pools(fx.Pool("p", 1).Devices(fx.GPU("gpu", 8, "80Gi")).Obj()).Obj()
	cluster := fx.Cluster("a").Pools(fx.Pool("p", 1).Devices(fx.GPU("gpu", 8, "80Gi")).Obj()).Obj()
	cluster.Metadata.UID, cluster.Metadata.ResourceVersion = "uid-a", "7"
	unversioned := fx.Cluster("b").Obj()
	unversioned.Metadata.UID = "uid-b"
	cases := map[string]struct {
		reason                   string
		clusters                 []any // cluster when nil
		replicas                 []any
		wantUnlabelled, wantFixt int
	}{
		"AllLabelled": {
			reason:   "Every replica an API object, every one labelled.",
			replicas: []any{versioned(labelled(fx.Replica("m", "a", 0).Obj(), "true"), "u1", "1"), versioned(labelled(fx.Replica("o", "z", 0).Obj(), "false"), "u2", "1")},
		},
		"OneUnlabelledElsewhere": {
			reason:         "A replica of another deployment on a cluster this call does not select still counts: it is in the fleet.",
			replicas:       []any{versioned(labelled(fx.Replica("m", "a", 0).Obj(), "true"), "u1", "1"), versioned(fx.Replica("o", "z", 0).Obj(), "u2", "1")},
			wantUnlabelled: 1,
		},
		"Fixtures": {
			reason:         "Replicas without uids are a fixture's.",
			replicas:       []any{fx.Replica("m", "a", 0).Obj()},
			wantUnlabelled: 1, wantFixt: 1,
		},
		"AFixtureCluster": {
			reason:   "A cluster without a uid is a render's, whatever the replicas: Crossplane v2.4's render gives only the XR a uid.",
			clusters: []any{cluster, fixtureCluster},
			replicas: []any{versioned(labelled(fx.Replica("m", "a", 0).Obj(), "true"), "u1", "1")},
			wantFixt: 1,
		},
		"AClusterWithoutResourceVersion": {
			reason:   "A uid without a resourceVersion does not tell versions apart: not an API object.",
			clusters: []any{cluster, unversioned},
			wantFixt: 1,
		},
		"RenderFleet": {
			reason:         "A render: the cluster and the replica without uids.",
			clusters:       []any{fixtureCluster},
			replicas:       []any{fx.Replica("m", "a", 0).Obj()},
			wantUnlabelled: 1, wantFixt: 2,
		},
		"UnreadableUnlabelled": {
			reason:         "A replica that does not read, and carries no label, is unlabelled.",
			replicas:       []any{map[string]any{"metadata": map[string]any{"name": "x", "namespace": "ml-team", "uid": "u3", "resourceVersion": "1"}, "spec": map[string]any{"clusterName": 3}}},
			wantUnlabelled: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clusters := tc.clusters
			if clusters == nil {
				clusters = []any{cluster}
			}
			fl := read(t, nil, request(t, xr, clusters, tc.replicas))
			if fl.Unlabelled != tc.wantUnlabelled || fl.Fixtures != tc.wantFixt {
				t.Errorf("%s\nRead(...): %d unlabelled, %d fixtures; want %d, %d", tc.reason, fl.Unlabelled, fl.Fixtures, tc.wantUnlabelled, tc.wantFixt)
			}
		})
	}
}
