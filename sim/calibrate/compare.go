package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// simPod is what the simulator's binder decided for one pod of a state.
type simPod struct {
	scored  []string
	scores  map[string]int64
	plugins map[string]map[string]int64
	best    []string
	// searched is how far its search went (Evaluation.Searched); bound
	// the node it picked as parallelism 1 does (Evaluation.Pick).
	searched int
	bound    string
	devices  []string
}

// simulate schedules a state's pods, one after another, with the
// simulator's binder under a mutation (or none), each bound to the node
// Pick names: in a clone of the state's cluster with its pods bound, or,
// for what counts as allocated, which is counted as pods are added, in a
// new one.
func simulate(ctx context.Context, st *state, base *kube.Cluster, prof kube.Profile, m kube.Mutation) ([]simPod, error) {
	var c *kube.Cluster
	var err error
	if strings.HasPrefix(string(m), "allocated/") {
		c, err = st.cluster(st.pods, m)
	} else {
		c = base.Clone()
		err = c.Mutate(m)
	}
	if err != nil {
		return nil, err
	}
	bound := map[string]*resourceapi.ResourceClaim{}
	for _, rc := range st.claims {
		bound[rc.Name] = rc
	}
	out := make([]simPod, 0, len(st.incoming))
	for _, in := range st.incoming {
		claims := map[string]*resourceapi.ResourceClaim{}
		maps.Copy(claims, bound)
		for _, rc := range in.claims {
			claims[rc.Name] = rc
		}
		for name, rc := range claims {
			claims[name] = rc.DeepCopy()
		}
		pod := in.pod.DeepCopy()
		p, err := kube.NewPod(pod, st.claimsOf(pod, claims)...)
		if err != nil {
			return nil, err
		}
		e, err := c.Evaluate(ctx, p, prof)
		if err != nil {
			return nil, fmt.Errorf("pod %s: %w", pod.Name, err)
		}
		sp := simPod{scores: map[string]int64{}, plugins: map[string]map[string]int64{}, searched: e.Searched, bound: e.Pick()}
		for i, n := range e.Scored {
			sp.scores[n] = e.Scores[i]
			sp.plugins[n] = weighted(e.Plugins[i])
		}
		sp.scored = slices.Sorted(slices.Values(e.Scored))
		sp.best = slices.Sorted(slices.Values(e.Best))
		if sp.bound != "" {
			for _, a := range e.Allocation(sp.bound) {
				sp.devices = append(sp.devices, devices(&a)...)
			}
			if err := c.Bind(p, sp.bound, e); err != nil {
				return nil, err
			}
		}
		out = append(out, sp)
	}
	return out, nil
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

// outcome compares the two schedulers on one state's pods.
type outcome struct {
	// Each holds when it holds for every pod: feasible, the same nodes
	// scored (or none fit); evaluated, the search went through as many
	// nodes; scores, the same total on every scored node; best, the same
	// best nodes; bound, the same node picked; devices, the same devices
	// allocated there.
	feasible, evaluated, scores, best, bound, devices bool
	// pods is how many pods were scheduled, contested how many had two or
	// more scored nodes, unique how many of those a unique best,
	// unschedulable how many fit no node.
	pods, contested, unique, unschedulable int
	// decidedBy names, for each pod with a unique best, the plugins whose
	// weighted scores favour it over the runner-up.
	decidedBy []string
	diff      string
}

func (o outcome) agrees() bool {
	return o.feasible && o.evaluated && o.scores && o.best && o.bound && o.devices
}

// compare compares the framework's verdicts on a state's pods with the
// simulator's.
func compare(fw []podVerdict, sim []simPod) outcome {
	o := outcome{feasible: true, evaluated: true, scores: true, best: true, bound: true, devices: true, pods: len(fw)}
	var lines []string
	for i, v := range fw {
		o = counted(o, v)
		bad := func(ok *bool, what string, args ...any) {
			*ok = false
			lines = append(lines, fmt.Sprintf("  pod %d: %s", i, fmt.Sprintf(what, args...)))
		}
		comparePod(v, sim[i], &o, bad)
	}
	if !o.agrees() {
		o.diff = strings.Join(lines, "\n")
	}
	return o
}

// counted is o with what the framework's verdict on a pod was counted.
func counted(o outcome, v podVerdict) outcome {
	if len(v.scored) > 1 {
		o.contested++
		if len(v.best) == 1 {
			o.unique++
			o.decidedBy = append(o.decidedBy, decidedBy(v)...)
		}
	}
	if v.bound == "" {
		o.unschedulable++
	}
	return o
}

// comparePod compares the verdicts on one pod, calling bad with each
// difference and the outcome's field it clears.
func comparePod(v podVerdict, s simPod, o *outcome, bad func(ok *bool, what string, args ...any)) {
	if !slices.Equal(v.scored, s.scored) {
		bad(&o.feasible, "scored %v / %v (%s)", v.scored, s.scored, v.rejection)
	}
	if v.bound != "" && v.evaluated != s.searched {
		bad(&o.evaluated, "searched %d / %d nodes", v.evaluated, s.searched)
	}
	if len(v.scored) > 1 {
		for _, n := range v.scored {
			if t, ok := s.scores[n]; ok && t != v.scores[n] {
				bad(&o.scores, "%s: kube-scheduler %d %v, simulator %d %v", n, v.scores[n], v.plugins[n], t, s.plugins[n])
			}
		}
	}
	if !slices.Equal(v.best, s.best) {
		bad(&o.best, "best %v / %v", v.best, s.best)
	}
	if v.bound != s.bound {
		bad(&o.bound, "bound to %q / %q", v.bound, s.bound)
	}
	if v.bound != "" && v.bound == s.bound && !slices.Equal(v.devices, s.devices) {
		bad(&o.devices, "devices on %s: kube-scheduler %v, simulator %v", v.bound, v.devices, s.devices)
	}
}

// decidedBy names the plugins that score the unique best node above the
// runner-up.
func decidedBy(v podVerdict) []string {
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
