package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// The fleet's InferenceClusters and ModelReplicas are read straight from
// their protobuf Structs, field by field, rather than through JSON: a request
// can carry tens of thousands of replicas, and only a few of their fields
// matter here (pod templates, the bulk of a replica, are never read). A field
// of the wrong type is an error that names it.

// structReader reads typed values out of a protobuf Struct, keeping the
// first type error it meets.
type structReader struct {
	err error
}

func (r *structReader) fail(path, want string, v *structpb.Value) {
	if r.err == nil {
		r.err = fmt.Errorf("%s: cannot use %s as %s", path, kindOf(v), want)
	}
}

func kindOf(v *structpb.Value) string {
	switch v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return "a string"
	case *structpb.Value_NumberValue:
		return "a number"
	case *structpb.Value_BoolValue:
		return "a boolean"
	case *structpb.Value_ListValue:
		return "a list"
	case *structpb.Value_StructValue:
		return "an object"
	}
	return "null"
}

func absent(v *structpb.Value) bool {
	_, isNull := v.GetKind().(*structpb.Value_NullValue)
	return v == nil || v.GetKind() == nil || isNull
}

func (r *structReader) object(v *structpb.Value, path string) map[string]*structpb.Value {
	if absent(v) {
		return nil
	}
	s, ok := v.GetKind().(*structpb.Value_StructValue)
	if !ok {
		r.fail(path, "an object", v)
		return nil
	}
	return s.StructValue.GetFields()
}

func (r *structReader) list(v *structpb.Value, path string) []*structpb.Value {
	if absent(v) {
		return nil
	}
	l, ok := v.GetKind().(*structpb.Value_ListValue)
	if !ok {
		r.fail(path, "a list", v)
		return nil
	}
	return l.ListValue.GetValues()
}

func (r *structReader) str(v *structpb.Value, path string) string {
	if absent(v) {
		return ""
	}
	s, ok := v.GetKind().(*structpb.Value_StringValue)
	if !ok {
		r.fail(path, "a string", v)
		return ""
	}
	return s.StringValue
}

func (r *structReader) integer(v *structpb.Value, path string) *int64 {
	if absent(v) {
		return nil
	}
	n, ok := v.GetKind().(*structpb.Value_NumberValue)
	if !ok || n.NumberValue != math.Trunc(n.NumberValue) {
		r.fail(path, "a whole number", v)
		return nil
	}
	// A huge count is held, not refused: the scheduler bounds every count.
	i := int64(max(min(n.NumberValue, 1<<62), -(1 << 62)))
	return &i
}

func (r *structReader) boolean(v *structpb.Value, path string) *bool {
	if absent(v) {
		return nil
	}
	b, ok := v.GetKind().(*structpb.Value_BoolValue)
	if !ok {
		r.fail(path, "a boolean", v)
		return nil
	}
	return &b.BoolValue
}

func (r *structReader) stringMap(v *structpb.Value, path string) map[string]string {
	fields := r.object(v, path)
	if fields == nil {
		return nil
	}
	out := make(map[string]string, len(fields))
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		out[k] = r.str(fields[k], path+"."+k)
	}
	return out
}

// readReplica reads what the scheduler uses of a ModelReplica: identity,
// pins, stamped requests and status conditions.
func readReplica(s *structpb.Struct) (*v1alpha1.ModelReplica, error) {
	r := &structReader{}
	f := s.GetFields()
	md := r.object(f["metadata"], "metadata")
	out := &v1alpha1.ModelReplica{Metadata: v1alpha1.ObjectMeta{
		Name:      r.str(md["name"], "metadata.name"),
		Namespace: r.str(md["namespace"], "metadata.namespace"),
	}}
	// Only the two labels the scheduler reads, not a copy of them all.
	if labels := r.object(md["labels"], "metadata.labels"); labels != nil {
		out.Metadata.Labels = make(map[string]string, 2)
		for _, k := range []string{v1alpha1.LabelDeployment, v1alpha1.LabelReplicaIndex} {
			if v, ok := labels[k]; ok {
				out.Metadata.Labels[k] = r.str(v, "metadata.labels."+k)
			}
		}
	}
	spec := r.object(f["spec"], "spec")
	out.Spec.ClusterName = r.str(spec["clusterName"], "spec.clusterName")
	for ei, ev := range r.list(spec["engines"], "spec.engines") {
		ep := fmt.Sprintf("spec.engines[%d]", ei)
		ef := r.object(ev, ep)
		e := v1alpha1.ReplicaEngine{Name: r.str(ef["name"], ep+".name"), Copies: r.integer(ef["copies"], ep+".copies")}
		for mi, mv := range r.list(ef["members"], ep+".members") {
			mp := ep + ".members[" + strconv.Itoa(mi) + "]"
			mf := r.object(mv, mp)
			m := v1alpha1.ReplicaMember{
				Role:         r.str(mf["role"], mp+".role"),
				NodePoolName: r.str(mf["nodePoolName"], mp+".nodePoolName"),
			}
			if w := r.object(mf["worker"], mp+".worker"); w != nil {
				if n := r.integer(w["nodes"], mp+".worker.nodes"); n != nil {
					m.Worker = &v1alpha1.Worker{Nodes: *n}
				}
			}
			for di, dv := range r.list(mf["deviceRequests"], mp+".deviceRequests") {
				dp := mp + ".deviceRequests[" + strconv.Itoa(di) + "]"
				df := r.object(dv, dp)
				d := v1alpha1.DeviceRequest{Name: r.str(df["name"], dp+".name"), DeviceClassName: r.str(df["deviceClassName"], dp+".deviceClassName"), Count: 1}
				if c := r.integer(df["count"], dp+".count"); c != nil {
					d.Count = *c
				}
				for si, sv := range r.list(df["selectors"], dp+".selectors") {
					sf := r.object(sv, dp+".selectors["+strconv.Itoa(si)+"]")
					d.Selectors = append(d.Selectors, v1alpha1.Selector{CEL: r.str(sf["cel"], dp+".selectors["+strconv.Itoa(si)+"].cel")})
				}
				m.DeviceRequests = append(m.DeviceRequests, d)
			}
			e.Members = append(e.Members, m)
		}
		out.Spec.Engines = append(out.Spec.Engines, e)
	}
	if conds := r.object(f["status"], "status")["conditions"]; !absent(conds) {
		out.Status = &v1alpha1.ModelReplicaStatus{Conditions: podsScheduledJSON(conds)}
	}
	return out, r.err
}

// podsScheduledJSON keeps, raw, what the observation package judges of a
// replica's conditions: the PodsScheduled ones, or all of it when it is not
// a list of objects. Other conditions are never read, so never re-encoded.
func podsScheduledJSON(conds *structpb.Value) json.RawMessage {
	list, ok := conds.GetKind().(*structpb.Value_ListValue)
	if !ok {
		return appendJSON(nil, conds)
	}
	b := []byte{'['}
	for _, c := range list.ListValue.GetValues() {
		cf, isObject := c.GetKind().(*structpb.Value_StructValue)
		if isObject && cf.StructValue.GetFields()["type"].GetStringValue() != "PodsScheduled" {
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = appendJSON(b, c)
	}
	return append(b, ']')
}

// readCluster reads what the scheduler uses of an InferenceCluster: nothing
// more, so that a malformed field it has no use for cannot fail the call.
func readCluster(s *structpb.Struct) (*v1alpha1.InferenceCluster, error) {
	r := &structReader{}
	f := s.GetFields()
	md := r.object(f["metadata"], "metadata")
	out := &v1alpha1.InferenceCluster{Metadata: v1alpha1.ObjectMeta{Name: r.str(md["name"], "metadata.name")}}
	spec := r.object(f["spec"], "spec")
	for ti, tv := range r.list(spec["taints"], "spec.taints") {
		tp := fmt.Sprintf("spec.taints[%d]", ti)
		tf := r.object(tv, tp)
		out.Spec.Taints = append(out.Spec.Taints, v1alpha1.Taint{Key: r.str(tf["key"], tp+".key"), Value: r.str(tf["value"], tp+".value"), Effect: r.str(tf["effect"], tp+".effect")})
	}
	if pm := r.object(r.object(spec["placement"], "spec.placement")["metadata"], "spec.placement.metadata"); pm != nil {
		out.Spec.Placement = &v1alpha1.Placement{Metadata: v1alpha1.TemplateMetadata{Labels: r.stringMap(pm["labels"], "spec.placement.metadata.labels")}}
	}
	status := r.object(f["status"], "status")
	for ci, cv := range r.list(status["conditions"], "status.conditions") {
		cp := fmt.Sprintf("status.conditions[%d]", ci)
		cf := r.object(cv, cp)
		out.Status.Conditions = append(out.Status.Conditions, v1alpha1.Condition{Type: r.str(cf["type"], cp+".type"), Status: r.str(cf["status"], cp+".status")})
	}
	if gw := r.object(status["gateway"], "status.gateway"); gw != nil {
		out.Status.Gateway = &v1alpha1.Gateway{Hostname: r.str(gw["hostname"], "status.gateway.hostname"), Address: r.str(gw["address"], "status.gateway.address")}
	}
	for pi, pv := range r.list(status["gpuPools"], "status.gpuPools") {
		pp := fmt.Sprintf("status.gpuPools[%d]", pi)
		pf := r.object(pv, pp)
		p := v1alpha1.GPUPool{Name: r.str(pf["name"], pp+".name"), Nodes: r.integer(pf["nodes"], pp+".nodes")}
		for di, dv := range r.list(pf["devices"], pp+".devices") {
			p.Devices = append(p.Devices, r.device(dv, fmt.Sprintf("%s.devices[%d]", pp, di)))
		}
		// The agent's report stays raw: the observation package judges it.
		p.ObservedNodes = rawOrNil(pf["observedNodes"])
		p.ObservedAt = rawOrNil(pf["observedAt"])
		p.NodesByFreeDevices = rawOrNil(pf["nodesByFreeDevices"])
		out.Status.GPUPools = append(out.Status.GPUPools, p)
	}
	return out, r.err
}

func (r *structReader) device(v *structpb.Value, path string) v1alpha1.Device {
	f := r.object(v, path)
	d := v1alpha1.Device{
		Name: r.str(f["name"], path+".name"), Claim: r.str(f["claim"], path+".claim"), Driver: r.str(f["driver"], path+".driver"),
		DeviceClassName: r.str(f["deviceClassName"], path+".deviceClassName"), Count: r.integer(f["count"], path+".count"),
	}
	if attrs := r.object(f["attributes"], path+".attributes"); attrs != nil {
		d.Attributes = make(map[string]v1alpha1.DeviceAttribute, len(attrs))
		for _, k := range slices.Sorted(maps.Keys(attrs)) {
			av := attrs[k]
			ap := path + ".attributes." + k
			af := r.object(av, ap)
			a := v1alpha1.DeviceAttribute{Int: r.integer(af["int"], ap+".int"), Bool: r.boolean(af["bool"], ap+".bool")}
			if !absent(af["string"]) {
				s := r.str(af["string"], ap+".string")
				a.String = &s
			}
			if !absent(af["version"]) {
				s := r.str(af["version"], ap+".version")
				a.Version = &s
			}
			d.Attributes[k] = a
		}
	}
	if capacity := r.object(f["capacity"], path+".capacity"); capacity != nil {
		d.Capacity = make(map[string]v1alpha1.DeviceCapacityVal, len(capacity))
		for _, k := range slices.Sorted(maps.Keys(capacity)) {
			cv := capacity[k]
			d.Capacity[k] = v1alpha1.DeviceCapacityVal{Value: r.str(r.object(cv, path+".capacity."+k)["value"], path+".capacity."+k+".value")}
		}
	}
	return d
}

func rawOrNil(v *structpb.Value) json.RawMessage {
	if absent(v) {
		return nil
	}
	return appendJSON(nil, v)
}

// appendJSON encodes a protobuf Value as JSON, as protojson would, without
// its reflection: it serves the small status fields kept raw.
func appendJSON(b []byte, v *structpb.Value) []byte {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return appendJSONString(b, k.StringValue)
	case *structpb.Value_NumberValue:
		if math.IsInf(k.NumberValue, 0) || math.IsNaN(k.NumberValue) {
			return append(b, "null"...)
		}
		return strconv.AppendFloat(b, k.NumberValue, 'g', -1, 64)
	case *structpb.Value_BoolValue:
		return strconv.AppendBool(b, k.BoolValue)
	case *structpb.Value_ListValue:
		b = append(b, '[')
		for i, e := range k.ListValue.GetValues() {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSON(b, e)
		}
		return append(b, ']')
	case *structpb.Value_StructValue:
		// Keys in order, so that what quotes this JSON never flaps.
		b = append(b, '{')
		fields := k.StructValue.GetFields()
		for i, key := range slices.Sorted(maps.Keys(fields)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, key)
			b = append(b, ':')
			b = appendJSON(b, fields[key])
		}
		return append(b, '}')
	}
	return append(b, "null"...)
}

// appendJSONString quotes s as JSON: plain printable ASCII, the common case,
// directly; anything else through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	plain := true
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			plain = false
			break
		}
	}
	if plain {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	q, err := json.Marshal(s)
	if err != nil {
		return append(b, "null"...)
	}
	return append(b, q...)
}
