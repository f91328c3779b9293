package fleet

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/wiretest"
)

func TestReadReplica(t *testing.T) {
	r := fx.Replica("m", "a", 3).Engines(fx.PinnedGang("main", "h100", 2, fx.Stamped(4))).PodsScheduled("True", now.Add(-time.Minute)).Obj()
	got, err := readReplicaStruct(wiretest.StructOf(t, r))
	if err != nil {
		t.Fatalf("readReplicaStruct(...): %v", err)
	}
	// Pod templates, the bulk of a replica, are not read, nor labels other
	// than the two the scheduler uses, nor fields of PodsScheduled other
	// than the three the observation package judges.
	want := *r
	want.Status = &v1alpha1.ModelReplicaStatus{Conditions: []any{map[string]any{
		"type": "PodsScheduled", "status": "True", "lastTransitionTime": now.Add(-time.Minute).UTC().Format(time.RFC3339),
	}}}
	want.TypeMeta = v1alpha1.TypeMeta{}
	want.Metadata.Labels = map[string]string{
		v1alpha1.LabelDeployment:   r.Metadata.Labels[v1alpha1.LabelDeployment],
		v1alpha1.LabelReplicaIndex: r.Metadata.Labels[v1alpha1.LabelReplicaIndex],
	}
	if diff := cmp.Diff(&want, got, jsonEqual, cmpopts.IgnoreFields(v1alpha1.ReplicaMember{}, "Template")); diff != "" {
		t.Errorf("readReplicaStruct(...): -want, +got:\n%s", diff)
	}
	if got.Spec.Engines[0].Members[0].Template != nil {
		t.Errorf("readReplicaStruct(...): read a pod template it has no use for")
	}
}

// readReplicaStruct reads a replica as a request carries it, on the wire.
func readReplicaStruct(s *structpb.Struct) (*v1alpha1.ModelReplica, error) {
	b, err := proto.Marshal(s)
	if err != nil {
		return nil, err
	}
	var r structReader
	observed, pins, err := r.readReplica(b, nil, 0)
	if err != nil {
		return nil, err
	}
	return observed.replica.Object, r.readPins(pins, observed.replica.Object)
}
