package main

import (
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// The fleet's objects are read straight off the protobuf wire: a
// google.protobuf.Struct is a list of (key, Value) entries, and a Value one
// field of six kinds. A request can carry tens of thousands of ModelReplicas
// whose pod templates the scheduler never reads; on the wire a template is
// skipped by its length, where a decoded Struct would have been built
// field by field and walked through pointers.

// kind is which field of a google.protobuf.Value is set, by field number.
type kind uint8

const (
	kindAbsent kind = 0 // no such key, or no field of the Value set
	kindNull   kind = 1
	kindNumber kind = 2
	kindString kind = 3
	kindBool   kind = 4
	kindStruct kind = 5
	kindList   kind = 6

	// kindMalformed is a Value whose bytes are not protobuf.
	kindMalformed kind = 255
)

// value is a google.protobuf.Value: its kind, and its number (a bool as 0
// or 1) or its bytes (a string, or a Struct or ListValue message).
type value struct {
	kind kind
	num  float64
	raw  []byte
}

// object is a google.protobuf.Struct message, still on the wire; nil for
// none. A key is looked up by walking its entries: objects have few, and
// a replica's are read a handful of keys each.
type object []byte

// entry is one field of a Struct: its key, and its Value message.
type entry struct {
	key []byte
	val []byte
}

// get is the value of key; the last entry of a key wins, as when protobuf
// decodes a map.
func (o object) get(key string) value {
	var val []byte
	found := false
	for b := []byte(o); len(b) > 0; {
		e, ok, rest, err := nextEntry(b)
		if err != nil {
			return value{kind: kindMalformed}
		}
		b = rest
		if ok && string(e.key) == key {
			val, found = e.val, true
		}
	}
	if !found {
		return value{}
	}
	return parseValue(val)
}

// fields reads several keys in one walk of the object: out[i] is the value
// of keys[i], the last entry of a key winning.
func (o object) fields(keys []string, out []value) {
	var raw [8][]byte
	var found [8]bool
	if len(keys) > len(raw) {
		for i, k := range keys {
			out[i] = o.get(k)
		}
		return
	}
	for b := []byte(o); len(b) > 0; {
		key, val, rest, ok := shortEntry(b)
		if !ok {
			var e entry
			var err error
			e, ok, rest, err = nextEntry(b)
			if err != nil {
				for i := range keys {
					out[i] = value{kind: kindMalformed}
				}
				return
			}
			key, val = e.key, e.val
		}
		b = rest
		if !ok {
			continue
		}
		for i, k := range keys {
			if string(key) == k {
				raw[i], found[i] = val, true
			}
		}
	}
	for i := range keys {
		out[i] = value{}
		if found[i] {
			out[i] = parseValue(raw[i])
		}
	}
}

// entriesOf are an object's entries in wire order, in the reader's buffer.
func (w *wireReader) entriesOf(o object) ([]entry, error) {
	start := len(w.entries)
	for b := []byte(o); len(b) > 0; {
		e, ok, rest, err := nextEntry(b)
		if err != nil {
			return nil, err
		}
		b = rest
		if ok {
			w.entries = append(w.entries, e)
		}
	}
	return w.entries[start:len(w.entries):len(w.entries)], nil
}

var errTruncated = errors.New("truncated or malformed protobuf")

// next reads one field: its number, its wire type and its value (for a
// length-delimited field, the bytes it delimits). It returns the rest of b
// after the field.
func next(b []byte) (num protowire.Number, typ protowire.Type, field, rest []byte, err error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, nil, errTruncated
	}
	b = b[n:]
	m := protowire.ConsumeFieldValue(num, typ, b)
	if m < 0 {
		return 0, 0, nil, nil, errTruncated
	}
	field = b[:m]
	if typ == protowire.BytesType {
		field, _ = protowire.ConsumeBytes(field)
	}
	return num, typ, field, b[m:], nil
}

// delimited reads a length-delimited field under a one-byte tag, the way
// nearly every field of a Struct is written, faster than next. It reports
// false when b does not start with that tag, or is truncated.
func delimited(b []byte, tag byte) (field, rest []byte, ok bool) {
	if len(b) < 2 || b[0] != tag {
		return nil, nil, false
	}
	if n := int(b[1]); n < 0x80 {
		if n > len(b)-2 {
			return nil, nil, false
		}
		return b[2 : 2+n], b[2+n:], true
	}
	field, n := protowire.ConsumeBytes(b[1:])
	if n < 0 {
		return nil, nil, false
	}
	return field, b[1+n:], true
}

// One-byte tags of the length-delimited fields read most: a Struct's
// entries, a ListValue's values and a map entry's key are field 1, a map
// entry's value field 2.
const (
	tagField1 byte = 1<<3 | byte(protowire.BytesType)
	tagField2 byte = 2<<3 | byte(protowire.BytesType)
)

// parseValue reads a google.protobuf.Value message. Of several kinds set,
// the last wins, as protobuf decodes a oneof.
func parseValue(b []byte) value {
	// A Value is almost always one field: a string, an object or a list.
	if len(b) > 0 {
		if k := kind(b[0] >> 3); b[0]&7 == byte(protowire.BytesType) && (k == kindString || k == kindStruct || k == kindList) {
			if field, rest, ok := delimited(b, b[0]); ok && len(rest) == 0 {
				return value{kind: k, raw: field}
			}
		}
	}
	var v value
	var message pieces // of a struct_value or list_value
	for len(b) > 0 {
		num, typ, field, rest, err := next(b)
		if err != nil {
			return value{kind: kindMalformed}
		}
		switch {
		case num == protowire.Number(kindNull) && typ == protowire.VarintType:
			v = value{kind: kindNull}
		case num == protowire.Number(kindNumber) && typ == protowire.Fixed64Type:
			bits, _ := protowire.ConsumeFixed64(field)
			v = value{kind: kindNumber, num: math.Float64frombits(bits)}
		case num == protowire.Number(kindBool) && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(field)
			v = value{kind: kindBool}
			if x != 0 {
				v.num = 1
			}
		case typ == protowire.BytesType && (num == protowire.Number(kindStruct) || num == protowire.Number(kindList)) && v.kind == kind(num):
			message.add(field)
			v.raw = message.b
		case typ == protowire.BytesType && (num == protowire.Number(kindStruct) || num == protowire.Number(kindList)):
			message = pieces{}
			message.add(field)
			v = value{kind: kind(num), raw: message.b}
		case typ == protowire.BytesType && num == protowire.Number(kindString):
			v = value{kind: kindString, raw: field}
		}
		b = rest
	}
	return v
}

// pieces gathers a message written in several pieces: protobuf merges
// them as it would parse their concatenation. No encoder writes a message
// so, but protobuf allows it. The first piece is used in place; from the
// second on they are appended to a copy, whose growth is amortized.
type pieces struct {
	b     []byte
	owned bool
}

func (p *pieces) add(piece []byte) {
	switch {
	case p.b == nil:
		p.b = piece
	case !p.owned:
		p.b = append(append(make([]byte, 0, 2*(len(p.b)+len(piece))), p.b...), piece...)
		p.owned = true
	default:
		p.b = append(p.b, piece...)
	}
}

// wireReader parses lists and entries into buffers it reuses for every
// object it reads, so an object costs no allocation for its structure.
type wireReader struct {
	values  []value
	entries []entry
}

// reset drops everything parsed so far; the lists and entries returned
// before must no longer be used.
func (w *wireReader) reset() {
	w.values = w.values[:0]
	w.entries = w.entries[:0]
}

// nextEntry reads the next field of a Struct: ok when it is an entry.
func nextEntry(b []byte) (e entry, ok bool, rest []byte, err error) {
	if key, val, rest, ok := shortEntry(b); ok {
		return entry{key: key, val: val}, true, rest, nil
	}
	payload, rest, ok := delimited(b, tagField1)
	if !ok {
		num, typ, field, after, err := next(b)
		if err != nil {
			return entry{}, false, nil, err
		}
		if num != 1 || typ != protowire.BytesType {
			return entry{}, false, after, nil
		}
		payload, rest = field, after
	}
	e, err = parseEntry(payload)
	return e, err == nil, rest, err
}

// shortEntry reads, fast, an entry as protobuf writes nearly every one: a
// field 1 of a one- or two-byte length, holding the key field, then the
// value field. ok is false for anything else, left to the general path.
func shortEntry(b []byte) (key, val, rest []byte, ok bool) {
	if len(b) < 2 || b[0] != tagField1 {
		return nil, nil, nil, false
	}
	n, p := shortLen(b, 1)
	if n < 0 || n > len(b)-p {
		return nil, nil, nil, false
	}
	end := p + n
	if p+2 > end || b[p] != tagField1 {
		return nil, nil, nil, false
	}
	keyLen, k := shortLen(b[:end], p+1)
	if keyLen < 0 || keyLen > end-k {
		return nil, nil, nil, false
	}
	q := k + keyLen
	if q == end {
		return b[k:q], nil, b[end:], true
	}
	if q+2 > end || b[q] != tagField2 {
		return nil, nil, nil, false
	}
	valLen, v := shortLen(b[:end], q+1)
	if valLen != end-v {
		return nil, nil, nil, false
	}
	return b[k:q], b[v:end], b[end:], true
}

// shortLen reads a length of one or two bytes at b[i:]: -1 for any other.
func shortLen(b []byte, i int) (n, next int) {
	if i < len(b) {
		if c := b[i]; c < 0x80 {
			return int(c), i + 1
		}
		if i+1 < len(b) && b[i+1] < 0x80 {
			return int(b[i]&0x7f) | int(b[i+1])<<7, i + 2
		}
	}
	return -1, i
}

// parseEntry reads a Struct's map entry: its key, then its value, as
// protobuf writes them, else in any order.
func parseEntry(b []byte) (entry, error) {
	if key, rest, ok := delimited(b, tagField1); ok {
		if len(rest) == 0 {
			return entry{key: key}, nil
		}
		if val, rest, ok := delimited(rest, tagField2); ok && len(rest) == 0 {
			return entry{key: key, val: val}, nil
		}
	}
	var e entry
	var val pieces
	for len(b) > 0 {
		num, typ, field, rest, err := next(b)
		if err != nil {
			return entry{}, err
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.BytesType:
			e.key = field
		case num == 2 && typ == protowire.BytesType:
			val.add(field)
		}
	}
	e.val = val.b
	return e, nil
}

// parseList reads the values of a google.protobuf.ListValue message.
func (w *wireReader) parseList(b []byte) ([]value, error) {
	start := len(w.values)
	for len(b) > 0 {
		payload, rest, ok := delimited(b, tagField1)
		if !ok {
			num, typ, field, after, err := next(b)
			if err != nil {
				return nil, err
			}
			b = after
			if num != 1 || typ != protowire.BytesType {
				continue
			}
			payload = field
		} else {
			b = rest
		}
		w.values = append(w.values, parseValue(payload))
	}
	return w.values[start:len(w.values):len(w.values)], nil
}

// describe names a value's kind for an error message.
func (v value) describe() string {
	switch v.kind {
	case kindString:
		return "a string"
	case kindNumber:
		return "a number"
	case kindBool:
		return "a boolean"
	case kindList:
		return "a list"
	case kindStruct:
		return "an object"
	case kindMalformed:
		return "malformed protobuf"
	case kindAbsent, kindNull:
	}
	return "null"
}

// absent is whether a field is missing or null, as JSON's omitted.
func (v value) absent() bool { return v.kind == kindAbsent || v.kind == kindNull }

// resourceStruct is the Struct of a fnv1.Resource message: its field 1.
func resourceStruct(b []byte) ([]byte, error) {
	var s pieces
	for len(b) > 0 {
		num, typ, payload, rest, err := next(b)
		if err != nil {
			return nil, fmt.Errorf("cannot read resource: %w", err)
		}
		if num == 1 && typ == protowire.BytesType {
			s.add(payload)
		}
		b = rest
	}
	return s.b, nil
}
