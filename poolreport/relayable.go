package poolreport

import (
	"fmt"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
)

// Relayable is a PoolObservation status's report as the relay may copy it
// onto the pool's entry of an InferenceCluster: its three fields, and
// binding when it is Steered; or nil when it has none of the three (the
// agent has not reported, or cannot observe the pool). A report with only
// some of the fields, or outside the bounds the InferenceCluster's schema
// sets, is an error: copied, it would fail the whole status write. What
// the schema allows is copied as it is: the function judges it against the
// pool (docs/spec.md#usable-reports). A binding the schema does not allow
// (anything but Steered) is left out, so that the report still reaches the
// function, which then accounts the pool as not steered: the safe side.
func Relayable(status map[string]any) (map[string]any, error) {
	fields := agentv1alpha1.ReportFields
	present := 0
	for _, f := range fields {
		if _, ok := status[f]; ok {
			present++
		}
	}
	switch present {
	case 0:
		return nil, nil
	case len(fields):
	default:
		return nil, fmt.Errorf("it has only some of %s, %s and %s", fields[0], fields[1], fields[2])
	}
	if _, err := WholeNumber(status[agentv1alpha1.FieldObservedNodes], MaxCount); err != nil {
		return nil, fmt.Errorf("%s: %w", agentv1alpha1.FieldObservedNodes, err)
	}
	at, ok := status[agentv1alpha1.FieldObservedAt].(string)
	if !ok || len(at) > MaxTimeLength {
		return nil, fmt.Errorf("%s: not a string of at most %d characters", agentv1alpha1.FieldObservedAt, MaxTimeLength)
	}
	buckets, ok := status[agentv1alpha1.FieldNodesByFreeDevices].([]any)
	if !ok || len(buckets) > MaxBuckets {
		return nil, fmt.Errorf("%s: not a list of at most %d buckets", agentv1alpha1.FieldNodesByFreeDevices, MaxBuckets)
	}
	for i, b := range buckets {
		if err := schemaBucket(b); err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", agentv1alpha1.FieldNodesByFreeDevices, i, err)
		}
	}
	out := make(map[string]any, len(fields)+1)
	for _, f := range fields {
		out[f] = status[f]
	}
	if status[agentv1alpha1.FieldBinding] == agentv1alpha1.BindingSteered {
		out[agentv1alpha1.FieldBinding] = agentv1alpha1.BindingSteered
	}
	return out, nil
}

// schemaBucket checks a bucket against the schema: its fields and their
// bounds, not the pool it describes.
func schemaBucket(b any) error {
	m, ok := b.(map[string]any)
	if !ok {
		return fmt.Errorf("not an object")
	}
	for k := range m {
		if k != agentv1alpha1.FieldBucketNodes && k != agentv1alpha1.FieldBucketFree {
			return fmt.Errorf("%s: not a field of a bucket", k)
		}
	}
	if _, err := WholeNumber(m[agentv1alpha1.FieldBucketNodes], MaxCount); err != nil {
		return fmt.Errorf("%s: %w", agentv1alpha1.FieldBucketNodes, err)
	}
	free, ok := m[agentv1alpha1.FieldBucketFree].([]any)
	if _, present := m[agentv1alpha1.FieldBucketFree]; present && (!ok || len(free) > MaxFreePerBucket) {
		return fmt.Errorf("%s: not a list of at most %d devices", agentv1alpha1.FieldBucketFree, MaxFreePerBucket)
	}
	for j, f := range free {
		d, ok := f.(map[string]any)
		if !ok {
			return fmt.Errorf("free[%d]: not an object", j)
		}
		if name, ok := d[agentv1alpha1.FieldFreeName].(string); !ok || len(name) > MaxNameLength {
			return fmt.Errorf("free[%d].name: not a string of at most %d characters", j, MaxNameLength)
		}
		if _, err := WholeNumber(d[agentv1alpha1.FieldFreeCount], MaxCount); err != nil {
			return fmt.Errorf("free[%d].count: %w", j, err)
		}
		for k := range d {
			if k != agentv1alpha1.FieldFreeName && k != agentv1alpha1.FieldFreeCount {
				return fmt.Errorf("free[%d].%s: not a field of a device", j, k)
			}
		}
	}
	return nil
}
