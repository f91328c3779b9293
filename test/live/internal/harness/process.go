package harness

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is a program a test runs, with its output in a log file.
type Process struct {
	Name string
	// Log is the file its output is appended to.
	Log    string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // how it exited, once exited is closed
	// hostPID is its PID as /proc knows it, once Usage found it.
	hostPID int
}

// started are the processes StartProcess and StartProcessOf started, for
// Started: the test binary's, whichever test started each.
var started struct { //nolint:gochecknoglobals // One registry per test binary, as its processes are.
	mu        sync.Mutex
	processes []*Process
}

// Started returns every process the tests started, in the order started,
// running or not: what a run's cost is read from (Usage).
func Started() []*Process {
	started.mu.Lock()
	defer started.mu.Unlock()
	return slices.Clone(started.processes)
}

// StartProcess starts bin with args, its output appended to
// logs/<name>.log. The process is stopped when the test ends, if it has not
// been already.
func StartProcess(t *testing.T, logs, name, bin string, env []string, args ...string) *Process {
	t.Helper()
	return StartProcessOf(t, t, logs, name, bin, env, args...)
}

// StartProcessOf is StartProcess for a process a subtest t starts that
// outlives it: it is stopped when owner, a test t is part of, ends.
func StartProcessOf(t, owner *testing.T, logs, name, bin string, env []string, args ...string) *Process {
	t.Helper()
	log := filepath.Join(logs, name+".log")
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("cannot open the log of %s: %v", name, err)
	}
	_, _ = fmt.Fprintf(f, "\n==> %s %s %v\n", time.Now().Format(time.RFC3339Nano), bin, args)
	// Not CommandContext: Stop signals it and waits for it, below.
	cmd := exec.Command(bin, args...) //nolint:noctx // stopped by Stop, from t.Cleanup
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		t.Fatalf("cannot start %s: %v", name, err)
	}
	p := &Process{Name: name, Log: log, cmd: cmd, exited: make(chan struct{})}
	started.mu.Lock()
	started.processes = append(started.processes, p)
	started.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.exited)
	}()
	owner.Cleanup(func() { p.Stop(owner) })
	return p
}

// Stop asks the process to end (SIGTERM), kills it after 20s, and waits.
func (p *Process) Stop(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Logf("%s did not stop within 20s of SIGTERM; killing it", p.Name)
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Kill kills the process (SIGKILL), as a crash or a node lost would, and
// waits for it to end.
func (p *Process) Kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Signal sends the process a signal.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Exited returns a channel closed once the process has exited, and how it
// exited once it is.
func (p *Process) Exited() (<-chan struct{}, func() error) {
	return p.exited, func() error { return p.err }
}

// Running fails the test if the process has exited, pointing at its log.
func (p *Process) Running(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("%s exited: %v; its log: %s", p.Name, p.err, p.Log)
	default:
	}
}

// WaitListening waits until addr accepts TCP connections, failing the test
// if the process exits first or timeout passes.
func (p *Process) WaitListening(t *testing.T, addr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p.Running(t)
		d := net.Dialer{Timeout: time.Second}
		c, err := d.DialContext(t.Context(), "tcp", addr)
		if err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen on %s within %s: %v; its log: %s", p.Name, addr, timeout, err, p.Log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// RunToEnd runs bin with args to its end, its output appended to
// logs/<name>.log, and says how it failed, if it did.
func RunToEnd(t *testing.T, logs, name, bin string, env []string, args ...string) error {
	t.Helper()
	p := StartProcess(t, logs, name, bin, env, args...)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("%s did not finish within 5m; its log: %s", name, p.Log)
	}
	if p.err != nil {
		return fmt.Errorf("%s failed: %w; its log: %s", name, p.err, p.Log)
	}
	return nil
}
