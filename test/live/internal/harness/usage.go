package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// userHZ is the unit of /proc/<pid>/stat's times: USER_HZ, 100 on every
// Linux architecture Go supports (the kernel converts to it).
const userHZ = 100

// Usage is what a process has used so far, as the kernel counts it.
type Usage struct {
	// CPU is its user and system CPU time, in seconds, every thread.
	CPU float64
	// RSS is its resident memory now, and Peak the most it has had
	// resident (VmHWM), in bytes.
	RSS, Peak int64
}

// Usage reads what the process has used so far from /proc. A program's own
// figures cannot be trusted here: in the suites' PID namespace, without a
// /proc of its own, a process that reads /proc/<its pid> reads another
// process's (Prometheus' process_cpu_seconds_total does). The kernel's
// /proc knows it by its PID outside the namespace, found by NSpid.
func (p *Process) Usage() (Usage, error) {
	if p.hostPID == 0 {
		pid, err := hostPID(p.cmd.Process.Pid)
		if err != nil {
			return Usage{}, fmt.Errorf("cannot find %s in /proc: %w", p.Name, err)
		}
		p.hostPID = pid
	}
	dir := filepath.Join("/proc", strconv.Itoa(p.hostPID))
	cpu, err := readProc(dir, "stat", statCPU)
	if err != nil {
		return Usage{}, fmt.Errorf("cannot read the CPU time of %s: %w", p.Name, err)
	}
	status, err := readProc(dir, "status", func(s string) (string, error) { return s, nil })
	if err != nil {
		return Usage{}, fmt.Errorf("cannot read the memory of %s: %w", p.Name, err)
	}
	rss, err := statusKB(status, "VmRSS")
	if err != nil {
		return Usage{}, fmt.Errorf("cannot read the memory of %s: %w", p.Name, err)
	}
	peak, err := statusKB(status, "VmHWM")
	if err != nil {
		return Usage{}, fmt.Errorf("cannot read the peak memory of %s: %w", p.Name, err)
	}
	return Usage{CPU: cpu, RSS: rss, Peak: peak}, nil
}

// readProc reads the file name of a process's /proc directory dir with
// parse.
func readProc[T any](dir, name string, parse func(string) (T, error)) (T, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		var zero T
		return zero, err
	}
	return parse(string(b))
}

// hostPID finds the PID /proc knows a child of this process by, given its
// PID in this process's namespace: the one whose NSpid ends in it and
// whose parent is this process.
func hostPID(pid int) (int, error) {
	self, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	me, _, err := nsPIDs(string(self))
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue // gone since listed
		}
		host, inner, err := nsPIDs(string(status))
		if err != nil || inner != pid || field(string(status), "PPid") != strconv.Itoa(me) {
			continue
		}
		return host, nil
	}
	return 0, fmt.Errorf("no process with NSpid ending in %d and parent %d", pid, me)
}

// nsPIDs reads a status file's NSpid: the PID in /proc's namespace (the
// first) and in the process's own (the last).
func nsPIDs(status string) (first, last int, err error) {
	ids := strings.Fields(field(status, "NSpid"))
	if len(ids) == 0 {
		return 0, 0, errors.New("no NSpid in the process's status")
	}
	if first, err = strconv.Atoi(ids[0]); err != nil {
		return 0, 0, fmt.Errorf("cannot read NSpid: %w", err)
	}
	if last, err = strconv.Atoi(ids[len(ids)-1]); err != nil {
		return 0, 0, fmt.Errorf("cannot read NSpid: %w", err)
	}
	return first, last, nil
}

// field is the value of a "Name:\tvalue" line of a status file.
func field(status, name string) string {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// statCPU reads utime and stime (fields 14 and 15) of a stat file, after
// the command name, which may hold spaces and parentheses.
func statCPU(stat string) (float64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("no command name in stat")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state): utime is field 14, f[11].
	if len(f) < 13 {
		return 0, fmt.Errorf("stat has %d fields after the command name, want 13 at least", len(f))
	}
	utime, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cannot read utime: %w", err)
	}
	stime, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cannot read stime: %w", err)
	}
	return float64(utime+stime) / userHZ, nil
}

// statusKB reads a field in kB of a status file (VmRSS, VmHWM), in bytes.
func statusKB(status, name string) (int64, error) {
	v, ok := strings.CutSuffix(field(status, name), " kB")
	if !ok {
		return 0, fmt.Errorf("no %s in kB in the process's status", name)
	}
	kb, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cannot read %s: %w", name, err)
	}
	return kb << 10, nil
}
