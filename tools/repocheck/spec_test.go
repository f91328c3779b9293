package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestAnchors(t *testing.T) {
	text := "# Title\n## What it is\n### PodsScheduled\n```\n# not a heading\n```\n### Why a replica does not fit (yet)\n## What it is\n"
	want := map[string]bool{"title": true, "what-it-is": true, "podsscheduled": true, "why-a-replica-does-not-fit-yet": true, "what-it-is-1": true}
	if diff := cmp.Diff(want, anchors(text)); diff != "" {
		t.Errorf("anchors(...): -want, +got:\n%s", diff)
	}
}

// repo is a git repository of the files given, in a temporary directory.
func repo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.CommandContext(context.Background(), "git", "-C", dir, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	return dir
}

func TestCheckSpecReferences(t *testing.T) {
	cases := map[string]struct {
		reason string
		files  map[string]string
		want   []string
	}{
		"Resolve": {
			reason: "Citations of headings that exist, from code and docs, resolve.",
			files: map[string]string{
				"docs/spec.md":  "# Spec\n## Matching\nSee [matching](#matching).\n",
				"a.go":          "// Matching rules (docs/spec.md#matching).\npackage a\n",
				"docs/other.md": "[rules](spec.md#matching)\n",
			},
		},
		"Unresolved": {
			reason: "A citation of no heading, in code or within the spec, is named with its line.",
			files: map[string]string{
				"docs/spec.md": "# Spec\n## Matching\nSee [filling](#filling).\n",
				"a.go":         "package a\n\n// See docs/spec.md#retaining.\n",
			},
			want: []string{
				"a.go:3: cites docs/spec.md#retaining, which is no heading of it",
				"docs/spec.md:3: cites docs/spec.md#filling, which is no heading of it",
			},
		},
		"Upstream": {
			reason: "Citing the upstream document, which users cannot open, is named, in any form.",
			files: map[string]string{
				"docs/spec.md": "# Spec\n",
				"a.go":         "package a // " + upstreamName + " 4.6\n",
				"b.sh":         "# as " + strings.ToLower(upstreamName) + " 4.1 says\n",
				"c.md":         strings.ToLower(upstreamName) + " section 3\n",
			},
			want: []string{
				"a.go:1: cites the upstream specification, which users cannot open; cite docs/spec.md#<section>",
				"b.sh:1: cites the upstream specification, which users cannot open; cite docs/spec.md#<section>",
				"c.md:1: cites the upstream specification, which users cannot open; cite docs/spec.md#<section>",
			},
		},
		"NoSpec": {
			reason: "Without the spec there is nothing to cite.",
			files:  map[string]string{"a.go": "package a\n"},
			want:   []string{"docs/spec.md: missing: code and docs cite it"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := checkSpecReferences(repo(t, tc.files))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\ncheckSpecReferences(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
