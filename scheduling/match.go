package scheduling

import "github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"

// Matching (docs/spec.md#matching): a member matches a pool when every request of its
// nodeSelector is met by a pool device, requests taking devices greedily in
// order; only claim: DRA devices become deviceRequests; a member that could
// claim somewhere may not be placed where it would claim nothing; and an
// engine needs at least one claiming member. Every rule of matching lives
// here.

// matchMember matches a member's requests against one pool, each request
// taking, greedily in order, the first device that satisfies its selectors
// and has count left on one node. Nil when any request finds no device.
func matchMember(p *pool, m *member) *memberMatch {
	remaining := make([]int64, len(p.devices))
	for i := range p.devices {
		remaining[i] = p.devices[i].count
	}
	mm := &memberMatch{claim: make([]int64, len(p.devices))}
	for _, r := range m.requests {
		found := -1
		for i := range p.devices {
			if remaining[i] >= r.count && p.devices[i].satisfies(r.programs) {
				found = i
				break
			}
		}
		if found < 0 {
			return nil
		}
		remaining[found] -= r.count
		d := p.devices[found].spec
		if !d.IsDRA() {
			continue
		}
		mm.claim[found] += r.count
		dr := v1alpha1.DeviceRequest{Name: r.name, DeviceClassName: d.DeviceClassName, Count: r.count}
		for _, s := range r.selectors {
			dr.Selectors = append(dr.Selectors, v1alpha1.Selector{CEL: s})
		}
		mm.requests = append(mm.requests, dr)
	}
	return mm
}

// match matches member mi of engine ei against a pool, once per pass.
func (c *cluster) match(p *pool, engines []engine, ei, mi int) *memberMatch {
	k := matchKey{p.index, ei, mi}
	if m, ok := c.matches[k]; ok {
		return m
	}
	m := matchMember(p, &engines[ei].members[mi])
	c.matches[k] = m
	return m
}

// claimable reports, per member of engine ei, whether it claims a device on
// some pool of the cluster: such a member may not be stranded on a pool
// where it would claim nothing.
func (c *cluster) claimable(engines []engine, ei int) []bool {
	out := make([]bool, len(engines[ei].members))
	for mi := range out {
		for _, p := range c.pools {
			if mm := c.match(p, engines, ei, mi); mm != nil && mm.claims() {
				out[mi] = true
				break
			}
		}
	}
	return out
}

// matchOnPool matches every member of engine ei to one pool, as a new
// placement: nil when a member does not match it, or one that claims
// somewhere (claimable) would claim nothing on it.
func (c *cluster) matchOnPool(p *pool, engines []engine, ei int, claimable []bool) []*memberMatch {
	matches := make([]*memberMatch, len(engines[ei].members))
	for mi := range matches {
		mm := c.match(p, engines, ei, mi)
		if mm == nil || (claimable[mi] && !mm.claims()) {
			return nil
		}
		matches[mi] = mm
	}
	return matches
}

// engineClaims is whether an engine matched this way claims something: an
// engine of claimless members is placed nowhere.
func engineClaims(matches []*memberMatch) bool {
	for _, mm := range matches {
		if mm.claims() {
			return true
		}
	}
	return false
}
