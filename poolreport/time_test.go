package poolreport

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseTime(t *testing.T) {
	utc := func(s string) time.Time { return time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC).Add(mustDuration(s)) }
	type want struct {
		t   time.Time
		err bool
	}
	cases := map[string]struct {
		reason string
		in     string
		want   want
	}{
		"UpperCase":        {reason: "The usual form.", in: "2026-10-20T20:06:00Z", want: want{t: utc("0s")}},
		"LowerCase":        {reason: "RFC 3339 5.6 allows a lower-case t and z.", in: "2026-10-20t20:06:00z", want: want{t: utc("0s")}},
		"MixedCase":        {reason: "Each letter in either case.", in: "2026-10-20t20:06:00Z", want: want{t: utc("0s")}},
		"Offset":           {reason: "Any offset, read as the instant it names.", in: "2026-10-20T22:06:00+02:00", want: want{t: utc("0s")}},
		"Fraction":         {reason: "Fractional seconds.", in: "2026-10-20T20:06:00.250z", want: want{t: utc("250ms")}},
		"LeapSecond":       {reason: "A leap second reads as the first instant of the next minute.", in: "2026-10-20T20:05:60Z", want: want{t: utc("0s")}},
		"LeapSecondOffset": {reason: "A leap second with a half-hour offset and a fraction.", in: "2026-10-21t05:29:60.5+05:30", want: want{t: time.Date(2026, 10, 21, 0, 0, 0, 500_000_000, time.UTC)}},
		"SecondSixtyOne":   {reason: "There is no second 61.", in: "2026-10-20T20:59:61Z", want: want{err: true}},
		"LeapSecondBadDay": {reason: "A leap second of a day that does not exist is refused.", in: "2026-02-30T23:59:60Z", want: want{err: true}},
		"Space":            {reason: "A space for the T is ISO 8601's, not RFC 3339's grammar.", in: "2026-10-20 20:06:00Z", want: want{err: true}},
		"DateOnly":         {reason: "A date alone is not a date-time.", in: "2026-10-20", want: want{err: true}},
		"NoOffset":         {reason: "A time without an offset is local to nowhere.", in: "2026-10-20T20:06:00", want: want{err: true}},
		"Garbage":          {reason: "Garbage is refused.", in: "yesterday", want: want{err: true}},
		"OtherLetters":     {reason: "No other letter is allowed, in any case.", in: "2026-10-20x20:06:00z", want: want{err: true}},
		"OutOfRange":       {reason: "A month 13 is refused.", in: "2026-13-20T20:06:00Z", want: want{err: true}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseTime(tc.in)
			if diff := cmp.Diff(tc.want, want{t: got, err: err != nil}, cmp.AllowUnexported(want{}), cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
				t.Errorf("%s\nParseTime(%q): -want, +got:\n%s", tc.reason, tc.in, diff)
			}
		})
	}
}

func mustDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}
