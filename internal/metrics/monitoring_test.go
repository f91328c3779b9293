package metrics

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"
)

const monitoring = "../../deploy/monitoring"

// exported are the names a query may read of what the metrics export: each
// family's name, and a histogram's _bucket, _sum and _count.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	m := New(func() time.Time { return t0 }, func(time.Time) int { return 0 })
	// A call that sets every series, so that every family is gathered.
	m.Record(Call{
		Result: OK, At: t0, Deployment: "ns/a",
		Pools: slices.Values([]Pool{{Cluster: "a", Pool: "p", Ready: true, ObservedAt: t0}}),
		Free:  slices.Values([]PoolFree{{Cluster: "a", Pool: "p", Devices: []string{"gpu"}, Largest: []int64{1}}}),
	})
	r := prometheus.NewPedanticRegistry()
	r.MustRegister(m)
	families, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range families {
		out[f.GetName()] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[f.GetName()+s] = true
			}
		}
	}
	return out
}

var (
	strLiteral = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	matchers   = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	grouping   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	keywords   = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true}
)

// metricNames are the metric names a PromQL expression reads: what is left
// of its identifiers once strings, label matchers, ranges, grouping
// clauses, functions and keywords are taken out.
func metricNames(expr string) []string {
	e := strLiteral.ReplaceAllString(expr, `""`)
	e = matchers.ReplaceAllString(e, " ")
	e = grouping.ReplaceAllString(e, " ")
	var out []string
	for _, m := range identifier.FindAllStringSubmatch(e, -1) {
		if m[1] != "" || keywords[m[0]] {
			continue
		}
		out = append(out, m[0])
	}
	return out
}

func TestMetricNames(t *testing.T) {
	cases := map[string]struct {
		reason string
		expr   string
		want   []string
	}{
		"Grouped": {
			reason: "Functions, grouping labels, matchers and ranges are not metric names.",
			expr:   `histogram_quantile(0.99, sum by (le) (rate(a_bucket{x="y"}[5m]))) > 60`,
			want:   []string{"a_bucket"},
		},
		"Joined": {
			reason: "Both sides of a set operation are read.",
			expr:   `max by (d) (a and on (d, instance) (time() - b) < 300) > 0`,
			want:   []string{"a", "b"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, metricNames(tc.expr)); diff != "" {
				t.Errorf("%s\nmetricNames(%q): -want, +got:\n%s", tc.reason, tc.expr, diff)
			}
		})
	}
}

// checkExpr fails the test for an expression that reads no metric, or
// one the function does not export.
func checkExpr(t *testing.T, where, expr string, names map[string]bool) {
	t.Helper()
	read := metricNames(expr)
	if len(read) == 0 {
		t.Errorf("%s: %q reads no metric", where, expr)
	}
	for _, n := range read {
		if !names[n] {
			t.Errorf("%s: %q reads %s, which the function does not export", where, expr, n)
		}
	}
}

// TestDashboard checks that every query of the dashboard reads only metrics
// the function exports, and that it shows every one of them.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(monitoring, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	names := exported(t)
	shown := map[string]bool{}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			checkExpr(t, "panel "+p.Title, q.Expr, names)
			for _, n := range metricNames(q.Expr) {
				shown[strings.TrimSuffix(n, "_bucket")] = true
			}
		}
	}
	var missing []string
	for n := range names {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		if !shown[base] && !shown[n] && n != "fleet_scheduler_deployment_last_call_timestamp_seconds" {
			missing = append(missing, n)
		}
	}
	slices.Sort(missing)
	missing = slices.Compact(missing)
	if len(missing) > 0 {
		t.Errorf("the dashboard shows none of %v", missing)
	}
}

// TestAlertRules checks that the PrometheusRule's alerts read only exported
// metrics, and runs promtool's unit tests of them (alerts-test.yaml). CI
// installs promtool and sets FLEET_SCHEDULER_REQUIRE_PROMTOOL, so that a
// missing promtool fails there instead of skipping.
func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(monitoring, "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Kind string
		Spec struct {
			Groups []struct {
				Name  string           `json:"name"`
				Rules []map[string]any `json:"rules"`
			}
		}
	}
	if err := yaml.Unmarshal(b, &rule); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	if rule.Kind != "PrometheusRule" || len(rule.Spec.Groups) == 0 {
		t.Fatalf("prometheusrule.yaml: kind %q with %d groups, want a PrometheusRule with some", rule.Kind, len(rule.Spec.Groups))
	}
	names := exported(t)
	var alerts []string
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			alert, _ := r["alert"].(string)
			expr, _ := r["expr"].(string)
			alerts = append(alerts, alert)
			checkExpr(t, "alert "+alert, expr, names)
		}
	}
	want := []string{"FleetSchedulerReplicasUnplaced", "FleetSchedulerPoolReportStale", "FleetSchedulerFatalResults", "FleetSchedulerReplacementsLooping", "FleetSchedulerSlowCalls"}
	if diff := cmp.Diff(want, alerts); diff != "" {
		t.Errorf("alerts: -want, +got:\n%s", diff)
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("FLEET_SCHEDULER_REQUIRE_PROMTOOL") != "" {
			t.Fatalf("promtool is required and not on PATH: %v", err)
		}
		t.Skip("promtool is not on PATH")
	}
	dir := t.TempDir()
	rules, err := yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(monitoring, "alerts-test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"rules.yaml": rules, "alerts-test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(t.Context(), promtool, "test", "rules", "alerts-test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}
