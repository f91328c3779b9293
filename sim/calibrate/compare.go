package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// outcome compares the two schedulers on one state.
type outcome struct {
	// feasible: both found the same nodes feasible; scores: the same
	// total on every one of them; best: the same set of best nodes;
	// bound: the node the framework bound to is among the simulator's
	// best; devices: the simulator's allocation on that node is the one
	// the framework wrote.
	feasible, scores, best, bound, devices bool
	// contested: two or more nodes were feasible; unique: of those, one
	// scored highest alone.
	contested, unique bool
	unschedulable     bool
	// decidedBy names, for a unique best, the plugins whose weighted
	// scores favour it over the runner-up.
	decidedBy []string
	diff      string
}

func (o outcome) agrees() bool { return o.feasible && o.scores && o.best && o.bound && o.devices }

func compare(ctx context.Context, st *state, prof kube.Profile) (outcome, error) {
	framework, err := schedule(ctx, st, prof)
	if err != nil {
		return outcome{}, fmt.Errorf("kube-scheduler: %w", err)
	}
	c, err := st.cluster(st.pods)
	if err != nil {
		return outcome{}, err
	}
	p, err := kube.NewPod(st.pod.DeepCopy(), st.claimsOf(st.pod)...)
	if err != nil {
		return outcome{}, err
	}
	e, err := c.Evaluate(ctx, p, prof)
	if err != nil {
		return outcome{}, fmt.Errorf("simulator: %w", err)
	}
	o := outcome{contested: len(framework.feasible) > 1, unschedulable: len(framework.feasible) == 0}
	o.unique = o.contested && len(framework.best) == 1
	simFeasible := slices.Sorted(slices.Values(e.Scored))
	simBest := slices.Sorted(slices.Values(e.Best))
	o.feasible = slices.Equal(simFeasible, framework.feasible)
	o.best = slices.Equal(simBest, framework.best)
	o.scores = true
	var lines []string
	if o.contested {
		for i, n := range e.Scored {
			if framework.scores[n] != e.Scores[i] {
				o.scores = false
				lines = append(lines, fmt.Sprintf("  %s: kube-scheduler %d %v, simulator %d %v", n, framework.scores[n], framework.plugins[n], e.Scores[i], weighted(e.Plugins[i])))
			}
		}
	}
	o.bound = framework.bound == "" && len(e.Best) == 0 || slices.Contains(e.Best, framework.bound)
	o.devices = true
	if framework.bound != "" {
		var sim []string
		for _, a := range e.Allocation(framework.bound) {
			sim = append(sim, devices(&a)...)
		}
		o.devices = slices.Equal(sim, framework.devices)
		if !o.devices {
			lines = append(lines, fmt.Sprintf("  devices on %s: kube-scheduler %v, simulator %v", framework.bound, framework.devices, sim))
		}
	}
	if o.unique {
		o.decidedBy = decidedBy(framework)
	}
	if !o.agrees() {
		o.diff = fmt.Sprintf("feasible %v / %v, best %v / %v, bound %s %s\n%s", framework.feasible, simFeasible, framework.best, simBest, framework.bound, framework.rejection, strings.Join(lines, "\n"))
	}
	return o, nil
}

// decidedBy names the plugins that score the unique best node above the
// runner-up.
func decidedBy(v *verdict) []string {
	best := v.best[0]
	var runnerUp string
	for n, s := range v.scores {
		if n != best && (runnerUp == "" || s > v.scores[runnerUp] || s == v.scores[runnerUp] && n < runnerUp) {
			runnerUp = n
		}
	}
	var out []string
	for pl, s := range v.plugins[best] {
		if s > v.plugins[runnerUp][pl] {
			out = append(out, pl)
		}
	}
	slices.Sort(out)
	return out
}

// weighted is the simulator's plugin scores as the framework reports them:
// multiplied by their weights.
func weighted(ps kube.PluginScores) map[string]int64 {
	out := map[string]int64{}
	for pl, s := range ps {
		out[pl] = s * kube.Weights()[pl]
	}
	return out
}
