package poolreport

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
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
	for _, file := range []string{
		"../deploy/inferenceclusters.yaml",
		"../deploy/cluster-agent/crds/poolobservations.agent.modelplane.ai.yaml",
	} {
		schemas := reportSchemas(t, file)
		if len(schemas) == 0 {
			t.Fatalf("%s: no schema of a pool's report (properties with nodesByFreeDevices)", file)
		}
		for i, s := range schemas {
			for name, b := range bounds {
				got := at(s, b.path...)
				if got == nil && b.optional {
					continue
				}
				if diff := cmp.Diff(b.want, got); diff != "" {
					t.Errorf("%s, report schema %d, %s: -want (poolreport's bound), +got (the schema's):\n%s", file, i, name, diff)
				}
			}
		}
	}
}
