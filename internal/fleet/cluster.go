package fleet

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/wire"
	"github.com/modelplaneai/fleet-scheduler/observation"
)

// readCluster reads what the scheduler uses of an InferenceCluster: nothing
// more, so that a malformed field it has no use for cannot fail the call;
// and its pool reports (observation.ReadCluster). From the cache when it
// holds this version of the cluster.
func (r *structReader) readCluster(s []byte, cache *clusterCache, call uint64) (*observation.ClusterReports, error) {
	r.start()
	f := wire.Object(s)
	var meta [4]wire.Value
	r.object(f.Get("metadata"), "metadata").Fields([]string{keyName, "namespace", "uid", "resourceVersion"}, meta[:])
	r.cacheKey = appendObjectKey(r.cacheKey[:0], meta[1], meta[0], meta[2], meta[3])
	if cached, ok := cache.get(r.cacheKey, call); ok {
		return cached, r.err
	}
	r.enter("metadata", notAnElement)
	out := &v1alpha1.InferenceCluster{Metadata: v1alpha1.ObjectMeta{Name: r.str(meta[0], keyName), UID: r.str(meta[2], "uid"), ResourceVersion: r.str(meta[3], "resourceVersion")}}
	r.leave()

	spec := r.object(f.Get("spec"), "spec")
	r.enter("spec", notAnElement)
	for ti, tv := range r.list(spec.Get("taints"), "taints") {
		r.enter("taints", ti)
		tf := r.object(tv, "")
		out.Spec.Taints = append(out.Spec.Taints, v1alpha1.Taint{Key: r.str(tf.Get("key"), "key"), Value: r.str(tf.Get("value"), "value"), Effect: r.str(tf.Get("effect"), "effect")})
		r.leave()
	}
	if placement := r.object(spec.Get("placement"), "placement"); placement != nil {
		r.enter("placement", notAnElement)
		if pm := r.object(placement.Get("metadata"), "metadata"); pm != nil {
			r.enter("metadata", notAnElement)
			out.Spec.Placement = &v1alpha1.Placement{Metadata: v1alpha1.TemplateMetadata{Labels: r.stringMap(pm.Get("labels"), "labels")}}
			r.leave()
		}
		r.leave()
	}
	r.leave()

	status := r.object(f.Get("status"), "status")
	r.enter("status", notAnElement)
	for ci, cv := range r.list(status.Get("conditions"), "conditions") {
		r.enter("conditions", ci)
		cf := r.object(cv, "")
		out.Status.Conditions = append(out.Status.Conditions, v1alpha1.Condition{Type: r.str(cf.Get("type"), "type"), Status: r.str(cf.Get("status"), "status")})
		r.leave()
	}
	if gw := r.object(status.Get("gateway"), "gateway"); gw != nil {
		r.enter("gateway", notAnElement)
		out.Status.Gateway = &v1alpha1.Gateway{Hostname: r.str(gw.Get("hostname"), "hostname"), Address: r.str(gw.Get("address"), "address")}
		r.leave()
	}
	for pi, pv := range r.list(status.Get("gpuPools"), "gpuPools") {
		r.enter("gpuPools", pi)
		out.Status.GPUPools = append(out.Status.GPUPools, r.pool(pv))
		r.leave()
	}
	r.leave()
	if r.err != nil {
		return nil, r.err
	}
	reports := observation.ReadCluster(out)
	cache.put(r.cacheKey, call, reports)
	return reports, nil
}

// pool reads a GPU pool; the agent's report is only decoded, for the
// observation package to judge.
func (r *structReader) pool(v wire.Value) v1alpha1.GPUPool {
	var f [7]wire.Value
	r.object(v, "").Fields([]string{keyName, "nodes", "devices", observation.FieldObservedNodes, observation.FieldObservedAt, observation.FieldNodesByFreeDevices, observation.FieldBinding}, f[:])
	p := v1alpha1.GPUPool{
		Name: r.str(f[0], keyName), Nodes: r.integer(f[1], "nodes"),
		ObservedNodes:      r.decoded(f[3], observation.FieldObservedNodes),
		ObservedAt:         r.decoded(f[4], observation.FieldObservedAt),
		NodesByFreeDevices: r.decoded(f[5], observation.FieldNodesByFreeDevices),
		Binding:            r.decoded(f[6], observation.FieldBinding),
	}
	for di, dv := range r.list(f[2], "devices") {
		r.enter("devices", di)
		p.Devices = append(p.Devices, r.device(dv))
		r.leave()
	}
	return p
}

// maxDeviceBytes bounds a device as published: a DRA device has at most 32
// attributes and capacities (ResourceSliceMaxAttributesAndCapacitiesPerDevice),
// names and values of at most a few hundred bytes, so a few KiB. A larger
// one is no device of a ResourceSlice, and reading it (sorting its
// entries, converting them for CEL) would cost in proportion.
const maxDeviceBytes = 64 << 10

// device reads a pool's device. Fleets publish the same few devices on
// hundreds of pools: a device equal to one read before (canonically, as
// map order on the wire may differ) is that one, maps and all, shared.
func (r *structReader) device(v wire.Value) v1alpha1.Device {
	if len(v.Raw) > maxDeviceBytes {
		r.malformed("", fmt.Errorf("%d bytes, more than the %d a device of at most 32 attributes and capacities can be", len(v.Raw), maxDeviceBytes))
		return v1alpha1.Device{}
	}
	if v.Kind == wire.KindStruct {
		key, err := r.canonical(r.keyBuf[:0], v, 0)
		r.keyBuf = key
		if err == nil {
			if d, ok := r.devices[string(key)]; ok {
				return d
			}
			d := r.readDevice(v)
			if r.err == nil {
				if r.devices == nil {
					r.devices = map[string]v1alpha1.Device{}
				}
				r.devices[string(key)] = d
			}
			return d
		}
	}
	return r.readDevice(v)
}

// canonical appends a value in a form equal for equal values whatever the
// order of their objects' entries on the wire: kind, then length-prefixed
// bytes, objects' entries sorted by key (the last of a key winning).
func (r *structReader) canonical(b []byte, v wire.Value, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	b = append(b, byte(v.Kind))
	switch v.Kind {
	case wire.KindStruct:
		entries, err := r.EntriesOf(wire.Object(v.Raw))
		if err != nil {
			return nil, err
		}
		entries = lastOfEachKey(entries)
		// The count first, as for a list: no entry can then pass for the
		// end of its object.
		b = protowire.AppendVarint(b, uint64(len(entries)))
		for _, e := range entries {
			b = protowire.AppendBytes(b, e.Key)
			if b, err = r.canonical(b, wire.ParseValue(e.Val), depth+1); err != nil {
				return nil, err
			}
		}
		return b, nil
	case wire.KindList:
		list, err := r.ParseList(v.Raw)
		if err != nil {
			return nil, err
		}
		b = protowire.AppendVarint(b, uint64(len(list)))
		for _, e := range list {
			if b, err = r.canonical(b, e, depth+1); err != nil {
				return nil, err
			}
		}
		return b, nil
	case wire.KindNumber:
		return protowire.AppendFixed64(b, math.Float64bits(v.Num)), nil
	case wire.KindMalformed:
		return nil, wire.ErrTruncated
	case wire.KindAbsent, wire.KindNull, wire.KindString, wire.KindBool:
	}
	b = protowire.AppendVarint(b, uint64(v.Num))
	return protowire.AppendBytes(b, v.Raw), nil
}

func (r *structReader) readDevice(v wire.Value) v1alpha1.Device {
	var f [7]wire.Value
	r.object(v, "").Fields([]string{keyName, "claim", "driver", "deviceClassName", "count", "attributes", "capacity"}, f[:])
	d := v1alpha1.Device{
		Name: r.str(f[0], keyName), Claim: r.str(f[1], "claim"), Driver: r.str(f[2], "driver"),
		DeviceClassName: r.str(f[3], "deviceClassName"), Count: r.integer(f[4], "count"),
	}
	if attrs := r.object(f[5], "attributes"); attrs != nil {
		r.enter("attributes", notAnElement)
		entries := r.sortedEntries(attrs, "")
		d.Attributes = make(map[string]v1alpha1.DeviceAttribute, len(entries))
		for _, e := range entries {
			k := r.intern(e.Key)
			var af [4]wire.Value
			r.object(wire.ParseValue(e.Val), k).Fields([]string{"int", "bool", "string", "version"}, af[:])
			r.enter(k, notAnElement)
			a := v1alpha1.DeviceAttribute{Int: r.integer(af[0], "int"), Bool: r.boolean(af[1], "bool")}
			if !af[2].Absent() {
				s := r.str(af[2], "string")
				a.String = &s
			}
			if !af[3].Absent() {
				s := r.str(af[3], "version")
				a.Version = &s
			}
			d.Attributes[k] = a
			r.leave()
		}
		r.leave()
	}
	if capacity := r.object(f[6], "capacity"); capacity != nil {
		r.enter("capacity", notAnElement)
		entries := r.sortedEntries(capacity, "")
		d.Capacity = make(map[string]v1alpha1.DeviceCapacityVal, len(entries))
		for _, e := range entries {
			k := r.intern(e.Key)
			cf := r.object(wire.ParseValue(e.Val), k)
			r.enter(k, notAnElement)
			d.Capacity[k] = v1alpha1.DeviceCapacityVal{Value: r.str(cf.Get("value"), "value")}
			r.leave()
		}
		r.leave()
	}
	return d
}
