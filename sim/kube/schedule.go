package kube

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
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
	// Searched is how many nodes the search went through, as
	// kube-scheduler counts them to move its next search's start: the
	// feasible nodes it kept and the infeasible ones before the one it
	// stopped at.
	Searched int

	allocations map[string]*nodeAllocation
	mutation    Mutation
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
// binding it. It searches the nodes as kube-scheduler v1.37 does with
// parallelism 1: from where the previous search stopped, one node after
// another, until it finds one feasible node more than it scores
// (NumFeasibleNodesToFind), which it drops; and it moves the start of the
// next search past the nodes it kept or rejected. With more than one
// worker, kube-scheduler filters nodes beyond that point at once and
// moves the start by as many as it happened to finish.
func (c *Cluster) Evaluate(ctx context.Context, p *Pod, prof Profile) (*Evaluation, error) {
	cy, e, err := c.begin(ctx, p)
	if err != nil {
		return nil, err
	}
	nodes := c.nodes
	if c.mutation == InsertionOrder {
		nodes = c.inserted
	}
	total := len(nodes)
	if names, narrowed := nodeNames(p.Obj); narrowed {
		if len(names) == 0 {
			// Its terms name no node in common: PreFilter rejects the pod
			// before any search, which then does not move.
			e.Rejected[reasonSelector] = total
			return e, nil
		}
		nodes = narrow(nodes, names)
	}
	all := len(nodes)
	want := NumFeasibleNodesToFind(all)
	if c.mutation == ScoreAllNodes {
		want = all
	}
	start := c.nextStart
	if c.mutation == RestartSearch {
		start = 0
	}
	var feasible []*Node
	var allocations []*nodeAllocation
	for i := range all {
		n := nodes[(start+i)%all]
		reason, na, err := c.filter(ctx, cy, n)
		if err != nil {
			return nil, err
		}
		if reason != "" {
			e.Rejected[reason]++
			e.Searched++
			continue
		}
		if len(feasible) == want {
			// One too many: the search stops here, without it.
			break
		}
		feasible = append(feasible, n)
		allocations = append(allocations, na)
		e.allocations[n.Obj.Name] = na
		e.Searched++
		if len(feasible) == want && c.mutation == StopAtEnough {
			break
		}
	}
	if total > 0 {
		// The start moves over every node, the search over those its
		// node affinity by name leaves (findNodesThatFitPod).
		c.nextStart = (c.nextStart + e.Searched) % total
	}
	if len(feasible) == 0 {
		return e, nil
	}
	e.Scores, e.Plugins = c.score(p, prof, feasible, allocations)
	top := slices.Max(e.Scores)
	for i, n := range feasible {
		e.Scored = append(e.Scored, n.Obj.Name)
		if e.Scores[i] == top {
			e.Best = append(e.Best, n.Obj.Name)
		}
	}
	return e, nil
}

// Pick is the node kube-scheduler v1.37 picks with parallelism 1, where
// its feasible nodes are in search order: the one a heap of the scored
// nodes by total (schedule_one.go's NewSortedScoredNodes) puts on top. Of
// nodes that tie, which that is depends on their order and how many there
// are; it is not random. "" when no node fits.
func (e *Evaluation) Pick() string {
	switch {
	case len(e.Scored) == 0:
		return ""
	case e.mutation == FirstBest:
		return e.Best[0]
	}
	h := &scoreHeap{names: slices.Clone(e.Scored), scores: slices.Clone(e.Scores)}
	heap.Init(h)
	top, _ := heap.Pop(h).(string) // scoreHeap's Pop returns a node's name.
	return top
}

// scoreHeap orders nodes by total, highest first, as the framework's
// nodeScoreHeap does without extenders (every Randomizer 0).
type scoreHeap struct {
	names  []string
	scores []int64
}

func (h *scoreHeap) Len() int           { return len(h.names) }
func (h *scoreHeap) Less(i, j int) bool { return h.scores[i] > h.scores[j] }
func (h *scoreHeap) Swap(i, j int) {
	h.names[i], h.names[j] = h.names[j], h.names[i]
	h.scores[i], h.scores[j] = h.scores[j], h.scores[i]
}
func (h *scoreHeap) Push(any) { panic("scoreHeap: Push is never called") }
func (h *scoreHeap) Pop() any {
	n := len(h.names) - 1
	name := h.names[n]
	h.names, h.scores = h.names[:n], h.scores[:n]
	return name
}

// Schedule evaluates a pod and binds it to one of the best nodes, at
// random, as kube-scheduler's default parallelism of 16 makes the choice
// among them depend on which worker finished first; with a nil rng it
// binds to Pick's node, as parallelism 1 does. It returns the node, or ""
// when none fits.
func (c *Cluster) Schedule(ctx context.Context, p *Pod, prof Profile, rng *rand.Rand) (string, *Evaluation, error) {
	e, err := c.Evaluate(ctx, p, prof)
	if err != nil || e.Unschedulable() {
		return "", e, err
	}
	name := e.Pick()
	if rng != nil {
		name = e.Best[rng.IntN(len(e.Best))]
	}
	if err := c.Bind(p, name, e); err != nil {
		return "", e, err
	}
	return name, e, nil
}

// Bind binds a pod to a node its evaluation found feasible: its claims get
// the allocation the allocator found on that node, reserved for the pod,
// and the claim made for its extended resources backed by DRA, if it
// needs one there, is added to its claims.
func (c *Cluster) Bind(p *Pod, node string, e *Evaluation) error {
	n := c.byName[node]
	na, ok := e.allocations[node]
	if n == nil || !ok {
		return fmt.Errorf("cannot bind pod %s to %s: the node was not found feasible", p.Obj.Name, node)
	}
	var results []resourceapi.AllocationResult
	if na != nil {
		results = na.results
	}
	reserved := []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Obj.Name, UID: p.Obj.UID}}
	i := 0
	for _, rc := range p.Claims {
		if rc.Status.Allocation != nil {
			rc.Status.ReservedFor = append(rc.Status.ReservedFor, reserved...)
			continue
		}
		if i >= len(results) {
			return fmt.Errorf("cannot bind pod %s to %s: %d allocations for more claims", p.Obj.Name, node, len(results))
		}
		a := results[i]
		rc.Status.Allocation = &a
		rc.Status.ReservedFor = reserved
		i++
	}
	if na != nil && na.extended != nil && i < len(results) && len(results[i].Devices.Results) > 0 {
		// PreBind writes the claim the plugin made for the node, named
		// after the pod, and records it in the pod's status.
		rc := na.extended.DeepCopy()
		rc.Name = rc.GenerateName + "sim"
		rc.UID = types.UID("claim-" + rc.Namespace + "-" + rc.Name)
		a := results[i]
		rc.Status.Allocation = &a
		rc.Status.ReservedFor = reserved
		p.Claims = append(p.Claims, rc)
		p.Obj.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: rc.Name}
	}
	c.assume(p, n)
	return nil
}

// Allocation is what the allocator allocated the pod's claims on a
// feasible node, in the order of the claims it had to allocate, the claim
// for the pod's extended resources backed by DRA last.
func (e *Evaluation) Allocation(node string) []resourceapi.AllocationResult {
	if na := e.allocations[node]; na != nil {
		return na.results
	}
	return nil
}

// EvaluateOn runs the filters for a pod on the named nodes only, in that
// order, without scoring them or moving the next search's start: for
// placing pods where a test wants them. Every feasible node is among the
// best.
func (c *Cluster) EvaluateOn(ctx context.Context, p *Pod, nodes []string) (*Evaluation, error) {
	cy, e, err := c.begin(ctx, p)
	if err != nil {
		return nil, err
	}
	for _, name := range nodes {
		n := c.byName[name]
		if n == nil {
			return nil, fmt.Errorf("cannot schedule pod %s on %s: no such node", p.Obj.Name, name)
		}
		if _, done := e.allocations[name]; done {
			continue
		}
		reason, na, err := c.filter(ctx, cy, n)
		if err != nil {
			return nil, err
		}
		e.Searched++
		if reason != "" {
			e.Rejected[reason]++
			continue
		}
		e.allocations[name] = na
		e.Scored = append(e.Scored, name)
		e.Scores = append(e.Scores, 0)
	}
	e.Best = slices.Clone(e.Scored)
	return e, nil
}

// begin starts a scheduling cycle for a pod that is not bound.
func (c *Cluster) begin(ctx context.Context, p *Pod) (*cycle, *Evaluation, error) {
	if p.node != nil {
		return nil, nil, fmt.Errorf("cannot schedule pod %s: it is bound to %s", p.Obj.Name, p.node.Obj.Name)
	}
	cy, err := c.newCycle(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	return cy, &Evaluation{Rejected: map[string]int{}, allocations: map[string]*nodeAllocation{}, mutation: c.mutation}, nil
}
