// Command fnload measures the function under concurrent load, as Crossplane
// puts it: N calls at once, each for a distinct ModelDeployment, each
// carrying the whole fleet (the benchmark fleet of internal/benchfleet), over
// one real gRPC connection on loopback. Each server is the function binary,
// built from a git revision or the work tree, run as its own process with
// --insecure on a free loopback port, so that its peak RSS (VmHWM) is its
// own; a fresh process for every level, warmed by one call first. Servers
// and levels are interleaved, repeat after repeat, so that a noisy machine
// spreads over all of them alike.
//
//	go run ./sim/cmd/fnload -server before=71a174d -server 'after=. --max-concurrent-streams=4'
//
// A -server is label=revision, then any flags for the server: revision "."
// is the work tree as it is, bin:<path> a binary built already. The report is Markdown: each run, then the
// median of the repeats with their range, then the ratios of each server to
// the first.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"
)

type serverFlags []string

func (s *serverFlags) String() string { return strings.Join(*s, "; ") }

func (s *serverFlags) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	var servers serverFlags
	flag.Var(&servers, "server", "label=revision [server flags...]; revision . is the work tree; repeat for each server (default: tree=.)")
	replicas := flag.Int("replicas", 10_000, "ModelReplicas in the fleet every request carries")
	levels := flag.String("concurrency", "1,4,16,64,100", "comma-separated numbers of calls in flight")
	calls := flag.Int("calls", 0, "calls per level; 0 is max(200, 4 x concurrency)")
	repeat := flag.Int("repeat", 3, "how many times to run every server at every level")
	timeout := flag.Duration("timeout", 2*time.Minute, "deadline of each call (Crossplane's: its reconcile timeout, 2m)")
	flag.Parse()
	if len(servers) == 0 {
		servers = serverFlags{"tree=."}
	}
	os.Exit(measure(servers, *replicas, *levels, *calls, *repeat, *timeout))
}

// measure runs the measurement and returns the exit code.
func measure(servers []string, replicas int, levels string, calls, repeat int, timeout time.Duration) int {
	ns, err := parseLevels(levels)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fnload:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := config{replicas: replicas, levels: ns, calls: calls, repeat: repeat, timeout: timeout}
	if err := run(ctx, cfg, servers, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fnload:", err)
		return 1
	}
	return 0
}

// config is what every run shares.
type config struct {
	replicas int
	levels   []int
	calls    int
	repeat   int
	timeout  time.Duration
}

// callsAt is how many calls a level makes: enough for a p99 at the
// smaller levels, and four rounds of the larger.
func (c config) callsAt(n int) int {
	if c.calls > 0 {
		return c.calls
	}
	return max(200, 4*n)
}

func parseLevels(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("invalid -concurrency %q: want positive whole numbers, comma-separated", s)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("-concurrency is empty")
	}
	return out, nil
}
