package kube

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// named is a required node affinity of one term per list of names, each
// term `matchFields metadata.name In` every name of its list (ANDed).
func named(terms ...[]string) *corev1.Affinity {
	req := &corev1.NodeSelector{}
	for _, names := range terms {
		var t corev1.NodeSelectorTerm
		for _, n := range names {
			t.MatchFields = append(t.MatchFields, corev1.NodeSelectorRequirement{Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{n}})
		}
		req.NodeSelectorTerms = append(req.NodeSelectorTerms, t)
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: req}}
}

// TestPinnedSearch: a pod whose required node affinity names its node is
// filtered on that node only (NodeAffinity's PreFilter), where the filters
// and the allocator still decide; the next search starts one node on.
func TestPinnedSearch(t *testing.T) {
	type want struct {
		best      []string
		searched  int
		nextStart int
		rejected  map[string]int
	}
	cases := map[string]struct {
		reason   string
		affinity *corev1.Affinity
		want     want
	}{
		"PinnedToAFreeNode": {
			reason:   "Pinned to n3, the pod is searched on n3 only and lands there, though the default profile would spread it elsewhere.",
			affinity: named([]string{"n3"}),
			want:     want{best: []string{"n3"}, searched: 1, nextStart: 1, rejected: map[string]int{}},
		},
		"PinnedToAFullNode": {
			reason:   "Pinned to n1, whose GPUs are allocated, the allocator rejects it there, and no other node is tried.",
			affinity: named([]string{"n1"}),
			want:     want{searched: 1, nextStart: 1, rejected: map[string]int{reasonClaims: 1}},
		},
		"ORedTerms": {
			reason:   "Two terms naming n1 and n2 search those two, in the node tree's order; n1 is full.",
			affinity: named([]string{"n2"}, []string{"n1"}),
			want:     want{best: []string{"n2"}, searched: 2, nextStart: 2, rejected: map[string]int{reasonClaims: 1}},
		},
		"Conflicting": {
			reason:   "One term naming two different nodes matches none: PreFilter rejects the pod and the search does not move.",
			affinity: named([]string{"n2", "n3"}),
			want:     want{rejected: map[string]int{reasonSelector: 3}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := cluster(makeNode("n1").gpus(2, "80Gi"), makeNode("n2").gpus(2, "80Gi"), makeNode("n3").gpus(2, "80Gi"))
			if err := c.AddPod(makePod("b").claim(Exactly("g", gpuClass, 2)).boundTo("n1", gpu("gpu-0"), gpu("gpu-1")).obj()); err != nil {
				t.Fatal(err)
			}
			p := makePod("p").claim(Exactly("g", gpuClass, 1)).obj()
			if err := p.SetAffinity(tc.affinity); err != nil {
				t.Fatal(err)
			}
			e, err := c.Evaluate(context.Background(), p, Default)
			if err != nil {
				t.Fatal(err)
			}
			got := want{best: e.Best, searched: e.Searched, nextStart: c.nextStart, rejected: e.Rejected}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nEvaluate(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestSetAffinity(t *testing.T) {
	cases := map[string]struct {
		reason   string
		affinity *corev1.Affinity
		bound    bool
		wantErr  bool
	}{
		"Pin": {
			reason:   "A pin by name is modelled.",
			affinity: named([]string{"n1"}),
		},
		"OtherField": {
			reason: "A field other than metadata.name is refused.",
			affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "spec.unschedulable", Operator: corev1.NodeSelectorOpIn, Values: []string{"false"}}},
			}}}}},
			wantErr: true,
		},
		"Bound": {
			reason:   "A bound pod's affinity does not change.",
			affinity: named([]string{"n1"}),
			bound:    true,
			wantErr:  true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := cluster(makeNode("n1").gpus(2, "80Gi"))
			p := makePod("p").claim(Exactly("g", gpuClass, 1)).obj()
			if tc.bound {
				if _, _, err := c.Schedule(context.Background(), p, Default, nil); err != nil {
					t.Fatal(err)
				}
			}
			err := p.SetAffinity(tc.affinity)
			if (err != nil) != tc.wantErr {
				t.Errorf("%s\nSetAffinity(...): error %v, want error %t", tc.reason, err, tc.wantErr)
			}
			if err != nil && p.Obj.Spec.Affinity != nil {
				t.Errorf("%s\nSetAffinity(...) failed but changed the pod's affinity", tc.reason)
			}
		})
	}
}

// TestPreferredPin: a preferred term naming a node scores NodeAffinity
// there (weight 2 x 100), which the other scores can outvote.
func TestPreferredPin(t *testing.T) {
	c := cluster(makeNode("n1").gpus(2, "80Gi"), makeNode("n2").gpus(2, "80Gi"))
	p := makePod("p").claim(Exactly("g", gpuClass, 1)).obj()
	a := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
		Weight: 100, Preference: named([]string{"n2"}).NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0],
	}}}}
	if err := p.SetAffinity(a); err != nil {
		t.Fatal(err)
	}
	e, err := c.Evaluate(context.Background(), p, Default)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"n2"}, e.Best); diff != "" {
		t.Errorf("best nodes: -want, +got:\n%s", diff)
	}
	if got := e.Plugins[1]["NodeAffinity"]; got != 100 {
		t.Errorf("NodeAffinity scored n2 %d, want 100", got)
	}
}

func TestPinAffinity(t *testing.T) {
	byLabel := corev1.NodeSelectorRequirement{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}
	pinN1 := corev1.NodeSelectorRequirement{Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}
	cases := map[string]struct {
		reason string
		in     *corev1.Affinity
		want   *corev1.Affinity
	}{
		"None": {
			reason: "A pod without affinity gets one term naming the node.",
			want:   named([]string{"n1"}),
		},
		"Terms": {
			reason: "Each required term is narrowed to the node, so that they stay ORed and all name it.",
			in: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{byLabel}}, {MatchExpressions: []corev1.NodeSelectorRequirement{byLabel}},
			}}}},
			want: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{byLabel}, MatchFields: []corev1.NodeSelectorRequirement{pinN1}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{byLabel}, MatchFields: []corev1.NodeSelectorRequirement{pinN1}},
			}}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := tc.in.DeepCopy()
			if diff := cmp.Diff(tc.want, PinAffinity(tc.in, "n1")); diff != "" {
				t.Errorf("%s\nPinAffinity(...): -want, +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(before, tc.in); diff != "" {
				t.Errorf("%s\nPinAffinity(...) changed its argument: -before, +after:\n%s", tc.reason, diff)
			}
		})
	}
}
