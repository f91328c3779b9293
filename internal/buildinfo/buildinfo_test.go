package buildinfo

import (
	"runtime/debug"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLine(t *testing.T) {
	type args struct {
		version  string
		settings []debug.BuildSetting
	}
	cases := map[string]struct {
		reason string
		args   args
		want   string
	}{
		"Released": {
			reason: "A build of a tagged module version from a clean tree: the version and the revision.",
			args:   args{version: "v0.2.0", settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "44a1de5"}, {Key: "vcs.modified", Value: "false"}}},
			want:   "relay v0.2.0 (revision 44a1de5)",
		},
		"Modified": {
			reason: "A build from a checkout with uncommitted changes says so.",
			args:   args{version: "(devel)", settings: []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: "44a1de5"}}},
			want:   "relay (devel) (revision 44a1de5+modified)",
		},
		"NoVCS": {
			reason: "Without a recorded revision (-buildvcs=false), the version alone.",
			args:   args{version: "(devel)"},
			want:   "relay (devel)",
		},
		"NoVersion": {
			reason: "No version recorded: unknown, never empty.",
			args:   args{},
			want:   "relay (unknown)",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			version, revision := fromSettings(tc.args.version, tc.args.settings)
			got := line("relay", version, revision)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("\n%s\nLine(relay): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
