package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
)

// BuildModelplaneStandIn builds the stand-in for Modelplane v0.3.1's
// Configuration package (testenv.ModelplaneStandIn) with the crossplane CLI
// cli, and returns its apis/ directory and the package file.
func BuildModelplaneStandIn(t *testing.T, cli string) (apis, pkg string) {
	t.Helper()
	root := testenv.ModelplaneStandIn(t)
	pkg = filepath.Join(t.TempDir(), "modelplane-v0.3.1.xpkg")
	if out, err := testenv.Run(t.Context(), root, nil, cli,
		"xpkg", "build", "--package-root="+root, "--examples-root="+filepath.Join(root, "examples"), "-o", pkg); err != nil {
		t.Fatalf("cannot build the stand-in for Modelplane v0.3.1's package: %v\n%s", err, out)
	}
	return filepath.Join(root, "apis"), pkg
}

// Release runs the repository's ./hack/release.sh for this machine's
// architecture, pushing every artefact under registry, with Modelplane's
// apis/ from apis and the function's step input from the file input (none
// if empty). It returns the release's output directory (its binaries are
// under bin/linux_<arch>/) and what the script printed.
func Release(t *testing.T, root, registry, apis, input string) (out, log string) {
	t.Helper()
	out = t.TempDir()
	env := []string{
		"MODELPLANE_APIS=" + apis, "INPUT=" + input, "CROSSPLANE=" + filepath.Join(root, "bin", "crossplane"),
		"ARCHS=" + runtime.GOARCH, "OUTPUT_DIR=" + out,
		// No credentials of this machine's leak in.
		"DOCKER_CONFIG=" + t.TempDir(), "HELM_REGISTRY_CONFIG=" + filepath.Join(t.TempDir(), "config.json"),
	}
	log, err := testenv.Run(t.Context(), root, env, "./hack/release.sh", registry, ReleaseVersion)
	if err != nil {
		t.Fatalf("./hack/release.sh: %v\n%s", err, log)
	}
	return out, log
}

// ReleaseVersion is the version Release gives ./hack/release.sh; the
// agent's chart is pushed as its version without the v (ChartVersion).
const (
	ReleaseVersion = "v0.1.0"
	ChartVersion   = "0.1.0"
)

// WriteInput writes a scheduler.fn.modelplane.ai/v1beta1 Input with the
// fields given, in order of their names, to a file for Release, and
// returns the file.
func WriteInput(t *testing.T, fields map[string]string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: scheduler.fn.modelplane.ai/v1beta1\nkind: Input\n")
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		b.WriteString(k + ": " + fields[k] + "\n")
	}
	file := filepath.Join(t.TempDir(), "input.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// SetConfigurationPackage points a Configuration at another package, as
// `kubectl patch configuration NAME --type merge` does.
func SetConfigurationPackage(t *testing.T, kube client.Client, name, ref string) {
	t.Helper()
	c := Object("pkg.crossplane.io/v1", "Configuration", "", name)
	patch := fmt.Appendf(nil, `{"spec":{"package":%q}}`, ref)
	if err := kube.Patch(t.Context(), c, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("cannot point Configuration %s at %s: %v", name, ref, err)
	}
}

// WaitConfiguration waits until a Configuration's active revision is of
// ref, the only active one, and the Configuration is Installed and Healthy.
func WaitConfiguration(t *testing.T, kube client.Client, name, ref string) {
	t.Helper()
	Eventually(t, 3*time.Minute, 250*time.Millisecond, "Configuration "+name+" Installed and Healthy from "+ref, func() error {
		c := Get(t, kube, "pkg.crossplane.io/v1", "Configuration", "", name)
		if id, _, _ := unstructured.NestedString(c.Object, "status", "currentIdentifier"); id != ref {
			return fmt.Errorf("its current package is %q", id)
		}
		for _, typ := range []string{"Installed", "Healthy"} {
			if cond := Condition(c, typ); cond["status"] != "True" {
				return fmt.Errorf("%s is %v: %v", typ, cond["status"], cond["message"])
			}
		}
		for _, r := range List(t, kube, "pkg.crossplane.io/v1", "ConfigurationRevision", client.MatchingLabels{"pkg.crossplane.io/package": name}) {
			image, _, _ := unstructured.NestedString(r.Object, "spec", "image")
			state, _, _ := unstructured.NestedString(r.Object, "spec", "desiredState")
			if (image == ref) != (state == "Active") {
				return fmt.Errorf("revision %s of %s is %s", r.GetName(), image, state)
			}
		}
		return nil
	})
}

// CompositionFunctions returns the Functions a Composition's pipeline
// calls, in order.
func CompositionFunctions(t *testing.T, kube client.Client, name string) []string {
	t.Helper()
	c := Get(t, kube, "apiextensions.crossplane.io/v1", "Composition", "", name)
	if c == nil {
		return nil
	}
	steps, _, _ := unstructured.NestedSlice(c.Object, "spec", "pipeline")
	var fns []string
	for _, s := range steps {
		step, _ := s.(map[string]any)
		fn, _, _ := unstructured.NestedString(step, "functionRef", "name")
		fns = append(fns, fn)
	}
	return fns
}

// InstallConfiguration creates the Configuration name from the package ref
// with skipDependencyResolution (the packages it depends on are on
// registries a test cannot reach; the test installs them itself), and
// waits until it is Installed and Healthy.
func InstallConfiguration(t *testing.T, kube client.Client, name, ref string) {
	t.Helper()
	c := Object("pkg.crossplane.io/v1", "Configuration", "", name)
	c.Object["spec"] = map[string]any{"package": ref, "skipDependencyResolution": true}
	if err := kube.Create(t.Context(), c); err != nil {
		t.Fatalf("cannot create Configuration %s: %v", name, err)
	}
	WaitConfiguration(t, kube, name, ref)
}

// SchemaHas says whether a CRD's spec names a field; an error when there is
// no such CRD.
func SchemaHas(t *testing.T, kube client.Client, crd, field string) (bool, error) {
	t.Helper()
	got := Get(t, kube, "apiextensions.k8s.io/v1", "CustomResourceDefinition", "", crd)
	if got == nil {
		return false, errors.New("no such CRD")
	}
	b, err := json.Marshal(got.Object["spec"])
	if err != nil {
		return false, err
	}
	return strings.Contains(string(b), strconv.Quote(field)+":"), nil
}

// ModelplaneUIDs returns the uid of every CRD of a modelplane.ai group, and
// of every InferenceCluster, ModelDeployment and ModelReplica not being
// deleted, by kind and name.
func ModelplaneUIDs(t *testing.T, kube client.Client) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, crd := range List(t, kube, "apiextensions.k8s.io/v1", "CustomResourceDefinition") {
		if group, _, _ := unstructured.NestedString(crd.Object, "spec", "group"); group == "modelplane.ai" || strings.HasSuffix(group, ".modelplane.ai") {
			m["CustomResourceDefinition/"+crd.GetName()] = string(crd.GetUID())
		}
	}
	for _, kind := range []string{"InferenceCluster", "ModelDeployment", "ModelReplica"} {
		for _, u := range List(t, kube, "modelplane.ai/v1alpha1", kind) {
			if u.GetDeletionTimestamp() == nil {
				m[kind+"/"+u.GetNamespace()+"/"+u.GetName()] = string(u.GetUID())
			}
		}
	}
	if len(m) == 0 {
		t.Fatal("no Modelplane CRD or XR")
	}
	return m
}

// CheckKept checks that every object in before (name to uid) is still there
// and the same object: not deleted, not re-created.
func CheckKept(t *testing.T, before, after map[string]string) {
	t.Helper()
	for name, uid := range before {
		switch got, ok := after[name]; {
		case !ok:
			t.Errorf("%s (uid %s) is gone or being deleted", name, uid)
		case got != uid:
			t.Errorf("%s was re-created: uid %s, then %s", name, uid, got)
		}
	}
}
