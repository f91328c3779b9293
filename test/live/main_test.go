package live

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// Environment TestMain hands the tests it re-executes in their own
// namespaces, besides the suite's own (LIVE_IN_NAMESPACES, LIVE_LOGS,
// LIVE_SKIP).
const (
	envArtifacts  = "LIVE_ARTIFACTS"      // ./hack/build-xpkg.sh's output directory
	envCrossplane = "LIVE_CROSSPLANE_DIR" // Crossplane core's module directory (its CRDs)
)

// suite runs the live tests in network and PID namespaces of their own
// (harness.Suite.Main): Crossplane core binds its metrics and health ports
// on every interface, with no flag to say otherwise, and there only
// loopback exists.
var suite = harness.Suite{Name: "live", Prepare: prepare}

// TestMain builds what the tests run (the control plane, the crossplane CLI,
// the function's package) while the Go module proxy can be reached, then runs
// the tests again in new network and PID namespaces.
func TestMain(m *testing.M) {
	os.Exit(suite.Main(m))
}

// prepare builds the artifacts into logs/artifacts and returns where they
// are for the tests.
func prepare(root, logs string) ([]string, error) {
	artifacts := filepath.Join(logs, "artifacts")
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create %s: %w", artifacts, err)
	}
	crossplaneDir, err := build(root, artifacts, logs)
	if err != nil {
		return nil, err
	}
	return []string{envArtifacts + "=" + artifacts, envCrossplane + "=" + crossplaneDir}, nil
}

// build runs the repository's build scripts: the control plane
// (bin/control-plane/, cached), the crossplane CLI (bin/crossplane, cached)
// and the function's package for this machine's architecture into artifacts.
// It returns the directory of Crossplane core's module, whose cluster/crds
// `crossplane core init` installs. Each script's output goes to a log in logs.
func build(root, artifacts, logs string) (string, error) {
	steps := []struct {
		name   string
		env    []string
		script string
	}{
		{name: "build-control-plane", script: "./hack/build-control-plane.sh"},
		{name: "build-crossplane", script: "./hack/build-crossplane.sh"},
		{name: "build-xpkg", script: "./hack/build-xpkg.sh", env: []string{
			"ARCHS=" + runtime.GOARCH, "OUTPUT_DIR=" + artifacts, "CROSSPLANE=" + filepath.Join(root, "bin", "crossplane"),
		}},
		// What ./hack/release.sh builds besides, while the module proxy can
		// be reached: the tests run it where only loopback exists.
		{name: "build-release-tools", script: "./hack/build-release-tools.sh"},
	}
	for _, s := range steps {
		started := time.Now()
		out, err := testenv.Run(context.Background(), root, s.env, s.script)
		log := filepath.Join(logs, s.name+".log")
		if werr := os.WriteFile(log, []byte(out), 0o644); werr != nil {
			return "", fmt.Errorf("cannot write %s: %w", log, werr)
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w (log: %s)\n%s", s.script, err, log, tail(out))
		}
		fmt.Fprintf(os.Stderr, "live: %s done in %s (log: %s)\n", s.script, time.Since(started).Round(time.Second), log)
	}
	dir, err := testenv.Run(context.Background(), filepath.Join(root, "test", "live", "controlplane", "crossplane"),
		[]string{"GOWORK=off", "GOFLAGS=-mod=readonly"}, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/crossplane/crossplane/v2")
	if err != nil {
		return "", fmt.Errorf("cannot find Crossplane core's module directory: %w\n%s", err, dir)
	}
	return strings.TrimSpace(dir), nil
}

func tail(s string) string {
	const n = 4000
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
