package fleet

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/wiretest"
	"github.com/modelplaneai/fleet-scheduler/internal/wire"
)

func TestReadCluster(t *testing.T) {
	c := fx.Cluster("a").Taint("gpu", "x", "NoSchedule").PlacementLabels(map[string]string{"region": "eu"}).Hostname("a.example.com").
		Pools(fx.Pool("h100", 4).Devices(fx.GPU("gpu", 8, "80Gi"), fx.NIC(8)).Observed(now, 3, fx.NodesFree(2, "gpu", 8)).Steered().Obj()).Obj()
	c.Status.GPUPools[0].Devices[0].Attributes["cc"] = v1alpha1.DeviceAttribute{Version: new("9.0.0")}
	c.Status.GPUPools[0].Devices[0].Attributes["pcie"] = v1alpha1.DeviceAttribute{Int: new(int64(5))}
	c.Status.GPUPools[0].Devices[0].Attributes["mig"] = v1alpha1.DeviceAttribute{Bool: new(false)}
	got, err := readClusterStruct(wiretest.StructOf(t, c))
	if err != nil {
		t.Fatalf("readCluster(...): %v", err)
	}
	// Only what the scheduler reads is read.
	c.TypeMeta = v1alpha1.TypeMeta{}
	c.Metadata.Labels = nil
	for i := range c.Status.Conditions {
		c.Status.Conditions[i] = v1alpha1.Condition{Type: c.Status.Conditions[i].Type, Status: c.Status.Conditions[i].Status}
	}
	if diff := cmp.Diff(c, got, jsonEqual); diff != "" {
		t.Errorf("readClusterStruct(...): -want, +got:\n%s", diff)
	}
}

// readClusterStruct reads a cluster as a request carries it, on the wire.
func readClusterStruct(s *structpb.Struct) (*v1alpha1.InferenceCluster, error) {
	b, err := proto.Marshal(s)
	if err != nil {
		return nil, err
	}
	var r structReader
	return readClusterWire(&r, b)
}

// collidingDevices are two devices a canonical form without entry counts
// confused (found in review): A's attribute "a" holds an object with an
// empty key; B has an extra attribute with a version that is not semantic.
func collidingDevices() (a, b map[string]any) {
	const m = 97 // entries of B's extra attribute; A's list has m+1 elements
	base := func() map[string]any {
		return map[string]any{
			"name": "gpu", "claim": "DRA", "driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com", "count": 8.0,
			"capacity": map[string]any{"memory": map[string]any{"value": "80Gi"}},
		}
	}
	list := []any{"aa\x05"}
	extra := map[string]any{}
	for i := range m - 1 {
		x := string([]byte{byte(0x01 + i)})
		list = append(list, x+"\x01\x00\x00")
		extra["\x00\x04"+x] = nil
	}
	last := string([]byte{byte(0x01 + m - 1)})
	content := last + "\x01\x00\x00" + "\x07version\x03\x00\x03bad"
	list = append(list, content)
	extra["\x00"+string(rune(len(content)))+last] = nil
	extra["version"] = "bad"
	a, b = base(), base()
	a["attributes"] = map[string]any{"a": map[string]any{"": list}}
	b["attributes"] = map[string]any{"a": map[string]any{}, "b\x03\x00\x03aa": extra}
	return a, b
}

func TestCanonicalTellsDevicesApart(t *testing.T) {
	a, b := collidingDevices()
	var r structReader
	key := func(dev map[string]any) []byte {
		v, err := structpb.NewValue(dev)
		if err != nil {
			t.Fatal(err)
		}
		k, err := r.canonical(nil, wire.ParseValue(wiretest.Marshalled(t, v)), 0)
		if err != nil {
			t.Fatalf("canonical(...): %v", err)
		}
		return k
	}
	if bytes.Equal(key(a), key(b)) {
		t.Error("two different devices have the same canonical form, so one pool would be read with the other's device")
	}
	if !bytes.Equal(key(a), key(a)) {
		t.Error("one device has two canonical forms")
	}
}
