package compose

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

func TestEncoderSharesTemplates(t *testing.T) {
	// Converting each distinct template once, and sharing it, writes what
	// converting each replica whole writes.
	vllm := json.RawMessage(`{"spec":{"containers":[{"name":"vllm","args":["--port","8000"],"env":[{"name":"A","value":"<&>"}]}]}}`)
	other := json.RawMessage(`{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[]}}`)
	replica := func(templates ...json.RawMessage) *v1alpha1.ModelReplica {
		r := fx.Replica("m", "a", 0).Obj()
		e := v1alpha1.ReplicaEngine{Name: "main"}
		for _, tmpl := range templates {
			e.Members = append(e.Members, v1alpha1.ReplicaMember{Role: v1alpha1.RoleStandalone, NodePoolName: "p", Template: tmpl})
		}
		r.Spec.Engines = []v1alpha1.ReplicaEngine{e, {Name: "second", Members: []v1alpha1.ReplicaMember{{Role: v1alpha1.RoleStandalone, Template: vllm}}}}
		return r
	}
	enc := NewEncoder()
	for name, r := range map[string]*v1alpha1.ModelReplica{
		"one":           replica(vllm),
		"two distinct":  replica(vllm, other),
		"none, a null":  replica(nil, json.RawMessage(`null`)),
		"again, shared": replica(other, vllm),
	} {
		want, err := Encode(r)
		if err != nil {
			t.Fatalf("%s: Encode(...): %v", name, err)
		}
		got, err := enc.Replica(r)
		if err != nil {
			t.Fatalf("%s: Replica(...): %v", name, err)
		}
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("%s: Replica(...): Encode's -want, +got:\n%s", name, diff)
		}
		if len(r.Spec.Engines[1].Members[0].Template) == 0 {
			t.Errorf("%s: Replica(...) changed the replica it was given", name)
		}
	}
	if len(enc.templates) != 3 {
		t.Errorf("Replica(...): %d templates converted, want 3 distinct (vllm, other, null)", len(enc.templates))
	}
}
