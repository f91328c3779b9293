package kube

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// InterPodAffinity, as kube-scheduler v1.37 runs it with its
// InterPodAffinityHostnameFastPath gate off (the default): the filter
// counts, before it tries nodes, the topology domains (a topology key and
// a node's value of it) of the pods each rule is about, then checks each
// node's domains against the counts.

// topologyPair is a topology domain.
type topologyPair struct{ key, value string }

// podAffinityCounts are InterPodAffinity's PreFilter counts for a pod.
type podAffinityCounts struct {
	// existingAnti counts, by domain, the bound pods' required
	// anti-affinity terms that match the pod.
	existingAnti topologyCounts
	// affinity counts, for each of the pod's required affinity terms, the
	// bound pods matching all of them in each domain; anti counts the
	// bound pods matching each of its required anti-affinity terms.
	affinity, anti topologyCounts
}

func (t affinityTerm) matches(p *corev1.Pod) bool {
	return t.namespaces.Has(p.Namespace) && t.selector.Matches(labels.Set(p.Labels))
}

func matchesAll(terms []affinityTerm, p *corev1.Pod) bool {
	if len(terms) == 0 {
		return false
	}
	for _, t := range terms {
		if !t.matches(p) {
			return false
		}
	}
	return true
}

// topologyCounts counts something by topology domain.
type topologyCounts map[topologyPair]int64

func (m topologyCounts) record(n *corev1.Node, key string) {
	if v, ok := n.Labels[key]; ok {
		m[topologyPair{key, v}]++
	}
}

func (c *Cluster) podAffinityCounts(p *Pod) podAffinityCounts {
	out := podAffinityCounts{existingAnti: topologyCounts{}, affinity: topologyCounts{}, anti: topologyCounts{}}
	for q := range c.antiPods {
		for _, t := range q.affinity.antiRequired {
			if t.matches(p.Obj) {
				out.existingAnti.record(q.node.Obj, t.topologyKey)
			}
		}
	}
	if len(p.affinity.required) == 0 && len(p.affinity.antiRequired) == 0 {
		return out
	}
	for _, n := range c.nodes {
		for _, q := range n.Pods {
			if matchesAll(p.affinity.required, q.Obj) {
				for _, t := range p.affinity.required {
					out.affinity.record(n.Obj, t.topologyKey)
				}
			}
			for _, t := range p.affinity.antiRequired {
				if t.matches(q.Obj) {
					out.anti.record(n.Obj, t.topologyKey)
				}
			}
		}
	}
	return out
}

// podAffinityRejects is InterPodAffinity's filter: the pod's required
// affinity (every term's domain on the node holds a pod matching all the
// terms, or no pod anywhere does and the pod matches them itself), its
// required anti-affinity, and the bound pods' anti-affinity against it.
func (c *Cluster) podAffinityRejects(cy *cycle, n *Node) string {
	p, node := cy.pod, n.Obj
	if terms := p.affinity.required; len(terms) > 0 && c.mutation != IgnorePodAffinity {
		exist := true
		for _, t := range terms {
			v, ok := node.Labels[t.topologyKey]
			if !ok {
				return reasonAffinity
			}
			if cy.pods.affinity[topologyPair{t.topologyKey, v}] <= 0 {
				exist = false
			}
		}
		if !exist && (len(cy.pods.affinity) > 0 || !matchesAll(terms, p.Obj) || c.mutation == NoSelfAffinity) {
			return reasonAffinity
		}
	}
	if c.mutation != IgnoreAntiAffinity {
		for _, t := range p.affinity.antiRequired {
			if v, ok := node.Labels[t.topologyKey]; ok && cy.pods.anti[topologyPair{t.topologyKey, v}] > 0 {
				return reasonAntiAffinity
			}
		}
	}
	if c.mutation != IgnoreExistingAntiAffinity {
		for k, v := range node.Labels {
			if cy.pods.existingAnti[topologyPair{k, v}] > 0 {
				return reasonExistingAntiAffinity
			}
		}
	}
	return ""
}

// hardPodAffinityWeight is InterPodAffinity's default weight of a bound
// pod's required affinity term in the score.
const hardPodAffinityWeight = 1

// interPodAffinityScores is InterPodAffinity's score: per topology
// domain, the weights of the pod's preferred affinity terms that bound
// pods there match, less those of its preferred anti-affinity terms; and
// of the bound pods' terms that match the pod (required affinity at
// hardPodAffinityWeight, preferred affinity, less preferred
// anti-affinity). A node scores its domains' sums, scaled from the lowest
// (0) to the highest (100). It skips (nil) when no term matched anything.
func (c *Cluster) interPodAffinityScores(p *Pod, nodes []*Node) []int64 {
	own := len(p.affinity.preferred)+len(p.affinity.antiPreferred) > 0
	topo := map[topologyPair]int64{}
	// add adds, in the domain of n, the weight of each term matching
	// pod, times sign.
	add := func(n *corev1.Node, terms []affinityTerm, pod *corev1.Pod, sign int64) {
		for _, t := range terms {
			if v, ok := n.Labels[t.topologyKey]; ok && t.matches(pod) {
				topo[topologyPair{t.topologyKey, v}] += sign * t.weight
			}
		}
	}
	process := func(q *Pod) {
		n := q.node.Obj
		add(n, p.affinity.preferred, q.Obj, 1)
		add(n, p.affinity.antiPreferred, q.Obj, -1)
		if c.mutation == NoExistingAffinityTerms {
			return
		}
		if c.mutation != NoHardAffinityWeight {
			add(n, q.affinity.required, p.Obj, 1)
		}
		add(n, q.affinity.preferred, p.Obj, 1)
		add(n, q.affinity.antiPreferred, p.Obj, -1)
	}
	if own {
		for _, n := range c.nodes {
			for _, q := range n.Pods {
				process(q)
			}
		}
	} else {
		for q := range c.affinityPods {
			process(q)
		}
	}
	if len(topo) == 0 {
		return nil
	}
	raw := make([]int64, len(nodes))
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for i, n := range nodes {
		for k, v := range n.Obj.Labels {
			raw[i] += topo[topologyPair{k, v}]
		}
		lo, hi = min(lo, raw[i]), max(hi, raw[i])
	}
	out := make([]int64, len(nodes))
	if hi > lo {
		for i, s := range raw {
			out[i] = int64(float64(maxNodeScore) * (float64(s-lo) / float64(hi-lo)))
		}
	}
	return out
}
