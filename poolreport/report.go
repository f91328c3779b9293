// Package poolreport holds the rules of a pool's report, the one thing the
// three binaries pass between them (docs/spec.md#pool-reports): the bounds
// the agent publishes within and the InferenceCluster's schema enforces,
// what the relay may copy onto an InferenceCluster, and how the function
// reads and checks a report against its pool. The agent, the relay and the
// function all check through it, so the rules cannot drift apart.
//
// It knows no scheduler: it reads decoded JSON into plain values, and a
// report it cannot use becomes a field and a defect, never a panic.
package poolreport

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// Bounds of a report, as the agent's CRDs and deploy/inferenceclusters.yaml's
// schema have them (TestBoundsMatchSchemas holds them to it).
const (
	// MaxBuckets is the most buckets nodesByFreeDevices may hold.
	MaxBuckets = 64
	// MaxFreePerBucket is the most devices one bucket may list.
	MaxFreePerBucket = 16
	// MaxCount bounds every count of a report (a million nodes, or devices
	// on a node).
	MaxCount = 1 << 20
	// MaxNameLength is the longest device name a bucket may list.
	MaxNameLength = 63
	// MaxTimeLength is the longest observedAt string.
	MaxTimeLength = 64
)

// Bucket is a number of nodes with exactly the same free devices, as the
// function reads it.
type Bucket struct {
	Nodes int64
	// Free devices by pool device name; a device not listed has 0 free.
	Free map[string]int64
}

// Count reads a report's count: a non-negative whole number no larger than
// MaxCount. The defect says what is wrong, empty when nothing is.
func Count(v any) (int64, string) {
	if v == nil {
		return 0, "missing"
	}
	f, ok := number(v)
	switch {
	case !ok:
		return 0, fmt.Sprintf("%s is not a number", render(v))
	case f != math.Trunc(f):
		return 0, fmt.Sprintf("%v is not a whole number", f)
	case f < 0:
		return 0, fmt.Sprintf("%v is negative", f)
	case f > MaxCount:
		return 0, fmt.Sprintf("%v is more than %d", f, MaxCount)
	}
	return int64(f), ""
}

// WholeNumber reads a JSON number that is a whole number from 0 to hi, as
// a schema's integer with those bounds admits it.
func WholeNumber(v any, hi float64) (int64, error) {
	f, ok := number(v)
	if !ok {
		return 0, fmt.Errorf("%v is not a number", v)
	}
	if f != float64(int64(f)) || f < 0 || f > hi {
		return 0, fmt.Errorf("%s is not a whole number from 0 to %.0f", strconv.FormatFloat(f, 'f', -1, 64), hi)
	}
	return int64(f), nil
}

// number is a decoded JSON number, of whichever Go type decoded it.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	}
	return 0, false
}

// render shows a value as the JSON it came from, keys in order, for a
// defect that quotes it.
func render(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// notBuckets is the defect of a histogram that is not a list of buckets.
const notBuckets = "not a list of {nodes, free} buckets"

// Histogram reads and checks nodesByFreeDevices against the pool's devices
// and observedNodes. It returns the field (relative to the pool's entry)
// and defect of the first problem found.
func Histogram(v any, devices []v1alpha1.Device, observedNodes int64) ([]Bucket, string, string) {
	const field = agentv1alpha1.FieldNodesByFreeDevices
	list, ok := v.([]any)
	if !ok {
		return nil, field, notBuckets
	}
	if len(list) > MaxBuckets {
		return nil, field, fmt.Sprintf("%d buckets, more than %d", len(list), MaxBuckets)
	}
	out := make([]Bucket, 0, len(list))
	var total int64
	for bi, v := range list {
		b, sub, defect := bucket(v, devices)
		if defect != "" {
			if sub == "" {
				return nil, field, defect
			}
			return nil, fmt.Sprintf("%s[%d].%s", field, bi, sub), defect
		}
		total += b.Nodes
		out = append(out, b)
	}
	if total > observedNodes {
		return nil, field, fmt.Sprintf("buckets hold %d nodes, more than observedNodes %d", total, observedNodes)
	}
	return out, "", ""
}

// bucket reads one bucket of the histogram. It returns the field, relative
// to the bucket (empty when the histogram as a whole is malformed), and
// defect of the first problem found.
func bucket(v any, devices []v1alpha1.Device) (Bucket, string, string) {
	fields, isObject := v.(map[string]any)
	free, isList := fields[agentv1alpha1.FieldBucketFree].([]any)
	if (!isObject && v != nil) || (!isList && fields[agentv1alpha1.FieldBucketFree] != nil) {
		return Bucket{}, "", notBuckets
	}
	nodes, defect := Count(fields[agentv1alpha1.FieldBucketNodes])
	if defect != "" {
		return Bucket{}, agentv1alpha1.FieldBucketNodes, defect
	}
	if len(free) > MaxFreePerBucket {
		return Bucket{}, agentv1alpha1.FieldBucketFree, fmt.Sprintf("%d devices, more than %d", len(free), MaxFreePerBucket)
	}
	b := Bucket{Nodes: nodes, Free: make(map[string]int64, len(free))}
	for fi, fv := range free {
		ff, isObject := fv.(map[string]any)
		if !isObject && fv != nil {
			return Bucket{}, "", notBuckets
		}
		// The field is named only when it is wrong: this runs for every
		// bucket of every pool of the fleet.
		field := func(sub string) string { return "free[" + strconv.Itoa(fi) + "]." + sub }
		name, _ := ff[agentv1alpha1.FieldFreeName].(string)
		if name == "" {
			return Bucket{}, field(agentv1alpha1.FieldFreeName), "not a device name"
		}
		// The first device of a name is the one, as everywhere a pool's
		// devices are looked up by name.
		di := slices.IndexFunc(devices, func(d v1alpha1.Device) bool { return d.Name == name })
		switch {
		case di < 0:
			return Bucket{}, field(agentv1alpha1.FieldFreeName), fmt.Sprintf("pool has no device %q", name)
		case !devices[di].IsDRA():
			return Bucket{}, field(agentv1alpha1.FieldFreeName), fmt.Sprintf("device %q is not claimed through DRA", name)
		}
		if _, dup := b.Free[name]; dup {
			return Bucket{}, field(agentv1alpha1.FieldFreeName), fmt.Sprintf("device %q is listed twice", name)
		}
		n, defect := Count(ff[agentv1alpha1.FieldFreeCount])
		if defect != "" {
			return Bucket{}, field(agentv1alpha1.FieldFreeCount), defect
		}
		perNode := int64(0)
		if c := devices[di].Count; c != nil {
			perNode = *c
		}
		if n > perNode {
			return Bucket{}, field(agentv1alpha1.FieldFreeCount), fmt.Sprintf("%d free %s is more than the %d a node has", n, name, perNode)
		}
		b.Free[name] = n
	}
	return b, "", ""
}
