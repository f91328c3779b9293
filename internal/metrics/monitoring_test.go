package metrics

import (
	"encoding/json"
	"fmt"
	"maps"
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

// exported are the names a query may read of what the metrics export, each
// with its label names: each family's name, and a histogram's _bucket (with
// le), _sum and _count.
func exported(t *testing.T) map[string]map[string]bool {
	t.Helper()
	m := New(func() time.Time { return t0 }, func(time.Time) int { return 0 })
	// A call that sets every series, so that every family is gathered.
	m.Record(Call{
		Result: OK, At: t0, Deployment: "ns/a",
		Pools: slices.Values([]Pool{{Cluster: "a", Pool: "p", Ready: true, ObservedAt: t0, Free: []DeviceCount{{Device: "gpu", Count: 3}}}}),
		Free:  slices.Values([]PoolFree{{Cluster: "a", Pool: "p", Devices: []string{"gpu"}, Largest: []int64{1}}}),
	})
	r := prometheus.NewPedanticRegistry()
	r.MustRegister(m)
	families, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]bool{}
	for _, f := range families {
		labels := map[string]bool{}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		out[f.GetName()] = labels
		if f.GetType() == dto.MetricType_HISTOGRAM {
			out[f.GetName()+"_bucket"] = maps.Clone(labels)
			out[f.GetName()+"_bucket"]["le"] = true
			out[f.GetName()+"_sum"] = labels
			out[f.GetName()+"_count"] = labels
		}
	}
	return out
}

// targetLabels are the labels Prometheus puts on every series of a target
// that podmonitor.yaml scrapes: instance and job, and prometheus-operator's
// namespace, pod, container and endpoint (the port's name).
var targetLabels = map[string]bool{"instance": true, "job": true, "namespace": true, "pod": true, "container": true, "endpoint": true}

var (
	strLiteral = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	matchers   = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	grouping   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	keywords   = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true}

	selector    = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}`)
	matcher     = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	leading     = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)\s*`)
	byBefore    = regexp.MustCompile(`^(by|without)\s*\(([^)]*)\)\s*`)
	byAfter     = regexp.MustCompile(`^\s*(by|without)\s*\(([^)]*)\)`)
	template    = regexp.MustCompile(`\{\{\s*(?:\$labels\.)?([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	aggregation = map[string]bool{
		"sum": true, "min": true, "max": true, "avg": true, "count": true, "group": true, "stddev": true,
		"stdvar": true, "topk": true, "bottomk": true, "quantile": true, "count_values": true,
	}
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

// labelUse is a label name a PromQL expression reads: in a matcher of
// metric (empty for a matcher with no metric name, or a grouping clause's
// label, which may be any metric's the expression reads).
type labelUse struct {
	Label, Metric string
}

// labelsRead are the label names of an expression's matchers and of its
// grouping clauses (by, without, on, ignoring, group_left, group_right).
func labelsRead(expr string) []labelUse {
	e := strLiteral.ReplaceAllString(expr, `""`)
	var out []labelUse
	for _, m := range selector.FindAllStringSubmatch(e, -1) {
		metric := m[1]
		if keywords[metric] || aggregation[metric] {
			metric = ""
		}
		for _, l := range matcher.FindAllStringSubmatch(m[2], -1) {
			out = append(out, labelUse{Label: l[1], Metric: metric})
		}
	}
	for _, m := range grouping.FindAllStringSubmatch(e, -1) {
		for l := range strings.SplitSeq(m[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, labelUse{Label: l})
			}
		}
	}
	return out
}

// outputLabels are the labels of an expression's result where its outermost
// operation says them: an aggregation (by its by clause; none without one),
// or histogram_quantile of one (without le). ok is false where the result
// keeps its metrics' labels, or an aggregation's without clause leaves them.
func outputLabels(expr string) (labels []string, ok bool) {
	e := strings.TrimSpace(strLiteral.ReplaceAllString(expr, `""`))
	for strings.HasPrefix(e, "(") && closing(e, 0) == len(e)-1 {
		e = strings.TrimSpace(e[1 : len(e)-1])
	}
	m := leading.FindStringSubmatch(e)
	if m == nil {
		return nil, false
	}
	name, rest := m[1], e[len(m[0]):]
	switch {
	case aggregation[name]:
		// sum by (l) (x), or sum (x) by (l).
		if c := byBefore.FindStringSubmatch(rest); c != nil {
			return grouped(c[1], c[2])
		}
		if !strings.HasPrefix(rest, "(") {
			return nil, false
		}
		end := closing(rest, 0)
		if end < 0 {
			return nil, false
		}
		if c := byAfter.FindStringSubmatch(rest[end+1:]); c != nil {
			return grouped(c[1], c[2])
		}
		return []string{}, true
	case name == "histogram_quantile" && strings.HasPrefix(rest, "("):
		end := closing(rest, 0)
		if end < 0 {
			return nil, false
		}
		args := rest[1:end]
		comma := -1
		for i, depth := 0, 0; i < len(args) && comma < 0; i++ {
			switch args[i] {
			case '(', '{', '[':
				depth++
			case ')', '}', ']':
				depth--
			case ',':
				if depth == 0 {
					comma = i
				}
			}
		}
		if comma < 0 {
			return nil, false
		}
		labels, ok := outputLabels(args[comma+1:])
		return slices.DeleteFunc(labels, func(l string) bool { return l == "le" }), ok
	}
	return nil, false
}

// grouped are an aggregation's result labels: its by clause's, or, for a
// without clause, unknown.
func grouped(kind, list string) ([]string, bool) {
	if kind == "without" {
		return nil, false
	}
	out := []string{}
	for l := range strings.SplitSeq(list, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out, true
}

// closing is the index of the parenthesis that closes e's at open, -1 for
// none.
func closing(e string, open int) int {
	depth := 0
	for i := open; i < len(e); i++ {
		switch e[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

func TestLabelsRead(t *testing.T) {
	cases := map[string]struct {
		reason string
		expr   string
		want   []labelUse
	}{
		"Matchers": {
			reason: "A matcher's label is its metric's; a string's braces are not a matcher.",
			expr:   `sum(increase(a_total{result="fatal", x!~"{y=\"z\"}"}[10m])) + b{c="d"}`,
			want:   []labelUse{{"result", "a_total"}, {"x", "a_total"}, {"c", "b"}},
		},
		"Grouped": {
			reason: "Grouping and matching clauses' labels may be any metric's.",
			expr:   `max by (d) (a and on (d, instance) (time() - b) < 300) > 0`,
			want:   []labelUse{{"d", ""}, {"d", ""}, {"instance", ""}},
		},
		"Trailing": {
			reason: "A clause after the aggregation's argument is read too.",
			expr:   `sum(rate(a_bucket[5m])) without (le)`,
			want:   []labelUse{{"le", ""}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, labelsRead(tc.expr)); diff != "" {
				t.Errorf("%s\nlabelsRead(%q): -want, +got:\n%s", tc.reason, tc.expr, diff)
			}
		})
	}
}

func TestOutputLabels(t *testing.T) {
	cases := map[string]struct {
		reason string
		expr   string
		want   []string
		ok     bool
	}{
		"By":          {"The outermost aggregation's by clause.", `max by (cluster) (min by (cluster, pool) (a)) > 300`, []string{"cluster"}, true},
		"TrailingBy":  {"A by clause after the argument.", `sum(rate(a[5m])) by (result)`, []string{"result"}, true},
		"Plain":       {"An aggregation without a clause keeps no label.", `sum(a)`, []string{}, true},
		"Quantile":    {"histogram_quantile drops le.", `histogram_quantile(0.99, sum by (le, x) (rate(a_bucket[5m])))`, []string{"x"}, true},
		"Parenthesed": {"Parentheses around the whole are looked through.", `(sum by (d) (a))`, []string{"d"}, true},
		"Without":     {"A without clause leaves unknown labels.", `sum without (le) (a)`, nil, false},
		"Selector":    {"A selector keeps its metric's labels.", `rate(a[5m])`, nil, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := outputLabels(tc.expr)
			if diff := cmp.Diff(tc.want, got); diff != "" || ok != tc.ok {
				t.Errorf("%s\noutputLabels(%q): ok %v, want %v; -want, +got:\n%s", tc.reason, tc.expr, ok, tc.ok, diff)
			}
		})
	}
}

// checkLabels fails the test for a label that expr reads, or that shown (a
// Grafana legend's {{label}}, an annotation's {{ $labels.label }}) shows,
// that its metrics do not have: a target label, le of a histogram's
// buckets, or one of the metric's own. A label shown must also be one the
// expression's outermost aggregation keeps.
func checkLabels(t *testing.T, where, expr string, shown []string, names map[string]map[string]bool) {
	t.Helper()
	has := func(metric, label string) bool {
		return targetLabels[label] || names[metric][label] || label == "__name__"
	}
	read := metricNames(expr)
	some := func(label string) bool {
		return slices.ContainsFunc(read, func(n string) bool { return has(n, label) })
	}
	for _, u := range labelsRead(expr) {
		switch {
		case u.Metric != "" && names[u.Metric] != nil && !has(u.Metric, u.Label):
			t.Errorf("%s: %q matches label %s, which %s does not have", where, expr, u.Label, u.Metric)
		case u.Metric == "" && !some(u.Label):
			t.Errorf("%s: %q reads label %s, which none of %v has", where, expr, u.Label, read)
		}
	}
	out, ok := outputLabels(expr)
	for _, l := range shown {
		switch {
		case ok && !slices.Contains(out, l):
			t.Errorf("%s: shows label %s, which %q does not keep (its result has %v)", where, l, expr, out)
		case !some(l):
			t.Errorf("%s: shows label %s, which none of %v has", where, l, read)
		}
	}
}

// templated are the labels a Grafana legend or an alert's annotation shows.
func templated(s string) []string {
	var out []string
	for _, m := range template.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// checkExpr fails the test for an expression that reads no metric, or
// one the function does not export.
func checkExpr(t *testing.T, where, expr string, names map[string]map[string]bool) {
	t.Helper()
	read := metricNames(expr)
	if len(read) == 0 {
		t.Errorf("%s: %q reads no metric", where, expr)
	}
	for _, n := range read {
		if names[n] == nil {
			t.Errorf("%s: %q reads %s, which the function does not export", where, expr, n)
		}
	}
}

// TestDashboard checks that every query of the dashboard reads only metrics
// the function exports, and labels they have (legends included), and that
// it shows every one of them.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(monitoring, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr   string `json:"expr"`
				Legend string `json:"legendFormat"`
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
			checkLabels(t, "panel "+p.Title, q.Expr, templated(q.Legend), names)
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
			var shown []string
			annotations, _ := r["annotations"].(map[string]any)
			for _, a := range annotations {
				s, _ := a.(string)
				shown = append(shown, templated(s)...)
			}
			checkLabels(t, "alert "+alert, expr, shown, names)
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

// What Crossplane's package manager gives a function's pods (its
// RuntimeManifestBuilder): they run in its namespace, crossplane-system by
// default; they are labelled pkg.crossplane.io/function with the Function's
// name; and their package-runtime container declares the port 8080, named
// metrics, where the function serves its metrics by default.
const (
	crossplaneNamespace = "crossplane-system"
	functionLabel       = "pkg.crossplane.io/function"
	runtimeContainer    = "package-runtime"
	metricsPortName     = "metrics"
	metricsPortNumber   = 8080
	productionDoc       = "../../docs/production.md"
	specDoc             = "../../docs/spec.md"
	podMonitorFile      = "podmonitor.yaml"
)

// docObjects are the objects of a Markdown file's yaml code blocks.
func docObjects(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, block := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		for _, doc := range regexp.MustCompile(`(?m)^---$`).Split(block[1], -1) {
			// A block that is not YAML (a template, an excerpt) is not an
			// object of the docs' examples.
			var o map[string]any
			if err := yaml.Unmarshal([]byte(doc), &o); err == nil && o != nil {
				out = append(out, o)
			}
		}
	}
	return out
}

// field is the value at a path of maps and, for a number, a list's element.
func field(o any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := o.(map[string]any)
			o = m[k]
		case int:
			l, _ := o.([]any)
			if k >= len(l) {
				return nil
			}
			o = l[k]
		}
	}
	return o
}

// TestPodMonitor checks that podmonitor.yaml scrapes the pods that
// docs/production.md's Function and DeploymentRuntimeConfig make: those
// Crossplane labels with the Function's name, in its namespace, on the
// port it names metrics, where the function serves its metrics; and that
// nothing in it rewrites the labels the rules join on.
func TestPodMonitor(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(monitoring, podMonitorFile))
	if err != nil {
		t.Fatal(err)
	}
	var pm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Selector struct {
				MatchLabels      map[string]string `json:"matchLabels"`
				MatchExpressions []any             `json:"matchExpressions"`
			} `json:"selector"`
			NamespaceSelector struct {
				Any        bool     `json:"any"`
				MatchNames []string `json:"matchNames"`
			} `json:"namespaceSelector"`
			Endpoints []struct {
				Port              string           `json:"port"`
				Path              string           `json:"path"`
				Scheme            string           `json:"scheme"`
				Interval          string           `json:"interval"`
				HonorLabels       bool             `json:"honorLabels"`
				Relabelings       []map[string]any `json:"relabelings"`
				MetricRelabelings []map[string]any `json:"metricRelabelings"`
			} `json:"podMetricsEndpoints"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(b, &pm); err != nil {
		t.Fatalf("%s: %v", podMonitorFile, err)
	}
	if pm.APIVersion != "monitoring.coreos.com/v1" || pm.Kind != "PodMonitor" {
		t.Fatalf("%s: %s %s, want a monitoring.coreos.com/v1 PodMonitor", podMonitorFile, pm.APIVersion, pm.Kind)
	}

	// The fleet-scheduler Function of docs/production.md that refers to a
	// DeploymentRuntimeConfig, and that config.
	var function, config map[string]any
	objects := docObjects(t, productionDoc)
	for _, o := range objects {
		pkg, _ := field(o, "spec", "package").(string)
		if o["kind"] == "Function" && strings.Contains(pkg, "/fleet-scheduler:") && field(o, "spec", "runtimeConfigRef", "name") != nil {
			function = o
		}
	}
	if function == nil {
		t.Fatalf("%s: no fleet-scheduler Function with a runtimeConfigRef", productionDoc)
	}
	for _, o := range objects {
		if o["kind"] == "DeploymentRuntimeConfig" && field(o, "metadata", "name") == field(function, "spec", "runtimeConfigRef", "name") {
			config = o
		}
	}
	if config == nil {
		t.Fatalf("%s: no DeploymentRuntimeConfig %v, which its Function refers to", productionDoc, field(function, "spec", "runtimeConfigRef", "name"))
	}
	name, _ := field(function, "metadata", "name").(string)

	want := map[string]string{functionLabel: name}
	if diff := cmp.Diff(want, pm.Spec.Selector.MatchLabels); diff != "" || len(pm.Spec.Selector.MatchExpressions) > 0 {
		t.Errorf("%s: selector, want the pods of Function %s: -want, +got matchLabels:\n%s", podMonitorFile, name, diff)
	}
	// The config's own selector of the function's pods, which spreads them.
	template := field(config, "spec", "deploymentTemplate", "spec", "template")
	for i := 0; field(template, "spec", "topologySpreadConstraints", i) != nil; i++ {
		got := map[string]string{}
		m, _ := field(template, "spec", "topologySpreadConstraints", i, "labelSelector", "matchLabels").(map[string]any)
		for k, v := range m {
			got[k], _ = v.(string)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: the DeploymentRuntimeConfig's topology spread selects other pods than Function %s's: -want, +config:\n%s", productionDoc, name, diff)
		}
	}
	if pm.Spec.NamespaceSelector.Any || !slices.Equal(pm.Spec.NamespaceSelector.MatchNames, []string{crossplaneNamespace}) {
		t.Errorf("%s: namespaceSelector %+v, want matchNames [%s]", podMonitorFile, pm.Spec.NamespaceSelector, crossplaneNamespace)
	}

	// The port: Crossplane's metrics, where the function serves them.
	if got := specDefault(t, "--metrics-address"); got != fmt.Sprintf(":%d", metricsPortNumber) {
		t.Errorf("%s: --metrics-address defaults to %q; Crossplane names port %d %s, which %s scrapes", specDoc, got, metricsPortNumber, metricsPortName, podMonitorFile)
	}
	for i := 0; field(template, "spec", "containers", i) != nil; i++ {
		c := field(template, "spec", "containers", i)
		if field(c, "name") != runtimeContainer {
			continue
		}
		args, _ := field(c, "args").([]any)
		for _, a := range args {
			if s, _ := a.(string); strings.HasPrefix(s, "--metrics-address=") {
				t.Errorf("%s: the DeploymentRuntimeConfig sets %s; %s scrapes port %s, %d", productionDoc, s, podMonitorFile, metricsPortName, metricsPortNumber)
			}
		}
		for j := 0; field(c, "ports", j) != nil; j++ {
			p := field(c, "ports", j)
			if field(p, "name") == metricsPortName && fmt.Sprint(field(p, "containerPort")) != fmt.Sprint(metricsPortNumber) {
				t.Errorf("%s: the DeploymentRuntimeConfig's port %s is %v, not %d where the function serves metrics", productionDoc, metricsPortName, field(p, "containerPort"), metricsPortNumber)
			}
		}
	}

	if len(pm.Spec.Endpoints) != 1 {
		t.Fatalf("%s: %d podMetricsEndpoints, want 1", podMonitorFile, len(pm.Spec.Endpoints))
	}
	e := pm.Spec.Endpoints[0]
	if e.Port != metricsPortName || (e.Path != "" && e.Path != "/metrics") || (e.Scheme != "" && e.Scheme != "http") {
		t.Errorf("%s: scrapes port %q path %q scheme %q, want port %s (%d), /metrics over http", podMonitorFile, e.Port, e.Path, e.Scheme, metricsPortName, metricsPortNumber)
	}
	// The rules' 5-minute rate and freshness guard want a sample a minute.
	if d, err := time.ParseDuration(e.Interval); e.Interval != "" && (err != nil || d > time.Minute) {
		t.Errorf("%s: interval %q, want a minute or less", podMonitorFile, e.Interval)
	}
	// The rules take each pod's series apart by instance, and read the
	// function's own labels: no relabeling may write them, nor may the
	// scraped labels override the target's.
	names := exported(t)
	for _, r := range append(slices.Clone(e.Relabelings), e.MetricRelabelings...) {
		target, _ := r["targetLabel"].(string)
		own := slices.ContainsFunc(slices.Collect(maps.Values(names)), func(l map[string]bool) bool { return l[target] })
		if target == "instance" || own {
			t.Errorf("%s: a relabeling writes %s, which the rules read", podMonitorFile, target)
		}
	}
	if e.HonorLabels {
		t.Errorf("%s: honorLabels lets scraped labels override instance", podMonitorFile)
	}
}

// specDefault is a flag's default in docs/spec.md's table of flags.
func specDefault(t *testing.T, flag string) string {
	t.Helper()
	b, err := os.ReadFile(specDoc)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(flag) + "`[^|]*\\| `([^`]*)` \\|").FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no row for %s in the table of flags", specDoc, flag)
	}
	return string(m[1])
}
