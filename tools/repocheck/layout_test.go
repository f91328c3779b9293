package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const layoutDoc = "| file | owns | uses |\n|---|---|---|\n" +
	"| `fn.go` | the function | `read.go` |\n" +
	"| `read.go` | reading | |\n\n" +
	"| package | owns | may import |\n|---|---|---|\n" +
	"| `scheduling` | the scheduler | `apis`, `k8s.io/dynamic-resource-allocation/cel` |\n" +
	"| `apis/v1alpha1` | kinds | |\n" +
	"| `e2e` | renders | (tests only) |\n"

func scheduling(allow ...string) rule {
	return rule{ListMode: "strict", Files: []string{"${base-path}/scheduling/*.go", "!$test"}, Allow: append([]string{"$gostd"}, allow...)}
}

func TestComparePackages(t *testing.T) {
	apisRule := rule{ListMode: "strict", Files: []string{"${base-path}/apis/v1alpha1/*.go", "!$test"}, Allow: []string{"$gostd"}}
	goodRules := map[string]rule{
		"scheduling":    scheduling(modulePath+"/apis", "k8s.io/dynamic-resource-allocation/cel"),
		"apis_v1alpha1": apisRule,
	}
	goodPkgs := []pkg{
		{rel: "scheduling", files: []string{"a.go"}, imports: []string{"fmt", modulePath + "/apis/v1alpha1", "k8s.io/dynamic-resource-allocation/cel"}},
		{rel: "apis/v1alpha1", files: []string{"t.go"}, imports: []string{"time"}},
		{rel: "e2e", tests: true},
	}
	cases := map[string]struct {
		reason string
		rules  map[string]rule
		pkgs   []pkg
		want   []string
	}{
		"Agree": {
			reason: "The layout, the rules and the code agree: nothing to say.",
			rules:  goodRules,
			pkgs:   goodPkgs,
		},
		"ImportNotAllowed": {
			reason: "An import that no entry of the row allows is named.",
			rules:  goodRules,
			pkgs: []pkg{
				{rel: "scheduling", files: []string{"a.go"}, imports: []string{modulePath + "/apis/v1alpha1", modulePath + "/input/v1beta1", "k8s.io/dynamic-resource-allocation/cel"}},
				goodPkgs[1], goodPkgs[2],
			},
			want: []string{"docs/layout.md: package scheduling imports github.com/modelplaneai/fleet-scheduler/input/v1beta1, which its row does not allow"},
		},
		"EntryUnused": {
			reason: "An entry nothing imports is named: the table lists the packages as they are.",
			rules:  goodRules,
			pkgs:   []pkg{{rel: "scheduling", files: []string{"a.go"}, imports: []string{modulePath + "/apis/v1alpha1"}}, goodPkgs[1], goodPkgs[2]},
			want:   []string{"docs/layout.md: package scheduling may import k8s.io/dynamic-resource-allocation/cel, but imports nothing of it"},
		},
		"RuleDiffers": {
			reason: "A rule that allows more than the row is named.",
			rules:  map[string]rule{"scheduling": scheduling(modulePath+"/apis", "k8s.io/dynamic-resource-allocation"), "apis_v1alpha1": apisRule},
			pkgs:   goodPkgs,
			want: []string{".golangci.yml: depguard rule scheduling is not docs/layout.md's row of scheduling: want list-mode strict, files [${base-path}/scheduling/*.go !$test], allow [$gostd github.com/modelplaneai/fleet-scheduler/apis k8s.io/dynamic-resource-allocation/cel]; " +
				"got list-mode strict, files [${base-path}/scheduling/*.go !$test], allow [$gostd github.com/modelplaneai/fleet-scheduler/apis k8s.io/dynamic-resource-allocation]"},
		},
		"PackageWithoutRowOrRule": {
			reason: "A package the layout does not list, and a rule of no row, are named.",
			rules:  map[string]rule{"scheduling": goodRules["scheduling"], "apis_v1alpha1": apisRule, "sim": apisRule},
			pkgs:   append(append([]pkg{}, goodPkgs...), pkg{rel: "internal/plan", files: []string{"p.go"}}),
			want: []string{
				"docs/layout.md: package internal/plan has no row",
				".golangci.yml: depguard rule sim is no package's row in docs/layout.md",
			},
		},
		"RowWithoutPackage": {
			reason: "A row of a package that does not exist is named, and so is a missing rule.",
			rules:  map[string]rule{"scheduling": goodRules["scheduling"]},
			pkgs:   []pkg{goodPkgs[0], goodPkgs[1]},
			want: []string{
				".golangci.yml: no depguard rule apis_v1alpha1 for package apis/v1alpha1 (docs/layout.md)",
				"docs/layout.md: a row for package e2e, which does not exist",
			},
		},
		"TestsOnlyMismatch": {
			reason: "A package with files whose row says tests only is named.",
			rules:  goodRules,
			pkgs:   []pkg{goodPkgs[0], goodPkgs[1], {rel: "e2e", files: []string{"x.go"}}},
			want:   []string{`docs/layout.md: package e2e has non-test files, but its row says "(tests only)"`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := comparePackages(parseLayout(layoutDoc), tc.rules, tc.pkgs)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("%s\ncomparePackages(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestCompareRootFiles(t *testing.T) {
	cases := map[string]struct {
		reason string
		ties   map[string][]string
		want   []string
	}{
		"OneWay": {
			reason: "fn.go uses read.go, which is below it: as the table says.",
			ties:   map[string][]string{"fn.go": {"read.go"}, "read.go": nil},
		},
		"BothWays": {
			reason: "read.go using fn.go is a tie back up, and not in its row.",
			ties:   map[string][]string{"fn.go": {"read.go"}, "read.go": {"fn.go"}},
			want: []string{
				"docs/layout.md: root file read.go uses [fn.go], its row says []",
				"docs/layout.md: root file read.go uses fn.go, which is not below it: root files must use each other one way",
			},
		},
		"UnlistedFile": {
			reason: "A root file the table does not list is named.",
			ties:   map[string][]string{"fn.go": {"read.go"}, "read.go": nil, "extra.go": nil},
			want:   []string{"docs/layout.md: root file extra.go has no row"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := compareRootFiles(parseLayout(layoutDoc), tc.ties)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\ncompareRootFiles(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestRootTies types a package of two files that use each other, through
// a function, a type's method and a constant, and one that uses neither.
func TestRootTies(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":  "module example.com/ties\n\ngo 1.26\n",
		"fn.go":   "package main\n\nfunc main() { var r reader; r.read(); _ = limit }\n",
		"read.go": "package main\n\ntype reader struct{}\n\nfunc (reader) read() { main2() }\n\nconst limit = 1\n",
		"more.go": "package main\n\nfunc main2() { x := 1; _ = x }\n",
		"lone.go": "package main\n\nfunc lone() int { main := 2; return main }\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := rootTies(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"fn.go": {"read.go"}, "read.go": {"more.go"}, "more.go": {}, "lone.go": {}}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("rootTies(...): -want, +got:\n%s", diff)
	}
}
