package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/wire"
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
