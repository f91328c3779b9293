// Package wire reads google.protobuf.Struct messages straight off the
// protobuf wire: a Struct is a list of (key, Value) entries, and a Value one
// field of six kinds. A caller reads the few keys it needs of a large
// message and skips the rest by length, where a decoded Struct would have
// been built field by field and walked through pointers. It knows nothing
// of what the Structs hold, and imports nothing but protowire.
package wire

import (
	"errors"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// Kind is which field of a google.protobuf.Value is set, by field number.
type Kind uint8

// The kinds of a Value: its field numbers, and two more.
const (
	KindAbsent Kind = 0 // no such key, or no field of the Value set
	KindNull   Kind = 1
	KindNumber Kind = 2
	KindString Kind = 3
	KindBool   Kind = 4
	KindStruct Kind = 5
	KindList   Kind = 6

	// KindMalformed is a Value whose bytes are not protobuf.
	KindMalformed Kind = 255
)

// Value is a google.protobuf.Value: its kind, and its number (a bool as 0
// or 1) or its bytes (a string, or a Struct or ListValue message).
type Value struct {
	Kind Kind
	Num  float64
	Raw  []byte
}

// Object is a google.protobuf.Struct message, still on the wire; nil for
// none. A key is looked up by walking its entries: objects have few, and
// a replica's are read a handful of keys each.
type Object []byte

// Entry is one field of a Struct: its key, and its Value message.
type Entry struct {
	Key []byte
	Val []byte
}

// Get is the value of key; the last entry of a key wins, as when protobuf
// decodes a map.
func (o Object) Get(key string) Value {
	var val []byte
	found := false
	for b := []byte(o); len(b) > 0; {
		e, ok, rest, err := nextEntry(b)
		if err != nil {
			return Value{Kind: KindMalformed}
		}
		b = rest
		if ok && string(e.Key) == key {
			val, found = e.Val, true
		}
	}
	if !found {
		return Value{}
	}
	return ParseValue(val)
}

// Fields reads several keys in one walk of the object: out[i] is the value
// of keys[i], the last entry of a key winning.
func (o Object) Fields(keys []string, out []Value) {
	var raw [8][]byte
	var found [8]bool
	if len(keys) > len(raw) {
		for i, k := range keys {
			out[i] = o.Get(k)
		}
		return
	}
	for b := []byte(o); len(b) > 0; {
		key, val, rest, ok := shortEntry(b)
		if !ok {
			var e Entry
			var err error
			e, ok, rest, err = nextEntry(b)
			if err != nil {
				for i := range keys {
					out[i] = Value{Kind: KindMalformed}
				}
				return
			}
			key, val = e.Key, e.Val
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
		out[i] = Value{}
		if found[i] {
			out[i] = ParseValue(raw[i])
		}
	}
}

// EntriesOf are an object's entries in wire order, in the reader's buffer.
func (w *Reader) EntriesOf(o Object) ([]Entry, error) {
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

// ErrTruncated is bytes that are not the protobuf they claim to be.
var ErrTruncated = errors.New("truncated or malformed protobuf")

// Next reads one field: its number, its wire type and its value (for a
// length-delimited field, the bytes it delimits). It returns the rest of b
// after the field.
func Next(b []byte) (num protowire.Number, typ protowire.Type, field, rest []byte, err error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, nil, ErrTruncated
	}
	b = b[n:]
	m := protowire.ConsumeFieldValue(num, typ, b)
	if m < 0 {
		return 0, 0, nil, nil, ErrTruncated
	}
	field = b[:m]
	if typ == protowire.BytesType {
		field, _ = protowire.ConsumeBytes(field)
	}
	return num, typ, field, b[m:], nil
}

// delimited reads a length-delimited field under a one-byte tag, the way
// nearly every field of a Struct is written, faster than Next. It reports
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

// ParseValue reads a google.protobuf.Value message. Of several kinds set,
// the last wins, as protobuf decodes a oneof.
func ParseValue(b []byte) Value {
	// A Value is almost always one field: a string, an object or a list.
	if len(b) > 0 {
		if k := Kind(b[0] >> 3); b[0]&7 == byte(protowire.BytesType) && (k == KindString || k == KindStruct || k == KindList) {
			if field, rest, ok := delimited(b, b[0]); ok && len(rest) == 0 {
				return Value{Kind: k, Raw: field}
			}
		}
	}
	var v Value
	var message Pieces // of a struct_value or list_value
	for len(b) > 0 {
		num, typ, field, rest, err := Next(b)
		if err != nil {
			return Value{Kind: KindMalformed}
		}
		switch {
		case num == protowire.Number(KindNull) && typ == protowire.VarintType:
			v = Value{Kind: KindNull}
		case num == protowire.Number(KindNumber) && typ == protowire.Fixed64Type:
			bits, _ := protowire.ConsumeFixed64(field)
			v = Value{Kind: KindNumber, Num: math.Float64frombits(bits)}
		case num == protowire.Number(KindBool) && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(field)
			v = Value{Kind: KindBool}
			if x != 0 {
				v.Num = 1
			}
		case typ == protowire.BytesType && (num == protowire.Number(KindStruct) || num == protowire.Number(KindList)) && v.Kind == Kind(num):
			message.Add(field)
			v.Raw = message.Bytes
		case typ == protowire.BytesType && (num == protowire.Number(KindStruct) || num == protowire.Number(KindList)):
			message = Pieces{}
			message.Add(field)
			v = Value{Kind: Kind(num), Raw: message.Bytes}
		case typ == protowire.BytesType && num == protowire.Number(KindString):
			v = Value{Kind: KindString, Raw: field}
		}
		b = rest
	}
	return v
}

// Pieces gathers a message written in several Pieces: protobuf merges
// them as it would parse their concatenation. No encoder writes a message
// so, but protobuf allows it. The first piece is used in place; from the
// second on they are appended to a copy, whose growth is amortized.
type Pieces struct {
	Bytes []byte
	owned bool
}

// Add gathers the next piece.
func (p *Pieces) Add(piece []byte) {
	switch {
	case p.Bytes == nil:
		p.Bytes = piece
	case !p.owned:
		p.Bytes = append(append(make([]byte, 0, 2*(len(p.Bytes)+len(piece))), p.Bytes...), piece...)
		p.owned = true
	default:
		p.Bytes = append(p.Bytes, piece...)
	}
}

// Reader parses lists and entries into buffers it reuses for every
// object it reads, so an object costs no allocation for its structure.
type Reader struct {
	values  []Value
	entries []Entry
}

// Reset drops everything parsed so far; the lists and entries returned
// before must no longer be used.
func (w *Reader) Reset() {
	w.values = w.values[:0]
	w.entries = w.entries[:0]
}

// nextEntry reads the next field of a Struct: ok when it is an entry.
func nextEntry(b []byte) (e Entry, ok bool, rest []byte, err error) {
	if key, val, rest, ok := shortEntry(b); ok {
		return Entry{Key: key, Val: val}, true, rest, nil
	}
	payload, rest, ok := delimited(b, tagField1)
	if !ok {
		num, typ, field, after, err := Next(b)
		if err != nil {
			return Entry{}, false, nil, err
		}
		if num != 1 || typ != protowire.BytesType {
			return Entry{}, false, after, nil
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
func parseEntry(b []byte) (Entry, error) {
	if key, rest, ok := delimited(b, tagField1); ok {
		if len(rest) == 0 {
			return Entry{Key: key}, nil
		}
		if val, rest, ok := delimited(rest, tagField2); ok && len(rest) == 0 {
			return Entry{Key: key, Val: val}, nil
		}
	}
	var e Entry
	var val Pieces
	for len(b) > 0 {
		num, typ, field, rest, err := Next(b)
		if err != nil {
			return Entry{}, err
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.BytesType:
			e.Key = field
		case num == 2 && typ == protowire.BytesType:
			val.Add(field)
		}
	}
	e.Val = val.Bytes
	return e, nil
}

// ParseList reads the values of a google.protobuf.ListValue message.
func (w *Reader) ParseList(b []byte) ([]Value, error) {
	start := len(w.values)
	for len(b) > 0 {
		payload, rest, ok := delimited(b, tagField1)
		if !ok {
			num, typ, field, after, err := Next(b)
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
		w.values = append(w.values, ParseValue(payload))
	}
	return w.values[start:len(w.values):len(w.values)], nil
}

// Describe names a value's kind for an error message.
func (v Value) Describe() string {
	switch v.Kind {
	case KindString:
		return "a string"
	case KindNumber:
		return "a number"
	case KindBool:
		return "a boolean"
	case KindList:
		return "a list"
	case KindStruct:
		return "an object"
	case KindMalformed:
		return "malformed protobuf"
	case KindAbsent, KindNull:
	}
	return "null"
}

// Absent is whether a field is missing or null, as JSON's omitted.
func (v Value) Absent() bool { return v.Kind == KindAbsent || v.Kind == KindNull }
