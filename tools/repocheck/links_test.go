package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseLinkRules(t *testing.T) {
	cases := map[string]struct {
		reason string
		text   string
		want   []linkRule
	}{
		"Rule": {
			reason: "A rule names the binary and every forbidden package.",
			text:   "Some prose.\n\n- `cmd/relay` links none of `scheduling`, `github.com/google/cel-go` and `k8s.io/dynamic-resource-allocation`.\n",
			want:   []linkRule{{binary: "cmd/relay", forbidden: []string{"scheduling", "github.com/google/cel-go", "k8s.io/dynamic-resource-allocation"}}},
		},
		"OtherLists": {
			reason: "Other list items are not rules.",
			text:   "- `cmd/relay` is the relay.\n",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, parseLinkRules(tc.text), cmp.AllowUnexported(linkRule{})); diff != "" {
				t.Errorf("%s\nparseLinkRules(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestForbiddenLinks(t *testing.T) {
	relay := linkRule{binary: "cmd/relay", forbidden: []string{"scheduling", "github.com/google/cel-go"}}
	cases := map[string]struct {
		reason string
		rule   linkRule
		deps   []string
		want   []string
	}{
		"Clean": {
			reason: "No forbidden dependency: nothing to say.",
			rule:   relay,
			deps:   []string{"fmt", modulePath + "/apis/v1alpha1", modulePath + "/poolreport"},
		},
		"Indirect": {
			reason: "A forbidden package anywhere among the dependencies is named, and so is one under a forbidden prefix.",
			rule:   relay,
			deps:   []string{modulePath + "/scheduling", "github.com/google/cel-go/cel", "github.com/google/cel-gone"},
			want: []string{
				"docs/layout.md: cmd/relay links github.com/google/cel-go/cel, which its rule forbids (github.com/google/cel-go)",
				"docs/layout.md: cmd/relay links github.com/modelplaneai/fleet-scheduler/scheduling, which its rule forbids (scheduling)",
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, forbiddenLinks(tc.rule, tc.deps)); diff != "" {
				t.Errorf("%s\nforbiddenLinks(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
