package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/wire"
	"github.com/modelplaneai/fleet-scheduler/observation"
)

// The fleet's InferenceClusters and ModelReplicas are read straight off
// the wire (wire.go), field by field: a request can carry tens of thousands
// of replicas, and only a few of their fields matter here (pod templates,
// the bulk of a replica, are never read). A field of the wrong type is an
// error that names it.

// structReader reads typed values out of a protobuf Struct on the wire,
// keeping the first type error it meets. The error names the field's path, which the
// reader tracks as a stack of steps and spells out only then: most reads
// never fail, and a request can hold millions of fields.
type structReader struct {
	wire.Reader

	err  error
	path []step

	// interned holds the strings read so far: cluster, pool, class and
	// label values and CEL expressions repeat across thousands of replicas,
	// and each is then allocated once; boxed, the same as decoded JSON.
	interned map[string]string
	boxed    map[string]any

	// devices are the devices read so far, by canonical form.
	devices map[string]v1alpha1.Device
	keyBuf  []byte

	// cacheKey is the replica cache's key of the replica being read.
	cacheKey []byte
}

// maxInterned bounds the strings a reader keeps.
const maxInterned = 1 << 14

// step is one level of a field path: an object's key, or a list's key and
// an element's index.
type step struct {
	key   string
	index int
}

const notAnElement = -1

// enter descends into key, or into element index of the list at key.
func (r *structReader) enter(key string, index int) {
	r.path = append(r.path, step{key: key, index: index})
}

func (r *structReader) leave() { r.path = r.path[:len(r.path)-1] }

// where spells out the path to leaf, a key of the current object; an empty
// leaf is the current object itself.
func (r *structReader) where(leaf string) string {
	var b strings.Builder
	// A step without a key is an element a list step already named, or
	// one of a list of lists.
	for _, s := range r.path {
		if s.key != "" {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.key)
		}
		if s.index != notAnElement {
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		}
	}
	if leaf != "" {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(leaf)
	}
	return b.String()
}

func (r *structReader) fail(leaf, want string, v wire.Value) {
	if r.err == nil {
		r.err = fmt.Errorf("%s: cannot use %s as %s", r.where(leaf), v.Describe(), want)
	}
}

// malformed records bytes that are not the protobuf they claim to be.
func (r *structReader) malformed(leaf string, err error) {
	if r.err == nil {
		r.err = fmt.Errorf("%s: %w", r.where(leaf), err)
	}
}

func (r *structReader) object(v wire.Value, key string) wire.Object {
	if v.Absent() {
		return nil
	}
	if v.Kind != wire.KindStruct {
		r.fail(key, "an object", v)
		return nil
	}
	return wire.Object(v.Raw)
}

func (r *structReader) list(v wire.Value, key string) []wire.Value {
	if v.Absent() {
		return nil
	}
	if v.Kind != wire.KindList {
		r.fail(key, "a list", v)
		return nil
	}
	l, err := r.ParseList(v.Raw)
	if err != nil {
		r.malformed(key, err)
	}
	return l
}

func (r *structReader) str(v wire.Value, key string) string {
	if v.Absent() {
		return ""
	}
	if v.Kind != wire.KindString {
		r.fail(key, "a string", v)
		return ""
	}
	return r.intern(v.Raw)
}

func (r *structReader) intern(b []byte) string {
	if s, ok := r.interned[string(b)]; ok {
		return s
	}
	s := string(b)
	if r.interned == nil {
		r.interned = map[string]string{}
	}
	if len(r.interned) < maxInterned {
		r.interned[s] = s
	}
	return s
}

// internAny is intern for a string in decoded JSON: boxed once.
func (r *structReader) internAny(b []byte) any {
	if a, ok := r.boxed[string(b)]; ok {
		return a
	}
	var a any = string(b)
	if r.boxed == nil {
		r.boxed = map[string]any{}
	}
	if len(r.boxed) < maxInterned {
		r.boxed[string(b)] = a
	}
	return a
}

// unique reads a string no other object shares, such as a name.
func (r *structReader) unique(v wire.Value, key string) string {
	if v.Kind != wire.KindString {
		return r.str(v, key)
	}
	return string(v.Raw)
}

func (r *structReader) integer(v wire.Value, key string) *int64 {
	if v.Absent() {
		return nil
	}
	if v.Kind != wire.KindNumber || v.Num != math.Trunc(v.Num) {
		r.fail(key, "a whole number", v)
		return nil
	}
	// A huge count is held, not refused: the scheduler bounds every count.
	i := int64(max(min(v.Num, 1<<62), -(1 << 62)))
	return &i
}

func (r *structReader) boolean(v wire.Value, key string) *bool {
	if v.Absent() {
		return nil
	}
	if v.Kind != wire.KindBool {
		r.fail(key, "a boolean", v)
		return nil
	}
	b := v.Num != 0
	return &b
}

// decoded is a field kept as decoded JSON for the observation package: as
// encoding/json decodes into an any, nil, bool, float64, string, []any or
// map[string]any.
func (r *structReader) decoded(v wire.Value, key string) any {
	if len(r.path) > maxDepth {
		r.malformed(key, errTooDeep)
		return nil
	}
	switch v.Kind {
	case wire.KindNumber:
		return boxNumber(v.Num)
	case wire.KindString:
		return r.internAny(v.Raw)
	case wire.KindBool:
		return v.Num != 0
	case wire.KindStruct:
		entries, err := r.EntriesOf(r.object(v, key))
		if err != nil {
			r.malformed(key, err)
		}
		out := make(map[string]any, len(entries))
		r.enter(key, notAnElement)
		for _, e := range entries {
			k := r.intern(e.Key)
			out[k] = r.decoded(wire.ParseValue(e.Val), k)
		}
		r.leave()
		return out
	case wire.KindList:
		l := r.list(v, key)
		out := make([]any, len(l))
		for i, e := range l {
			r.enter(key, i)
			out[i] = r.decoded(e, "")
			r.leave()
		}
		return out
	case wire.KindMalformed:
		r.malformed(key, wire.ErrTruncated)
	case wire.KindAbsent, wire.KindNull:
	}
	return nil
}

func (r *structReader) stringMap(v wire.Value, key string) map[string]string {
	fields := r.object(v, key)
	if fields == nil {
		return nil
	}
	r.enter(key, notAnElement)
	defer r.leave()
	entries := r.sortedEntries(fields, "")
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		k := r.intern(e.Key)
		out[k] = r.str(wire.ParseValue(e.Val), k)
	}
	return out
}

// start readies the reader for a new object, dropping what it parsed of
// the last one.
func (r *structReader) start() {
	r.Reset()
	r.err = nil
	r.path = r.path[:0]
}

// sortedEntries are an object's entries in key order, the last of a key
// winning: of several bad values, the one named is always the same.
func (r *structReader) sortedEntries(o wire.Object, key string) []wire.Entry {
	entries, err := r.EntriesOf(o)
	if err != nil {
		r.malformed(key, err)
	}
	return lastOfEachKey(entries)
}

// lastOfEachKey sorts entries by key, in place, keeping of each key the
// last, as protobuf decodes a map.
func lastOfEachKey(entries []wire.Entry) []wire.Entry {
	slices.SortStableFunc(entries, func(a, b wire.Entry) int { return bytes.Compare(a.Key, b.Key) })
	out := entries[:0]
	for i, e := range entries {
		if i+1 < len(entries) && bytes.Equal(entries[i+1].Key, e.Key) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// readReplica reads what the scheduler uses of every ModelReplica: its
// identity, its cluster and its PodsScheduled condition, observed; from
// the cache when it holds this version of the replica. Its spec is
// returned still on the wire for readPins: the scheduler needs the engines
// (pins and stamped requests) only of the replicas it may charge or keep.
func (r *structReader) readReplica(s []byte, cache *replicaCache, call uint64) (*observedReplica, wire.Object, error) {
	r.start()
	// Each object is read in one walk of its entries.
	var top [3]wire.Value
	wire.Object(s).Fields([]string{"metadata", "spec", "status"}, top[:])
	var meta [5]wire.Value
	r.object(top[0], "metadata").Fields([]string{keyName, "namespace", "labels", "uid", "resourceVersion"}, meta[:])
	r.cacheKey = appendObjectKey(r.cacheKey[:0], meta[1], meta[0], meta[3], meta[4])
	if cached, ok := cache.get(r.cacheKey, call); ok {
		return cached, r.object(top[1], "spec"), r.err
	}

	out := &v1alpha1.ModelReplica{}
	r.enter("metadata", notAnElement)
	out.Metadata.Name = r.unique(meta[0], keyName)
	out.Metadata.Namespace = r.str(meta[1], "namespace")
	// Only the two labels the scheduler reads, not a copy of them all.
	if labels := r.object(meta[2], "labels"); labels != nil {
		r.enter("labels", notAnElement)
		labelKeys := [...]string{v1alpha1.LabelDeployment, v1alpha1.LabelReplicaIndex}
		var vals [len(labelKeys)]wire.Value
		labels.Fields(labelKeys[:], vals[:])
		out.Metadata.Labels = make(map[string]string, len(labelKeys))
		for i, k := range labelKeys {
			if vals[i].Kind != wire.KindAbsent {
				out.Metadata.Labels[k] = r.str(vals[i], k)
			}
		}
		r.leave()
	}
	r.leave()

	spec := r.object(top[1], "spec")
	r.enter("spec", notAnElement)
	out.Spec.ClusterName = r.str(spec.Get("clusterName"), "clusterName")
	r.leave()

	if conds := r.object(top[2], "status").Get("conditions"); !conds.Absent() {
		r.enter("status", notAnElement)
		out.Status = &v1alpha1.ModelReplicaStatus{Conditions: r.podsScheduledConditions(conds)}
		r.leave()
	}
	if r.err != nil {
		return nil, spec, r.err
	}
	observed := newObservedReplica(out)
	cache.put(r.cacheKey, call, observed)
	return observed, spec, nil
}

// readPins reads a replica's spec.engines, of the spec readReplica returned.
func (r *structReader) readPins(spec wire.Object, into *v1alpha1.ModelReplica) error {
	r.start()
	r.enter("spec", notAnElement)
	for ei, ev := range r.list(spec.Get("engines"), "engines") {
		r.enter("engines", ei)
		ef := r.object(ev, "")
		e := v1alpha1.ReplicaEngine{Name: r.str(ef.Get(keyName), keyName), Copies: r.integer(ef.Get("copies"), "copies")}
		for mi, mv := range r.list(ef.Get("members"), "members") {
			r.enter("members", mi)
			e.Members = append(e.Members, r.member(mv))
			r.leave()
		}
		into.Spec.Engines = append(into.Spec.Engines, e)
		r.leave()
	}
	r.leave()
	return r.err
}

// member reads a replica member's pin, gang size and stamped requests; its
// pod template, the bulk of a replica, is never read.
func (r *structReader) member(v wire.Value) v1alpha1.ReplicaMember {
	f := r.object(v, "")
	m := v1alpha1.ReplicaMember{Role: r.str(f.Get("role"), "role"), NodePoolName: r.str(f.Get("nodePoolName"), "nodePoolName")}
	if w := r.object(f.Get("worker"), "worker"); w != nil {
		r.enter("worker", notAnElement)
		if n := r.integer(w.Get("nodes"), "nodes"); n != nil {
			m.Worker = &v1alpha1.Worker{Nodes: *n}
		}
		r.leave()
	}
	for di, dv := range r.list(f.Get("deviceRequests"), "deviceRequests") {
		r.enter("deviceRequests", di)
		df := r.object(dv, "")
		d := v1alpha1.DeviceRequest{Name: r.str(df.Get(keyName), keyName), DeviceClassName: r.str(df.Get("deviceClassName"), "deviceClassName"), Count: 1}
		if c := r.integer(df.Get("count"), "count"); c != nil {
			d.Count = *c
		}
		for si, sv := range r.list(df.Get("selectors"), "selectors") {
			r.enter("selectors", si)
			d.Selectors = append(d.Selectors, v1alpha1.Selector{CEL: r.str(r.object(sv, "").Get("cel"), "cel")})
			r.leave()
		}
		m.DeviceRequests = append(m.DeviceRequests, d)
		r.leave()
	}
	return m
}

// keyName is the key of every object's name: metadata's, an engine's, a
// request's, a pool's, a device's.
const keyName = "name"

// maxDepth bounds how deep the values read may nest, as protobuf's own
// decoder does: a request is bounded in size, not in depth, and recursion
// without a bound could exhaust the stack.
const maxDepth = 10_000

var errTooDeep = errors.New("nested deeper than 10000")

// smallNumbers are the whole numbers 0 to 255 boxed once: the counts of a
// histogram, which boxing each would allocate.
var smallNumbers = func() (out [256]any) { //nolint:gochecknoglobals // A read-only table of boxed values.
	for i := range out {
		out[i] = float64(i)
	}
	return out
}()

func boxNumber(f float64) any {
	if f >= 0 && f < float64(len(smallNumbers)) && f == math.Trunc(f) && !math.Signbit(f) {
		return smallNumbers[int(f)]
	}
	return f
}

// podsScheduledConditions keeps, decoded, what the observation package
// judges of a replica's conditions: of each PodsScheduled condition, at its
// index, its type, status and lastTransitionTime; all of it when it is not a
// list. Other conditions and fields are never read, so never decoded: a
// replica carries several conditions, and a fleet thousands of replicas.
func (r *structReader) podsScheduledConditions(conds wire.Value) any {
	if conds.Kind != wire.KindList {
		return r.decoded(conds, "conditions")
	}
	list := r.list(conds, "conditions")
	out := make([]any, len(list))
	for i, c := range list {
		r.enter("conditions", i)
		if c.Kind != wire.KindStruct {
			out[i] = r.decoded(c, "")
			r.leave()
			continue
		}
		// A condition whose bytes do not hold the type's name is not of that
		// type; most of a replica's conditions are skipped without a walk.
		if !bytes.Contains(c.Raw, []byte(podsScheduledType)) {
			r.leave()
			continue
		}
		// The fields of a condition observation.Replica reads.
		conditionKeys := [...]string{"type", "status", "lastTransitionTime"}
		var fields [len(conditionKeys)]wire.Value
		r.object(c, "").Fields(conditionKeys[:], fields[:])
		if isPodsScheduled(fields[0]) {
			cond := make(map[string]any, len(conditionKeys))
			for k, key := range conditionKeys {
				if fields[k].Kind != wire.KindAbsent {
					cond[key] = r.decoded(fields[k], key)
				}
			}
			out[i] = cond
		}
		r.leave()
	}
	return out
}

// podsScheduledType is the type of condition readReplica reads.
const podsScheduledType = observation.ConditionPodsScheduled

func isPodsScheduled(typ wire.Value) bool {
	return typ.Kind == wire.KindString && string(typ.Raw) == podsScheduledType
}

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
	out := &v1alpha1.InferenceCluster{Metadata: v1alpha1.ObjectMeta{Name: r.str(meta[0], keyName)}}
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
	var f [6]wire.Value
	r.object(v, "").Fields([]string{keyName, "nodes", "devices", "observedNodes", "observedAt", "nodesByFreeDevices"}, f[:])
	p := v1alpha1.GPUPool{
		Name: r.str(f[0], keyName), Nodes: r.integer(f[1], "nodes"),
		ObservedNodes:      r.decoded(f[3], "observedNodes"),
		ObservedAt:         r.decoded(f[4], "observedAt"),
		NodesByFreeDevices: r.decoded(f[5], "nodesByFreeDevices"),
	}
	for di, dv := range r.list(f[2], "devices") {
		r.enter("devices", di)
		p.Devices = append(p.Devices, r.device(dv))
		r.leave()
	}
	return p
}

// device reads a pool's device. Fleets publish the same few devices on
// hundreds of pools: a device equal to one read before (canonically, as
// map order on the wire may differ) is that one, maps and all, shared.
func (r *structReader) device(v wire.Value) v1alpha1.Device {
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
