// Package harness runs the live suites' tests (test/live, test/live/agent)
// in network and PID namespaces of their own, with the processes they
// start (etcd, kube-apiserver, the programs under test) logged to files.
package harness

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
)

// Suite is a package of tests that runs in namespaces.
type Suite struct {
	// Name names the suite's logs directory, _output/<Name>, and prefixes
	// the environment its re-executed tests get: <NAME>_IN_NAMESPACES,
	// <NAME>_LOGS and <NAME>_SKIP.
	Name string
	// Prepare builds what the tests run, while the Go module proxy can be
	// reached, into logs (the repository is root), and returns more
	// environment to hand the tests.
	Prepare func(root, logs string) ([]string, error)
}

func (s Suite) env(what string) string { return strings.ToUpper(s.Name) + "_" + what }

// InNamespaces is whether this is the re-executed test process.
func (s Suite) InNamespaces() bool { return os.Getenv(s.env("IN_NAMESPACES")) != "" }

// Logs is the directory of the processes' logs, kept after the tests.
func (s Suite) Logs() string { return os.Getenv(s.env("LOGS")) }

// Skip skips the test when it cannot run: there are no namespaces here, or
// it is not the re-executed process (TestMain builds what it needs first).
func (s Suite) Skip(t *testing.T) {
	t.Helper()
	if why := os.Getenv(s.env("SKIP")); why != "" {
		t.Skip("SKIP: " + why)
	}
	if !s.InNamespaces() {
		t.Skip("SKIP: the " + s.Name + " tests run from TestMain, which builds what they need")
	}
}

// Main is a suite's TestMain: it prepares what the tests run, then runs the
// tests again in new network and PID namespaces. In the network namespace
// only loopback exists, so nothing the tests start can listen on or reach
// another interface. The tests' process is PID 1 of the PID namespace, so
// when it exits, however it exits, the kernel kills every process it
// started. It returns the exit code.
func (s Suite) Main(m *testing.M) int {
	flag.Parse()
	if s.InNamespaces() {
		if err := loopbackUp(); err != nil {
			fmt.Fprintf(os.Stderr, "cannot bring up the loopback interface: %v\n", err)
			return 1
		}
		return m.Run()
	}
	if testing.Short() {
		return m.Run() // the tests skip themselves
	}
	root, err := testenv.FindRepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	logs := filepath.Join(root, "_output", s.Name)
	if err := os.RemoveAll(logs); err != nil {
		fmt.Fprintf(os.Stderr, "cannot clear %s: %v\n", logs, err)
		return 1
	}
	if err := os.MkdirAll(logs, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "cannot create %s: %v\n", logs, err)
		return 1
	}
	env, err := s.Prepare(root, logs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot build what the %s tests run: %v\n", s.Name, err)
		return 1
	}

	cmd := exec.Command(os.Args[0], os.Args[1:]...) //nolint:noctx // the child ends with the test run's own timeout
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.Env = append(environWithout(
		// envtest must use the binaries given to it, never an existing
		// cluster, and nothing may find another cluster's kubeconfig.
		"USE_EXISTING_CLUSTER", "KUBEBUILDER_ASSETS", "TEST_ASSET_ETCD", "TEST_ASSET_KUBE_APISERVER", "TEST_ASSET_KUBECTL", "KUBECONFIG",
	), append(env, s.env("IN_NAMESPACES")+"=1", s.env("LOGS")+"="+logs)...)
	cmd.SysProcAttr = namespaceAttrs()
	err = cmd.Run()
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		return exit.ExitCode()
	}
	if err != nil {
		// No namespaces here (no root, no unprivileged user namespaces):
		// running the tests unisolated would expose their ports, so say
		// why they cannot run; CI must have them.
		why := fmt.Sprintf("cannot start the tests in new network and PID namespaces: %v", err)
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, why)
			return 1
		}
		_ = os.Setenv(s.env("SKIP"), why)
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
	defer func() { _ = unix.Close(fd) }() // A socket only asked about; nothing to lose.
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
