package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// run builds every server, runs every level of every server repeat times,
// interleaved, and writes the report.
func run(ctx context.Context, cfg config, specs []string, out io.Writer) error {
	servers := make([]server, 0, len(specs))
	for _, spec := range specs {
		s, err := parseServer(spec)
		if err != nil {
			return err
		}
		servers = append(servers, s)
	}
	root, err := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return fmt.Errorf("cannot find the repository's root: %w", err)
	}
	dir, err := os.MkdirTemp("", "fnload-")
	if err != nil {
		return fmt.Errorf("cannot create a temporary directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	for i := range servers {
		if err := servers[i].build(ctx, strings.TrimSpace(string(root)), dir); err != nil {
			return err
		}
	}
	var results []result
	for rep := range cfg.repeat {
		for _, n := range cfg.levels {
			for _, s := range servers {
				// Observed anew for every level, so that no report goes stale.
				reqs, err := newRequests(cfg.replicas)
				if err != nil {
					return err
				}
				r, err := runOne(ctx, s, reqs, n, cfg.callsAt(n), cfg.timeout)
				if err != nil {
					return fmt.Errorf("%s at %d in flight: %w", s.label, n, err)
				}
				fmt.Fprintf(os.Stderr, "repeat %d: %s\n", rep+1, row(r))
				results = append(results, r)
			}
		}
	}
	report(out, cfg, servers, results)
	return nil
}

func runOne(ctx context.Context, s server, reqs *requests, n, calls int, timeout time.Duration) (result, error) {
	p, err := s.start(ctx)
	if err != nil {
		return result{}, err
	}
	defer p.stop()
	r, err := runLevel(ctx, p, reqs, n, calls, timeout)
	r.server, r.requestBytes = s.label, len(reqs.fleet)
	return r, err
}

func row(r result) string {
	return fmt.Sprintf("| %s | %d | %d | %.1f | %s | %s | %s | %s | %s |", r.server, r.n, r.calls, r.perSecond(),
		ms(r.quantile(0.5)), ms(r.quantile(0.99)), mib(float64(r.peakRSS)), ms(r.cpuPerOp), r.errorText())
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func mib(b float64) string { return fmt.Sprintf("%.0f MiB", b/(1<<20)) }

// report writes every run, then per server and level the median of the
// repeats and their range, then each server's ratios to the first's.
func report(out io.Writer, cfg config, servers []server, results []result) {
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(out, format, args...) }
	p("Servers:")
	for _, s := range servers {
		p(" %s = %s %s;", s.label, s.rev, strings.Join(s.flags, " "))
	}
	p("\n%d replicas (a request of %s), %d repeats, deadline %s.\n\n", cfg.replicas, mib(float64(results[0].requestBytes)), cfg.repeat, cfg.timeout)
	p("| server | in flight | calls | calls/s | p50 | p99 | peak RSS | server CPU/call | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range results {
		p("%s\n", row(r))
	}

	type key struct {
		server string
		n      int
	}
	runs := map[key][]result{}
	for _, r := range results {
		runs[key{r.server, r.n}] = append(runs[key{r.server, r.n}], r)
	}
	metrics := []struct {
		name   string
		get    func(result) float64
		format func(float64) string
	}{
		{"calls/s", result.perSecond, func(v float64) string { return fmt.Sprintf("%.1f", v) }},
		{"p50", func(r result) float64 { return float64(r.quantile(0.5)) }, func(v float64) string { return ms(time.Duration(v)) }},
		{"p99", func(r result) float64 { return float64(r.quantile(0.99)) }, func(v float64) string { return ms(time.Duration(v)) }},
		{"peak RSS", func(r result) float64 { return float64(r.peakRSS) }, mib},
	}
	p("\nMedian of %d repeats [min-max]:\n\n| in flight | server | calls/s | p50 | p99 | peak RSS | errors (all repeats) |\n|---:|---|---:|---:|---:|---:|---:|\n", cfg.repeat)
	for _, n := range cfg.levels {
		for _, s := range servers {
			rs := runs[key{s.label, n}]
			cells := make([]string, 0, len(metrics))
			for _, m := range metrics {
				med, lo, hi := spread(rs, m.get)
				cells = append(cells, fmt.Sprintf("%s [%s-%s]", m.format(med), m.format(lo), m.format(hi)))
			}
			errs := 0
			for _, r := range rs {
				errs += r.errorCount()
			}
			p("| %d | %s | %s | %d |\n", n, s.label, strings.Join(cells, " | "), errs)
		}
	}
	if len(servers) < 2 {
		return
	}
	p("\nRatios of the medians, each server to %s:\n\n| in flight | server | calls/s | p50 | p99 | peak RSS |\n|---:|---|---:|---:|---:|---:|\n", servers[0].label)
	for _, n := range cfg.levels {
		base := runs[key{servers[0].label, n}]
		for _, s := range servers[1:] {
			rs := runs[key{s.label, n}]
			cells := make([]string, 0, len(metrics))
			for _, m := range metrics {
				b, _, _ := spread(base, m.get)
				v, _, _ := spread(rs, m.get)
				cells = append(cells, fmt.Sprintf("x%.2f", v/b))
			}
			p("| %d | %s | %s |\n", n, s.label, strings.Join(cells, " | "))
		}
	}
}

// spread is the median, the least and the most of a metric over runs.
func spread(rs []result, get func(result) float64) (med, lo, hi float64) {
	vs := make([]float64, 0, len(rs))
	for _, r := range rs {
		vs = append(vs, get(r))
	}
	if len(vs) == 0 {
		return 0, 0, 0
	}
	slices.Sort(vs)
	mid := len(vs) / 2
	med = vs[mid]
	if len(vs)%2 == 0 {
		med = (vs[mid-1] + vs[mid]) / 2
	}
	return med, vs[0], vs[len(vs)-1]
}
