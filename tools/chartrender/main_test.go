package main

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// loadChart loads the repository's chart.
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.LoadDir(filepath.Join(repoRoot, chartDir))
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// object is one rendered object: its kind, namespace and name, and its
// YAML document, to decode into its type.
type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	doc string
}

// renderObjects renders the chart as a release in namespace ns with vals
// over its defaults and returns its objects, in template order.
func renderObjects(t *testing.T, ns string, vals map[string]any) []object {
	t.Helper()
	rendered, err := render(loadChart(t), ns, vals)
	if err != nil {
		t.Fatal(err)
	}
	var out []object
	for _, name := range slices.Sorted(maps.Keys(rendered)) {
		for doc := range strings.SplitSeq(rendered[name], "\n---\n") {
			o := object{doc: doc}
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if o.Kind != "" {
				out = append(out, o)
			}
		}
	}
	return out
}

// find returns the names of the objects of kind, as namespace/name (name
// alone where cluster-scoped), and decodes the last of them into into,
// unless that is nil.
func find(t *testing.T, objs []object, kind string, into any) []string {
	t.Helper()
	var names []string
	for _, o := range objs {
		if o.Kind != kind {
			continue
		}
		n := o.Metadata.Name
		if o.Metadata.Namespace != "" {
			n = o.Metadata.Namespace + "/" + n
		}
		names = append(names, n)
		if into != nil {
			if err := yaml.UnmarshalStrict([]byte(o.doc), into); err != nil {
				t.Fatalf("%s %s: %v", kind, n, err)
			}
		}
	}
	return names
}

// TestGeneratedFilesAreCommitted holds deploy/cluster-agent/ to the chart:
// the files chartrender writes are those committed, byte for byte, and no
// generated file is committed that the chart no longer renders. Run `go
// generate -tags generate ./...` at the repository's root after changing
// the chart.
func TestGeneratedFilesAreCommitted(t *testing.T) {
	type args struct {
		chart  string
		deploy string
	}
	type want struct {
		files map[string]string
	}
	committed := func(t *testing.T, dir string) map[string]string {
		t.Helper()
		files := map[string]string{}
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") || d.Name() == "kustomization.yaml" {
				return err
			}
			b, err := os.ReadFile(filepath.Clean(p))
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(dir, p)
			files[filepath.ToSlash(rel)] = string(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return files
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"DeployClusterAgent": {
			reason: "deploy/cluster-agent/ should hold what the chart renders with its defaults, and nothing else but its kustomizations.",
			args:   args{chart: filepath.Join(repoRoot, chartDir), deploy: filepath.Join(repoRoot, deployDir)},
			want:   want{files: committed(t, filepath.Join(repoRoot, deployDir))},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			generated, err := generate(tc.args.chart)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for k, v := range generated {
				got[k] = string(v)
			}
			if diff := cmp.Diff(tc.want.files, got); diff != "" {
				t.Errorf("%s\ngenerate(%s): -committed, +generated (run go generate -tags generate ./... at the root):\n%s", tc.reason, tc.args.chart, diff)
			}
			for _, f := range []string{"kustomization.yaml", "steering/kustomization.yaml"} {
				if _, err := os.Stat(filepath.Join(tc.args.deploy, f)); err != nil {
					t.Errorf("%s\nthe hand-written %s is missing: %v", tc.reason, f, err)
				}
			}
		})
	}
}

// podsRBAC is where the pods Roles and RoleBindings are, and the agent's
// flag and ServiceAccount: what a release's pod namespaces decide.
type podsRBAC struct {
	Roles        []string
	RoleBindings []string
	Subjects     []string
	Flag         string
	Namespace    string
}

// podsRBACOf reads podsRBAC from a release's objects.
func podsRBACOf(t *testing.T, objs []object) podsRBAC {
	t.Helper()
	var got podsRBAC
	for _, n := range find(t, objs, "Role", nil) {
		if strings.HasSuffix(n, "/modelplane-cluster-agent-pods") {
			got.Roles = append(got.Roles, n)
		}
	}
	for _, o := range objs {
		if o.Kind != "RoleBinding" || o.Metadata.Name != "modelplane-cluster-agent-pods" {
			continue
		}
		got.RoleBindings = append(got.RoleBindings, o.Metadata.Namespace+"/"+o.Metadata.Name)
		rb := &rbacv1.RoleBinding{}
		if err := yaml.UnmarshalStrict([]byte(o.doc), rb); err != nil {
			t.Fatal(err)
		}
		for _, s := range rb.Subjects {
			got.Subjects = append(got.Subjects, s.Kind+" "+s.Namespace+"/"+s.Name)
		}
	}
	d := &appsv1.Deployment{}
	find(t, objs, "Deployment", d)
	got.Namespace = d.Namespace
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--pod-namespaces=") {
			got.Flag = a
		}
	}
	return got
}

func TestPodNamespaces(t *testing.T) {
	type args struct {
		podNamespaces []any
	}
	type want struct {
		rbac podsRBAC
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"Default": {
			reason: "By default the agent should read pods in default, Modelplane v0.3's namespace.",
			args:   args{},
			want: want{rbac: podsRBAC{
				Roles:        []string{"default/modelplane-cluster-agent-pods"},
				RoleBindings: []string{"default/modelplane-cluster-agent-pods"},
				Subjects:     []string{"ServiceAccount modelplane-cluster-agent/cluster-agent"},
				Flag:         "--pod-namespaces=default",
				Namespace:    releaseNamespace,
			}},
		},
		"TwoNamespaces": {
			reason: "Each pod namespace should get the pods Role and RoleBinding, and the flag should list them all.",
			args:   args{podNamespaces: []any{"default", "team-a"}},
			want: want{rbac: podsRBAC{
				Roles:        []string{"default/modelplane-cluster-agent-pods", "team-a/modelplane-cluster-agent-pods"},
				RoleBindings: []string{"default/modelplane-cluster-agent-pods", "team-a/modelplane-cluster-agent-pods"},
				Subjects:     []string{"ServiceAccount modelplane-cluster-agent/cluster-agent", "ServiceAccount modelplane-cluster-agent/cluster-agent"},
				Flag:         "--pod-namespaces=default,team-a",
				Namespace:    releaseNamespace,
			}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var vals map[string]any
			if tc.args.podNamespaces != nil {
				vals = map[string]any{"podNamespaces": tc.args.podNamespaces}
			}
			got := podsRBACOf(t, renderObjects(t, releaseNamespace, vals))
			if diff := cmp.Diff(tc.want.rbac, got); diff != "" {
				t.Errorf("%s\nrender(podNamespaces: %v): -want, +got:\n%s", tc.reason, tc.args.podNamespaces, diff)
			}
		})
	}
}

// TestReleaseNamespace holds the pods Roles in the pod namespaces whatever
// the release's namespace: a kustomize namespace: overlay moved them into
// the agent's, where they grant nothing the agent needs.
func TestReleaseNamespace(t *testing.T) {
	type args struct {
		namespace     string
		podNamespaces []any
	}
	type want struct {
		rbac podsRBAC
		// inRelease are the kinds of the objects in the release namespace.
		inRelease []string
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"OtherNamespace": {
			reason: "In a release namespace of its own the agent's objects should move there, and the pods Role and RoleBinding stay in default.",
			args:   args{namespace: "fleet-agent"},
			want: want{
				rbac: podsRBAC{
					Roles:        []string{"default/modelplane-cluster-agent-pods"},
					RoleBindings: []string{"default/modelplane-cluster-agent-pods"},
					Subjects:     []string{"ServiceAccount fleet-agent/cluster-agent"},
					Flag:         "--pod-namespaces=default",
					Namespace:    "fleet-agent",
				},
				inRelease: []string{"Deployment", "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount"},
			},
		},
		"OtherNamespaceTwoPodNamespaces": {
			reason: "With several pod namespaces, each should keep its own pods Role, none in the release namespace.",
			args:   args{namespace: "fleet-agent", podNamespaces: []any{"default", "team-a"}},
			want: want{
				rbac: podsRBAC{
					Roles:        []string{"default/modelplane-cluster-agent-pods", "team-a/modelplane-cluster-agent-pods"},
					RoleBindings: []string{"default/modelplane-cluster-agent-pods", "team-a/modelplane-cluster-agent-pods"},
					Subjects:     []string{"ServiceAccount fleet-agent/cluster-agent", "ServiceAccount fleet-agent/cluster-agent"},
					Flag:         "--pod-namespaces=default,team-a",
					Namespace:    "fleet-agent",
				},
				inRelease: []string{"Deployment", "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var vals map[string]any
			if tc.args.podNamespaces != nil {
				vals = map[string]any{"podNamespaces": tc.args.podNamespaces}
			}
			objs := renderObjects(t, tc.args.namespace, vals)
			if diff := cmp.Diff(tc.want.rbac, podsRBACOf(t, objs)); diff != "" {
				t.Errorf("%s\nrender(namespace %s): pods RBAC -want, +got:\n%s", tc.reason, tc.args.namespace, diff)
			}
			var inRelease []string
			for _, o := range objs {
				if o.Metadata.Namespace == tc.args.namespace {
					inRelease = append(inRelease, o.Kind)
				}
			}
			slices.Sort(inRelease)
			inRelease = slices.Compact(inRelease)
			if diff := cmp.Diff(tc.want.inRelease, inRelease); diff != "" {
				t.Errorf("%s\nrender(namespace %s): kinds in the release namespace -want, +got:\n%s", tc.reason, tc.args.namespace, diff)
			}
			ns := &corev1.Namespace{}
			find(t, objs, "Namespace", ns)
			if ns.Name != tc.args.namespace {
				t.Errorf("%s\nrender(namespace %s): the Namespace is %q", tc.reason, tc.args.namespace, ns.Name)
			}
		})
	}
}

// deploymentFields are the Deployment's fields that values set.
type deploymentFields struct {
	Replicas          int32
	Image             string
	PullPolicy        corev1.PullPolicy
	Args              []string
	Resources         corev1.ResourceRequirements
	PriorityClassName string
	NodeSelector      map[string]string
	Tolerations       []corev1.Toleration
}

func TestDeploymentValues(t *testing.T) {
	type args struct {
		vals map[string]any
	}
	type want struct {
		fields deploymentFields
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"Defaults": {
			reason: "The defaults should be what deploy/cluster-agent shipped before the chart.",
			args:   args{},
			want: want{fields: deploymentFields{
				Replicas:   2,
				Image:      "xpkg.upbound.io/modelplane/cluster-agent:v0.1.0",
				PullPolicy: corev1.PullIfNotPresent,
				Args:       []string{"--pod-namespaces=default", "--health-address=:8081", "--metrics-address=:8080"},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				},
			}},
		},
		"AllSet": {
			reason: "Image, replicas, resources, priority class, node selector, tolerations and extra flags should reach the Deployment.",
			args: args{vals: map[string]any{
				"image":             map[string]any{"repository": "registry.example.com/cluster-agent", "tag": "v9.9.9", "pullPolicy": "Always"},
				"replicas":          3,
				"resources":         map[string]any{"requests": map[string]any{"cpu": "250m", "memory": "256Mi"}, "limits": map[string]any{"cpu": "1", "memory": "2Gi"}},
				"priorityClassName": "system-cluster-critical",
				"nodeSelector":      map[string]any{"node-role.kubernetes.io/control-plane": ""},
				"tolerations":       []any{map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}},
				"extraArgs":         []any{"--device-taint-rules=off"},
			}},
			want: want{fields: deploymentFields{
				Replicas:   3,
				Image:      "registry.example.com/cluster-agent:v9.9.9",
				PullPolicy: corev1.PullAlways,
				Args:       []string{"--pod-namespaces=default", "--health-address=:8081", "--metrics-address=:8080", "--device-taint-rules=off"},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")},
				},
				PriorityClassName: "system-cluster-critical",
				NodeSelector:      map[string]string{"node-role.kubernetes.io/control-plane": ""},
				Tolerations:       []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			}},
		},
		"EmptyTag": {
			reason: "An empty tag should mean the chart's appVersion.",
			args:   args{vals: map[string]any{"image": map[string]any{"tag": ""}}},
			want: want{fields: deploymentFields{
				Replicas:   2,
				Image:      "xpkg.upbound.io/modelplane/cluster-agent:v0.1.0",
				PullPolicy: corev1.PullIfNotPresent,
				Args:       []string{"--pod-namespaces=default", "--health-address=:8081", "--metrics-address=:8080"},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				},
			}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := &appsv1.Deployment{}
			if n := find(t, renderObjects(t, releaseNamespace, tc.args.vals), "Deployment", d); len(n) != 1 {
				t.Fatalf("%s\nrender: Deployments %v, want one", tc.reason, n)
			}
			spec := d.Spec.Template.Spec
			c := spec.Containers[0]
			got := deploymentFields{
				Image:             c.Image,
				PullPolicy:        c.ImagePullPolicy,
				Args:              c.Args,
				Resources:         c.Resources,
				PriorityClassName: spec.PriorityClassName,
				NodeSelector:      spec.NodeSelector,
				Tolerations:       spec.Tolerations,
			}
			if d.Spec.Replicas != nil {
				got.Replicas = *d.Spec.Replicas
			}
			if diff := cmp.Diff(tc.want.fields, got); diff != "" {
				t.Errorf("%s\nrender(%v): Deployment -want, +got:\n%s", tc.reason, tc.args.vals, diff)
			}
		})
	}
}

// podMonitor is what the test reads of a PodMonitor.
type podMonitor struct {
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		PodMetricsEndpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// options is what the optional parts of the chart render.
type options struct {
	// Objects are the optional parts' objects, as kind namespace/name.
	Objects []string
	// Scrapes are the PodMonitor's selector and endpoints, as
	// namespaces, labels and port path interval.
	Scrapes []string
	// PolicyNamespaces are the namespaces the admission policy holds
	// pods in; ParamNamespace is where its binding finds the agent.
	PolicyNamespaces []string
	ParamNamespace   string
}

func TestOptionalParts(t *testing.T) {
	type args struct {
		vals map[string]any
	}
	type want struct {
		opts options
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"Defaults": {
			reason: "By default neither a PodMonitor nor steering should render.",
			args:   args{},
			want:   want{},
		},
		"PodMonitor": {
			reason: "podMonitor.enabled should render a PodMonitor scraping the agent's pods on their metrics port.",
			args:   args{vals: map[string]any{"podMonitor": map[string]any{"enabled": true}}},
			want: want{opts: options{
				Objects: []string{"PodMonitor modelplane-cluster-agent/cluster-agent"},
				Scrapes: []string{"[modelplane-cluster-agent] map[app.kubernetes.io/name:cluster-agent] metrics /metrics 30s"},
			}},
		},
		"Steering": {
			reason: "steering.enabled should render the admission policy and its binding, holding pods in every pod namespace, and the steering roles in each.",
			args:   args{vals: map[string]any{"steering": map[string]any{"enabled": true}, "podNamespaces": []any{"default", "team-a"}}},
			want: want{opts: options{
				Objects: []string{
					"ClusterRole modelplane-cluster-agent-steering",
					"ClusterRoleBinding modelplane-cluster-agent-steering",
					"MutatingAdmissionPolicy modelplane-cluster-agent-steering",
					"MutatingAdmissionPolicyBinding modelplane-cluster-agent-steering",
					"Role default/modelplane-cluster-agent-steering",
					"Role modelplane-cluster-agent/cluster-agent-own-pod",
					"Role team-a/modelplane-cluster-agent-steering",
					"RoleBinding default/modelplane-cluster-agent-steering",
					"RoleBinding modelplane-cluster-agent/cluster-agent-own-pod",
					"RoleBinding team-a/modelplane-cluster-agent-steering",
				},
				PolicyNamespaces: []string{"default", "team-a"},
				ParamNamespace:   "modelplane-cluster-agent",
			}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// The objects the release renders without the options, which
			// they add to.
			without := maps.Clone(tc.args.vals)
			delete(without, "podMonitor")
			delete(without, "steering")
			base := map[string]bool{}
			for _, o := range renderObjects(t, releaseNamespace, without) {
				base[o.Kind+" "+o.Metadata.Namespace+"/"+o.Metadata.Name] = true
			}
			objs := renderObjects(t, releaseNamespace, tc.args.vals)
			var got options
			for _, o := range objs {
				if base[o.Kind+" "+o.Metadata.Namespace+"/"+o.Metadata.Name] {
					continue
				}
				n := o.Metadata.Name
				if o.Metadata.Namespace != "" {
					n = o.Metadata.Namespace + "/" + n
				}
				got.Objects = append(got.Objects, o.Kind+" "+n)
				switch o.Kind {
				case "PodMonitor":
					pm := &podMonitor{}
					if err := yaml.Unmarshal([]byte(o.doc), pm); err != nil {
						t.Fatal(err)
					}
					for _, e := range pm.Spec.PodMetricsEndpoints {
						got.Scrapes = append(got.Scrapes, strings.Join([]string{
							"[" + strings.Join(pm.Spec.NamespaceSelector.MatchNames, " ") + "]",
							mapString(pm.Spec.Selector.MatchLabels), e.Port, e.Path, e.Interval,
						}, " "))
					}
				case "MutatingAdmissionPolicy":
					p := &admissionregistrationv1.MutatingAdmissionPolicy{}
					if err := yaml.UnmarshalStrict([]byte(o.doc), p); err != nil {
						t.Fatal(err)
					}
					if s := p.Spec.MatchConstraints.NamespaceSelector; s != nil {
						for _, e := range s.MatchExpressions {
							if e.Key == "kubernetes.io/metadata.name" && e.Operator == "In" {
								got.PolicyNamespaces = append(got.PolicyNamespaces, e.Values...)
							}
						}
					}
				case "MutatingAdmissionPolicyBinding":
					b := &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
					if err := yaml.UnmarshalStrict([]byte(o.doc), b); err != nil {
						t.Fatal(err)
					}
					if b.Spec.ParamRef != nil {
						got.ParamNamespace = b.Spec.ParamRef.Namespace
					}
				}
			}
			slices.Sort(got.Objects)
			if diff := cmp.Diff(tc.want.opts, got); diff != "" {
				t.Errorf("%s\nrender(%v): -want, +got:\n%s", tc.reason, tc.args.vals, diff)
			}
		})
	}
}

// mapString prints a map as fmt does, sorted by key.
func mapString(m map[string]string) string {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kv = append(kv, k+":"+m[k])
	}
	return "map[" + strings.Join(kv, " ") + "]"
}
