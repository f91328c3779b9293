package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// server is a function binary to measure, and the flags to run it with.
type server struct {
	label string
	// rev is the git revision it was built from; "." the work tree.
	rev   string
	bin   string
	flags []string
}

// parseServer reads label=revision [flags...].
func parseServer(s string) (server, error) {
	label, rest, ok := strings.Cut(s, "=")
	fields := strings.Fields(rest)
	if !ok || label == "" || len(fields) == 0 {
		return server{}, fmt.Errorf("invalid -server %q: want label=revision [flags...]", s)
	}
	return server{label: label, rev: fields[0], flags: fields[1:]}, nil
}

// build builds the function binary of the server's revision into dir: the
// work tree as it is for ".", else the revision's tree, exported with git
// archive, built with the same module cache. A revision bin:<path> is a
// binary built already.
func (s *server) build(ctx context.Context, root, dir string) error {
	if bin, ok := strings.CutPrefix(s.rev, "bin:"); ok {
		s.bin = bin
		return nil
	}
	src := root
	if s.rev != "." {
		// The report names the commit, not a branch that moves on.
		commit, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--short", s.rev).Output() //nolint:gosec // The caller's revision.
		if err != nil {
			return fmt.Errorf("cannot find revision %s: %w", s.rev, err)
		}
		s.rev = strings.TrimSpace(string(commit))
		src = filepath.Join(dir, "src-"+s.label)
		if err := os.MkdirAll(src, 0o750); err != nil {
			return fmt.Errorf("cannot create %s: %w", src, err)
		}
		// The revision and the binary are the caller's to name.
		archive := exec.CommandContext(ctx, "git", "-C", root, "archive", s.rev) //nolint:gosec // See above.
		extract := exec.CommandContext(ctx, "tar", "-x", "-C", src)              //nolint:gosec // See above.
		pipe, err := archive.StdoutPipe()
		if err != nil {
			return fmt.Errorf("cannot export revision %s: %w", s.rev, err)
		}
		extract.Stdin = pipe
		var stderr bytes.Buffer
		archive.Stderr = &stderr
		if err := extract.Start(); err != nil {
			return fmt.Errorf("cannot export revision %s: %w", s.rev, err)
		}
		if err := archive.Run(); err != nil {
			_ = extract.Wait()
			return fmt.Errorf("cannot export revision %s: %w: %s", s.rev, err, stderr.String())
		}
		if err := extract.Wait(); err != nil {
			return fmt.Errorf("cannot export revision %s: %w", s.rev, err)
		}
	}
	s.bin = filepath.Join(dir, "function-"+s.label)
	build := exec.CommandContext(ctx, "go", "build", "-buildvcs=false", "-o", s.bin, ".") //nolint:gosec // The caller's revision.
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("cannot build the function at %s: %w\n%s", s.rev, err, out)
	}
	return nil
}

// process is a running server.
type process struct {
	cmd  *exec.Cmd
	addr string
	// exited is closed once the server has exited, why in exit.
	exited chan struct{}
	exit   error
	// log is the file of the server's output.
	log *os.File
}

// start runs the server on a free loopback port and waits until it
// listens. A port taken between choosing it and listening on it is
// retried.
func (s *server) start(ctx context.Context) (*process, error) {
	for range 3 {
		port, err := freePort(ctx)
		if err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		args := append([]string{"--insecure", "--address=" + addr, "--metrics-address=127.0.0.1:0"}, s.flags...)
		log, err := os.CreateTemp(filepath.Dir(s.bin), s.label+"-*.log")
		if err != nil {
			return nil, fmt.Errorf("cannot create the server's log: %w", err)
		}
		p := &process{cmd: exec.CommandContext(ctx, s.bin, args...), addr: addr, exited: make(chan struct{}), log: log} //nolint:gosec // The caller's binary and flags.
		p.cmd.Stdout, p.cmd.Stderr = log, log
		if err := p.cmd.Start(); err != nil {
			_ = log.Close()
			return nil, fmt.Errorf("cannot start %s: %w", s.bin, err)
		}
		go func() {
			p.exit = p.cmd.Wait()
			close(p.exited)
		}()
		err = p.waitListening(ctx, 30*time.Second)
		if err == nil {
			return p, nil
		}
		p.stop()
		if !errors.Is(err, errExited) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%s exited before listening, three times", s.bin)
}

var errExited = errors.New("the server exited")

func (p *process) waitListening(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			out, _ := os.ReadFile(p.log.Name())
			return fmt.Errorf("%w before listening on %s: %w: %s", errExited, p.addr, p.exit, out)
		default:
		}
		d := net.Dialer{Timeout: time.Second}
		if c, err := d.DialContext(ctx, "tcp", p.addr); err == nil {
			_ = c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("the server did not listen on %s within %s", p.addr, timeout)
}

// stop kills the server and waits for it to exit.
func (p *process) stop() {
	_ = p.cmd.Process.Kill()
	<-p.exited
	_ = p.log.Close()
}

// usage is what the kernel says of the process: its peak resident set
// (VmHWM) and the CPU time it has used.
type usage struct {
	peakRSS int64 // bytes
	cpu     time.Duration
}

// usage reads /proc/<pid>/status and /proc/<pid>/stat.
func (p *process) usage() (usage, error) {
	pid := p.cmd.Process.Pid
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return usage{}, fmt.Errorf("cannot read the server's status: %w", err)
	}
	var u usage
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return usage{}, fmt.Errorf("cannot read VmHWM %q: %w", v, err)
			}
			u.peakRSS = kb << 10
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return usage{}, fmt.Errorf("cannot read the server's stat: %w", err)
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 14th and 15th fields, in clock ticks (100 a second on
	// Linux).
	_, after, ok := bytes.Cut(stat, []byte(") "))
	fields := strings.Fields(string(after))
	if !ok || len(fields) < 13 {
		return usage{}, fmt.Errorf("cannot read the server's stat %q", stat)
	}
	const ticksPerSecond = 100
	for _, f := range fields[11:13] {
		ticks, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return usage{}, fmt.Errorf("cannot read the server's CPU time %q: %w", f, err)
		}
		u.cpu += time.Duration(ticks) * time.Second / ticksPerSecond
	}
	return u, nil
}

func freePort(ctx context.Context) (int, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("cannot find a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, fmt.Errorf("cannot find a free port: %v is not a TCP address", l.Addr())
	}
	return addr.Port, nil
}
