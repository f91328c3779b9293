package poolreport

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
)

// reportSchemas finds every schema of a pool's report in a YAML stream: the
// properties that hold nodesByFreeDevices.
func reportSchemas(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Clean(path))
	if err != nil {
		t.Fatalf("cannot read %s: %v", path, err)
	}
	var found []map[string]any
	var walk func(v any)
	walk = func(v any) {
		switch n := v.(type) {
		case map[string]any:
			if props, ok := n["properties"].(map[string]any); ok {
				if _, ok := props["nodesByFreeDevices"]; ok {
					found = append(found, props)
				}
			}
			for _, c := range n {
				walk(c)
			}
		case []any:
			for _, c := range n {
				walk(c)
			}
		}
	}
	for doc := range strings.SplitSeq(string(b), "\n---\n") {
		var v any
		if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatalf("cannot read %s: %v", path, err)
		}
		walk(v)
	}
	return found
}

// at is the value at a path of nested schema maps; nil when absent.
func at(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

// TestBoundsMatchSchemas holds the bounds here to the schemas the agent
// publishes into and the relay copies into: a report within the bounds is
// one the API server accepts, and the function reads no report the
// schemas would refuse.
func TestBoundsMatchSchemas(t *testing.T) {
	bucket := []string{"nodesByFreeDevices", "items", "properties"}
	free := append(append([]string{}, bucket...), "free", "items", "properties")
	type bound struct {
		path []string
		want float64
		// optional: a schema may leave it out (the CRD's observedAt is a
		// date-time, bounded by its format).
		optional bool
	}
	bounds := map[string]bound{
		"observedNodes.maximum":       {path: []string{"observedNodes", "maximum"}, want: MaxCount},
		"observedAt.maxLength":        {path: []string{"observedAt", "maxLength"}, want: MaxTimeLength, optional: true},
		"nodesByFreeDevices.maxItems": {path: []string{"nodesByFreeDevices", "maxItems"}, want: MaxBuckets},
		"bucket.nodes.maximum":        {path: append(append([]string{}, bucket...), "nodes", "maximum"), want: MaxCount},
		"bucket.free.maxItems":        {path: append(append([]string{}, bucket...), "free", "maxItems"), want: MaxFreePerBucket},
		"free.name.maxLength":         {path: append(append([]string{}, free...), "name", "maxLength"), want: MaxNameLength},
		"free.count.maximum":          {path: append(append([]string{}, free...), "count", "maximum"), want: MaxCount},
	}
	eachReportSchema(t, func(where string, s map[string]any) {
		for name, b := range bounds {
			got := at(s, b.path...)
			if got == nil && b.optional {
				continue
			}
			if diff := cmp.Diff(b.want, got); diff != "" {
				t.Errorf("%s, %s: -want (poolreport's bound), +got (the schema's):\n%s", where, name, diff)
			}
		}
	})
}

// The schemas a report is written into: the InferenceCluster's, which the
// relay copies it into, and the PoolObservation's, which the agent
// publishes it in.
const (
	inferenceClusterXRD = "../deploy/inferenceclusters.yaml"
	poolObservationCRD  = "../deploy/cluster-agent/crds/poolobservations.agent.modelplane.ai.yaml"
)

// eachReportSchema calls f with every schema of a pool's report in both
// files, and where it is.
func eachReportSchema(t *testing.T, f func(where string, s map[string]any)) {
	t.Helper()
	for _, file := range []string{inferenceClusterXRD, poolObservationCRD} {
		schemas := reportSchemas(t, file)
		if len(schemas) == 0 {
			t.Fatalf("%s: no schema of a pool's report (properties with nodesByFreeDevices)", file)
		}
		for i, s := range schemas {
			f(fmt.Sprintf("%s, report schema %d", file, i), s)
		}
	}
}

// TestEnumsMatchSchemas holds the schemas' enumerations to the names of
// apis/agent/v1alpha1: a report's binding, in both schemas a report is
// written into, and the PoolObservation's spec.steering with its default.
// An enum the schema lacks would let an API server store a value no binary
// knows; a value it lacks would fail the agent's or the relay's write.
func TestEnumsMatchSchemas(t *testing.T) {
	eachReportSchema(t, func(where string, s map[string]any) {
		checkEnum(t, where, s, []string{agentv1alpha1.FieldBinding}, []any{agentv1alpha1.BindingSteered}, nil)
	})

	const crd = poolObservationCRD
	b, err := os.ReadFile(crd)
	if err != nil {
		t.Fatalf("cannot read %s: %v", crd, err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("cannot read %s: %v", crd, err)
	}
	versions, _ := at(doc, "spec", "versions").([]any)
	if len(versions) != 1 {
		t.Fatalf("%s: %d versions, want the one, v1alpha1", crd, len(versions))
	}
	version, _ := versions[0].(map[string]any)
	spec, _ := at(version, "schema", "openAPIV3Schema", "properties", "spec", "properties").(map[string]any)
	checkEnum(t, crd+", spec", spec, []string{"steering"},
		[]any{string(agentv1alpha1.SteeringDisabled), string(agentv1alpha1.SteeringEnabled)}, string(agentv1alpha1.SteeringDisabled))
}

// checkEnum checks a string property's enum, and its default when deflt is
// not nil.
func checkEnum(t *testing.T, where string, props map[string]any, path []string, want []any, deflt any) {
	t.Helper()
	if got := at(props, append(slices.Clone(path), "type")...); got != "string" {
		t.Errorf("%s, %v: type %v, want string", where, path, got)
	}
	if diff := cmp.Diff(want, at(props, append(slices.Clone(path), "enum")...)); diff != "" {
		t.Errorf("%s, %v: enum: -want (apis/agent/v1alpha1's names), +got (the schema's):\n%s", where, path, diff)
	}
	if deflt != nil {
		if diff := cmp.Diff(deflt, at(props, append(slices.Clone(path), "default")...)); diff != "" {
			t.Errorf("%s, %v: default: -want, +got:\n%s", where, path, diff)
		}
	}
}
