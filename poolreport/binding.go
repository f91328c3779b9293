package poolreport

import (
	"fmt"
	"strconv"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
)

// Binding reads a report's optional binding (docs/spec.md#pool-reports):
// whether the agent steers the pool's claiming pods. Absent is not
// steered. Any other value, or a value of another type, is a defect and
// not steered; it leaves the rest of the report as usable as it was, since
// the counts do not depend on it (docs/spec.md#usable-reports).
func Binding(v any) (bool, string) {
	switch b := v.(type) {
	case nil:
		return false, ""
	case string:
		if b == agentv1alpha1.BindingSteered {
			return true, ""
		}
		return false, fmt.Sprintf("%s is not %s, the one binding there is", quoteShort(b), agentv1alpha1.BindingSteered)
	}
	return false, fmt.Sprintf("%s is not a string", kindOf(v))
}

// quoteShort quotes a string for a defect, cut to MaxNameLength bytes: a
// warning quotes it, and a fixture's string can be of any length.
func quoteShort(s string) string {
	if len(s) <= MaxNameLength {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:MaxNameLength]) + "..."
}

// kindOf names the JSON kind of a decoded value, for a defect that must not
// quote a value of any size.
func kindOf(v any) string {
	switch v.(type) {
	case bool:
		return "a boolean"
	case float64, int64, int:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("a %T", v)
}
