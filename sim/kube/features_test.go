package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const zoneKey = corev1.LabelTopologyZone

// featureState is a cluster with extras, and a pod to evaluate.
type featureState struct {
	nodes   []*nodeWrapper
	bound   []*podWrapper
	rules   []*resourceapi.DeviceTaintRule
	classes []*resourceapi.DeviceClass
	pod     *podWrapper
}

func (s featureState) evaluate(t *testing.T) *Evaluation {
	t.Helper()
	classes := s.classes
	if classes == nil {
		classes = []*resourceapi.DeviceClass{NewClass(gpuClass, gpuDriver), NewClass(nicClass, nicDriver)}
	}
	c := NewCluster(classes...)
	for _, r := range s.rules {
		c.AddDeviceTaintRule(r)
	}
	for _, n := range s.nodes {
		if err := c.AddNode(n.node, n.slices...); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range s.bound {
		if err := c.AddPod(b.obj()); err != nil {
			t.Fatal(err)
		}
	}
	e, err := c.Evaluate(context.Background(), s.pod.obj(), Default)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestFilterFeatures(t *testing.T) {
	gpuBacked := NewClass(gpuClass, gpuDriver)
	gpuBacked.Spec.ExtendedResourceName = new("example.com/gpu")
	cases := []struct {
		reason string
		args   featureState
		want   []string
	}{
		{
			reason: "Required pod affinity admits only the zones that hold a pod it selects.",
			args: featureState{
				nodes: []*nodeWrapper{makeNode("n1").label(zoneKey, "a"), makeNode("n2").label(zoneKey, "b"), makeNode("n3").label(zoneKey, "a")},
				bound: []*podWrapper{makePod("cache").labels("role", "cache").boundTo("n1")},
				pod:   makePod("p").requireAffinity(zoneKey, "role", "cache"),
			},
			want: []string{"n1", "n3"},
		},
		{
			reason: "The first pod of a group with affinity to itself lands on any node with the topology key, when no pod anywhere matches.",
			args: featureState{
				nodes: []*nodeWrapper{makeNode("n1").label(zoneKey, "a"), makeNode("n2"), makeNode("n3").label(zoneKey, "b")},
				pod:   makePod("p").labels("tier", "serving").requireAffinity(zoneKey, "tier", "serving"),
			},
			want: []string{"n1", "n3"},
		},
		{
			reason: "Once a pod of the group is bound, the next goes only where it is.",
			args: featureState{
				nodes: []*nodeWrapper{makeNode("n1").label(zoneKey, "a"), makeNode("n2").label(zoneKey, "b")},
				bound: []*podWrapper{makePod("first").labels("tier", "serving").requireAffinity(zoneKey, "tier", "serving").boundTo("n2")},
				pod:   makePod("p").labels("tier", "serving").requireAffinity(zoneKey, "tier", "serving"),
			},
			want: []string{"n2"},
		},
		{
			reason: "A bound pod's required anti-affinity keeps off a pod that has none against it.",
			args: featureState{
				nodes: []*nodeWrapper{makeNode("n1"), makeNode("n2")},
				bound: []*podWrapper{makePod("loner").antiAffinity("app", "p").boundTo("n1")},
				pod:   makePod("p"),
			},
			want: []string{"n2"},
		},
		{
			reason: "A NoExecute taint repels a pod that does not tolerate it.",
			args: featureState{
				nodes: []*nodeWrapper{makeNode("n1").taint("drain", corev1.TaintEffectNoExecute), makeNode("n2")},
				pod:   makePod("p"),
			},
			want: []string{"n2"},
		},
		{
			reason: "An extended resource a device plugin advertises is counted against its allocatable.",
			args: featureState{
				nodes: []*nodeWrapper{makeNode("n1").advertise("example.com/fpga", 1), makeNode("n2").advertise("example.com/fpga", 4), makeNode("n3")},
				bound: []*podWrapper{makePod("b").extended("example.com/fpga", 2).boundTo("n2")},
				pod:   makePod("p").extended("example.com/fpga", 2),
			},
			want: []string{"n2"},
		},
		{
			reason: "An extended resource a DeviceClass backs is allocated through DRA where no device plugin advertises it, and counted where one does.",
			args: featureState{
				classes: []*resourceapi.DeviceClass{gpuBacked},
				nodes: []*nodeWrapper{
					makeNode("n1").gpus(4, "80Gi"), makeNode("n2").advertise("example.com/gpu", 1),
					makeNode("n3"), makeNode("n4").advertise("example.com/gpu", 2), makeNode("n5").gpus(1, "80Gi"),
				},
				pod: makePod("p").extended("example.com/gpu", 2),
			},
			want: []string{"n1", "n4"},
		},
		{
			reason: "A claim made from a template is allocated like any other.",
			args: featureState{
				nodes: []*nodeWrapper{makeNode("n1").gpus(1, "80Gi"), makeNode("n2").gpus(2, "80Gi")},
				pod:   makePod("p").fromTemplate(Exactly("g", gpuClass, 2)),
			},
			want: []string{"n2"},
		},
		{
			reason: "A DeviceTaintRule's NoSchedule taint keeps a claim off the pool it selects; None keeps nothing off; a rule without a selector selects nothing.",
			args: featureState{
				nodes: []*nodeWrapper{makeNode("n1").gpus(2, "80Gi"), makeNode("n2").gpus(2, "80Gi"), makeNode("n3").gpus(2, "80Gi")},
				rules: []*resourceapi.DeviceTaintRule{
					taintRule("pool", &resourceapi.DeviceTaintSelector{Driver: new(gpuDriver), Pool: new("n1")}, resourceapi.DeviceTaintEffectNoSchedule),
					taintRule("info", &resourceapi.DeviceTaintSelector{Pool: new("n2")}, resourceapi.DeviceTaintEffectNone),
					taintRule("nothing", nil, resourceapi.DeviceTaintEffectNoSchedule),
				},
				pod: makePod("p").claim(Exactly("g", gpuClass, 1)),
			},
			want: []string{"n2", "n3"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			got := slices.Sorted(slices.Values(tc.args.evaluate(t).Scored))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nfeasible nodes: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func taintRule(name string, sel *resourceapi.DeviceTaintSelector, effect resourceapi.DeviceTaintEffect) *resourceapi.DeviceTaintRule {
	return &resourceapi.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.DeviceTaintRuleSpec{DeviceSelector: sel, Taint: resourceapi.DeviceTaint{Key: "k", Value: name, Effect: effect}},
	}
}

func TestScoreFeatures(t *testing.T) {
	type want struct {
		plugin string
		scores map[string]int64
	}
	cases := []struct {
		reason string
		args   featureState
		want   want
	}{
		{
			reason: "NodeAffinity scores the weights of the preferred terms a node matches, scaled by the highest.",
			args: featureState{
				nodes: []*nodeWrapper{makeNode("n1").label("tier", "reserved").label(zoneKey, "a"), makeNode("n2").label(zoneKey, "a"), makeNode("n3").label("tier", "reserved")},
				pod:   makePod("p").preferNodes(30, "tier", "reserved").preferNodes(10, zoneKey, "a"),
			},
			want: want{"NodeAffinity", map[string]int64{"n1": 100, "n2": 25, "n3": 75}},
		},
		{
			reason: "InterPodAffinity: a preferred affinity term raises the domain of the pods it selects, a preferred anti-affinity term lowers it; scaled from lowest to highest.",
			args: featureState{
				nodes: []*nodeWrapper{makeNode("n1").label(zoneKey, "a"), makeNode("n2").label(zoneKey, "b"), makeNode("n3").label(zoneKey, "c")},
				bound: []*podWrapper{makePod("cache").labels("role", "cache").boundTo("n1"), makePod("noisy").labels("role", "noisy").boundTo("n2")},
				pod:   makePod("p").prefer(60, zoneKey, "role", "cache").prefer(-20, zoneKey, "role", "noisy"),
			},
			want: want{"InterPodAffinity", map[string]int64{"n1": 100, "n2": 0, "n3": 25}},
		},
		{
			reason: "InterPodAffinity counts bound pods' terms that match the pod: required affinity at weight 1, preferred anti-affinity against it.",
			args: featureState{
				nodes: []*nodeWrapper{makeNode("n1"), makeNode("n2"), makeNode("n3")},
				bound: []*podWrapper{
					makePod("friend").requireAffinity(corev1.LabelHostname, "app", "p").boundTo("n1"),
					makePod("foe").prefer(-5, corev1.LabelHostname, "app", "p").boundTo("n2"),
				},
				pod: makePod("p"),
			},
			want: want{"InterPodAffinity", map[string]int64{"n1": 100, "n2": 0, "n3": 83}},
		},
		{
			reason: "DynamicResources scores the rank of the sub-request of a prioritized list each node's allocation took: 8 for the first, 7 for the second.",
			args: featureState{
				nodes: []*nodeWrapper{makeNode("n1").gpus(4, "80Gi"), makeNode("n2").gpus(1, "80Gi")},
				pod: makePod("p").claim(resourceapi.DeviceRequest{Name: "g", FirstAvailable: []resourceapi.DeviceSubRequest{
					{Name: "four", DeviceClassName: gpuClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 4},
					{Name: "one", DeviceClassName: gpuClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
				}}),
			},
			want: want{"DynamicResources", map[string]int64{"n1": 100, "n2": 87}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			e := tc.args.evaluate(t)
			got := map[string]int64{}
			for i, n := range e.Scored {
				got[n] = e.Plugins[i][tc.want.plugin]
			}
			if diff := cmp.Diff(tc.want.scores, got); diff != "" {
				t.Errorf("%s\n%s scores: -want, +got:\n%s", tc.reason, tc.want.plugin, diff)
			}
		})
	}
}

// TestSearchCountsRejectedNodesUpToTheNextFeasible: kube-scheduler with
// parallelism 1 stops at the feasible node one past what it scores and
// moves its next start past the infeasible nodes before it.
func TestSearchCountsRejectedNodesUpToTheNextFeasible(t *testing.T) {
	var nodes []*nodeWrapper
	for i := range 150 {
		n := makeNode(fmt.Sprintf("n%03d", i))
		if i >= 100 && i < 110 {
			n.label(poolLabel, "b")
		}
		nodes = append(nodes, n)
	}
	c := cluster(nodes...)
	var got []any
	for _, name := range []string{"p", "q"} {
		e, err := c.Evaluate(context.Background(), makePod(name).obj(), Default)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, len(e.Scored), e.Scored[0], e.Searched)
	}
	// p: n000-n099 scored, n100-n109 rejected, n110 the one too many.
	// q: from n110, n110-n149 and n000-n059, then n060 too many.
	want := []any{100, "n000", 110, 100, "n110", 100}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scored, first scored, searched of two pods: -want, +got:\n%s", diff)
	}
}

func TestPick(t *testing.T) {
	cases := []struct {
		reason string
		scores []int64
		want   string
	}{
		{"One node.", []int64{3}, "n0"},
		{"Every node ties: the first.", []int64{5, 5, 5}, "n0"},
		{"A unique best.", []int64{5, 9, 7}, "n1"},
		{"Of two tied best, the heap puts the later one on top: not the first in search order.", []int64{5, 7, 9, 9}, "n3"},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			e := &Evaluation{Scores: tc.scores}
			for i := range tc.scores {
				e.Scored = append(e.Scored, fmt.Sprintf("n%d", i))
			}
			if got := e.Pick(); got != tc.want {
				t.Errorf("%s\nPick of %v: want %s, got %s", tc.reason, tc.scores, tc.want, got)
			}
		})
	}
}

func TestNewPodRefuses(t *testing.T) {
	notOwned := makePod("p").fromTemplate(Exactly("g", gpuClass, 1))
	notOwned.claims[0].OwnerReferences = nil
	wrongOrder := makePod("p").claim(Exactly("g", gpuClass, 1)).claim(Exactly("n", nicClass, 1))
	wrongOrder.claims[0], wrongOrder.claims[1] = wrongOrder.claims[1], wrongOrder.claims[0]
	nsSelector := makePod("p").requireAffinity(zoneKey, "a", "b")
	nsSelector.pod.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].NamespaceSelector = &metav1.LabelSelector{}
	pvc := makePod("p")
	pvc.pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	storage := makePod("p")
	storage.pod.Spec.Containers[0].Resources.Requests[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(1, resource.DecimalSI)
	cases := []struct {
		reason string
		pod    *podWrapper
		want   string
	}{
		{"A claim made from a template must be owned by the pod.", notOwned, "not created for"},
		{"Claims must be given in the order the pod lists them.", wrongOrder, "was not given in its place"},
		{"Affinity terms with a namespace selector are not modelled.", nsSelector, "namespaceSelector"},
		{"Persistent volumes are not modelled.", pvc, "volume data"},
		{"Ephemeral storage is not modelled.", storage, "ephemeral-storage"},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			_, err := NewPod(tc.pod.pod, tc.pod.claims...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s\nNewPod: want an error with %q, got %v", tc.reason, tc.want, err)
			}
		})
	}
	shm := makePod("p").fromTemplate(Exactly("g", gpuClass, 1))
	shm.pod.Spec.Volumes = []corev1.Volume{{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
	if _, err := NewPod(shm.pod, shm.claims...); err != nil {
		t.Errorf("a pod with /dev/shm in memory and a claim from a template: %v", err)
	}
}

func TestMutate(t *testing.T) {
	seen := map[Mutation]bool{}
	for _, m := range Mutations() {
		if seen[m] {
			t.Errorf("mutation %s is listed twice", m)
		}
		seen[m] = true
		if err := NewCluster().Mutate(m); err != nil {
			t.Errorf("Mutate(%s): %v", m, err)
		}
	}
	if err := NewCluster().Mutate("filter/nothing"); err == nil {
		t.Error("Mutate of an unknown mutation: want an error, got none")
	}
	c := NewCluster()
	if err := c.Mutate("weight/TaintToleration-1"); err != nil {
		t.Fatal(err)
	}
	if got := c.weights["TaintToleration"]; got != 2 {
		t.Errorf("weight/TaintToleration-1: want weight 2, got %d", got)
	}
	if f := c.features(); f.AdminAccess != true {
		t.Error("a weight mutation switched an allocator feature off")
	}
	if err := c.Mutate("allocator/AdminAccess"); err != nil {
		t.Fatal(err)
	}
	if f := c.features(); f.AdminAccess || !f.PrioritizedList || f.FractionalCapacityRange {
		t.Errorf("allocator/AdminAccess: want AdminAccess alone off, got %+v", f)
	}
	if err := c.Mutate("allocator/FractionalCapacityRange"); err != nil {
		t.Fatal(err)
	}
	if f := c.features(); !f.FractionalCapacityRange || !f.AdminAccess {
		t.Errorf("allocator/FractionalCapacityRange: want FractionalCapacityRange alone on, got %+v", f)
	}
}

func TestCloneLeavesTheOriginal(t *testing.T) {
	c := cluster(makeNode("n1").gpus(2, "80Gi"), makeNode("n2").gpus(2, "80Gi"))
	if err := c.AddPod(makePod("b").claim(Exactly("g", gpuClass, 1)).boundTo("n1", gpu("gpu-0")).obj()); err != nil {
		t.Fatal(err)
	}
	clone := c.Clone()
	ctx := context.Background()
	for i := range 2 {
		p := makePod(fmt.Sprintf("p%d", i)).claim(Exactly("g", gpuClass, 2)).obj()
		if node, _, err := clone.Schedule(ctx, p, Default, nil); err != nil || node != "n2" && i == 0 || node != "" && i == 1 {
			t.Fatalf("clone, pod %d of 2 GPUs: bound to %q (%v); want n2, then none", i, node, err)
		}
	}
	e, err := c.Evaluate(ctx, makePod("q").claim(Exactly("g", gpuClass, 2)).obj(), Default)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"n2"}, e.Scored); diff != "" {
		t.Errorf("the original after binding in its clone: feasible nodes for 2 GPUs: -want, +got:\n%s", diff)
	}
	if got := len(c.Node("n2").Pods); got != 0 {
		t.Errorf("the original's n2 holds %d pods, want 0", got)
	}
}
