package schemas

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
)

// kindCluster is the kind whose status the cluster agent extends.
const kindCluster = "InferenceCluster"

// shippedXRD is the InferenceCluster XRD extended with the agent's report
// (docs/spec.md#pool-reports), which users apply in place of Modelplane v0.3's.
const shippedXRD = "deploy/inferenceclusters.yaml"

// agentFields are the fields of a pool the cluster agent publishes.
var agentFields = []string{"observedNodes", "observedAt", "nodesByFreeDevices", "binding"}

// TestObservedClustersValidate validates the InferenceClusters of every
// fixture that carries agent reports (example/observed and e2e/testdata)
// against the shipped XRD, and shows that Modelplane v0.3's XRD does not
// know the report's fields: the reason the extension ships.
func TestObservedClustersValidate(t *testing.T) {
	cli := testenv.CrossplaneCLI(t)
	root := testenv.RepoRoot(t)
	dirs, err := filepath.Glob(filepath.Join(root, "e2e", "testdata", "*"))
	if err != nil {
		t.Fatal(err)
	}
	dirs = append([]string{filepath.Join(root, "example", "observed")}, dirs...)

	observed := 0
	for _, dir := range dirs {
		clusters, reports := fixtureClusters(t, filepath.Join(dir, "required-resources"))
		if reports == 0 {
			continue
		}
		observed++
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(rel, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "clusters.yaml")
			write(t, file, clusters)

			r := validateWith(t, cli, filepath.Join(root, shippedXRD), file)
			t.Logf("against %s (%d clusters, %d with reports):\n%s", shippedXRD, len(clusters), reports, r.output)
			if r.err != nil || r.failures != 0 || r.passed != len(clusters) {
				t.Errorf("want all %d clusters of %s to validate against %s, got %d passed, %d failed (%v):\n%s", len(clusters), rel, shippedXRD, r.passed, r.failures, r.err, r.output)
			}

			v03 := validateWith(t, cli, filepath.Join("xrds", "inferenceclusters.yaml"), file)
			if v03.failures < reports || !strings.Contains(v03.output, `unknown field: "observedNodes"`) {
				t.Errorf("want Modelplane v0.3's XRD to refuse the %d clusters with reports, for unknown fields, got %d failures:\n%s", reports, v03.failures, v03.output)
			}
		})
	}
	if observed == 0 {
		t.Fatal("no fixture's InferenceClusters carry agent reports: nothing validated")
	}
	t.Logf("%d fixtures with agent reports validated against %s", observed, shippedXRD)
}

// TestAgentReportsValidate validates the InferenceClusters the agent
// package's tests publish its reports on (agent/testdata, kept current by
// its TestPublishedCluster) against the shipped XRD.
func TestAgentReportsValidate(t *testing.T) {
	cli := testenv.CrossplaneCLI(t)
	root := testenv.RepoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "agent", "testdata", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no InferenceClusters in agent/testdata (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := validateWith(t, cli, filepath.Join(root, shippedXRD), f)
			if r.err != nil || r.failures != 0 || r.passed != 1 {
				t.Errorf("want %s to validate against %s, got %d passed, %d failed (%v):\n%s", f, shippedXRD, r.passed, r.failures, r.err, r.output)
			}
		})
	}
}

// TestShippedXRDRejectsBadReports shows the shipped XRD holds the limits
// the function reads reports by (testdata/invalid-clusters).
func TestShippedXRDRejectsBadReports(t *testing.T) {
	rejectsEach(t, testenv.CrossplaneCLI(t), filepath.Join(testenv.RepoRoot(t), shippedXRD), "testdata/invalid-clusters/*.yaml")
}

// fixtureClusters returns the InferenceClusters of a fixture's required
// resources, and how many of them carry an agent report on some pool.
func fixtureClusters(t *testing.T, dir string) ([]map[string]any, int) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var clusters []map[string]any
	reports := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range decode(t, string(b)) {
			if o["kind"] != kindCluster {
				continue
			}
			clusters = append(clusters, o)
			if hasReport(o) {
				reports++
			}
		}
	}
	return clusters, reports
}

func hasReport(cluster map[string]any) bool {
	status, _ := cluster["status"].(map[string]any)
	pools, _ := status["gpuPools"].([]any)
	for _, p := range pools {
		pool, _ := p.(map[string]any)
		for _, f := range agentFields {
			if _, ok := pool[f]; ok {
				return true
			}
		}
	}
	return false
}
