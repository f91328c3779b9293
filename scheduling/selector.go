package scheduling

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/blang/semver/v4"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// InvalidSelectorError is a nodeSelector CEL expression that does not compile
// or whose worst-case cost is over the DRA limit. The user must fix it.
type InvalidSelectorError struct {
	Engine   string
	Member   int
	Role     string
	Request  string
	Selector int
	Detail   string
}

func (e *InvalidSelectorError) Error() string {
	return fmt.Sprintf("engine %s member %d (%s) request %s: selector #%d: %s",
		e.Engine, e.Member, e.Role, e.Request, e.Selector, e.Detail)
}

// program is a compiled DRA CEL selector.
type program struct {
	result dracel.CompilationResult
}

// compileSelector compiles one expression as DRA does, refusing one whose
// estimated cost is over the limit the API server enforces on a ResourceClaim.
func compileSelector(expr string) (*program, string) {
	r := dracel.GetCompiler(dracel.Features{}).CompileCELExpression(expr, dracel.Options{})
	if r.Error != nil {
		return nil, r.Error.Detail
	}
	if r.MaxCost > resourceapi.CELSelectorExpressionMaxCost {
		return nil, fmt.Sprintf("estimated cost %d is over the limit of %d", r.MaxCost, resourceapi.CELSelectorExpressionMaxCost)
	}
	return &program{result: r}, ""
}

// Selectors keeps compiled selectors across passes, and is safe for
// concurrent passes: compiling an expression takes about half a
// millisecond, and a fleet's passes compile the same few again and again.
// Compiling is a pure function of the expression, so what a pass decides
// does not depend on what the cache holds. A nil *Selectors compiles each
// expression once per pass.
type Selectors struct {
	mu       sync.Mutex
	compiled map[string]compiled
}

// compiled is a selector compiled: its program, or why it has none.
type compiled struct {
	program *program
	detail  string
}

// maxSelectors bounds the cache; a full cache starts over.
const maxSelectors = 1024

// NewSelectors returns an empty cache of compiled selectors.
func NewSelectors() *Selectors {
	return &Selectors{compiled: map[string]compiled{}}
}

// compile compiles expr, or returns what compiling it returned before.
func (s *Selectors) compile(expr string) (*program, string) {
	if s == nil {
		return compileSelector(expr)
	}
	s.mu.Lock()
	c, ok := s.compiled[expr]
	s.mu.Unlock()
	if ok {
		return c.program, c.detail
	}
	// Compiled without the lock: two passes may compile the same
	// expression, to the same result.
	c.program, c.detail = compileSelector(expr)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.compiled) >= maxSelectors {
		clear(s.compiled)
	}
	s.compiled[expr] = c
	return c.program, c.detail
}

// programCache compiles each distinct expression once per pass, through
// the shared cache when there is one. It serves the selectors stamped on
// observed replicas, which repeat across the fleet.
type programCache struct {
	shared   *Selectors
	programs map[string]*program
}

func (c programCache) get(expr string) *program {
	if p, ok := c.programs[expr]; ok {
		return p
	}
	p, _ := c.shared.compile(expr)
	c.programs[expr] = p
	return p
}

// poolDevice is a pool device made ready for CEL evaluation.
type poolDevice struct {
	spec  v1alpha1.Device
	count int64
	kind  *deviceKind
}

// deviceKind is what CEL sees of a device: its driver, attributes and
// capacity. A fleet publishes the same few kinds on hundreds of pools, so a
// pass converts each kind once and evaluates each selector on it once.
type deviceKind struct {
	input   dracel.Device
	matches map[*program]bool
}

// deviceKinds are a pass's device kinds by deviceKey.
type deviceKinds struct {
	byKey map[string]*deviceKind
	key   []byte
	names []string
}

func newDeviceKinds() *deviceKinds {
	return &deviceKinds{byKey: map[string]*deviceKind{}}
}

func (k *deviceKinds) newPoolDevice(d v1alpha1.Device) poolDevice {
	k.key = k.appendKey(k.key[:0], d)
	kind := k.byKey[string(k.key)]
	if kind == nil {
		kind = &deviceKind{input: celDevice(d), matches: map[*program]bool{}}
		k.byKey[string(k.key)] = kind
	}
	return poolDevice{spec: d, count: clampCount(d.Count), kind: kind}
}

// appendKey appends what identifies a device to CEL: its driver, attributes
// and capacity, every string quoted so that no two different devices share
// a key.
func (k *deviceKinds) appendKey(b []byte, d v1alpha1.Device) []byte {
	b = strconv.AppendQuote(b, d.Driver)
	k.names = k.names[:0]
	for name := range d.Attributes {
		k.names = append(k.names, name)
	}
	slices.Sort(k.names)
	for _, name := range k.names {
		a := d.Attributes[name]
		b = strconv.AppendQuote(b, name)
		switch {
		case a.Int != nil:
			b = strconv.AppendInt(append(b, 'i'), *a.Int, 10)
		case a.Bool != nil:
			b = strconv.AppendBool(append(b, 'b'), *a.Bool)
		case a.String != nil:
			b = strconv.AppendQuote(append(b, 's'), *a.String)
		case a.Version != nil:
			b = strconv.AppendQuote(append(b, 'v'), *a.Version)
		default:
			b = append(b, '-')
		}
	}
	b = append(b, '|')
	k.names = k.names[:0]
	for name := range d.Capacity {
		k.names = append(k.names, name)
	}
	slices.Sort(k.names)
	for _, name := range k.names {
		b = strconv.AppendQuote(strconv.AppendQuote(b, name), d.Capacity[name].Value)
	}
	return b
}

// celDevice converts a published device to DRA's CEL input. An attribute or
// capacity DRA cannot read is left out, so only a selector that reads it
// fails to match the device (DeviceDefects names them for a warning).
func celDevice(d v1alpha1.Device) dracel.Device {
	in := dracel.Device{
		Driver:     d.Driver,
		Attributes: make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(d.Attributes)),
		Capacity:   make(map[resourceapi.QualifiedName]resourceapi.DeviceCapacity, len(d.Capacity)),
	}
	for name, a := range d.Attributes {
		if attr, defect := attributeValue(a); defect == "" {
			in.Attributes[resourceapi.QualifiedName(name)] = attr
		}
	}
	for name, c := range d.Capacity {
		if q, err := resource.ParseQuantity(c.Value); err == nil {
			in.Capacity[resourceapi.QualifiedName(name)] = resourceapi.DeviceCapacity{Value: q}
		}
	}
	return in
}

// attributeValue converts one attribute as DRA reads it: the first value set,
// a version parsed as a semantic version.
func attributeValue(a v1alpha1.DeviceAttribute) (resourceapi.DeviceAttribute, string) {
	switch {
	case a.Int != nil:
		return resourceapi.DeviceAttribute{IntValue: a.Int}, ""
	case a.Bool != nil:
		return resourceapi.DeviceAttribute{BoolValue: a.Bool}, ""
	case a.String != nil:
		return resourceapi.DeviceAttribute{StringValue: a.String}, ""
	case a.Version != nil:
		if _, err := semver.Parse(*a.Version); err != nil {
			return resourceapi.DeviceAttribute{}, fmt.Sprintf("%q is not a semantic version", *a.Version)
		}
		return resourceapi.DeviceAttribute{VersionValue: a.Version}, ""
	}
	return resourceapi.DeviceAttribute{}, "no value"
}

// DeviceDefects names, in order, each attribute and capacity of a published
// device that DRA's CEL cannot read.
func DeviceDefects(d v1alpha1.Device) []string {
	if !hasDefects(d) {
		return nil
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(d.Attributes)) {
		if _, defect := attributeValue(d.Attributes[name]); defect != "" {
			out = append(out, fmt.Sprintf("attributes[%s]: %s", name, defect))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(d.Capacity)) {
		if _, err := resource.ParseQuantity(d.Capacity[name].Value); err != nil {
			out = append(out, fmt.Sprintf("capacity[%s]: %q is not a quantity", name, d.Capacity[name].Value))
		}
	}
	return out
}

// hasDefects is whether DeviceDefects has any to name, without the work of
// naming them in order: pools are many, defects rare.
func hasDefects(d v1alpha1.Device) bool {
	for _, a := range d.Attributes {
		if _, defect := attributeValue(a); defect != "" {
			return true
		}
	}
	for _, c := range d.Capacity {
		if _, err := resource.ParseQuantity(c.Value); err != nil {
			return true
		}
	}
	return false
}

// satisfies reports whether the device meets every selector. A CEL runtime
// error, such as an attribute the device lacks, is a non-match.
func (d *poolDevice) satisfies(programs []*program) bool {
	for _, p := range programs {
		if p == nil {
			return false
		}
		ok, seen := d.kind.matches[p]
		if !seen {
			matched, _, err := p.result.DeviceMatches(context.Background(), d.kind.input)
			ok = err == nil && matched
			d.kind.matches[p] = ok
		}
		if !ok {
			return false
		}
	}
	return true
}

// MaxCount bounds every published count (a million nodes, or devices on a
// node), so sums and products of counts cannot overflow.
const MaxCount = 1 << 20

const maxCount = MaxCount

// clampCount reads a published count: absent or negative is 0, and a huge
// one is held at maxCount.
func clampCount(v *int64) int64 {
	if v == nil || *v < 0 {
		return 0
	}
	return min(*v, maxCount)
}
