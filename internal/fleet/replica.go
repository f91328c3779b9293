package fleet

import (
	"bytes"
	"slices"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/wire"
	"github.com/modelplaneai/fleet-scheduler/observation"
)

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
	var meta [7]wire.Value
	r.object(top[0], "metadata").Fields([]string{keyName, "namespace", "labels", "uid", "resourceVersion", "annotations", "deletionTimestamp"}, meta[:])
	r.cacheKey = appendObjectKey(r.cacheKey[:0], meta[1], meta[0], meta[3], meta[4])
	if cached, ok := cache.get(r.cacheKey, call); ok {
		return cached, r.object(top[1], "spec"), r.err
	}

	out := &v1alpha1.ModelReplica{}
	r.enter("metadata", notAnElement)
	out.Metadata.Name = r.unique(meta[0], keyName)
	out.Metadata.Namespace = r.str(meta[1], "namespace")
	if meta[3].Kind == wire.KindString {
		// Read only to tell an API server's objects from a fixture's: a uid
		// of another type is the cache key's business, not a defect here.
		out.Metadata.UID = string(meta[3].Raw)
	}
	// Only the two labels the scheduler reads, not a copy of them all.
	if labels := r.object(meta[2], "labels"); labels != nil {
		r.enter("labels", notAnElement)
		labelKeys := [...]string{v1alpha1.LabelDeployment, v1alpha1.LabelReplicaIndex, v1alpha1.LabelCounted}
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
	// Of the annotations, only the function's own memory.
	if annotations := r.object(meta[5], "annotations"); annotations != nil {
		if v := annotations.Get(v1alpha1.AnnotationReplacement); v.Kind != wire.KindAbsent {
			r.enter("annotations", notAnElement)
			out.Metadata.Annotations = map[string]string{v1alpha1.AnnotationReplacement: r.str(v, v1alpha1.AnnotationReplacement)}
			r.leave()
		}
	}
	// Only whether it is set matters: a replica being deleted.
	if !meta[6].Absent() {
		deleting := ""
		out.Metadata.DeletionTimestamp = &deleting
	}
	r.leave()

	spec := r.object(top[1], "spec")
	r.enter("spec", notAnElement)
	out.Spec.ClusterName = r.str(spec.Get("clusterName"), "clusterName")
	r.leave()

	if conds := r.object(top[2], "status").Get("conditions"); !conds.Absent() {
		r.enter("status", notAnElement)
		out.Status = &v1alpha1.ModelReplicaStatus{Conditions: r.observedConditions(conds)}
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

// observedConditions keeps, decoded, what the observation package judges
// of a replica's conditions: of each condition of the types
// observation.ConditionTypes names, at its index, the fields
// observation.ConditionFields names; all of it when it is not a list.
// Other conditions and fields are never read, so never decoded: a replica
// carries several conditions, and a fleet thousands of replicas.
func (r *structReader) observedConditions(conds wire.Value) any {
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
		// A condition whose bytes hold none of the types' names is of none
		// of them; most of a replica's conditions are skipped without a
		// walk.
		if !mayBeObserved(c.Raw) {
			r.leave()
			continue
		}
		conditionKeys := observation.ConditionFields
		var fields [len(conditionKeys)]wire.Value
		r.object(c, "").Fields(conditionKeys[:], fields[:])
		if isObservedType(fields[0]) {
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

func mayBeObserved(raw []byte) bool {
	for _, typ := range observation.ConditionTypes {
		if bytes.Contains(raw, []byte(typ)) {
			return true
		}
	}
	return false
}

func isObservedType(typ wire.Value) bool {
	return typ.Kind == wire.KindString && slices.Contains(observation.ConditionTypes[:], string(typ.Raw))
}

// partialReplica reads what it can of a replica that did not read whole:
// its identity, its cluster and its engines, each apart, so that one field
// of the wrong type loses only what it holds. clusterRead and enginesRead
// say whether those read.
func (r *structReader) partialReplica(s []byte) (rep *v1alpha1.ModelReplica, clusterRead, enginesRead bool) {
	name, namespace, deployment := metadataOf(s)
	rep = &v1alpha1.ModelReplica{Metadata: v1alpha1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{}}}
	if md := wire.Object(s).Get("metadata"); md.Kind == wire.KindStruct && !wire.Object(md.Raw).Get("deletionTimestamp").Absent() {
		deleting := ""
		rep.Metadata.DeletionTimestamp = &deleting
	}
	if deployment != "" {
		rep.Metadata.Labels[v1alpha1.LabelDeployment] = deployment
	}
	r.start()
	md := r.object(wire.Object(s).Get("metadata"), "metadata")
	labels := r.object(md.Get("labels"), "labels")
	for _, k := range []string{v1alpha1.LabelReplicaIndex, v1alpha1.LabelCounted} {
		if v := r.str(labels.Get(k), k); r.err == nil && v != "" {
			rep.Metadata.Labels[k] = v
		}
	}
	r.start()
	spec := r.object(wire.Object(s).Get("spec"), "spec")
	cluster := r.str(spec.Get("clusterName"), "clusterName")
	if clusterRead = r.err == nil && cluster != ""; clusterRead {
		rep.Spec.ClusterName = cluster
	}
	r.start()
	spec = r.object(wire.Object(s).Get("spec"), "spec")
	var engines v1alpha1.ModelReplica
	if enginesRead = r.err == nil && r.readPins(spec, &engines) == nil; enginesRead {
		rep.Spec.Engines = engines.Spec.Engines
	}
	return rep, clusterRead, enginesRead
}
