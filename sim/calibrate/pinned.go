package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// Pinned pods against the framework: the steering agent releases each
// held pod narrowed to the node it decided, a required node affinity by
// name (kube.PinAffinity), and the steered binder binds it through
// sim/kube there. For each state, each pod to schedule is pinned, three
// times in four, to a node it fits once the pods before it are bound (one
// of those at random), else to any node of the state; the rest stay as
// they are, so that the pods after a pinned one check where the next
// search starts. Then both schedulers schedule the pods, one after
// another, under the default profile, and are compared as in Agreement:
// the nodes NodeAffinity's PreFilter leaves to search and the filters
// admit, how far the search went, the node and the devices.

// pinnedTally is what the pinned check found.
type pinnedTally struct {
	states, pods, pinned, toFit, agreed, bound, unschedulable int
	diffs                                                     []string
}

func (r *report) checkPinned(ctx context.Context, all []*sampled) error {
	t := &pinnedTally{}
	r.pinned = t
	return parallel(len(all), r.opts.workers, func(i int) error {
		s := all[i]
		if len(s.st.incoming) == 0 {
			return nil
		}
		rng := rand.New(rand.NewPCG(r.opts.seed, uint64(i))) //nolint:gosec // Sampled pins, not security.
		st, pinned, toFit, err := pinIncoming(ctx, rng, s)
		if err != nil {
			return fmt.Errorf("pinned check, state %d (%s): %w", i, s.st.family, err)
		}
		v, err := schedule(ctx, st, kube.Default, 1)
		if err != nil {
			return fmt.Errorf("pinned check, state %d (%s): kube-scheduler: %w", i, s.st.family, err)
		}
		sim, err := simulate(ctx, st, s.base, kube.Default, "")
		if err != nil {
			return fmt.Errorf("pinned check, state %d (%s): simulator: %w", i, s.st.family, err)
		}
		o := compare(v, sim)
		r.mu.Lock()
		defer r.mu.Unlock()
		t.states++
		t.pods += o.pods
		t.pinned += pinned
		t.toFit += toFit
		t.unschedulable += o.unschedulable
		t.bound += o.pods - o.unschedulable
		if o.agrees() {
			t.agreed++
		} else {
			t.diffs = append(t.diffs, fmt.Sprintf("state %d (seed %d, %s), pinned:\n%s", i, r.opts.seed, s.st.family, o.diff))
		}
		return nil
	})
}

// pinIncoming is the state with its pods to schedule pinned, three in
// four, each to a node it fits once the pods before it are bound, in the
// simulator (else to any node), and how many it pinned, and to a node it
// fit.
func pinIncoming(ctx context.Context, rng *rand.Rand, s *sampled) (*state, int, int, error) {
	c := s.base.Clone()
	claims := map[string]*resourceapi.ResourceClaim{}
	for _, rc := range s.st.claims {
		claims[rc.Name] = rc.DeepCopy()
	}
	st := *s.st
	st.incoming = make([]incoming, len(s.st.incoming))
	pinned, toFit := 0, 0
	for i, in := range s.st.incoming {
		pod := in.pod.DeepCopy()
		for _, rc := range in.claims {
			claims[rc.Name] = rc.DeepCopy()
		}
		// A copy of the pod to bind in the simulator's clone, for the
		// pods after it to see.
		p, err := kube.NewPod(pod.DeepCopy(), st.claimsOf(pod, claims)...)
		if err != nil {
			return nil, 0, 0, err
		}
		if rng.IntN(4) > 0 {
			e, err := c.Evaluate(ctx, p, kube.Default)
			if err != nil {
				return nil, 0, 0, err
			}
			node := st.nodes[rng.IntN(len(st.nodes))].Name
			if len(e.Scored) > 0 && rng.IntN(4) > 0 {
				node = e.Scored[rng.IntN(len(e.Scored))]
				toFit++
			}
			pod.Spec.Affinity = kube.PinAffinity(pod.Spec.Affinity, node)
			if err := p.SetAffinity(pod.Spec.Affinity); err != nil {
				return nil, 0, 0, err
			}
			pinned++
		}
		st.incoming[i] = incoming{pod: pod, claims: in.claims}
		e, err := c.Evaluate(ctx, p, kube.Default)
		if err != nil {
			return nil, 0, 0, err
		}
		if node := e.Pick(); node != "" {
			if err := c.Bind(p, node, e); err != nil {
				return nil, 0, 0, err
			}
		}
	}
	return &st, pinned, toFit, nil
}

func (t *pinnedTally) render(b *strings.Builder) {
	b.WriteString("\n## Pinned pods\n\nThe steering agent's pin, against the framework: each pod to schedule pinned, three times in four, by a required node affinity by name (kube.PinAffinity, as the agent narrows a held pod), to a node it fits (three in four of those) or to any node; the default profile; compared as in Agreement. A pinned pod is searched on its node alone (NodeAffinity's PreFilter), and binds there or nowhere.\n\n")
	b.WriteString("| States | Pods | Pinned | of which to a node they fit, when pinned | Bound | Fit no node | **Agreement** |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(b, "| %d | %d | %d | %d | %d | %d | **%d (%s)** |\n", t.states, t.pods, t.pinned, t.toFit, t.bound, t.unschedulable, t.agreed, pct(t.agreed, t.states))
}

// pinnedFailures says why -strict fails for the pinned check, or nil.
func (t *pinnedTally) failures() error {
	if t == nil || t.agreed == t.states {
		return nil
	}
	return fmt.Errorf("pinned pods: %d of %d states disagree", t.states-t.agreed, t.states)
}
