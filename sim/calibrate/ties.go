package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// tieTally is what kube-scheduler with its default parallelism (16) picked
// where several nodes tie, against the heap's pick in search order
// (parallelism 1, Evaluation.Pick): the first pod of each state, whose
// cluster is the same for both.
type tieTally struct {
	states, tied, samePick, amongBest, untiedSame, untied int
}

func (r *report) checkTies(ctx context.Context, all []*sampled) error {
	t := &tieTally{}
	r.ties = t
	return parallel(len(all), r.opts.workers, func(i int) error {
		s := all[i]
		if len(s.st.incoming) == 0 {
			return nil
		}
		v, err := schedule(ctx, s.st, kube.Default, 16)
		if err != nil {
			return fmt.Errorf("state %d (%s), parallelism 16: %w", i, s.st.family, err)
		}
		sim, err := simulate(ctx, s.st, s.base, kube.Default, "")
		if err != nil {
			return err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		t.states++
		first, simFirst := v[0], sim[0]
		switch {
		case len(simFirst.best) > 1:
			t.tied++
			if first.bound == simFirst.bound {
				t.samePick++
			}
			if slices.Contains(simFirst.best, first.bound) {
				t.amongBest++
			}
		case first.bound != "":
			t.untied++
			if first.bound == simFirst.bound {
				t.untiedSame++
			}
		}
		return nil
	})
}

func (t *tieTally) render(b *strings.Builder) {
	b.WriteString("\n## Ties with the default parallelism\n\n")
	b.WriteString("kube-scheduler's default parallelism is 16: its feasible nodes are in the order its workers finished them, and so is its heap's pick among nodes that tie. Here it ran with parallelism 16 on the same states, the first pod of each (whose cluster is the same for both), against the simulator's Pick (the heap's pick in search order, what parallelism 1 picks):\n\n")
	b.WriteString("| States | First pods with tied best nodes | kube-scheduler picked Pick's node | Among the simulator's best | First pods with a unique best | Same node |\n|---:|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(b, "| %d | %d | %d (%s) | %d (%s) | %d | %d (%s) |\n", t.states, t.tied, t.samePick, pct(t.samePick, t.tied), t.amongBest, pct(t.amongBest, t.tied), t.untied, t.untiedSame, pct(t.untiedSame, t.untied))
}
