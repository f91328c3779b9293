package kube

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Node affinity by node name: how a steering agent narrows a held pod to
// the node it decided (a required term `matchFields metadata.name In
// [node]`), or prefers it (a preferred term of the same), and how
// NodeAffinity's PreFilter then narrows the nodes kube-scheduler searches.

// SetAffinity replaces an unbound pod's affinity, as an update of a gated
// pod may (required node affinity while it has none, preferred terms
// freely), and reads it again. It refuses what NewPod refuses, and then
// leaves the pod as it was.
func (p *Pod) SetAffinity(a *corev1.Affinity) error {
	if p.node != nil {
		return fmt.Errorf("cannot change the affinity of pod %s: it is bound to %s", p.Obj.Name, p.node.Obj.Name)
	}
	if err := supportedAffinity(a); err != nil {
		return fmt.Errorf("cannot change the affinity of pod %s: %w", p.Obj.Name, err)
	}
	obj := *p.Obj
	obj.Spec.Affinity = a
	pods, err := readAffinity(&obj)
	if err != nil {
		return fmt.Errorf("cannot change the affinity of pod %s: %w", p.Obj.Name, err)
	}
	var preferred *nodeaffinity.PreferredSchedulingTerms
	if a != nil && a.NodeAffinity != nil && len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0 {
		if preferred, err = nodeaffinity.NewPreferredSchedulingTerms(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution); err != nil {
			return fmt.Errorf("cannot change the affinity of pod %s: preferred node affinity: %w", p.Obj.Name, err)
		}
	}
	p.Obj.Spec.Affinity, p.affinity, p.preferredNodes = a, pods, preferred
	return nil
}

// PinAffinity is an affinity narrowed to one node, as a steering agent
// narrows a held pod when it releases it: a required node affinity
// `matchFields metadata.name In [node]`, one term when it has no required
// node affinity (v0.3's pods have none), ANDed into each of its terms
// otherwise. a is not changed.
func PinAffinity(a *corev1.Affinity, node string) *corev1.Affinity {
	out := withNodeAffinity(a)
	req := nodeNamed(node)
	sel := out.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if sel == nil || len(sel.NodeSelectorTerms) == 0 {
		out.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{req}}}}
		return out
	}
	for i := range sel.NodeSelectorTerms {
		sel.NodeSelectorTerms[i].MatchFields = append(sel.NodeSelectorTerms[i].MatchFields, req)
	}
	return out
}

// PreferAffinity is an affinity with a preferred node affinity term of
// weight 100 (the most) for one node by name added. a is not changed.
func PreferAffinity(a *corev1.Affinity, node string) *corev1.Affinity {
	out := withNodeAffinity(a)
	out.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(out.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
		corev1.PreferredSchedulingTerm{Weight: 100, Preference: corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{nodeNamed(node)}}})
	return out
}

// withNodeAffinity is a copy of a with a node affinity to add to.
func withNodeAffinity(a *corev1.Affinity) *corev1.Affinity {
	out := a.DeepCopy()
	if out == nil {
		out = &corev1.Affinity{}
	}
	if out.NodeAffinity == nil {
		out.NodeAffinity = &corev1.NodeAffinity{}
	}
	return out
}

// nodeNamed is a node selector requirement of the node of that name.
func nodeNamed(node string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}
}

// nodeNames is NodeAffinity's PreFilter result for a pod: the names of
// the only nodes its required node affinity can match, when every one of
// its terms names nodes (`matchFields metadata.name In`); narrowed is
// false when some term (or none at all) leaves every node eligible. An
// empty set with narrowed true matches no node.
func nodeNames(p *corev1.Pod) (names sets.Set[string], narrowed bool) {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil, false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return nil, false
	}
	names = sets.New[string]()
	for _, t := range terms {
		var term sets.Set[string]
		for _, r := range t.MatchFields {
			if r.Key != metav1.ObjectNameField || r.Operator != corev1.NodeSelectorOpIn {
				continue
			}
			// A term's requirements are ANDed: the names they all allow.
			if s := sets.New(r.Values...); term == nil {
				term = s
			} else {
				term = term.Intersection(s)
			}
		}
		if term == nil {
			// This term names no node, and terms are ORed.
			return nil, false
		}
		names = names.Union(term)
	}
	return names, true
}

// narrow keeps the nodes of names, in the order given: kube-scheduler
// searches the nodes of a PreFilter result in its set's order, which is
// random beyond one name; the simulator's is the node tree's.
func narrow(nodes []*Node, names sets.Set[string]) []*Node {
	out := make([]*Node, 0, len(names))
	for _, n := range nodes {
		if names.Has(n.Obj.Name) {
			out = append(out, n)
		}
	}
	return out
}
