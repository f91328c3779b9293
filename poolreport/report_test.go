package poolreport

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

func decoded(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestHistogram(t *testing.T) {
	devices := []v1alpha1.Device{
		{Name: "gpu", Claim: v1alpha1.ClaimDRA, Count: new(int64(8))},
		{Name: "cpu", Claim: v1alpha1.ClaimSynthetic, Count: new(int64(1))},
	}
	type want struct {
		buckets       []Bucket
		field, defect string
	}
	cases := map[string]struct {
		reason   string
		list     string
		observed int64
		want     want
	}{
		"Valid": {
			reason:   "Buckets of the pool's DRA devices, within the node count, are read.",
			list:     `[{nodes: 2, free: [{name: gpu, count: 8}]}, {nodes: 1, free: []}]`,
			observed: 3,
			want:     want{buckets: []Bucket{{Nodes: 2, Free: map[string]int64{"gpu": 8}}, {Nodes: 1, Free: map[string]int64{}}}},
		},
		"MoreNodesThanObserved": {
			reason:   "Buckets may not hold more nodes than the pool has.",
			list:     `[{nodes: 4, free: []}]`,
			observed: 3,
			want:     want{field: "nodesByFreeDevices", defect: "buckets hold 4 nodes, more than observedNodes 3"},
		},
		"UnknownDevice": {
			reason:   "A device the pool does not have is named with its place.",
			list:     `[{nodes: 1, free: [{name: tpu, count: 1}]}]`,
			observed: 1,
			want:     want{field: "nodesByFreeDevices[0].free[0].name", defect: `pool has no device "tpu"`},
		},
		"NotDRA": {
			reason:   "A device not claimed through DRA has no free count.",
			list:     `[{nodes: 1, free: [{name: cpu, count: 1}]}]`,
			observed: 1,
			want:     want{field: "nodesByFreeDevices[0].free[0].name", defect: `device "cpu" is not claimed through DRA`},
		},
		"MoreThanANodeHas": {
			reason:   "More free than a node has is refused.",
			list:     `[{nodes: 1, free: [{name: gpu, count: 9}]}]`,
			observed: 1,
			want:     want{field: "nodesByFreeDevices[0].free[0].count", defect: "9 free gpu is more than the 8 a node has"},
		},
		"NegativeNodes": {
			reason:   "A negative count is refused by the count rule.",
			list:     `[{nodes: -1}]`,
			observed: 1,
			want:     want{field: "nodesByFreeDevices[0].nodes", defect: "-1 is negative"},
		},
		"NotAList": {
			reason:   "A histogram that is not a list is refused whole.",
			list:     `{nodes: 1}`,
			observed: 1,
			want:     want{field: "nodesByFreeDevices", defect: "not a list of {nodes, free} buckets"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b, field, defect := Histogram(decoded(t, tc.list), devices, tc.observed)
			if diff := cmp.Diff(tc.want, want{buckets: b, field: field, defect: defect}, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nHistogram(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestRelayable(t *testing.T) {
	type want struct {
		report map[string]any
		err    string
	}
	cases := map[string]struct {
		reason string
		status string
		want   want
	}{
		"NoReport": {
			reason: "A status without a report relays none.",
			status: `{conditions: []}`,
		},
		"Report": {
			reason: "A report within the schema is copied, its three fields only; the function judges it.",
			status: `{observedNodes: 1, observedAt: "2026-10-20T20:06:00Z", nodesByFreeDevices: [{nodes: 5, free: [{name: tpu, count: 3}]}], conditions: []}`,
			want: want{report: map[string]any{
				"observedNodes": float64(1), "observedAt": "2026-10-20T20:06:00Z",
				"nodesByFreeDevices": []any{map[string]any{"nodes": float64(5), "free": []any{map[string]any{"name": "tpu", "count": float64(3)}}}},
			}},
		},
		"Steered": {
			reason: "A report that says binding Steered is copied with it.",
			status: `{observedNodes: 0, observedAt: "2026-10-20T20:06:00Z", nodesByFreeDevices: [], binding: Steered}`,
			want: want{report: map[string]any{
				"observedNodes": float64(0), "observedAt": "2026-10-20T20:06:00Z", "nodesByFreeDevices": []any{}, "binding": "Steered",
			}},
		},
		"OtherBindingLeftOut": {
			reason: "A binding the InferenceCluster's schema does not allow is left out, and the report is still relayed: the function then accounts the pool as not steered.",
			status: `{observedNodes: 0, observedAt: "2026-10-20T20:06:00Z", nodesByFreeDevices: [], binding: Guessed}`,
			want: want{report: map[string]any{
				"observedNodes": float64(0), "observedAt": "2026-10-20T20:06:00Z", "nodesByFreeDevices": []any{},
			}},
		},
		"BindingOfAnotherTypeLeftOut": {
			reason: "A binding that is not a string is left out too.",
			status: `{observedNodes: 0, observedAt: "2026-10-20T20:06:00Z", nodesByFreeDevices: [], binding: [Steered]}`,
			want: want{report: map[string]any{
				"observedNodes": float64(0), "observedAt": "2026-10-20T20:06:00Z", "nodesByFreeDevices": []any{},
			}},
		},
		"BindingWithoutAReport": {
			reason: "A binding without the report it belongs to relays nothing.",
			status: `{binding: Steered}`,
		},
		"SomeFields": {
			reason: "A report with only some of its fields is not relayed.",
			status: `{observedNodes: 1}`,
			want:   want{err: "it has only some of observedNodes, observedAt and nodesByFreeDevices"},
		},
		"OverTheSchema": {
			reason: "A count over the schema's maximum would fail the status write.",
			status: `{observedNodes: 2097152, observedAt: "2026-10-20T20:06:00Z", nodesByFreeDevices: []}`,
			want:   want{err: "observedNodes: 2097152 is not a whole number from 0 to 1048576"},
		},
		"UnknownField": {
			reason: "A bucket field the schema does not have is refused, named.",
			status: `{observedNodes: 1, observedAt: "2026-10-20T20:06:00Z", nodesByFreeDevices: [{nodes: 1, gpus: 2}]}`,
			want:   want{err: "nodesByFreeDevices[0]: gpus: not a field of a bucket"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			status, _ := decoded(t, tc.status).(map[string]any)
			r, err := Relayable(status)
			got := want{report: r}
			if err != nil {
				got.err = err.Error()
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nRelayable(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestBinding(t *testing.T) {
	type want struct {
		steered bool
		defect  string
	}
	cases := map[string]struct {
		reason  string
		binding string // YAML; empty for none
		want    want
	}{
		"Absent": {
			reason: "No binding: the cluster's own scheduler picks each pod's node.",
		},
		"Steered": {
			reason:  "Steered is the one binding.",
			binding: "Steered",
			want:    want{steered: true},
		},
		"OtherValue": {
			reason:  "Any other value is a defect, and not steered.",
			binding: "MostFree",
			want:    want{defect: `"MostFree" is not Steered, the one binding there is`},
		},
		"CaseMatters": {
			reason:  "The value is an enum: its case matters.",
			binding: "steered",
			want:    want{defect: `"steered" is not Steered, the one binding there is`},
		},
		"Empty": {
			reason:  "An empty string is a value, not an absent field.",
			binding: `""`,
			want:    want{defect: `"" is not Steered, the one binding there is`},
		},
		"LongValueCut": {
			reason:  "A long value is quoted cut, so that a warning stays short.",
			binding: strings.Repeat("x", 100),
			want:    want{defect: `"` + strings.Repeat("x", 63) + `"... is not Steered, the one binding there is`},
		},
		"Boolean": {
			reason:  "A value of another type is named by its kind.",
			binding: "true",
			want:    want{defect: "a boolean is not a string"},
		},
		"Number": {
			reason:  "A number is not a binding.",
			binding: "1",
			want:    want{defect: "a number is not a string"},
		},
		"List": {
			reason:  "A list is named by its kind, never quoted whole.",
			binding: "[Steered]",
			want:    want{defect: "a list is not a string"},
		},
		"Object": {
			reason:  "An object is named by its kind.",
			binding: "{value: Steered}",
			want:    want{defect: "an object is not a string"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var v any
			if tc.binding != "" {
				v = decoded(t, tc.binding)
			}
			steered, defect := Binding(v)
			if diff := cmp.Diff(tc.want, want{steered: steered, defect: defect}, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nBinding(%v): -want, +got:\n%s", tc.reason, v, diff)
			}
		})
	}
}
