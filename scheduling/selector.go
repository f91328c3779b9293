package scheduling

import (
	"context"
	"fmt"

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

// programCache compiles each distinct expression once per pass. It serves
// the selectors stamped on observed replicas, which repeat across the fleet.
type programCache map[string]*program

func (c programCache) get(expr string) *program {
	if p, ok := c[expr]; ok {
		return p
	}
	p, _ := compileSelector(expr)
	c[expr] = p
	return p
}

// poolDevice is a pool device made ready for CEL evaluation.
type poolDevice struct {
	spec    v1alpha1.Device
	count   int64
	input   dracel.Device
	inputOK bool
}

func newPoolDevice(d v1alpha1.Device) poolDevice {
	pd := poolDevice{spec: d, count: clampCount(d.Count)}
	pd.input, pd.inputOK = celDevice(d)
	return pd
}

// celDevice converts a published device to DRA's CEL input. A device whose
// attributes or capacity cannot be converted matches no selector.
func celDevice(d v1alpha1.Device) (dracel.Device, bool) {
	in := dracel.Device{
		Driver:     d.Driver,
		Attributes: make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(d.Attributes)),
		Capacity:   make(map[resourceapi.QualifiedName]resourceapi.DeviceCapacity, len(d.Capacity)),
	}
	for name, a := range d.Attributes {
		in.Attributes[resourceapi.QualifiedName(name)] = resourceapi.DeviceAttribute{
			StringValue:  a.String,
			VersionValue: a.Version,
			BoolValue:    a.Bool,
			IntValue:     a.Int,
		}
	}
	for name, c := range d.Capacity {
		q, err := resource.ParseQuantity(c.Value)
		if err != nil {
			return in, false
		}
		in.Capacity[resourceapi.QualifiedName(name)] = resourceapi.DeviceCapacity{Value: q}
	}
	return in, true
}

// satisfies reports whether the device meets every selector. A CEL runtime
// error, such as an attribute the device lacks, is a non-match.
func (d *poolDevice) satisfies(programs []*program) bool {
	if len(programs) == 0 {
		return true
	}
	if !d.inputOK {
		return false
	}
	for _, p := range programs {
		if p == nil {
			return false
		}
		ok, _, err := p.result.DeviceMatches(context.Background(), d.input)
		if err != nil || !ok {
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
