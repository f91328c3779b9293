package live

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
)

// Environment the parent process hands the tests it re-executes in their own
// namespaces.
const (
	envInNamespaces = "LIVE_IN_NAMESPACES"  // set in the re-executed tests
	envArtifacts    = "LIVE_ARTIFACTS"      // ./hack/build-xpkg.sh's output directory
	envCrossplane   = "LIVE_CROSSPLANE_DIR" // Crossplane core's module directory (its CRDs)
	envLogs         = "LIVE_LOGS"           // where the processes' logs go
	envSkip         = "LIVE_SKIP"           // why the tests cannot run here
)

// TestMain builds what the tests run (the control plane, the crossplane CLI,
// the function's package) while the Go module proxy can be reached, then runs
// the tests again in new network and PID namespaces. In the network namespace
// only loopback exists, so nothing the tests start can listen on or reach
// another interface: Crossplane core binds its metrics and health ports on
// every interface, with no flag to say otherwise. The tests' process is PID 1
// of the PID namespace, so when it exits, however it exits, the kernel kills
// every process it started: etcd, kube-apiserver, Crossplane, the function.
func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv(envInNamespaces) != "" {
		if err := loopbackUp(); err != nil {
			fmt.Fprintf(os.Stderr, "cannot bring up the loopback interface: %v\n", err)
			os.Exit(1)
		}
		os.Exit(m.Run())
	}
	if testing.Short() {
		os.Exit(m.Run()) // the test skips itself
	}
	os.Exit(prepareAndReexec(m))
}

// prepareAndReexec builds the artifacts and runs the tests in namespaces. It
// returns the exit code.
func prepareAndReexec(m *testing.M) int {
	root, err := testenv.FindRepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	logs := filepath.Join(root, "_output", "live")
	if err := os.RemoveAll(logs); err != nil {
		fmt.Fprintf(os.Stderr, "cannot clear %s: %v\n", logs, err)
		return 1
	}
	artifacts := filepath.Join(logs, "artifacts")
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "cannot create %s: %v\n", artifacts, err)
		return 1
	}
	crossplaneDir, err := build(root, artifacts, logs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot build what the live tests run: %v\n", err)
		return 1
	}

	cmd := exec.Command(os.Args[0], os.Args[1:]...) //nolint:noctx // the child ends with the test run's own timeout
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.Env = append(environWithout(
		// envtest must use the binaries given to it, never an existing
		// cluster, and nothing may find another cluster's kubeconfig.
		"USE_EXISTING_CLUSTER", "KUBEBUILDER_ASSETS", "TEST_ASSET_ETCD", "TEST_ASSET_KUBE_APISERVER", "TEST_ASSET_KUBECTL", "KUBECONFIG",
	),
		envInNamespaces+"=1",
		envArtifacts+"="+artifacts,
		envCrossplane+"="+crossplaneDir,
		envLogs+"="+logs,
	)
	cmd.SysProcAttr = namespaceAttrs()
	err = cmd.Run()
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		return exit.ExitCode()
	}
	if err != nil {
		// No namespaces here (no root, no unprivileged user namespaces):
		// run the tests unisolated would expose Crossplane's ports, so say
		// why they cannot run; CI must have them.
		why := fmt.Sprintf("cannot start the tests in new network and PID namespaces: %v", err)
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, why)
			return 1
		}
		_ = os.Setenv(envSkip, why)
		return m.Run()
	}
	return 0
}

// environWithout returns this process's environment without the variables
// named. (envtest treats a variable set empty as set.)
func environWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, name) {
			env = append(env, kv)
		}
	}
	return env
}

// namespaceAttrs returns the attributes that start a process in new network
// and PID namespaces; as another user than root, in a new user namespace too,
// in which the user is root. The child is killed if this process dies.
func namespaceAttrs() *syscall.SysProcAttr {
	attrs := &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWPID,
		Pdeathsig:  syscall.SIGKILL,
	}
	if os.Geteuid() != 0 {
		attrs.Cloneflags |= syscall.CLONE_NEWUSER
		attrs.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		attrs.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	return attrs
}

// loopbackUp brings up lo, which a new network namespace has down.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cannot open a socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("cannot read the flags of lo: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("cannot set lo up: %w", err)
	}
	return nil
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
