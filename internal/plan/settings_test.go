package plan

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/modelplaneai/fleet-scheduler/input/v1beta1"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

func TestRead(t *testing.T) {
	binding := func(b v1beta1.AssumedBinding) *v1beta1.AssumedBinding { return &b }
	defaults := Settings{ObservationMaxAge: 5 * time.Minute, AssumedBinding: scheduling.MostFree, ReplaceUnscheduledAfter: 15 * time.Minute}
	type want struct {
		settings Settings
		err      error
	}
	cases := map[string]struct {
		reason string
		in     *v1beta1.Input
		want   want
	}{
		"NoInput": {
			reason: "Without an input every default holds.",
			want:   want{settings: defaults},
		},
		"EmptyInput": {
			reason: "An input that sets nothing is no input.",
			in:     &v1beta1.Input{},
			want:   want{settings: defaults},
		},
		"EverySet": {
			reason: "Each field that is set is used.",
			in:     &v1beta1.Input{ObservationMaxAge: new("90s"), AssumedBinding: binding(v1beta1.AssumedBindingLeastFree), ReplaceUnscheduledAfter: new("1h")},
			want:   want{settings: Settings{ObservationMaxAge: 90 * time.Second, AssumedBinding: scheduling.LeastFree, ReplaceUnscheduledAfter: time.Hour}},
		},
		"ReplacingOff": {
			reason: "0s turns re-placing off, and zero means off in Settings too.",
			in:     &v1beta1.Input{ReplaceUnscheduledAfter: new("0s")},
			want:   want{settings: Settings{ObservationMaxAge: 5 * time.Minute, AssumedBinding: scheduling.MostFree}},
		},
		"EveryFieldWrong": {
			reason: "Each value out of range or not parsing is named by its field, in the input's order.",
			in:     &v1beta1.Input{ObservationMaxAge: new("0s"), AssumedBinding: binding("Random"), ReplaceUnscheduledAfter: new("soon")},
			want: want{settings: defaults, err: errors.New(`invalid Function input: [observationMaxAge: Invalid value: "0s": must be positive, ` +
				`replaceUnscheduledAfter: Invalid value: "soon": must be a duration such as 15m or 1h, or 0s to turn re-placing off, ` +
				`assumedBinding: Unsupported value: "Random": supported values: "MostFree", "LeastFree"]`)},
		},
		"NegativeReplacing": {
			reason: "A negative replaceUnscheduledAfter is out of range.",
			in:     &v1beta1.Input{ReplaceUnscheduledAfter: new("-1m")},
			want:   want{settings: defaults, err: errors.New(`invalid Function input: replaceUnscheduledAfter: Invalid value: "-1m": must not be negative`)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := Read(tc.in)
			if diff := cmp.Diff(tc.want.settings, s); diff != "" {
				t.Errorf("%s\nRead(...): -want settings, +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(errString(tc.want.err), errString(err)); diff != "" {
				t.Errorf("%s\nRead(...): -want error, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
