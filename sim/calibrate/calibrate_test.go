package main

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

func TestFamilySharesAreTheirWeights(t *testing.T) {
	got := map[string]int{}
	for i := range 3 * weightSum() {
		got[familyOf(i).name]++
	}
	want := map[string]int{}
	for _, f := range families() {
		want[f.name] = 3 * f.weight
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("states per family in three rounds: -want, +got:\n%s", diff)
	}
	if weightSum() != 100 {
		t.Errorf("the weights sum to %d, want 100", weightSum())
	}
}

func TestEachFamilyExercisesItsFeature(t *testing.T) {
	// The feature a family is for, as the coverage table tells it.
	want := map[string]string{
		"modelplane":               "Modelplane v0.3 pod",
		"large":                    "100 nodes or more",
		"noexecute":                "NoExecute taint",
		"partitionable":            "partitionable devices (shared counters)",
		"consumable":               "consumable capacity",
		"admin-access":             "admin access",
		"device-taints":            "device taint",
		"taint-rules":              "DeviceTaintRule",
		"binding-conditions":       "binding conditions",
		"first-available":          "prioritized list (firstAvailable)",
		"all-mode":                 "allocation mode All",
		"match-attribute":          "matchAttribute constraint",
		"multi-slice":              "pool of two or more slices",
		"multi-claim":              "two or more claims",
		"shared-claims":            "claim shared with a bound pod",
		"extended-resources":       "extended resource backed by DRA",
		"device-plugin":            "extended resource of a device plugin",
		"asymmetric-anti-affinity": "bound pods' anti-affinity against a pod without",
		"preferred-affinity":       "preferred node affinity",
		"pod-affinity":             "required pod affinity",
	}
	in := map[string]func(*state) bool{}
	for _, f := range featureList() {
		in[f.name] = f.in
	}
	for _, f := range families() {
		if f.name == "base" {
			continue
		}
		feat, ok := want[f.name]
		if !ok || in[feat] == nil {
			t.Errorf("family %s: no feature to check", f.name)
			continue
		}
		hits := 0
		for seed := range uint64(20) {
			st, err := sample(t.Context(), rand.New(rand.NewPCG(seed, 99)), f)
			if err != nil {
				t.Fatalf("family %s, seed %d: %v", f.name, seed, err)
			}
			if in[feat](st) {
				hits++
			}
		}
		// Most states of a family exercise its feature; a few draw no
		// pod that uses it.
		if hits < 5 {
			t.Errorf("family %s: %d of 20 states have %q", f.name, hits, feat)
		}
	}
}

func TestSampleIsDeterministic(t *testing.T) {
	for i := range 30 {
		a, err := sample(t.Context(), rand.New(rand.NewPCG(7, uint64(i))), familyOf(i))
		if err != nil {
			t.Fatal(err)
		}
		b, err := sample(t.Context(), rand.New(rand.NewPCG(7, uint64(i))), familyOf(i))
		if err != nil {
			t.Fatal(err)
		}
		// The allocator draws each share's ID at random; the driver
		// stamps the binding conditions it meets.
		ignore := cmp.Options{
			cmpopts.IgnoreFields(resourceapi.DeviceRequestAllocationResult{}, "ShareID"),
			cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime"),
		}
		if diff := cmp.Diff(a.apiObjects(), b.apiObjects(), ignore); diff != "" {
			t.Fatalf("state %d drawn twice: -first, +second:\n%s", i, diff)
		}
	}
}

func TestCompareTellsEachDifference(t *testing.T) {
	fw := podVerdict{
		scored: []string{"a", "b"}, scores: map[string]int64{"a": 300, "b": 200}, best: []string{"a"},
		evaluated: 3, bound: "a", devices: []string{"gpu/a/gpu-0"},
		plugins: map[string]map[string]int64{"a": {"TaintToleration": 300}, "b": {"TaintToleration": 200}},
	}
	same := simPod{scored: []string{"a", "b"}, scores: map[string]int64{"a": 300, "b": 200}, best: []string{"a"}, searched: 3, bound: "a", devices: []string{"gpu/a/gpu-0"}}
	type flags struct{ Feasible, Evaluated, Scores, Best, Bound, Devices bool }
	cases := []struct {
		reason string
		sim    func(simPod) simPod
		want   flags
	}{
		{"The same decision agrees.", func(s simPod) simPod { return s }, flags{true, true, true, true, true, true}},
		{"Another node scored.", func(s simPod) simPod { s.scored = []string{"a", "c"}; return s }, flags{false, true, true, true, true, true}},
		{"A longer search.", func(s simPod) simPod { s.searched = 4; return s }, flags{true, false, true, true, true, true}},
		{"Another total.", func(s simPod) simPod { s.scores = map[string]int64{"a": 300, "b": 201}; return s }, flags{true, true, false, true, true, true}},
		{"Another best.", func(s simPod) simPod { s.best = []string{"a", "b"}; return s }, flags{true, true, true, false, true, true}},
		{"Another node picked.", func(s simPod) simPod { s.bound = "b"; return s }, flags{true, true, true, true, false, true}},
		{"Other devices.", func(s simPod) simPod { s.devices = []string{"gpu/a/gpu-1"}; return s }, flags{true, true, true, true, true, false}},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			o := compare([]podVerdict{fw}, []simPod{tc.sim(same)})
			got := flags{o.feasible, o.evaluated, o.scores, o.best, o.bound, o.devices}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\n-want, +got:\n%s", tc.reason, diff)
			}
			if o.agrees() != (tc.want == flags{true, true, true, true, true, true}) {
				t.Errorf("%s\nagrees: %t", tc.reason, o.agrees())
			}
		})
	}
}

// TestFrameworkAndBinderAgree runs both on a few states of each family,
// and a mutation the comparison must catch.
func TestFrameworkAndBinderAgree(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kube-scheduler")
	}
	ctx := context.Background()
	for i := range len(families()) {
		st, err := sample(t.Context(), rand.New(rand.NewPCG(3, uint64(i))), familyOf(i))
		if err != nil {
			t.Fatal(err)
		}
		fw, err := schedule(ctx, st, kube.Default, 1)
		if err != nil {
			t.Fatalf("state %d (%s): %v", i, st.family, err)
		}
		base, err := st.cluster(st.pods, "")
		if err != nil {
			t.Fatal(err)
		}
		sim, err := simulate(ctx, st, base, kube.Default, "")
		if err != nil {
			t.Fatal(err)
		}
		if o := compare(fw, sim); !o.agrees() {
			t.Errorf("state %d (%s) disagrees:\n%s", i, st.family, o.diff)
		}
		if st.family == "base" {
			broken, err := simulate(ctx, st, base, kube.Default, kube.IgnoreNodeAffinity)
			if err != nil {
				t.Fatal(err)
			}
			if compare(fw, broken).agrees() {
				t.Errorf("state %d (base): the binder without its node selector agrees", i)
			}
		}
	}
}

// TestPinnedPodsAgree pins the pods of a state of each of a few families
// as the steering agent pins them, and wants both schedulers to agree.
func TestPinnedPodsAgree(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kube-scheduler")
	}
	ctx := context.Background()
	pinned := 0
	for _, i := range []int{0, 1, 2, 3, 12, 21, 40, 60} {
		st, err := sample(ctx, rand.New(rand.NewPCG(5, uint64(i))), familyOf(i))
		if err != nil {
			t.Fatal(err)
		}
		base, err := st.cluster(st.pods, "")
		if err != nil {
			t.Fatal(err)
		}
		narrowed, n, _, err := pinIncoming(ctx, rand.New(rand.NewPCG(5, uint64(i))), &sampled{st: st, base: base})
		if err != nil {
			t.Fatal(err)
		}
		pinned += n
		fw, err := schedule(ctx, narrowed, kube.Default, 1)
		if err != nil {
			t.Fatalf("state %d (%s): %v", i, st.family, err)
		}
		sim, err := simulate(ctx, narrowed, base, kube.Default, "")
		if err != nil {
			t.Fatal(err)
		}
		if o := compare(fw, sim); !o.agrees() {
			t.Errorf("state %d (%s), pinned, disagrees:\n%s", i, st.family, o.diff)
		}
	}
	if pinned == 0 {
		t.Error("no pod was pinned")
	}
}
