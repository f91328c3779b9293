package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/tools/txtar"
)

func TestBestOrder(t *testing.T) {
	type args struct {
		files []string
		uses  map[string][]string
	}
	cases := map[string]struct {
		reason string
		args   args
		want   []string
	}{
		"TwoFiles": {
			reason: "Two files that use each other: one arrow must point up; by name, a.go stands first.",
			args:   args{files: []string{"a.go", "b.go"}, uses: map[string][]string{"a.go": {"b.go"}, "b.go": {"a.go"}}},
			want:   []string{"a.go", "b.go"},
		},
		"FewestUp": {
			reason: "c.go is used by a.go and b.go and uses a.go: below both, only c.go -> a.go points up; every other order points two or three up.",
			args: args{files: []string{"a.go", "b.go", "c.go"}, uses: map[string][]string{
				"a.go": {"b.go", "c.go"}, "b.go": {"c.go"}, "c.go": {"a.go"},
			}},
			want: []string{"a.go", "b.go", "c.go"},
		},
		"NameLoses": {
			reason: "b.go uses a.go and c.go: first, it points none up and only c.go -> b.go does, where the order by name points two up.",
			args: args{files: []string{"a.go", "b.go", "c.go"}, uses: map[string][]string{
				"a.go": {"c.go"}, "b.go": {"a.go", "c.go"}, "c.go": {"b.go"},
			}},
			want: []string{"b.go", "a.go", "c.go"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := bestOrder(tc.args.files, tc.args.uses)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nbestOrder(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// figures are a report's numbers, as the fixture's were counted by hand.
type figures struct {
	Packages, Arrows, Layers int
	Layer                    map[string]int
	NonStd                   map[string]int
	FileArrows, Cyclic       map[string]int
	Order                    map[string]string
	Up                       []string
	Functions, Calls         int
	Climbs                   []string
}

func figuresOf(r *report) figures {
	f := figures{
		Packages: len(r.packages), Arrows: r.arrows, Layers: r.layers,
		Layer: map[string]int{}, NonStd: map[string]int{}, FileArrows: map[string]int{}, Cyclic: map[string]int{}, Order: map[string]string{},
		Functions: r.calls.functions, Calls: r.calls.calls, Climbs: r.calls.climbs,
	}
	for _, q := range r.packages {
		f.Layer[q.rel] = q.layer
		f.FileArrows[q.rel] = q.files.arrows
		f.Cyclic[q.rel] = q.files.cyclic
		f.Order[q.rel] = strings.Join(q.files.order, " ")
		f.Up = append(f.Up, q.files.up...)
	}
	for _, b := range r.binaries {
		f.NonStd[b.name] = b.nonStd
	}
	return f
}

// unpack writes a txtar archive of testdata into a new directory: kept as
// an archive, the fixture's modules are no modules of this repository.
func unpack(t *testing.T, archive string) string {
	t.Helper()
	a, err := txtar.ParseFile(filepath.Join("testdata", archive))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range a.Files {
		path := filepath.Join(dir, f.Name)
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, f.Data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestMeasure(t *testing.T) {
	type args struct {
		archive string
		bins    []string
	}
	cases := map[string]struct {
		reason string
		args   args
		want   figures
	}{
		"Fixture": {
			reason: "The fixture's figures, counted by hand (the comments below).",
			args:   args{archive: "fixture.txtar", bins: []string{".", "./cmd/tool", "./cmd/agent"}},
			want: figures{
				// . -> lib, cmd/tool -> lib, lib -> lib/base, cmd/agent -> lib/base; e2e has
				// tests only.
				Packages: 5, Arrows: 4, Layers: 3,
				Layer:  map[string]int{".": 2, "cmd/tool": 2, "cmd/agent": 1, "lib": 1, "lib/base": 0},
				NonStd: map[string]int{".": 3, "./cmd/tool": 3, "./cmd/agent": 2},
				// fn.go -> read.go, fn.go -> util.go, read.go -> util.go, util.go -> fn.go: one
				// cycle; fn_test.go is not counted.
				FileArrows: map[string]int{".": 4, "cmd/tool": 0, "cmd/agent": 0, "lib": 0, "lib/base": 0},
				Cyclic:     map[string]int{".": 4, "cmd/tool": 0, "cmd/agent": 0, "lib": 0, "lib/base": 0},
				Order:      map[string]string{".": "fn.go read.go util.go", "cmd/tool": "main.go", "cmd/agent": "main.go", "lib": "lib.go", "lib/base": "base.go"},
				Up:         []string{"util.go -> fn.go"},
				// RunFunction, read, check, clamp, ceiling, Sum, Add; the calls lib.Sum, read,
				// check (from RunFunction), clamp (from read), clamp and ceiling (from check),
				// base.Add (from Sum); main's call of RunFunction is not reached.
				Functions: 7, Calls: 7,
				Climbs: []string{"(*Function).check (. util.go) -> (*Function).ceiling (. fn.go)"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := measure(unpack(t, tc.args.archive), tc.args.bins)
			if err != nil {
				t.Fatalf("%s\nmeasure(...): %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want, figuresOf(r)); diff != "" {
				t.Errorf("%s\nmeasure(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
