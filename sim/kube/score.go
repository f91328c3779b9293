package kube

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// maxNodeScore is the framework's MaxNodeScore.
const maxNodeScore int64 = 100

// Weights are the default profile's weights of its score plugins
// (pkg/scheduler/apis/config/v1/default_plugins.go).
func Weights() map[string]int64 {
	return map[string]int64{
		"TaintToleration":                 3,
		"NodeAffinity":                    2,
		"NodeResourcesFit":                1,
		"PodTopologySpread":               2,
		"InterPodAffinity":                2,
		"DynamicResources":                2,
		"NodeResourcesBalancedAllocation": 1,
		"ImageLocality":                   1,
	}
}

// pluginOrder are the score plugins in the default profile's order.
func pluginOrder() []string {
	return []string{"TaintToleration", "NodeAffinity", "NodeResourcesFit", "PodTopologySpread", "InterPodAffinity", "DynamicResources", "NodeResourcesBalancedAllocation", "ImageLocality"}
}

// PluginScores are one node's normalised scores, before weighting, of the
// plugins that score; a plugin that skipped the pod is absent.
type PluginScores map[string]int64

// score computes every scoring plugin's normalised scores of the feasible
// nodes, and their weighted totals.
func (c *Cluster) score(p *Pod, prof Profile, nodes []*Node, allocations []*nodeAllocation) ([]int64, []PluginScores) {
	weights := c.weights
	totals := make([]int64, len(nodes))
	per := make([]PluginScores, len(nodes))
	for i := range per {
		per[i] = PluginScores{}
	}
	add := func(name string, scores []int64) {
		if scores == nil || !c.scoreOn(name) {
			return
		}
		for i, s := range scores {
			per[i][name] = s
			totals[i] += weights[name] * s
		}
	}
	add("TaintToleration", taintScores(p, nodes))
	add("NodeAffinity", nodeAffinityScores(p, nodes))
	add("NodeResourcesFit", c.fitScores(p, prof, nodes))
	add("PodTopologySpread", c.spreadScores(p, nodes))
	add("InterPodAffinity", c.interPodAffinityScores(p, nodes))
	add("DynamicResources", c.draScores(p, allocations))
	add("NodeResourcesBalancedAllocation", balancedScores(p, nodes))
	add("ImageLocality", c.imageScores(p, nodes))
	return totals, per
}

// nodeAffinityScores is NodeAffinity's score: the weights of the pod's
// preferred node affinity terms the node matches, scaled by the highest.
// A pod without such terms is skipped (nil).
func nodeAffinityScores(p *Pod, nodes []*Node) []int64 {
	if p.preferredNodes == nil {
		return nil
	}
	raw := make([]int64, len(nodes))
	for i, n := range nodes {
		raw[i] = p.preferredNodes.Score(n.Obj)
	}
	return defaultNormalize(raw, false)
}

// draScores is DynamicResources' score: for each request of a
// prioritized list (firstAvailable), the rank of the sub-request the
// allocation on the node took, 8 for the first down to 1 for the eighth;
// scaled by the highest.
func (c *Cluster) draScores(p *Pod, allocations []*nodeAllocation) []int64 {
	raw := make([]int64, len(allocations))
	for i, na := range allocations {
		if na == nil {
			// The plugin allocated nothing on the node: it scores 0.
			continue
		}
		j := 0
		for _, rc := range p.Claims {
			a := rc.Status.Allocation
			if a == nil {
				if j >= len(na.results) {
					break
				}
				a = &na.results[j]
				j++
			}
			raw[i] += c.subRequestRanks(rc, a)
		}
	}
	return defaultNormalize(raw, false)
}

// subRequestRanks sums, over the claim's prioritized lists, the rank of
// the sub-request the allocation took.
func (c *Cluster) subRequestRanks(rc *resourceapi.ResourceClaim, a *resourceapi.AllocationResult) int64 {
	chosen := map[string]bool{}
	for _, r := range a.Devices.Results {
		chosen[r.Request] = true
	}
	var sum int64
	for _, req := range rc.Spec.Devices.Requests {
		for k, sub := range req.FirstAvailable {
			if chosen[req.Name+"/"+sub.Name] {
				rank := int64(resourceapi.FirstAvailableDeviceRequestMaxSize - k)
				if c.mutation == FlatSubRequestRank {
					rank = resourceapi.FirstAvailableDeviceRequestMaxSize
				}
				sum += rank
			}
		}
	}
	return sum
}

// taintScores is TaintToleration's score: the PreferNoSchedule taints the
// pod does not tolerate, fewer being better.
func taintScores(p *Pod, nodes []*Node) []int64 {
	var tolerations []corev1.Toleration
	for _, t := range p.Obj.Spec.Tolerations {
		if t.Effect == "" || t.Effect == corev1.TaintEffectPreferNoSchedule {
			tolerations = append(tolerations, t)
		}
	}
	raw := make([]int64, len(nodes))
	for i, n := range nodes {
		for _, taint := range n.Obj.Spec.Taints {
			if taint.Effect == corev1.TaintEffectPreferNoSchedule && !corev1helpers.TolerationsTolerateTaint(klog.Background(), tolerations, &taint, false) {
				raw[i]++
			}
		}
	}
	return defaultNormalize(raw, true)
}

// defaultNormalize is the framework's helper.DefaultNormalizeScore.
func defaultNormalize(scores []int64, reverse bool) []int64 {
	var top int64
	for _, s := range scores {
		top = max(top, s)
	}
	out := make([]int64, len(scores))
	for i, s := range scores {
		switch {
		case top == 0 && reverse:
			out[i] = maxNodeScore
		case top == 0:
			out[i] = s
		case reverse:
			out[i] = maxNodeScore - maxNodeScore*s/top
		default:
			out[i] = maxNodeScore * s / top
		}
	}
	return out
}

// fitScores is NodeResourcesFit's score over cpu and memory, weight 1 each:
// LeastAllocated, or MostAllocated under that profile. It reads the node's
// non-zero requests, and the pod's with the defaults for containers that
// request nothing.
func (c *Cluster) fitScores(p *Pod, prof Profile, nodes []*Node) []int64 {
	scored := p.scored
	if c.mutation == NoDefaultRequests {
		scored = p.requests
	}
	out := make([]int64, len(nodes))
	for i, n := range nodes {
		requested := [2]int64{n.nonZero.milliCPU + scored.milliCPU, n.nonZero.memory + scored.memory}
		allocatable := [2]int64{n.allocatable.milliCPU, n.allocatable.memory}
		var score, weights int64
		for r := range requested {
			if allocatable[r] == 0 {
				continue
			}
			if prof == MostAllocated {
				score += mostRequestedScore(requested[r], allocatable[r])
			} else {
				score += leastRequestedScore(requested[r], allocatable[r])
			}
			weights++
		}
		if weights > 0 {
			out[i] = score / weights
		}
	}
	return out
}

func leastRequestedScore(requested, capacity int64) int64 {
	if capacity == 0 || requested > capacity {
		return 0
	}
	return (capacity - requested) * maxNodeScore / capacity
}

func mostRequestedScore(requested, capacity int64) int64 {
	if capacity == 0 {
		return 0
	}
	return min(requested, capacity) * maxNodeScore / capacity
}

// balancedScores is NodeResourcesBalancedAllocation's score over cpu and
// memory: how much the pod improves the balance of the node's requests.
// A pod that requests neither is skipped (nil).
func balancedScores(p *Pod, nodes []*Node) []int64 {
	if p.requests.milliCPU == 0 && p.requests.memory == 0 {
		return nil
	}
	out := make([]int64, len(nodes))
	for i, n := range nodes {
		allocatable := []int64{n.allocatable.milliCPU, n.allocatable.memory}
		allocated := []int64{n.requested.milliCPU, n.requested.memory}
		requested := []int64{n.requested.milliCPU + p.requests.milliCPU, n.requested.memory + p.requests.memory}
		for r := range allocatable {
			if allocatable[r] == 0 {
				allocated[r], requested[r] = 0, 0
			}
		}
		with := balancedResourceScore(requested, allocatable)
		without := balancedResourceScore(allocated, allocatable)
		out[i] = maxNodeScore/2 + (maxNodeScore/2+with-without)/2
	}
	return out
}

// balancedResourceScore is the framework's, floating point and all.
func balancedResourceScore(requested, allocatable []int64) int64 {
	var fractions []float64
	var total float64
	for i := range requested {
		if allocatable[i] == 0 {
			continue
		}
		f := float64(requested[i]) / float64(allocatable[i])
		if f > 1 {
			f = 1
		}
		total += f
		fractions = append(fractions, f)
	}
	std := 0.0
	switch {
	case len(fractions) == 2:
		std = math.Abs((fractions[0] - fractions[1]) / 2)
	case len(fractions) > 2:
		mean := total / float64(len(fractions))
		var sum float64
		for _, f := range fractions {
			sum += (f - mean) * (f - mean)
		}
		std = math.Sqrt(sum / float64(len(fractions)))
	}
	return int64((1 - std) * float64(maxNodeScore))
}

// ImageLocality's bounds: 23 MiB and 1000 MiB per image.
const (
	mib                   int64 = 1024 * 1024
	minImageThreshold           = 23 * mib
	maxContainerThreshold       = 1000 * mib
)

// imageScores is ImageLocality's score: the sizes of the pod's images the
// node holds, each scaled by the share of the cluster's nodes holding it.
func (c *Cluster) imageScores(p *Pod, nodes []*Node) []int64 {
	total := len(c.nodes)
	out := make([]int64, len(nodes))
	for i, n := range nodes {
		var sum int64
		for _, name := range p.images {
			if size, ok := n.images[name]; ok {
				spread := float64(c.imageNodes[name]) / float64(total)
				if c.mutation == NoImageSpread {
					spread = 1
				}
				sum += int64(float64(size) * spread)
			}
		}
		top := maxContainerThreshold * int64(len(p.images))
		sum = min(max(sum, minImageThreshold), top)
		if top > minImageThreshold {
			out[i] = maxNodeScore * (sum - minImageThreshold) / (top - minImageThreshold)
		}
	}
	return out
}

// spreadConstraint is one of PodTopologySpread's system default
// constraints.
type spreadConstraint struct {
	key     string
	maxSkew int64
}

// systemDefaultConstraints are PodTopologySpread's (plugin.go).
func systemDefaultConstraints() []spreadConstraint {
	return []spreadConstraint{{corev1.LabelHostname, 3}, {corev1.LabelTopologyZone, 5}}
}

// spreadScores is PodTopologySpread's score with the system default
// constraints, for a pod whose controller the cluster knows: fewer pods of
// that controller in the node's domain are better. Any other pod is
// skipped (nil).
func (c *Cluster) spreadScores(p *Pod, nodes []*Node) []int64 {
	sel := c.owner(p.Obj)
	if sel.Empty() {
		return nil
	}
	ns := p.Obj.Namespace
	constraints := systemDefaultConstraints()
	if c.mutation == NoZoneSpread {
		constraints = constraints[:1]
	}
	counts, weights := c.spreadDomains(p, constraints, nodes, sel)
	raw := make([]int64, len(nodes))
	for j, n := range nodes {
		var score float64
		for i, sc := range constraints {
			v, ok := n.Obj.Labels[sc.key]
			if !ok {
				continue
			}
			var cnt int64
			if sc.key == corev1.LabelHostname {
				cnt = int64(countMatching(n.Pods, sel, ns))
			} else {
				cnt = *counts[i][v]
			}
			score += float64(cnt)*weights[i] + float64(sc.maxSkew-1)
		}
		raw[j] = int64(math.Round(score))
	}
	return normalizeSpread(raw)
}

// spreadDomains is PodTopologySpread's PreScore: per constraint, the
// matching pods in each domain of the feasible nodes (over every node the
// pod's required node affinity admits: NodeAffinityPolicy Honor; the
// hostname constraint counts per node when it scores), and each
// constraint's weight, the log of its domains (for hostname, the feasible
// nodes) plus two.
func (c *Cluster) spreadDomains(p *Pod, constraints []spreadConstraint, nodes []*Node, sel labels.Selector) ([]map[string]*int64, []float64) {
	counts := make([]map[string]*int64, len(constraints))
	weights := make([]float64, len(constraints))
	for i, sc := range constraints {
		counts[i] = map[string]*int64{}
		size := len(nodes)
		if sc.key != corev1.LabelHostname {
			for _, n := range nodes {
				if v := n.Obj.Labels[sc.key]; counts[i][v] == nil {
					counts[i][v] = new(int64)
				}
			}
			size = len(counts[i])
		}
		weights[i] = math.Log(float64(size + 2))
	}
	affinity := nodeaffinity.GetRequiredNodeAffinity(p.Obj)
	for _, n := range c.nodes {
		if ok, _ := affinity.Match(n.Obj); !ok {
			continue
		}
		for i, sc := range constraints {
			if cnt := counts[i][n.Obj.Labels[sc.key]]; sc.key != corev1.LabelHostname && cnt != nil {
				*cnt += int64(countMatching(n.Pods, sel, p.Obj.Namespace))
			}
		}
	}
	return counts, weights
}

// normalizeSpread is PodTopologySpread's NormalizeScore: fewer matching
// pods score higher, scaled by the highest.
func normalizeSpread(raw []int64) []int64 {
	var lo, hi int64 = math.MaxInt64, 0
	for _, s := range raw {
		lo, hi = min(lo, s), max(hi, s)
	}
	out := make([]int64, len(raw))
	for j, s := range raw {
		if hi == 0 {
			out[j] = maxNodeScore
			continue
		}
		out[j] = maxNodeScore * (hi + lo - s) / hi
	}
	return out
}

// countMatching counts the pods of a namespace a selector matches, leaving
// out those being deleted.
func countMatching(pods []*Pod, sel labels.Selector, ns string) int {
	n := 0
	for _, q := range pods {
		if q.Obj.DeletionTimestamp == nil && q.Obj.Namespace == ns && sel.Matches(labels.Set(q.Obj.Labels)) {
			n++
		}
	}
	return n
}
