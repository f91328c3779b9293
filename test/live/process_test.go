package live

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// process is a program the harness runs, with its output in a log file.
type process struct {
	name   string
	log    string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // how it exited, once exited is closed
}

// startProcess starts bin with args, its output appended to logs/<name>.log.
// The process is stopped when the test ends, if it has not been already.
func startProcess(t *testing.T, logs, name, bin string, env []string, args ...string) *process {
	t.Helper()
	log := filepath.Join(logs, name+".log")
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("cannot open the log of %s: %v", name, err)
	}
	fmt.Fprintf(f, "\n==> %s %s %v\n", time.Now().Format(time.RFC3339Nano), bin, args)
	// Not CommandContext: stop signals it and waits for it, below.
	cmd := exec.Command(bin, args...) //nolint:noctx // stopped by stop, from t.Cleanup
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		t.Fatalf("cannot start %s: %v", name, err)
	}
	p := &process{name: name, log: log, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.exited)
	}()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// stop asks the process to end (SIGTERM), kills it after 20s, and waits.
func (p *process) stop(t *testing.T) {
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
		t.Logf("%s did not stop within 20s of SIGTERM; killing it", p.name)
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// running fails the test if the process has exited, pointing at its log.
func (p *process) running(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("%s exited: %v; its log: %s", p.name, p.err, p.log)
	default:
	}
}

// waitListening waits until addr accepts TCP connections, failing the test if
// the process exits first or timeout passes.
func (p *process) waitListening(t *testing.T, addr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p.running(t)
		d := net.Dialer{Timeout: time.Second}
		c, err := d.DialContext(t.Context(), "tcp", addr)
		if err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen on %s within %s: %v; its log: %s", p.name, addr, timeout, err, p.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runToEnd runs bin with args to its end, its output appended to
// logs/<name>.log, and says how it failed, if it did.
func runToEnd(t *testing.T, logs, name, bin string, env []string, args ...string) error {
	t.Helper()
	p := startProcess(t, logs, name, bin, env, args...)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("%s did not finish within 5m; its log: %s", name, p.log)
	}
	if p.err != nil {
		return fmt.Errorf("%s failed: %w; its log: %s", name, p.err, p.log)
	}
	return nil
}
