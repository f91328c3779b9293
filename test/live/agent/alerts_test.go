package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
)

// TestSteeringAlertRules runs promtool's unit tests of the agent's alerts,
// its reports' and its steering's
// (deploy/monitoring/cluster-agent-alerts-test.yaml), and
// checks that the ServiceMonitor beside them scrapes the agent's metrics
// Service as shipped. It needs no control plane, so it runs with -short
// too. CI installs promtool and sets FLEET_SCHEDULER_REQUIRE_PROMTOOL, so
// that a missing promtool fails there instead of skipping.
func TestSteeringAlertRules(t *testing.T) {
	root := testenv.RepoRoot(t)
	monitoring := filepath.Join(root, "deploy", "monitoring")

	t.Run("the ServiceMonitor selects the agent's metrics Service and port", func(t *testing.T) {
		var sm struct {
			Metadata struct{ Namespace string }
			Spec     struct {
				Selector          struct{ MatchLabels map[string]string }
				NamespaceSelector struct{ MatchNames []string }
				Endpoints         []struct{ Port string }
			}
		}
		readYAML(t, filepath.Join(monitoring, "cluster-agent-servicemonitor.yaml"), &sm)
		svc := &corev1.Service{}
		readYAML(t, filepath.Join(root, "deploy", "cluster-agent", "service.yaml"), svc)
		for k, v := range sm.Spec.Selector.MatchLabels {
			if svc.Labels[k] != v {
				t.Errorf("the ServiceMonitor selects %s=%s; Service %s is labelled %v", k, v, svc.Name, svc.Labels)
			}
		}
		if len(sm.Spec.Selector.MatchLabels) == 0 {
			t.Error("the ServiceMonitor selects every Service")
		}
		if diff := cmp.Diff([]string{svc.Namespace}, sm.Spec.NamespaceSelector.MatchNames); diff != "" {
			t.Errorf("the ServiceMonitor's namespaces: -the Service's, +got:\n%s", diff)
		}
		if sm.Metadata.Namespace != svc.Namespace {
			t.Errorf("the ServiceMonitor is in namespace %q, the Service in %q", sm.Metadata.Namespace, svc.Namespace)
		}
		ports := map[string]bool{}
		for _, p := range svc.Spec.Ports {
			ports[p.Name] = true
		}
		if len(sm.Spec.Endpoints) == 0 {
			t.Error("the ServiceMonitor scrapes no endpoint")
		}
		for _, e := range sm.Spec.Endpoints {
			if !ports[e.Port] {
				t.Errorf("the ServiceMonitor scrapes port %q, which Service %s does not name", e.Port, svc.Name)
			}
		}
	})

	t.Run("promtool test rules", func(t *testing.T) {
		var rule struct {
			Kind string
			Spec struct {
				Groups []map[string]any `json:"groups"`
			}
		}
		readYAML(t, filepath.Join(monitoring, "cluster-agent-prometheusrule.yaml"), &rule)
		if rule.Kind != "PrometheusRule" || len(rule.Spec.Groups) == 0 {
			t.Fatalf("cluster-agent-prometheusrule.yaml: kind %q with %d groups, want a PrometheusRule with some", rule.Kind, len(rule.Spec.Groups))
		}
		promtool, err := exec.LookPath("promtool")
		if err != nil {
			if os.Getenv("FLEET_SCHEDULER_REQUIRE_PROMTOOL") != "" {
				t.Fatalf("promtool is required and not on PATH: %v", err)
			}
			t.Skip("SKIP: promtool is not on PATH")
		}
		dir := t.TempDir()
		rules, err := yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
		if err != nil {
			t.Fatal(err)
		}
		tests, err := os.ReadFile(filepath.Join(monitoring, "cluster-agent-alerts-test.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{"cluster-agent-rules.yaml": rules, "cluster-agent-alerts-test.yaml": tests} {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		out, err := testenv.Run(t.Context(), dir, nil, promtool, "test", "rules", "cluster-agent-alerts-test.yaml")
		if err != nil {
			t.Errorf("promtool test rules: %v\n%s", err, out)
		}
	})
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Clean(path))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("cannot read %s: %v", path, err)
	}
}
