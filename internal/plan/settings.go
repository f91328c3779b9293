package plan

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/modelplaneai/fleet-scheduler/input/v1beta1"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// Settings are the function input's values with every default applied
// (docs/spec.md#function-input). Each value has one meaning wherever it
// is used: a ReplaceUnscheduledAfter of zero turns re-placing off, as
// "0s" does in the input.
type Settings struct {
	// ObservationMaxAge is how old a pool report may be and still be used.
	ObservationMaxAge time.Duration
	// AssumedBinding is the node a claiming pod is assumed to bind to.
	AssumedBinding scheduling.Binding
	// ReplaceUnscheduledAfter is how long a replica's pods may stay
	// unscheduled before it is re-placed; zero never re-places.
	ReplaceUnscheduledAfter time.Duration
}

// Defaults are the settings of a call without a function input.
func Defaults() Settings {
	s, err := Read(nil)
	if err != nil {
		panic(err) // The defaults are constants of the input's package.
	}
	return s
}

// Read reads a function input: a nil input, or a field it leaves out,
// takes the default. A value that does not parse or is out of range is an
// error naming its field.
func Read(in *v1beta1.Input) (Settings, error) {
	s, errs := Check(in)
	return s, Invalid(errs)
}

// Check reads a function input as Read does, returning what is wrong with
// it field by field; a field in error keeps its default.
func Check(in *v1beta1.Input) (Settings, field.ErrorList) {
	if in == nil {
		in = &v1beta1.Input{}
	}
	var errs field.ErrorList
	s := Settings{}
	s.ObservationMaxAge, errs = duration(errs, field.NewPath("observationMaxAge"), in.ObservationMaxAge, v1beta1.DefaultObservationMaxAge, between(MinObservationMaxAge, MaxObservationMaxAge), "must be a duration such as 5m or 90s")
	s.ReplaceUnscheduledAfter, errs = duration(errs, field.NewPath("replaceUnscheduledAfter"), in.ReplaceUnscheduledAfter, v1beta1.DefaultReplaceUnscheduledAfter, offOrBetween(MinReplaceUnscheduledAfter, MaxReplaceUnscheduledAfter), "must be a duration such as 15m or 1h, or 0s to turn re-placing off")
	s.AssumedBinding = scheduling.Binding(v1beta1.DefaultAssumedBinding)
	if in.AssumedBinding != nil {
		switch b := *in.AssumedBinding; b {
		case v1beta1.AssumedBindingMostFree, v1beta1.AssumedBindingLeastFree:
			s.AssumedBinding = scheduling.Binding(b)
		default:
			errs = append(errs, field.NotSupported(field.NewPath("assumedBinding"), string(b), []string{string(v1beta1.AssumedBindingMostFree), string(v1beta1.AssumedBindingLeastFree)}))
		}
	}
	return s, errs
}

// Invalid is the error of a function input with errs, nil for none.
func Invalid(errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("invalid Function input: %w", errs.ToAggregate())
}

// The bounds of the input's durations (docs/spec.md#function-input;
// docs/operations.md, Bounds, says where each comes from).
const (
	// MinObservationMaxAge is above the oldest a report the agent keeps in
	// sync gets: under churn its observedAt was at most 13.2 s old with
	// its probes (the default) and 1m6.3s with bookmarks only, and in a
	// quiet cluster it is written again at 50 s (its heartbeat), a proof
	// later; the relay adds about a second (docs/cluster-agent.md,
	// docs/production.md). Below it pools go stale, and to whole-node
	// accounting, in normal operation.
	MinObservationMaxAge = v1beta1.MinObservationMaxAge
	// MaxObservationMaxAge is a day: a report older than that says nothing
	// of a pool's free devices, and the same age bounds how far in the
	// future an observedAt may be.
	MaxObservationMaxAge = v1beta1.MaxObservationMaxAge
	// MinReplaceUnscheduledAfter is above the 49 s measured live from a
	// pod's bind to the pool report that counts it (docs/production.md),
	// and the agent's 50 s heartbeat: a shorter wait could re-place a
	// replica whose pods bound before the fleet could say so.
	MinReplaceUnscheduledAfter = time.Minute
	// MaxReplaceUnscheduledAfter is a day: waits double with each move, so
	// the third comes a week after the first wait began; longer is re-placing
	// off, which 0s says.
	MaxReplaceUnscheduledAfter = 24 * time.Hour
)

// A bound says what is wrong with a parsed duration, or nothing.
type bound func(time.Duration) string

// between bounds a duration to [lo, hi].
func between(lo, hi time.Duration) bound {
	return func(d time.Duration) string {
		if d < lo || d > hi {
			return fmt.Sprintf("must be between %s and %s", short(lo), short(hi))
		}
		return ""
	}
}

// offOrBetween bounds a duration to 0, or [lo, hi].
func offOrBetween(lo, hi time.Duration) bound {
	return func(d time.Duration) string {
		if d != 0 && (d < lo || d > hi) {
			return fmt.Sprintf("must be 0s, or between %s and %s", short(lo), short(hi))
		}
		return ""
	}
}

// short renders a bound as a person writes it: 3m, 24h, 1m.
func short(d time.Duration) string {
	s := d.String()
	for _, zero := range []string{"0s", "0m"} {
		if strings.HasSuffix(s, zero) && len(s) > len(zero) {
			s = strings.TrimSuffix(s, zero)
		}
	}
	return s
}

// duration reads an optional duration field: its default when absent,
// and an error appended to errs, naming the field, when it does not parse
// or is out of bounds (the default is then kept).
func duration(errs field.ErrorList, path *field.Path, v *string, def string, ok bound, format string) (time.Duration, field.ErrorList) {
	d, err := time.ParseDuration(def)
	if err != nil {
		panic(err) // The defaults are constants of the input's package.
	}
	if v == nil {
		return d, errs
	}
	got, err := time.ParseDuration(*v)
	if err != nil {
		return d, append(errs, field.Invalid(path, *v, format))
	}
	if defect := ok(got); defect != "" {
		return d, append(errs, field.Invalid(path, *v, defect))
	}
	return got, errs
}
