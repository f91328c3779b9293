// Package fleet runs a live fleet: a Modelplane v0.3 control plane and two
// workload clusters, every part a binary built from source and started on
// loopback in namespaces of the test's own. The control plane is etcd,
// kube-apiserver, Crossplane core, provider-kubernetes (with watches),
// fleet-scheduler, the relay and a stand-in for Modelplane's Python
// functions, over mutual TLS. Each workload cluster is a kube-apiserver on
// the same etcd (a key prefix of its own), kube-scheduler,
// kube-controller-manager's deployment, replicaset, resourceclaim,
// garbage-collector, node-lifecycle, taint-eviction and pod-garbage-collector
// controllers, KWOK as the kubelet of its GPU pool nodes, and the cluster
// agent, installed with helm install of the chart ./hack/release.sh pushed,
// as the README does. KWOK marks the nodes Ready, renews their Leases, runs
// bound pods (Running, then Ready) and finishes their deletion; no
// container runs. ResourceSlices are written through the API as a DRA
// driver would.
package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// Environment TestMain hands the tests.
const (
	envArtifacts  = "FLEET_ARTIFACTS"  // ./hack/build-xpkg.sh's output, the agent and the stand-in
	envCrossplane = "FLEET_CROSSPLANE" // Crossplane core's module directory (its CRDs)
	envProvider   = "FLEET_PROVIDER"   // provider-kubernetes' module directory (its CRDs)
	envKWOK       = "FLEET_KWOK"       // KWOK's module directory (its stages)
	// envAgentRelease, set by ./hack/test-agent-release.sh, builds
	// provider-helm for TestAgentRelease, which alone runs it; envProviderHelm
	// is then its module directory (its CRDs).
	envAgentRelease = "FLEET_AGENT_RELEASE"
	envProviderHelm = "FLEET_PROVIDER_HELM"
)

// suite runs the tests in network and PID namespaces of their own: only
// loopback exists there, and every process the tests start ends with them.
var suite = harness.Suite{Name: "live-fleet", Prepare: prepare}

// TestMain builds what the fleet runs while the Go module proxy can be
// reached, then runs the tests in namespaces.
func TestMain(m *testing.M) {
	// The clients' own logs are not the test's.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(suite.Main(m))
}

// prepare builds the control plane (bin/control-plane/, current binaries
// reused), the crossplane CLI, the function's and the relay's packages,
// the agent as its image has it, the Helm CLI, and the stand-in and its
// package.
func prepare(root, logs string) ([]string, error) {
	artifacts := filepath.Join(logs, "artifacts")
	crossplane := filepath.Join(root, "bin", "crossplane")
	standin := filepath.Join(artifacts, "standin")
	static := []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + runtime.GOARCH}
	type step struct {
		name, dir string
		env       []string
		cmd       []string
	}
	steps := []step{
		{name: "build-control-plane", dir: root, cmd: []string{"./hack/build-control-plane.sh"}},
		{name: "build-crossplane", dir: root, cmd: []string{"./hack/build-crossplane.sh"}},
		{name: "build-xpkg", dir: root, env: []string{"ARCHS=" + runtime.GOARCH, "OUTPUT_DIR=" + artifacts, "CROSSPLANE=" + crossplane}, cmd: []string{"./hack/build-xpkg.sh"}},
		{
			name: "build-agent", dir: filepath.Join(root, "cmd", "cluster-agent"), env: static,
			cmd: []string{"go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(artifacts, "bin", "cluster-agent"), "."},
		},
		{
			name: "build-standin", dir: filepath.Join(root, "test", "live"), env: static,
			cmd: []string{"go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(standin, "standin"), "./fleet/standin"},
		},
		// The Helm CLI, at the version tools/chartrender pins for the
		// chart's render and push: the fleet installs the agent with it,
		// as the README does.
		{
			name: "build-helm", dir: filepath.Join(root, "tools", "chartrender"), env: static,
			cmd: []string{"go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(artifacts, "bin", "helm"), "helm.sh/helm/v4/cmd/helm"},
		},
		// What ./hack/release.sh builds besides, while the module proxy can
		// be reached: the fleet runs it where only loopback exists.
		{name: "build-release-tools", dir: root, cmd: []string{"./hack/build-release-tools.sh"}},
		{name: "build-standin-xpkg", dir: root, cmd: []string{crossplane, "xpkg", "build", "--package-root=" + filepath.Join(root, "test", "live", "fleet", "standin", "package"), "-o", filepath.Join(standin, "standin.xpkg")}},
	}
	type module struct{ env, wrapper, module string }
	modules := []module{
		{envCrossplane, "crossplane", "github.com/crossplane/crossplane/v2"},
		{envProvider, "provider-kubernetes", "github.com/crossplane-contrib/provider-kubernetes"},
		{envKWOK, "kwok", "sigs.k8s.io/kwok"},
	}
	if os.Getenv(envAgentRelease) != "" {
		steps = append(steps, step{name: "build-provider-helm", dir: root, cmd: []string{"./hack/build-control-plane.sh", "provider-helm"}})
		modules = append(modules, module{envProviderHelm, "provider-helm", "github.com/crossplane-contrib/provider-helm"})
	}
	for _, s := range steps {
		started := time.Now()
		out, err := testenv.Run(context.Background(), s.dir, s.env, s.cmd[0], s.cmd[1:]...)
		log := filepath.Join(logs, s.name+".log")
		if werr := os.WriteFile(log, []byte(out), 0o644); werr != nil {
			return nil, fmt.Errorf("cannot write %s: %w", log, werr)
		}
		if err != nil {
			return nil, fmt.Errorf("%v: %w (log: %s)\n%s", s.cmd, err, log, tail(out))
		}
		fmt.Fprintf(os.Stderr, "live-fleet: %s done in %s (log: %s)\n", s.name, time.Since(started).Round(time.Second), log)
	}
	env := []string{envArtifacts + "=" + artifacts}
	for _, m := range modules {
		dir, err := testenv.Run(context.Background(), filepath.Join(root, "test", "live", "controlplane", m.wrapper),
			[]string{"GOWORK=off", "GOFLAGS=-mod=readonly"}, "go", "list", "-m", "-f", "{{.Dir}}", m.module)
		if err != nil {
			return nil, fmt.Errorf("cannot find the module directory of %s: %w\n%s", m.module, err, dir)
		}
		env = append(env, m.env+"="+strings.TrimSpace(dir))
	}
	return env, nil
}

func tail(s string) string {
	const n = 4000
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
