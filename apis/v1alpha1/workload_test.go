package v1alpha1

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// shippedYAML are the directories of what the project ships: the agent's
// manifests (its steering component's admission policy among them), the
// relay's and the function's packages and Compositions, the monitoring.
var shippedYAML = []string{"../../deploy", "../../package", "../../cmd/relay/package"}

// TestShippedManifestsUseModelplaneNames holds every YAML the project ships
// to Modelplane's names as this package has them: a label of Modelplane's
// or LeaderWorkerSet's namespace that is not one of them is a typo or a
// drift from v0.3, and so is a pods Role or an agent reading pods anywhere
// but the namespace v0.3 runs replicas in, or a steering policy that holds
// pods elsewhere or reads other labels than v0.3's.
func TestShippedManifestsUseModelplaneNames(t *testing.T) {
	known := map[string]bool{
		LabelPool: true, LabelServing: true, LabelWorkload: true, LabelLWSRole: true, LabelLWSName: true,
		LabelDeployment: true, LabelCluster: true, LabelReplicaIndex: true,
	}
	// A label key of Modelplane's (no subdomain) or of LeaderWorkerSet's;
	// an API version (modelplane.ai/v1alpha1) is not a label.
	label := regexp.MustCompile(`(?:^|[^a-z0-9.-])((?:modelplane\.ai|leaderworkerset\.sigs\.k8s\.io)/[a-z0-9._-]+)`)
	version := regexp.MustCompile(`/v[0-9]+((alpha|beta)[0-9]+)?$`)

	files := 0
	for _, dir := range shippedYAML {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || (!strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".yml")) {
				return err
			}
			files++
			b, err := os.ReadFile(filepath.Clean(path))
			if err != nil {
				return err
			}
			for _, m := range label.FindAllStringSubmatch(string(b), -1) {
				if name := strings.TrimRight(m[1], "."); !known[name] && !version.MatchString(name) {
					t.Errorf("%s: %q is not one of Modelplane's names (apis/v1alpha1)", path, name)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("cannot read %s: %v", dir, err)
		}
	}
	if files == 0 {
		t.Fatal("no shipped YAML found")
	}

	// The agent reads pods in v0.3's namespace, and steers them there: its
	// Roles there, and the flag.
	for _, f := range []string{"../../deploy/cluster-agent/pods.yaml", "../../deploy/cluster-agent/steering/pods.yaml"} {
		for _, obj := range objects(t, f) {
			if ns := obj.Metadata.Namespace; ns != WorkloadNamespace {
				t.Errorf("%s: %s %s is in namespace %q, want v0.3's %q", f, obj.Kind, obj.Metadata.Name, ns, WorkloadNamespace)
			}
		}
	}
	deployment, err := os.ReadFile("../../deploy/cluster-agent/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	flag := regexp.MustCompile(`--pod-namespaces=([a-z0-9,-]+)`).FindSubmatch(deployment)
	if flag == nil || !slices.Contains(strings.Split(string(flag[1]), ","), WorkloadNamespace) {
		t.Errorf("deploy/cluster-agent/deployment.yaml: --pod-namespaces does not include v0.3's %q", WorkloadNamespace)
	}

	// The steering policy holds pods in v0.3's namespace, by v0.3's labels
	// of a replica's pods and of a pool's nodes.
	const policyFile = "../../deploy/cluster-agent/steering/policy.yaml"
	b, err := os.ReadFile(policyFile)
	if err != nil {
		t.Fatal(err)
	}
	var policy struct {
		Spec struct {
			MatchConstraints struct {
				NamespaceSelector struct {
					MatchExpressions []struct {
						Key      string   `json:"key"`
						Operator string   `json:"operator"`
						Values   []string `json:"values"`
					} `json:"matchExpressions"`
				} `json:"namespaceSelector"`
			} `json:"matchConstraints"`
			MatchConditions []struct {
				Expression string `json:"expression"`
			} `json:"matchConditions"`
		} `json:"spec"`
	}
	// The policy is the file's first object; its binding follows.
	if err := yaml.Unmarshal([]byte(strings.SplitN(string(b), "\n---\n", 2)[0]), &policy); err != nil {
		t.Fatalf("cannot read %s: %v", policyFile, err)
	}
	namespaces := policy.Spec.MatchConstraints.NamespaceSelector.MatchExpressions
	if len(namespaces) != 1 || namespaces[0].Key != "kubernetes.io/metadata.name" || namespaces[0].Operator != "In" || !slices.Contains(namespaces[0].Values, WorkloadNamespace) {
		t.Errorf("%s: the namespaceSelector is %+v, want kubernetes.io/metadata.name In namespaces that include v0.3's %q", policyFile, namespaces, WorkloadNamespace)
	}
	var conditions []string
	for _, c := range policy.Spec.MatchConditions {
		conditions = append(conditions, c.Expression)
	}
	for _, name := range []string{LabelWorkload, LabelLWSName, LabelPool} {
		if !strings.Contains(strings.Join(conditions, "\n"), "'"+name+"'") {
			t.Errorf("%s: no matchCondition reads %q", policyFile, name)
		}
	}
}

// objects reads the objects of a YAML stream, their kind and metadata.
func objects(t *testing.T, path string) []struct {
	Kind     string     `json:"kind"`
	Metadata ObjectMeta `json:"metadata"`
} {
	t.Helper()
	b, err := os.ReadFile(filepath.Clean(path))
	if err != nil {
		t.Fatal(err)
	}
	type object = struct {
		Kind     string     `json:"kind"`
		Metadata ObjectMeta `json:"metadata"`
	}
	var out []object
	for doc := range strings.SplitSeq(string(b), "\n---\n") {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("cannot read %s: %v", path, err)
		}
		if o.Kind != "" {
			out = append(out, o)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no object", path)
	}
	return out
}

func TestWorkloadNames(t *testing.T) {
	// v0.3's Python SDK's child_name: a name of 57 characters or fewer is
	// kept whole; the hash is of the joined parts.
	if got, want := WorkloadName("r", "main"), "r-main-"; !strings.HasPrefix(got, want) || len(got) != len(want)+5 {
		t.Errorf("WorkloadName(r, main) = %q, want %q and 5 hex characters", got, want)
	}
	long := strings.Repeat("a", 60)
	if got := ChildName(long); len(got) != 57+6 {
		t.Errorf("ChildName of 60 characters is %d long, want 63", len(got))
	}
	for _, tc := range []struct {
		engine ReplicaEngine
		want   bool
	}{
		{ReplicaEngine{Members: []ReplicaMember{{Role: RoleStandalone}}}, false},
		{ReplicaEngine{Members: []ReplicaMember{{}}}, false},
		{ReplicaEngine{Members: []ReplicaMember{{Role: "Leader"}, {Role: "Worker"}}}, true},
	} {
		if got := tc.engine.Gang(); got != tc.want {
			t.Errorf("Gang() of %+v = %v, want %v", tc.engine.Members, got, tc.want)
		}
	}
}
