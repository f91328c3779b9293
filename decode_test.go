package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/fixture"
	"github.com/modelplaneai/fleet-scheduler/internal/wire"
	"github.com/modelplaneai/fleet-scheduler/internal/wire/wiretest"
)

// jsonEqual compares raw JSON by meaning, not bytes: key order may differ.
var jsonEqual = cmp.Comparer(func(a, b json.RawMessage) bool {
	var x, y any
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return cmp.Equal(x, y)
})

func TestReadCluster(t *testing.T) {
	c := fx.Cluster("a").Taint("gpu", "x", "NoSchedule").PlacementLabels(map[string]string{"region": "eu"}).Hostname("a.example.com").
		Pools(fx.Pool("h100", 4).Devices(fx.GPU("gpu", 8, "80Gi"), fx.NIC(8)).Observed(now, 3, fx.NodesFree(2, "gpu", 8)).Obj()).Obj()
	c.Status.GPUPools[0].Devices[0].Attributes["cc"] = v1alpha1.DeviceAttribute{Version: new("9.0.0")}
	c.Status.GPUPools[0].Devices[0].Attributes["pcie"] = v1alpha1.DeviceAttribute{Int: new(int64(5))}
	c.Status.GPUPools[0].Devices[0].Attributes["mig"] = v1alpha1.DeviceAttribute{Bool: new(false)}
	got, err := readClusterStruct(toStruct(t, c))
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

func TestReadReplica(t *testing.T) {
	r := fx.Replica("m", "a", 3).Engines(fx.PinnedGang("main", "h100", 2, fx.Stamped(4))).PodsScheduled("True", now.Add(-time.Minute)).Obj()
	got, err := readReplicaStruct(toStruct(t, r))
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

func TestReadErrors(t *testing.T) {
	set := func(obj any, path []string, v *structpb.Value) *structpb.Struct {
		s := toStruct(t, obj)
		f := s
		for _, p := range path[:len(path)-1] {
			f = f.GetFields()[p].GetStructValue()
		}
		f.Fields[path[len(path)-1]] = v
		return s
	}
	pools := func(v *structpb.Value) *structpb.Value {
		l, _ := structpb.NewList([]any{map[string]any{"name": "p", "nodes": 1.0}})
		l.Values[0].GetStructValue().Fields["devices"] = v
		return structpb.NewListValue(l)
	}
	cases := map[string]struct {
		reason string
		read   func() error
		want   string
	}{
		"ReplicaCopiesString": {
			reason: "A wrong type names the field path.",
			read: func() error {
				s := toStruct(t, fx.Replica("m", "a", 0).Obj())
				s.Fields["spec"].GetStructValue().Fields["engines"].GetListValue().Values[0].GetStructValue().Fields["copies"] = structpb.NewStringValue("two")
				_, err := readReplicaStruct(s)
				return err
			},
			want: "spec.engines[0].copies: cannot use a string as a whole number",
		},
		"ReplicaFractionalCount": {
			reason: "A fractional count is not a whole number.",
			read: func() error {
				s := toStruct(t, fx.Replica("m", "a", 0).Obj())
				m := s.GetFields()["spec"].GetStructValue().GetFields()["engines"].GetListValue().GetValues()[0].GetStructValue().GetFields()["members"].GetListValue().GetValues()[0]
				m.GetStructValue().Fields["deviceRequests"].GetListValue().Values[0].GetStructValue().Fields["count"] = structpb.NewNumberValue(1.5)
				_, err := readReplicaStruct(s)
				return err
			},
			want: "spec.engines[0].members[0].deviceRequests[0].count: cannot use a number as a whole number",
		},
		"ReplicaLabelsList": {
			reason: "Labels that are not an object are refused.",
			read: func() error {
				_, err := readReplicaStruct(set(fx.Replica("m", "a", 0).Obj(), []string{"metadata", "labels"}, structpb.NewListValue(&structpb.ListValue{})))
				return err
			},
			want: "metadata.labels: cannot use a list as an object",
		},
		"ClusterUnusedFieldIgnored": {
			reason: "A malformed cluster field the scheduler has no use for does not fail the call.",
			read: func() error {
				_, err := readClusterStruct(set(fx.Cluster("a").Obj(), []string{"metadata", "labels"}, structpb.NewListValue(&structpb.ListValue{})))
				return err
			},
		},
		"ClusterDevicesNumber": {
			reason: "A pool's devices that are not a list are refused.",
			read: func() error {
				_, err := readClusterStruct(set(fx.Cluster("a").Obj(), []string{"status", "gpuPools"}, pools(structpb.NewNumberValue(3))))
				return err
			},
			want: "status.gpuPools[0].devices: cannot use a number as a list",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ""
			if err := tc.read(); err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nerror: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestReadHugeCountIsHeld(t *testing.T) {
	c := fx.Cluster("a").Obj()
	c.Status.GPUPools[0].Nodes = nil
	s := toStruct(t, c)
	s.Fields["status"].GetStructValue().Fields["gpuPools"].GetListValue().Values[0].GetStructValue().Fields["nodes"] = structpb.NewNumberValue(1e300)
	got, err := readClusterStruct(s)
	if err != nil {
		t.Fatalf("readCluster(...): %v", err)
	}
	if n := *got.Status.GPUPools[0].Nodes; n != 1<<62 {
		t.Errorf("readClusterStruct(...) nodes: want %d, got %d", int64(1<<62), n)
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

func TestReadTooDeep(t *testing.T) {
	// A list nested deeper than any decoder allows, as an agent report
	// field: it must be refused, not exhaust the stack. Written outside in,
	// each level's length known from the sizes of the levels inside it.
	const depth = maxDepth + 100
	sizes := make([]int, depth+1)
	sizes[0] = 2 // the innermost Value: an empty list_value
	listSize := func(i int) int { return 1 + protowire.SizeVarint(uint64(sizes[i-1])) + sizes[i-1] }
	for i := 1; i <= depth; i++ {
		sizes[i] = 1 + protowire.SizeVarint(uint64(listSize(i))) + listSize(i)
	}
	var v []byte
	for i := depth; i >= 1; i-- {
		v = protowire.AppendVarint(protowire.AppendTag(v, 6, protowire.BytesType), uint64(listSize(i)))
		v = protowire.AppendVarint(protowire.AppendTag(v, 1, protowire.BytesType), uint64(sizes[i-1]))
	}
	v = protowire.AppendVarint(protowire.AppendTag(v, 6, protowire.BytesType), 0)
	if len(v) != sizes[depth] {
		t.Fatalf("built %d bytes, want %d", len(v), sizes[depth])
	}
	var r structReader
	r.decoded(wire.ParseValue(v), "nodesByFreeDevices")
	if r.err == nil || !strings.Contains(r.err.Error(), "nested deeper than") {
		t.Errorf("decoded(...): error %v, want one saying the value is nested too deep", r.err)
	}
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

// TestReadErrorPaths: an error inside decoded JSON or a map of labels names
// the field once (found in review).
func TestReadErrorPaths(t *testing.T) {
	cases := map[string]struct {
		reason string
		read   func() error
		want   string
	}{
		"ObjectInAList": {
			reason: "An object inside a list is named by its index alone.",
			read: func() error {
				obj := wiretest.BytesField(protowire.Number(wire.KindStruct), wiretest.StructEntry("k", []byte{0xff}))
				list := wiretest.BytesField(protowire.Number(wire.KindList), wiretest.BytesField(1, obj))
				var r structReader
				r.decoded(wire.ParseValue(wiretest.BytesField(protowire.Number(wire.KindStruct), wiretest.StructEntry("pools", list))), "status")
				return r.err
			},
			want: "status.pools[0].k: ",
		},
		"MalformedLabels": {
			reason: "Placement labels whose bytes are malformed are named once.",
			read: func() error {
				labels := wiretest.BytesField(protowire.Number(wire.KindStruct), []byte{0x0a, 0x05, 0x01})
				md := wiretest.BytesField(protowire.Number(wire.KindStruct), wiretest.StructEntry("labels", labels))
				pl := wiretest.BytesField(protowire.Number(wire.KindStruct), wiretest.StructEntry("metadata", md))
				spec := wiretest.BytesField(protowire.Number(wire.KindStruct), wiretest.StructEntry("placement", pl))
				name := wiretest.BytesField(protowire.Number(wire.KindStruct), wiretest.StructEntry("name", wiretest.BytesField(protowire.Number(wire.KindString), []byte("c"))))
				var r structReader
				_, err := r.readCluster(wiretest.Cat(wiretest.StructEntry("metadata", name), wiretest.StructEntry("spec", spec)), nil, 0)
				return err
			},
			want: "spec.placement.metadata.labels: ",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.read()
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("%s\nerror: %v, want one starting %q", tc.reason, err, tc.want)
			}
		})
	}
}
