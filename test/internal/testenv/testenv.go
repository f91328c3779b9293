// Package testenv finds the repository, the crossplane CLI and the function
// binary that the artifact tests (package, mTLS, schemas, live) exercise, and
// serves them a registry and free ports on loopback.
package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
)

// RepoRoot returns the root of the fleet-scheduler repository: the nearest
// directory above the working directory that holds package/crossplane.yaml.
func RepoRoot(t *testing.T) string {
	t.Helper()
	dir, err := FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// FindRepoRoot is RepoRoot for code that runs outside a test, as TestMain.
func FindRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("cannot get working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "package", "crossplane.yaml")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the repository root (no package/crossplane.yaml above the working directory)")
		}
		dir = parent
	}
}

// FreeLoopbackAddr returns 127.0.0.1:port with a port nothing listens on now.
func FreeLoopbackAddr(t *testing.T) string {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// CrossplaneCLI returns the path of the crossplane CLI: $CROSSPLANE, else
// bin/crossplane as ./hack/build-crossplane.sh builds it (at the version
// tools/crossplane-cli/go.mod pins; quick when it is current). It skips the
// test, saying why, only when the CLI cannot be built.
func CrossplaneCLI(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CROSSPLANE"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("CROSSPLANE=%s: %v", p, err)
		}
		return p
	}
	root := RepoRoot(t)

	// Test packages run in parallel: one builds, the others wait.
	unlock := lock(t, filepath.Join(root, "bin", ".crossplane.lock"))
	defer unlock()
	if out, err := Run(t.Context(), root, nil, "./hack/build-crossplane.sh"); err != nil {
		t.Skipf("SKIP: cannot build the crossplane CLI with ./hack/build-crossplane.sh, so the package cannot be built, pushed or validated: %v\n%s", err, tail([]byte(out)))
	}
	return filepath.Join(root, "bin", "crossplane")
}

// BuildFunction builds the function binary the way ./hack/build-xpkg.sh
// builds it for the image: static (CGO_ENABLED=0), stripped, for
// linux/goarch, into dir. It returns the binary's path.
func BuildFunction(t *testing.T, goarch, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "function")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
	cmd.Dir = RepoRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cannot build the function binary: %v\n%s", err, b)
	}
	return out
}

// ServeRegistry serves an OCI registry on loopback, in this process, until the
// test ends, and returns the reference of a fleet-scheduler package tag in
// it. go-containerregistry, and so Crossplane and its CLI, talk plain HTTP to
// a loopback registry.
func ServeRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host + "/modelplane/fleet-scheduler:v0.1.0"
}

// PushPackage pushes .xpkg files, one per platform, as one package to ref
// with `crossplane xpkg push`.
func PushPackage(t *testing.T, cli, ref string, files ...string) {
	t.Helper()
	// An empty Docker config: no credentials from this machine leak in.
	env := []string{"DOCKER_CONFIG=" + t.TempDir()}
	if out, err := Run(t.Context(), RepoRoot(t), env, cli, "xpkg", "push", "-f", strings.Join(files, ","), ref); err != nil {
		t.Fatalf("crossplane xpkg push: %v\n%s", err, out)
	}
}

// Run runs name with args in dir and returns its combined output.
func Run(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err := cmd.Run()
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		return buf.String(), fmt.Errorf("%s exited %d", name, exit.ExitCode())
	}
	return buf.String(), err
}

func lock(t *testing.T, path string) func() {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatalf("cannot create %s: %v", filepath.Dir(path), err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("cannot open lock %s: %v", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("cannot lock %s: %v", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}
}

func tail(b []byte) []byte {
	const n = 4000
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// ModelplaneStandIn lays out a stand-in for the source of Modelplane
// v0.3.1's Configuration package (test/testdata/modelplane-v0.3.1/
// crossplane.yaml says what it is and is not) in a new directory, as
// v0.3.1's tree has it: crossplane.yaml, and apis/<kind>/definition.yaml
// and composition.yaml for each kind fleet-scheduler reads and writes. It
// returns the directory, a package root for `crossplane xpkg build`, whose
// apis/ is what ./hack/build-modelplane-configuration.sh rebuilds.
func ModelplaneStandIn(t *testing.T) string {
	t.Helper()
	root := RepoRoot(t)
	dir := t.TempDir()
	xrds := filepath.Join(root, "test", "schemas", "xrds") // v0.3.1's, as shared/reference has them
	standIn := filepath.Join(root, "test", "testdata", "modelplane-v0.3.1")
	definitions := map[string]string{
		"modeldeployments":  filepath.Join(xrds, "modeldeployments.yaml"),
		"modelreplicas":     filepath.Join(xrds, "modelreplicas.yaml"),
		"modelcaches":       filepath.Join(xrds, "modelcaches.yaml"),
		"inferenceclusters": filepath.Join(xrds, "inferenceclusters.yaml"),
		"modelendpoints":    filepath.Join(root, "test", "live", "testdata", "modelendpoints.yaml"),
	}
	for kind, definition := range definitions {
		copyFile(t, definition, filepath.Join(dir, "apis", kind, "definition.yaml"))
		copyFile(t, filepath.Join(standIn, kind+"-composition.yaml"), filepath.Join(dir, "apis", kind, "composition.yaml"))
	}
	copyFile(t, filepath.Join(standIn, "crossplane.yaml"), filepath.Join(dir, "crossplane.yaml"))
	return dir
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
