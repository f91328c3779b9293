package plan

import (
	"fmt"
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
	if in == nil {
		in = &v1beta1.Input{}
	}
	var errs field.ErrorList
	s := Settings{}
	s.ObservationMaxAge, errs = duration(errs, field.NewPath("observationMaxAge"), in.ObservationMaxAge, v1beta1.DefaultObservationMaxAge, positive, "must be a duration such as 5m or 90s")
	s.ReplaceUnscheduledAfter, errs = duration(errs, field.NewPath("replaceUnscheduledAfter"), in.ReplaceUnscheduledAfter, v1beta1.DefaultReplaceUnscheduledAfter, notNegative, "must be a duration such as 15m or 1h, or 0s to turn re-placing off")
	s.AssumedBinding = scheduling.Binding(v1beta1.DefaultAssumedBinding)
	if in.AssumedBinding != nil {
		switch b := *in.AssumedBinding; b {
		case v1beta1.AssumedBindingMostFree, v1beta1.AssumedBindingLeastFree:
			s.AssumedBinding = scheduling.Binding(b)
		default:
			errs = append(errs, field.NotSupported(field.NewPath("assumedBinding"), string(b), []string{string(v1beta1.AssumedBindingMostFree), string(v1beta1.AssumedBindingLeastFree)}))
		}
	}
	if len(errs) > 0 {
		return s, fmt.Errorf("invalid Function input: %w", errs.ToAggregate())
	}
	return s, nil
}

// A bound says what is wrong with a parsed duration, or nothing.
type bound func(time.Duration) string

func positive(d time.Duration) string {
	if d <= 0 {
		return "must be positive"
	}
	return ""
}

func notNegative(d time.Duration) string {
	if d < 0 {
		return "must not be negative"
	}
	return ""
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
