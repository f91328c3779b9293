package compose

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/modelplaneai/fleet-scheduler/internal/testkit/wiretest"
)

func TestIsReady(t *testing.T) {
	cases := map[string]struct {
		reason   string
		observed any
		want     bool
	}{
		"Ready": {
			reason:   "A Ready condition of status True is ready.",
			observed: map[string]any{"status": map[string]any{"conditions": []any{map[string]any{"type": "Synced", "status": "False"}, map[string]any{"type": "Ready", "status": "True"}}}},
			want:     true,
		},
		"NotReady": {
			reason:   "A Ready condition of any other status is not.",
			observed: map[string]any{"status": map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "Unknown"}}}},
		},
		"NoStatus": {
			reason:   "A resource with no status is not ready.",
			observed: map[string]any{"metadata": map[string]any{"name": "x"}},
		},
		"Malformed": {
			reason:   "Conditions that are not a list of objects read as no condition.",
			observed: map[string]any{"status": map[string]any{"conditions": "Ready"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := IsReady(wiretest.StructOf(t, tc.observed)); got != tc.want {
				t.Errorf("%s\nIsReady(...): want %t, got %t", tc.reason, tc.want, got)
			}
		})
	}
	if IsReady(nil) {
		t.Errorf("IsReady(nil): want false, a resource not observed is not ready")
	}
}

func TestIsComposedKey(t *testing.T) {
	for key, want := range map[string][2]bool{
		"replica-a-0":  {true, true},
		"endpoint-a-0": {false, true},
		"cache":        {false, false},
		"replicas":     {false, false},
	} {
		if got := [2]bool{IsReplicaKey(key), IsComposedKey(key)}; got != want {
			t.Errorf("IsReplicaKey, IsComposedKey(%q): want %v, got %v", key, want, got)
		}
	}
}

func TestDesiredFromObserved(t *testing.T) {
	observed := wiretest.StructOf(t, map[string]any{
		"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
		"metadata": map[string]any{"name": "m-1", "namespace": "ns", "labels": map[string]any{"a": "b"}, "uid": "u", "resourceVersion": "7"},
		"spec":     map[string]any{"clusterName": "a"},
		"status":   map[string]any{"conditions": []any{}},
	})
	want := wiretest.StructOf(t, map[string]any{
		"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
		"metadata": map[string]any{"name": "m-1", "namespace": "ns", "labels": map[string]any{"a": "b"}},
		"spec":     map[string]any{"clusterName": "a"},
	})
	if diff := cmp.Diff(want, DesiredFromObserved(observed), protocmp.Transform()); diff != "" {
		t.Errorf("DesiredFromObserved(...): only type, name, namespace, labels and spec are kept: -want, +got:\n%s", diff)
	}
	if diff := cmp.Diff(&structpb.Struct{Fields: map[string]*structpb.Value{"metadata": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{}})}}, DesiredFromObserved(nil), protocmp.Transform()); diff != "" {
		t.Errorf("DesiredFromObserved(nil): -want, +got:\n%s", diff)
	}
}
