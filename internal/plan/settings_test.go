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
			in:     &v1beta1.Input{ObservationMaxAge: new("210s"), AssumedBinding: binding(v1beta1.AssumedBindingLeastFree), ReplaceUnscheduledAfter: new("1h")},
			want:   want{settings: Settings{ObservationMaxAge: 210 * time.Second, AssumedBinding: scheduling.LeastFree, ReplaceUnscheduledAfter: time.Hour}},
		},
		"ReplacingOff": {
			reason: "0s turns re-placing off, and zero means off in Settings too.",
			in:     &v1beta1.Input{ReplaceUnscheduledAfter: new("0s")},
			want:   want{settings: Settings{ObservationMaxAge: 5 * time.Minute, AssumedBinding: scheduling.MostFree}},
		},
		"EveryFieldWrong": {
			reason: "Each value out of range or not parsing is named by its field, in the input's order.",
			in:     &v1beta1.Input{ObservationMaxAge: new("0s"), AssumedBinding: binding("Random"), ReplaceUnscheduledAfter: new("soon")},
			want: want{settings: defaults, err: errors.New(`invalid Function input: [observationMaxAge: Invalid value: "0s": must be between 3m and 24h, ` +
				`replaceUnscheduledAfter: Invalid value: "soon": must be a duration such as 15m or 1h, or 0s to turn re-placing off, ` +
				`assumedBinding: Unsupported value: "Random": supported values: "MostFree", "LeastFree"]`)},
		},
		"NegativeReplacing": {
			reason: "A negative replaceUnscheduledAfter is out of range.",
			in:     &v1beta1.Input{ReplaceUnscheduledAfter: new("-1m")},
			want:   want{settings: defaults, err: errors.New(`invalid Function input: replaceUnscheduledAfter: Invalid value: "-1m": must be 0s, or between 1m and 24h`)},
		},
		"Bounds": {
			reason: "Each bound is in range, inclusive.",
			in:     &v1beta1.Input{ObservationMaxAge: new("3m"), ReplaceUnscheduledAfter: new("1m")},
			want:   want{settings: Settings{ObservationMaxAge: 3 * time.Minute, AssumedBinding: scheduling.MostFree, ReplaceUnscheduledAfter: time.Minute}},
		},
		"UpperBounds": {
			reason: "A day is the most of either.",
			in:     &v1beta1.Input{ObservationMaxAge: new("24h"), ReplaceUnscheduledAfter: new("1440m")},
			want:   want{settings: Settings{ObservationMaxAge: 24 * time.Hour, AssumedBinding: scheduling.MostFree, ReplaceUnscheduledAfter: 24 * time.Hour}},
		},
		"ObservationMaxAgeTooShort": {
			reason: "A nanosecond would make every pool stale; below the agent's heartbeat plus its watch lag pools go stale in normal operation.",
			in:     &v1beta1.Input{ObservationMaxAge: new("1ns")},
			want:   want{settings: defaults, err: errors.New(`invalid Function input: observationMaxAge: Invalid value: "1ns": must be between 3m and 24h`)},
		},
		"ObservationMaxAgeJustShort": {
			reason: "Two minutes is the heartbeat plus the bookmark lag, with no margin.",
			in:     &v1beta1.Input{ObservationMaxAge: new("2m59s")},
			want:   want{settings: defaults, err: errors.New(`invalid Function input: observationMaxAge: Invalid value: "2m59s": must be between 3m and 24h`)},
		},
		"ObservationMaxAgeTooLong": {
			reason: "A report over a day old says nothing of free devices.",
			in:     &v1beta1.Input{ObservationMaxAge: new("25h")},
			want:   want{settings: defaults, err: errors.New(`invalid Function input: observationMaxAge: Invalid value: "25h": must be between 3m and 24h`)},
		},
		"ReplacingTooSoon": {
			reason: "Under the agent's one-minute heartbeat a replica could move before its pods' binding is reported.",
			in:     &v1beta1.Input{ReplaceUnscheduledAfter: new("59s")},
			want:   want{settings: defaults, err: errors.New(`invalid Function input: replaceUnscheduledAfter: Invalid value: "59s": must be 0s, or between 1m and 24h`)},
		},
		"ReplacingTooLate": {
			reason: "Over a day, the doubled waits would overflow what anyone means; 0s turns it off.",
			in:     &v1beta1.Input{ReplaceUnscheduledAfter: new("2562047h")},
			want:   want{settings: defaults, err: errors.New(`invalid Function input: replaceUnscheduledAfter: Invalid value: "2562047h": must be 0s, or between 1m and 24h`)},
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
