package kube

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
)

// Evaluation is what one scheduling cycle found for a pod.
type Evaluation struct {
	// Scored are the feasible nodes that were scored, in search order;
	// Scores their weighted totals and Plugins each plugin's part.
	Scored  []string
	Scores  []int64
	Plugins []PluginScores
	// Best are the scored nodes with the highest total, in search order.
	Best []string
	// Rejected counts the searched nodes that do not fit, by reason.
	Rejected map[string]int

	allocations map[string][]resourceapi.AllocationResult
}

// Unschedulable reports whether no node fits.
func (e *Evaluation) Unschedulable() bool { return len(e.Best) == 0 }

// The adaptive default of percentageOfNodesToScore (schedule_one.go).
const (
	minFeasibleNodesToFind           = 100
	minFeasibleNodesPercentageToFind = 5
)

// NumFeasibleNodesToFind is how many feasible nodes kube-scheduler scores
// in a cluster of numAllNodes with percentageOfNodesToScore unset.
func NumFeasibleNodesToFind(numAllNodes int) int {
	if numAllNodes < minFeasibleNodesToFind {
		return numAllNodes
	}
	percentage := max(50-numAllNodes/125, minFeasibleNodesPercentageToFind)
	return max(numAllNodes*percentage/100, minFeasibleNodesToFind)
}

// Evaluate runs a scheduling cycle's filters and scores for a pod without
// binding it. It moves the start of the next search, as kube-scheduler's
// cycle does.
func (c *Cluster) Evaluate(ctx context.Context, p *Pod, prof Profile) (*Evaluation, error) {
	if p.node != nil {
		return nil, fmt.Errorf("cannot schedule pod %s: it is bound to %s", p.Obj.Name, p.node.Obj.Name)
	}
	cy, err := c.newCycle(ctx, p)
	if err != nil {
		return nil, err
	}
	e := &Evaluation{Rejected: map[string]int{}, allocations: map[string][]resourceapi.AllocationResult{}}
	all := len(c.nodes)
	want := NumFeasibleNodesToFind(all)
	var feasible []*Node
	searched := 0
	for ; searched < all && len(feasible) < want; searched++ {
		n := c.nodes[(c.nextStart+searched)%all]
		reason, results, err := c.filter(ctx, cy, n)
		if err != nil {
			return nil, err
		}
		if reason != "" {
			e.Rejected[reason]++
			continue
		}
		feasible = append(feasible, n)
		e.allocations[n.Obj.Name] = results
	}
	if all > 0 {
		c.nextStart = (c.nextStart + searched) % all
	}
	if len(feasible) == 0 {
		return e, nil
	}
	e.Scores, e.Plugins = c.score(p, prof, feasible)
	top := slices.Max(e.Scores)
	for i, n := range feasible {
		e.Scored = append(e.Scored, n.Obj.Name)
		if e.Scores[i] == top {
			e.Best = append(e.Best, n.Obj.Name)
		}
	}
	return e, nil
}

// Schedule evaluates a pod and binds it to one of the best nodes, at
// random; it returns the node, or "" when none fits.
func (c *Cluster) Schedule(ctx context.Context, p *Pod, prof Profile, rng *rand.Rand) (string, *Evaluation, error) {
	e, err := c.Evaluate(ctx, p, prof)
	if err != nil || e.Unschedulable() {
		return "", e, err
	}
	name := e.Best[rng.IntN(len(e.Best))]
	if err := c.Bind(p, name, e); err != nil {
		return "", e, err
	}
	return name, e, nil
}

// Bind binds a pod to a node its evaluation found feasible: its claims get
// the allocation the allocator found on that node, reserved for the pod.
func (c *Cluster) Bind(p *Pod, node string, e *Evaluation) error {
	n := c.byName[node]
	results, ok := e.allocations[node]
	if n == nil || !ok {
		return fmt.Errorf("cannot bind pod %s to %s: the node was not found feasible", p.Obj.Name, node)
	}
	i := 0
	for _, rc := range p.Claims {
		if rc.Status.Allocation != nil {
			continue
		}
		if i >= len(results) {
			return fmt.Errorf("cannot bind pod %s to %s: %d allocations for more claims", p.Obj.Name, node, len(results))
		}
		a := results[i]
		rc.Status.Allocation = &a
		rc.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Obj.Name, UID: p.Obj.UID}}
		i++
	}
	c.assume(p, n)
	return nil
}

// Allocation is what the allocator allocated the pod's claims on a
// feasible node, in the order of the claims it had to allocate.
func (e *Evaluation) Allocation(node string) []resourceapi.AllocationResult {
	return e.allocations[node]
}
