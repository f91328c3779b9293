package cluster

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/modelplaneai/fleet-scheduler/agent"
)

// NodeView returns what the node's count depends on, with the taints of
// DeviceTaintRules applied to the slices, and a key of it: the
// resourceVersions of the Node, of every slice and claim in the view and
// of every DeviceTaintRule applied. Two views of one node with the same key
// count the same, so the agent recounts a node only when its key changes.
func (c *Cluster) NodeView(n *corev1.Node) (agent.NodeView, string) {
	nv := agent.NodeView{Node: n}
	var key strings.Builder
	key.WriteString(n.ResourceVersion)

	pools := map[string]bool{}
	if objs, err := c.slices.GetIndexer().ByIndex(indexNode, n.Name); err == nil {
		for _, s := range typed[*resourcev1.ResourceSlice](objs) {
			pools[agent.ResourcePoolKey(s.Spec.Driver, s.Spec.Pool.Name)] = true
		}
	}
	keys := make([]string, 0, len(pools))
	for k := range pools {
		keys = append(keys, k)
	}
	slices.Sort(keys)

	rules := c.TaintRules()
	claimsSeen := map[string]bool{}
	for _, pool := range keys {
		objs, err := c.slices.GetIndexer().ByIndex(indexPool, pool)
		if err != nil {
			continue
		}
		for _, s := range sortedByName(typed[*resourcev1.ResourceSlice](objs)) {
			patched, applied := Patch(s, rules)
			nv.ResourceSlices = append(nv.ResourceSlices, patched)
			key.WriteString("|s:" + s.Name + "@" + s.ResourceVersion)
			for _, r := range applied {
				key.WriteString("+" + r.Name + "@" + r.ResourceVersion)
			}
		}
		objs, err = c.claims.GetIndexer().ByIndex(indexPool, pool)
		if err != nil {
			continue
		}
		for _, cl := range sortedByName(typed[*resourcev1.ResourceClaim](objs)) {
			id := cl.Namespace + "/" + cl.Name
			if claimsSeen[id] {
				continue
			}
			claimsSeen[id] = true
			nv.ResourceClaims = append(nv.ResourceClaims, cl)
			key.WriteString(claimKey(cl.Namespace, cl.Name) + cl.ResourceVersion)
		}
	}
	return nv, key.String()
}

// claimKey is how a claim starts in a node view's key.
func claimKey(namespace, name string) string { return "|c:" + namespace + "/" + name + "@" }

// KeyHolds is whether a node's count of the key (NodeView) was counted
// with the claim of the namespace and name holding devices there: once it
// has, the count shows them taken.
func KeyHolds(key, namespace, name string) bool {
	return strings.Contains(key, claimKey(namespace, name))
}

// TaintRules are every DeviceTaintRule, sorted by name; none where the
// cluster does not serve them.
func (c *Cluster) TaintRules() []*resourcev1.DeviceTaintRule {
	if c.taintRules == nil {
		return nil
	}
	return sortedByName(typed[*resourcev1.DeviceTaintRule](c.taintRules.GetStore().List()))
}

// Patch returns the slice with the taints of the rules that select its
// devices added to theirs, as kube-scheduler sees it
// (k8s.io/dynamic-resource-allocation/resourceslice/tracker applies them
// the same way), and the rules applied. The slice is copied only when a
// rule applies; the rules are applied in order.
func Patch(s *resourcev1.ResourceSlice, rules []*resourcev1.DeviceTaintRule) (*resourcev1.ResourceSlice, []*resourcev1.DeviceTaintRule) {
	out := s
	var applied []*resourcev1.DeviceTaintRule
	for _, r := range rules {
		sel := r.Spec.DeviceSelector
		switch {
		case sel == nil:
			// No selector selects no device.
			continue
		case sel.Driver != nil && *sel.Driver != s.Spec.Driver:
			continue
		case sel.Pool != nil && *sel.Pool != s.Spec.Pool.Name:
			continue
		}
		hit := false
		for i := range s.Spec.Devices {
			if sel.Device != nil && *sel.Device != s.Spec.Devices[i].Name {
				continue
			}
			if out == s {
				out = s.DeepCopy()
			}
			out.Spec.Devices[i].Taints = append(out.Spec.Devices[i].Taints, r.Spec.Taint)
			hit = true
		}
		if hit {
			applied = append(applied, r)
		}
	}
	return out, applied
}
