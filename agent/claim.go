package agent

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/version"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/poolreport"
)

// ClaimSizer sizes a held pod of a steered pool from its ResourceClaims
// (docs/spec.md#steering): what SteerPod.Claim says, one count per DRA
// device of the pool, in the pool's order (Counter.Devices). It resolves
// each request as the function's ledger resolves the stamped requests of
// an observed replica (docs/spec.md#free-device-accounting), which
// Modelplane makes the pod's claim template of: the request's count goes
// to the first DRA device of the pool whose DeviceClass is the request's,
// whose published attributes and capacity satisfy the request's CEL
// selectors, and with that count left on a node after the requests before
// it. So the agent steers a pod by the very claim the ledger charged for
// it. A ClaimSizer may be used by several goroutines at once.
type ClaimSizer struct {
	pool    string
	devices []sizedDevice

	mu       sync.Mutex
	programs map[string]compiledSelector
	matches  map[matchKey]bool
}

// sizedDevice is a DRA device of the pool as a request is resolved to it.
type sizedDevice struct {
	class string
	count int64
	cel   dracel.Device
}

// compiledSelector is a CEL selector compiled, or why it does not compile.
type compiledSelector struct {
	result dracel.CompilationResult
	err    string
}

// matchKey is a selector evaluated on a device of the pool.
type matchKey struct {
	expr   string
	device int
}

// NewClaimSizer checks the pool's description as NewCounter does and
// returns the sizer of its pods' claims.
func NewClaimSizer(pool Pool) (*ClaimSizer, error) {
	devices, err := pool.devices()
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", pool.Name, err)
	}
	s := &ClaimSizer{pool: pool.Name, programs: map[string]compiledSelector{}, matches: map[matchKey]bool{}}
	for _, d := range pool.Devices {
		if !d.IsDRA() {
			continue
		}
		s.devices = append(s.devices, sizedDevice{class: d.DeviceClassName, cel: celDevice(d)})
	}
	for i := range s.devices {
		s.devices[i].count = devices[i].count
	}
	return s, nil
}

// Size returns what a pod with these ResourceClaims takes of the pool,
// one count per DRA device of the pool: the sum of its requests, each
// resolved as ClaimSizer says. It returns an error, naming the claim and
// the field, for a request it cannot resolve: one with firstAvailable (a
// prioritized list, whose choice is kube-scheduler's), a selector that
// does not compile, and one no device of the pool satisfies with its count
// left, where the ledger would charge a whole node. A request with
// allocation mode All takes every device of the one it resolves to; one
// with admin access takes none (it shares devices others hold).
func (s *ClaimSizer) Size(ctx context.Context, claims ...*resourcev1.ResourceClaim) ([]int64, error) {
	out := make([]int64, len(s.devices))
	for _, c := range claims {
		for i, r := range c.Spec.Devices.Requests {
			field := fmt.Sprintf("ResourceClaim %s/%s: spec.devices.requests[%d]", c.Namespace, c.Name, i)
			if err := s.resolve(ctx, field, r, out); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// resolve adds one request to the claim out, resolved as the ledger
// resolves a stamped request.
func (s *ClaimSizer) resolve(ctx context.Context, field string, r resourcev1.DeviceRequest, out []int64) error {
	e := r.Exactly
	if e == nil {
		return fmt.Errorf("%s (%s): not sized: only an exactly request names the device the ledger charged; a firstAvailable list leaves the choice to kube-scheduler", field, r.Name)
	}
	if e.AdminAccess != nil && *e.AdminAccess {
		return nil
	}
	exprs := make([]string, 0, len(e.Selectors))
	for j, sel := range e.Selectors {
		if sel.CEL == nil {
			continue
		}
		if msg := s.compile(sel.CEL.Expression); msg != "" {
			return fmt.Errorf("%s.exactly.selectors[%d].cel.expression: %s", field, j, msg)
		}
		exprs = append(exprs, sel.CEL.Expression)
	}
	count := min(max(e.Count, 1), poolreport.MaxCount)
	all := e.AllocationMode == resourcev1.DeviceAllocationModeAll
	for j, d := range s.devices {
		need := count
		if all {
			need = d.count
		}
		if d.class == e.DeviceClassName && need > 0 && d.count-out[j] >= need && s.satisfies(ctx, j, exprs) {
			out[j] += need
			return nil
		}
	}
	what := strconv.FormatInt(count, 10)
	if all {
		what = "all its devices"
	}
	return fmt.Errorf("%s (%s): no device of pool %s is of DeviceClass %s, satisfies its selectors and has %s left on a node", field, r.Name, s.pool, e.DeviceClassName, what)
}

// compile compiles a selector as DRA and the ledger do, once; it returns
// why the selector does not compile, or "".
func (s *ClaimSizer) compile(expr string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.programs[expr]
	if !ok {
		c.result = dracel.GetCompiler(dracel.Features{}).CompileCELExpression(expr, dracel.Options{})
		switch {
		case c.result.Error != nil:
			c.err = c.result.Error.Detail
		case c.result.MaxCost > resourcev1.CELSelectorExpressionMaxCost:
			c.err = fmt.Sprintf("estimated cost %d is over the limit of %d", c.result.MaxCost, resourcev1.CELSelectorExpressionMaxCost)
		}
		s.programs[expr] = c
	}
	return c.err
}

// satisfies is whether the pool's device i satisfies every selector (each
// compiled). A CEL runtime error, such as an attribute the device does not
// publish, is no match, as in the ledger.
func (s *ClaimSizer) satisfies(ctx context.Context, i int, exprs []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, expr := range exprs {
		k := matchKey{expr: expr, device: i}
		ok, seen := s.matches[k]
		if !seen {
			matched, _, err := s.programs[expr].result.DeviceMatches(ctx, s.devices[i].cel)
			ok = err == nil && matched
			s.matches[k] = ok
		}
		if !ok {
			return false
		}
	}
	return true
}

// celDevice is what DRA's CEL sees of a published device: its driver, and
// each attribute (the first of its values set) and capacity it can read;
// one it cannot read is left out, so that only a selector reading it fails
// to match, as in the ledger.
func celDevice(d v1alpha1.Device) dracel.Device {
	out := dracel.Device{
		Driver:     d.Driver,
		Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{},
		Capacity:   map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{},
	}
	for name, a := range d.Attributes {
		var v resourcev1.DeviceAttribute
		switch {
		case a.Int != nil:
			v.IntValue = a.Int
		case a.Bool != nil:
			v.BoolValue = a.Bool
		case a.String != nil:
			v.StringValue = a.String
		case a.Version != nil:
			if _, err := version.ParseSemantic(*a.Version); err != nil {
				continue
			}
			v.VersionValue = a.Version
		default:
			continue
		}
		out.Attributes[resourcev1.QualifiedName(name)] = v
	}
	for name, c := range d.Capacity {
		if q, err := resource.ParseQuantity(c.Value); err == nil {
			out.Capacity[resourcev1.QualifiedName(name)] = resourcev1.DeviceCapacity{Value: q}
		}
	}
	return out
}
