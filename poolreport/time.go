package poolreport

import (
	"errors"
	"strings"
	"time"
)

// ParseTime reads an RFC 3339 date-time as the agent publishes it in
// observedAt and as a condition's lastTransitionTime: "T" and "Z" in upper
// or lower case (RFC 3339 5.6), any offset, fractional seconds. What RFC
// 3339 does not allow, it refuses: no date alone, no space for the "T".
//
// A leap second (second 60, which RFC 3339's grammar allows, the last
// second of a minute, and Go's time package has no room for) reads as the
// first instant of the next minute: Go's clock, like Kubernetes', steps over
// leap seconds, so that is when the same moment reads on it.
func ParseTime(s string) (time.Time, error) {
	// An RFC 3339 time holds no letters but T and Z, so upper-casing can
	// only make a valid one readable, never an invalid one valid.
	upper := strings.ToUpper(s)
	t, err := time.Parse(time.RFC3339, upper)
	if err == nil {
		return t, nil
	}
	if leap, ok := leapSecond(upper); ok {
		if t, err := time.Parse(time.RFC3339, leap); err == nil {
			return t.Add(time.Second), nil
		}
	}
	return time.Time{}, errNotRFC3339
}

var errNotRFC3339 = errors.New("not an RFC 3339 time")

// leapSecond is an RFC 3339 time whose seconds are 60, as the same time at
// second 59; false for any other.
func leapSecond(s string) (string, bool) {
	// 2006-01-02T15:04:60 is 19 bytes; the seconds are at 17 and 18.
	const second = 17
	if len(s) < 19 || s[10] != 'T' || s[second:second+2] != "60" {
		return "", false
	}
	return s[:second] + "59" + s[second+2:], true
}
