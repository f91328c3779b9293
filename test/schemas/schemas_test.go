// Package schemas validates the objects fleet-scheduler emits against
// Modelplane's XRDs (copied from shared/reference into xrds/) with
// `crossplane resource validate`, offline: OpenAPI schema, unknown fields and
// the XRDs' CEL rules, as the API server would apply them. It shows the check
// rejects broken ModelReplicas (testdata/invalid) and accepts good ones
// (testdata/valid), then validates what `hack/render.sh` renders for the
// example fleet. clusters_test.go validates the InferenceClusters that carry
// cluster-agent reports (the observed fixtures, and agent/testdata) against
// the extended XRD the project ships, deploy/inferenceclusters.yaml.
package schemas

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
)

// The kinds fleet-scheduler composes, and its XR.
const (
	kindReplica    = "ModelReplica"
	kindEndpoint   = "ModelEndpoint"
	kindDeployment = "ModelDeployment"
)

// wantRE reads the defect an invalid fixture carries from its "# want:" line.
var wantRE = regexp.MustCompile(`(?m)^# want: (.+)$`)

func TestXRDsAreCopiesOfTheReference(t *testing.T) {
	ref := filepath.Join(testenv.RepoRoot(t), "..", "shared", "reference")
	if _, err := os.Stat(ref); err != nil {
		t.Skipf("SKIP: no shared/reference beside the repository to compare xrds/ with (%v)", err)
	}
	copies, err := filepath.Glob("xrds/*.yaml")
	if err != nil || len(copies) == 0 {
		t.Fatalf("no XRDs in xrds/ (%v)", err)
	}
	for _, c := range copies {
		want, err := os.ReadFile(filepath.Join(ref, filepath.Base(c)))
		if err != nil {
			t.Errorf("%s has no counterpart in shared/reference: %v", c, err)
			continue
		}
		got, err := os.ReadFile(c)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("%s differs from shared/reference/%s: copy it again", c, filepath.Base(c))
		}
	}
}

func TestValidReplicasPass(t *testing.T) {
	cli := testenv.CrossplaneCLI(t)
	files, err := filepath.Glob("testdata/valid/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in testdata/valid (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := validate(t, cli, f)
			if r.err != nil || r.failures != 0 || r.missing != 0 || r.passed != 1 {
				t.Errorf("want %s to validate, got %d passed, %d failed, %d without a schema (%v):\n%s", f, r.passed, r.failures, r.missing, r.err, r.output)
			}
		})
	}
}

func TestInvalidReplicasAreRejected(t *testing.T) {
	rejectsEach(t, testenv.CrossplaneCLI(t), "xrds", "testdata/invalid/*.yaml")
}

// rejectsEach validates each file of the glob against the extensions, and
// wants it rejected, once, with the error its "# want:" line says.
func rejectsEach(t *testing.T, cli, extensions, glob string) {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures match %s (%v)", glob, err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			m := wantRE.FindSubmatch(b)
			if m == nil {
				t.Fatalf("%s has no '# want: <error>' line", f)
			}
			want := string(m[1])

			r := validateWith(t, cli, extensions, f)
			if r.err == nil || r.failures != 1 {
				t.Fatalf("want %s rejected, got exit %v and %d failures:\n%s", f, r.err, r.failures, r.output)
			}
			if !strings.Contains(r.output, want) {
				t.Errorf("want the rejection to say %q, got:\n%s", want, r.output)
			}
		})
	}
}

func TestRenderedExampleValidates(t *testing.T) {
	cli := testenv.CrossplaneCLI(t)
	root := testenv.RepoRoot(t)
	// The example fleet, and every e2e fixture: between them they compose
	// Standalone and gang replicas, retained ones and endpoints.
	e2e, err := filepath.Glob(filepath.Join(root, "e2e", "testdata", "*", "required-resources"))
	if err != nil {
		t.Fatal(err)
	}
	fixtures := make([]string, 0, 2+len(e2e))
	fixtures = append(fixtures, "example", "example/observed")
	for _, d := range e2e {
		rel, err := filepath.Rel(root, filepath.Dir(d))
		if err != nil {
			t.Fatal(err)
		}
		fixtures = append(fixtures, rel)
	}

	replicas := 0
	for _, fixture := range fixtures {
		t.Run(fixture, func(t *testing.T) {
			stdout, stderr, err := render(t, root, cli, fixture)
			if err != nil {
				t.Fatalf("./hack/render.sh %s: %v\n%s", fixture, err, stderr)
			}
			objs := decode(t, stdout)
			xr := inputXR(t, root, fixture)

			var keep []map[string]any
			count := map[string]int{}
			for _, o := range objs {
				k := fmt.Sprint(o["kind"])
				count[k]++
				switch k {
				case kindDeployment:
					// Render prints the XR's desired state, what the
					// function writes: its status, without the spec the
					// API server keeps. Validate them together.
					o["spec"] = xr["spec"]
					keep = append(keep, o)
				case kindReplica, kindEndpoint:
					keep = append(keep, o)
				}
			}
			t.Logf("rendered: %d %s, %d %s, %d %s", count[kindDeployment], kindDeployment, count[kindReplica], kindReplica, count[kindEndpoint], kindEndpoint)

			file := filepath.Join(t.TempDir(), "rendered.yaml")
			write(t, file, keep)
			r := validate(t, cli, file)
			t.Logf("crossplane resource validate:\n%s", r.output)

			if r.failures != 0 || r.err != nil {
				t.Errorf("the rendered objects of %s do not validate against the XRDs: %v\n%s", fixture, r.err, r.output)
			}
			// The reference has no ModelEndpoint XRD; every other kind must
			// have met its schema.
			if want := count[kindReplica] + count[kindDeployment]; r.passed < want {
				t.Errorf("%d objects validated, want at least the %d ModelDeployments and ModelReplicas:\n%s", r.passed, want, r.output)
			}
			if r.missing > count[kindEndpoint] {
				t.Errorf("%d objects had no schema, more than the %d ModelEndpoints:\n%s", r.missing, count[kindEndpoint], r.output)
			}
			if count[kindEndpoint] > 0 {
				t.Logf("NOTE: %d ModelEndpoints were not validated: shared/reference holds no ModelEndpoint XRD", count[kindEndpoint])
			}
			replicas += count[kindReplica]
		})
	}
	if replicas == 0 {
		t.Errorf("no fixture rendered a ModelReplica: nothing the function composes was validated")
	}
}

// inputXR returns the XR hack/render.sh renders for a fixture: its own
// xr.yaml, else example/'s.
func inputXR(t *testing.T, root, fixture string) map[string]any {
	t.Helper()
	file := filepath.Join(root, fixture, "xr.yaml")
	if _, err := os.Stat(file); err != nil {
		file = filepath.Join(root, "example", "xr.yaml")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, string(b))
	if len(objs) != 1 {
		t.Fatalf("%s holds %d objects, want 1", file, len(objs))
	}
	return objs[0]
}

// result is what `crossplane resource validate` reported.
type result struct {
	output                    string
	err                       error
	passed, failures, missing int
}

// noBuiltinSchemas stands in for the Crossplane image whose CRDs `crossplane
// resource validate` always fetches to validate Crossplane's own kinds. We
// validate only Modelplane's kinds, from local XRDs, so an empty cache entry
// under this name keeps the command offline.
const noBuiltinSchemas = "offline.invalid/no-builtin-schemas:v0"

// validate runs `crossplane resource validate xrds/ resources`, offline.
func validate(t *testing.T, cli, resources string) result {
	t.Helper()
	return validateWith(t, cli, "xrds", resources)
}

// validateWith runs `crossplane resource validate extensions resources`,
// offline: extensions is an XRD file or a directory of them.
func validateWith(t *testing.T, cli, extensions, resources string) result {
	t.Helper()
	cache := t.TempDir()
	entry := filepath.Join(cache, strings.ReplaceAll(noBuiltinSchemas, ":", "@"))
	if err := os.MkdirAll(entry, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(entry, "package.yaml"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := testenv.Run(t.Context(), ".", nil, cli, "resource", "validate", "--cache-dir="+cache, "--crossplane-image="+noBuiltinSchemas, extensions, resources)
	r := result{output: out, err: err}
	for l := range strings.SplitSeq(out, "\n") {
		switch {
		case strings.HasPrefix(l, "[✓]"):
			r.passed++
		case strings.HasPrefix(l, "[!] could not find CRD/XRD"):
			r.missing++
		}
	}
	// One resource can have several errors: count the resources that failed.
	if m := regexp.MustCompile(`(\d+) failure cases`).FindStringSubmatch(out); m != nil {
		_, _ = fmt.Sscan(m[1], &r.failures)
	} else if err == nil {
		r.err = errors.New("no summary line in the output of crossplane resource validate")
	}
	return r
}

// render runs ./hack/render.sh on a fixture and returns its stdout (the
// rendered YAML) and stderr.
func render(t *testing.T, root, cli, fixture string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), "./hack/render.sh", fixture)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CROSSPLANE="+cli)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

func decode(t *testing.T, stream string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	d := yaml.NewDecoder(strings.NewReader(stream))
	for {
		var o map[string]any
		err := d.Decode(&o)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("cannot decode the rendered YAML: %v\n%s", err, stream)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
}

func write(t *testing.T, file string, objs []map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	e := yaml.NewEncoder(&buf)
	for _, o := range objs {
		if err := e.Encode(o); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}
