// Command calibrate checks the fleet simulator's binder (sim/kube) against
// kube-scheduler v1.37.2, run in process, on random cluster states of the
// families in families.go: for each state and profile it schedules the
// state's pods, one after another, with both (kube-scheduler through its
// own ScheduleOne), and compares for each pod the nodes scored, how far
// the search went, every scored node's total, the best nodes, the node
// picked and the devices allocated there.
//
//	cd sim/calibrate && go run . -states 2000 -mutations -ties 500 -agent 300 -out ../../docs/calibration.md
//
// With -mutations it runs the binder again under each deliberate break
// (kube.Mutations) on the same states, against kube-scheduler's verdicts
// of the first run, and counts the states each changes. With -ties it runs
// kube-scheduler with its default parallelism to compare its picks among
// nodes that tie. With -agent it checks the cluster agent's reports
// against kube-scheduler's Filter. With -strict it exits 1 when any state
// disagrees, a break changes no state and has no argument why it cannot,
// or the agent reports devices free that kube-scheduler refuses.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler/metrics"

	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

func main() {
	var o options
	flag.IntVar(&o.states, "states", 1000, "random states to sample; each is scheduled under every profile")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the states")
	flag.StringVar(&o.out, "out", "", "file to write the Markdown report to; empty prints it only")
	flag.BoolVar(&o.strict, "strict", false, "exit 1 if any state disagrees, a mutation changes no state without an argument, or the agent over-reports")
	flag.BoolVar(&o.mutations, "mutations", false, "also run every mutation of the binder on the states")
	flag.IntVar(&o.mutationStates, "mutation-states", 0, "run the mutations on the first this many states only (0: all)")
	flag.IntVar(&o.agent, "agent", 0, "also check the cluster agent's reports on this many states")
	flag.IntVar(&o.pinned, "pinned", 0, "also schedule the pods of this many states pinned to a node by name, as the steering agent pins them, with both")
	flag.IntVar(&o.ties, "ties", 0, "also run kube-scheduler with parallelism 16 on this many states, to compare its picks among ties")
	flag.IntVar(&o.workers, "workers", runtime.GOMAXPROCS(0), "states run at once")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile to this file")
	flag.Parse()
	// The binder's runs allocate a great deal and keep little: collect
	// less often, but keep the heap within 5 GiB (2,000 states hold about
	// 2 GiB; the machine is shared).
	debug.SetGCPercent(300)
	debug.SetMemoryLimit(5 << 30)
	// The framework logs every unschedulable pod; the report says what
	// matters.
	klog.SetOutput(&bytes.Buffer{})
	klog.LogToStderr(false)
	metrics.Register()
	if err := profiled(*cpuprofile, func() error { return run(context.Background(), o) }); err != nil {
		fmt.Fprintln(os.Stderr, "calibrate:", err)
		os.Exit(1)
	}
}

// profiled runs f, with a CPU profile written to path unless it is empty.
func profiled(path string, f func() error) error {
	if path == "" {
		return f()
	}
	out, err := os.Create(path) //nolint:gosec // The path is the user's flag.
	if err != nil {
		return fmt.Errorf("cannot profile: %w", err)
	}
	defer out.Close() //nolint:errcheck // The profile is flushed by StopCPUProfile; a failed close loses only it.
	if err := pprof.StartCPUProfile(out); err != nil {
		return fmt.Errorf("cannot profile: %w", err)
	}
	defer pprof.StopCPUProfile()
	return f()
}

type options struct {
	states, mutationStates, agent, ties, pinned, workers int
	seed                                                 uint64
	out                                                  string
	strict, mutations                                    bool
}

func profiles() []kube.Profile { return []kube.Profile{kube.Default, kube.MostAllocated} }

// parallel runs f(i) for i in [0, n) on workers goroutines and returns the
// first error.
func parallel(n, workers int, f func(i int) error) error {
	var mu sync.Mutex
	var first error
	next := 0
	var wg sync.WaitGroup
	for range max(1, workers) {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil
				mu.Unlock()
				if i >= n || stop {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return first
}

// sampled is one state and kube-scheduler's verdicts on it, by profile.
type sampled struct {
	st *state
	// base is the simulator's view of the state, its pods bound.
	base     *kube.Cluster
	verdicts map[kube.Profile][]podVerdict
	// agrees is whether the binder, unmutated, agreed with them.
	agrees map[kube.Profile]bool
}

func run(ctx context.Context, o options) error {
	r := &report{opts: o, tallies: map[kube.Profile]*tally{}, families: map[string]int{}}
	for _, p := range profiles() {
		r.tallies[p] = &tally{decidedBy: map[string]int{}}
	}
	if err := checkAssumptions(ctx); err != nil {
		return err
	}
	began := time.Now()
	all, err := frameworkRuns(ctx, o)
	if err != nil {
		return err
	}
	r.framework = time.Since(began)
	began = time.Now()
	outcomes, err := simulatorRuns(ctx, o, all)
	if err != nil {
		return err
	}
	r.simulator = time.Since(began)
	for i, s := range all {
		r.families[s.st.family]++
		for _, p := range profiles() {
			r.tallies[p].add(outcomes[i][p], fmt.Sprintf("state %d (seed %d, %s), %s", i, o.seed, s.st.family, p))
		}
	}
	r.coverage(all, outcomes)
	// The checks beyond the tallies, each on the first n states (the
	// mutations on all of them) and timed for the report's last line.
	mutations := 0
	if o.mutations {
		mutations = len(all)
	}
	checks := []struct {
		n    int
		took *time.Duration
		run  func(context.Context, []*sampled) error
	}{
		{n: mutations, took: &r.mutationTime, run: r.mutate},
		{n: o.ties, took: &r.tieTime, run: r.checkTies},
		{n: o.agent, took: &r.agentTime, run: r.checkAgent},
		{n: o.pinned, took: &r.pinnedTime, run: r.checkPinned},
	}
	for _, c := range checks {
		if c.n <= 0 {
			continue
		}
		began = time.Now()
		if err := c.run(ctx, all[:min(c.n, len(all))]); err != nil {
			return err
		}
		*c.took = time.Since(began)
	}
	text := r.render()
	if _, err := os.Stdout.WriteString(text); err != nil {
		return err
	}
	if o.out != "" {
		// The report is documentation, for everyone to read.
		if err := os.WriteFile(o.out, []byte(text), 0o644); err != nil { //nolint:gosec // See above.
			return fmt.Errorf("cannot write %s: %w", o.out, err)
		}
	}
	return r.failures()
}

// frameworkRuns samples the states and runs kube-scheduler on each, under
// every profile.
func frameworkRuns(ctx context.Context, o options) ([]*sampled, error) {
	all := make([]*sampled, o.states)
	err := parallel(o.states, o.workers, func(i int) error {
		fam := familyOf(i)
		st, err := sample(ctx, rand.New(rand.NewPCG(o.seed, uint64(i))), fam) //nolint:gosec // Sampled states, not security.
		if err != nil {
			return fmt.Errorf("state %d (%s): %w", i, fam.name, err)
		}
		s := &sampled{st: st, verdicts: map[kube.Profile][]podVerdict{}, agrees: map[kube.Profile]bool{}}
		for _, p := range profiles() {
			v, err := schedule(ctx, st, p, 1)
			if err != nil {
				return fmt.Errorf("state %d (%s), %s: kube-scheduler: %w", i, fam.name, p, err)
			}
			s.verdicts[p] = v
		}
		all[i] = s
		return nil
	})
	return all, err
}

// simulatorRuns runs the simulator's binder on each state, under every
// profile, and compares it with kube-scheduler's verdicts.
func simulatorRuns(ctx context.Context, o options, all []*sampled) ([]map[kube.Profile]outcome, error) {
	outcomes := make([]map[kube.Profile]outcome, o.states)
	err := parallel(o.states, o.workers, func(i int) error {
		outcomes[i] = map[kube.Profile]outcome{}
		base, err := all[i].st.cluster(all[i].st.pods, "")
		if err != nil {
			return fmt.Errorf("state %d (%s): simulator: %w", i, all[i].st.family, err)
		}
		all[i].base = base
		for _, p := range profiles() {
			sim, err := simulate(ctx, all[i].st, base, p, "")
			if err != nil {
				return fmt.Errorf("state %d (%s), %s: simulator: %w", i, all[i].st.family, p, err)
			}
			outcomes[i][p] = compare(all[i].verdicts[p], sim)
			all[i].agrees[p] = outcomes[i][p].agrees()
		}
		return nil
	})
	return outcomes, err
}
