// Package agent runs the cluster agent's binary where a platform team
// deploys it: against a real kube-apiserver and etcd (built from Go source,
// started on loopback in namespaces of the test's own), installed from
// deploy/cluster-agent/ as it ships, as its ServiceAccount with its roles.
// It creates Nodes, a DeviceClass, ResourceSlices, allocated ResourceClaims
// and bound Pods through the API and checks the agent's statuses against
// agent.PoolReport over the same objects, through changes and faults: the
// API server killed and restarted, leadership handed over, a watch that
// stalls, objects the agent cannot read.
package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// envBin is where TestMain built the agent's binary.
const envBin = "AGENT_BIN"

// suite runs the tests in network and PID namespaces of their own: only
// loopback exists there, and every process the tests start ends with them.
var suite = harness.Suite{Name: "agent", Prepare: prepare}

// TestMain builds etcd, kube-apiserver and the agent while the Go module
// proxy can be reached, then runs the tests in namespaces.
func TestMain(m *testing.M) {
	os.Exit(suite.Main(m))
}

// prepare builds the control plane's etcd and kube-apiserver
// (bin/control-plane/, current ones reused) and the agent into logs/bin,
// with go's default flags, as the tests are built: the image's static,
// trimmed build of the same code would build every dependency again.
func prepare(root, logs string) ([]string, error) {
	steps := []struct {
		name, dir string
		env       []string
		cmd       []string
	}{
		{name: "build-control-plane", dir: root, cmd: []string{"./hack/build-control-plane.sh", "etcd", "kube-apiserver"}},
		{
			name: "build-agent", dir: filepath.Join(root, "cmd", "cluster-agent"),
			cmd: []string{"go", "build", "-o", filepath.Join(logs, "bin", "cluster-agent"), "."},
		},
	}
	for _, s := range steps {
		started := time.Now()
		out, err := testenv.Run(context.Background(), s.dir, s.env, s.cmd[0], s.cmd[1:]...)
		log := filepath.Join(logs, s.name+".log")
		if werr := os.WriteFile(log, []byte(out), 0o644); werr != nil {
			return nil, fmt.Errorf("cannot write %s: %w", log, werr)
		}
		if err != nil {
			return nil, fmt.Errorf("%v: %w (log: %s)\n%s", s.cmd, err, log, out)
		}
		fmt.Fprintf(os.Stderr, "agent: %s done in %s (log: %s)\n", s.name, time.Since(started).Round(time.Second), log)
	}
	return []string{envBin + "=" + filepath.Join(logs, "bin", "cluster-agent")}, nil
}
