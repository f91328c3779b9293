package main

import (
	"bytes"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestMeasure builds the function from the work tree, as the command does,
// and measures a small fleet at two levels: every call answered right, and
// a row for each level with the calls made.
func TestMeasure(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the function")
	}
	var out bytes.Buffer
	cfg := config{replicas: 100, levels: []int{1, 3}, calls: 6, repeat: 1, timeout: time.Minute}
	if err := run(t.Context(), cfg, []string{"tree=. --max-concurrent-streams=2"}, &out); err != nil {
		t.Fatalf("run(...): %v", err)
	}
	// server, in flight, calls, then calls/s, p50, p99, RSS, CPU, and errors.
	row := regexp.MustCompile(`(?m)^\| tree \| (\d+) \| (\d+) \| [0-9.]+ \| \d+ ms \| \d+ ms \| [1-9]\d* MiB \| \d+ ms \| (.*) \|$`)
	var got [][]string
	for _, m := range row.FindAllStringSubmatch(out.String(), -1) {
		got = append(got, m[1:])
	}
	want := [][]string{{"1", "6", "0"}, {"3", "6", "0"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("run(...): rows (in flight, calls, errors) -want, +got:\n%s\nreport:\n%s", diff, out.String())
	}
}

func TestParse(t *testing.T) {
	cases := map[string]struct {
		reason string
		levels string
		server string
		want   server
		err    bool
	}{
		"RevisionAndFlags": {
			reason: "A server is a label, a revision and its flags.",
			levels: "1,4", server: "after=HEAD --max-concurrent-streams=4",
			want: server{label: "after", rev: "HEAD", flags: []string{"--max-concurrent-streams=4"}},
		},
		"NoRevision": {
			reason: "A server names a revision.",
			levels: "1", server: "after=",
			err: true,
		},
		"BadLevel": {
			reason: "Levels are positive whole numbers.",
			levels: "1,0", server: "tree=.",
			err: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, lerr := parseLevels(tc.levels)
			got, serr := parseServer(tc.server)
			if gotErr := lerr != nil || serr != nil; gotErr != tc.err {
				t.Fatalf("%s\nparse(%q, %q): want an error %t, got %v, %v", tc.reason, tc.levels, tc.server, tc.err, lerr, serr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(server{})); !tc.err && diff != "" {
				t.Errorf("%s\nparseServer(%q): -want, +got:\n%s", tc.reason, tc.server, diff)
			}
		})
	}
}
