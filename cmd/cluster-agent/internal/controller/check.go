package controller

import (
	"fmt"

	"github.com/modelplaneai/fleet-scheduler/agent"
)

// checkAllocations refuses a node view in which a claim holds a device its
// resource pool does not have (in the pool's newest generation): the pod
// may be using another device than the claim names, which the report
// would then count as free. A claim holding devices of a resource pool
// that has no slice at all (its node gone) holds nothing the view counts.
func checkAllocations(nv agent.NodeView) error {
	newest := map[string]int64{}
	for _, s := range nv.ResourceSlices {
		key := agent.ResourcePoolKey(s.Spec.Driver, s.Spec.Pool.Name)
		if g, ok := newest[key]; !ok || s.Spec.Pool.Generation > g {
			newest[key] = s.Spec.Pool.Generation
		}
	}
	devices := map[string]map[string]bool{}
	for _, s := range nv.ResourceSlices {
		key := agent.ResourcePoolKey(s.Spec.Driver, s.Spec.Pool.Name)
		if s.Spec.Pool.Generation != newest[key] {
			continue
		}
		if devices[key] == nil {
			devices[key] = map[string]bool{}
		}
		for _, d := range s.Spec.Devices {
			devices[key][d.Name] = true
		}
	}
	for _, c := range nv.ResourceClaims {
		if c.Status.Allocation == nil {
			continue
		}
		for i, r := range c.Status.Allocation.Devices.Results {
			key := agent.ResourcePoolKey(r.Driver, r.Pool)
			have, ok := devices[key]
			if !ok || have[r.Device] {
				continue
			}
			return fmt.Errorf("ResourceClaim %s/%s: status.allocation.devices.results[%d].device: %q is not a device of resource pool %s (generation %d)", c.Namespace, c.Name, i, r.Device, key, newest[key])
		}
	}
	return nil
}
