package agent

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// Environment of TestObservedAtUnderChurn, a measurement, not run by
// default: AGENT_CHURN is how long to churn (e.g. 5m); AGENT_CHURN_ARGS,
// more flags for the agent (e.g. --no-sync-probes).
const (
	envChurn     = "AGENT_CHURN"
	envChurnArgs = "AGENT_CHURN_ARGS"
)

// TestObservedAtUnderChurn measures how old a pool's observedAt is, read
// every 250ms, while claims on its nodes are allocated and deleted every
// 500ms, and checks every status the agent wrote meanwhile against the
// cluster's states. docs/cluster-agent.md reports what it printed.
//
//	AGENT_CHURN=5m go test -C test/live -v -run ObservedAtUnderChurn -timeout 30m ./agent
func TestObservedAtUnderChurn(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv(envChurn))
	if err != nil {
		t.Skipf("SKIP: a measurement: set %s to how long to churn (e.g. 5m)", envChurn)
	}
	cp := startControlPlane(t)
	objs := cp.install(t)
	cp.fixtures(t)
	s := &scenario{cp: cp, rec: cp.record(t), args: deploymentArgs(t, objs), defaults: true}
	s.changes.make(t, cp, "the fixtures", func() {})
	s.kubeconfig = cp.kubeconfig(t, agentSA, "https://"+cp.addr, cp.token(t, agentNS, agentSA))
	var extra []string
	if a := os.Getenv(envChurnArgs); a != "" {
		extra = append(extra, a)
	}
	s.startAgent(t, "agent-churn", extra...)
	// Without probes, the first proof waits for the API server's bookmarks.
	s.reflected(t, true, 3*time.Minute)

	rng := rand.New(rand.NewPCG(1, 2))
	var nodes []string
	for _, p := range testPools {
		for i := range p.nodes {
			nodes = append(nodes, fmt.Sprintf("%s-%d", p.name, i))
		}
	}
	held := map[string]string{} // claim -> node
	var ages []time.Duration
	start := time.Now()
	nextChange, nextSample := start, start
	n := 0
	for time.Since(start) < d {
		now := time.Now()
		if !now.Before(nextChange) {
			nextChange = now.Add(500 * time.Millisecond)
			if len(held) > 0 && (len(held) >= 6 || rng.IntN(2) == 0) {
				var names []string
				for c := range held {
					names = append(names, c)
				}
				slices.Sort(names)
				c := names[rng.IntN(len(names))]
				s.changes.make(t, cp, "delete "+c, func() { cp.deleteClaim(t, c) })
				delete(held, c)
			} else {
				node := nodes[rng.IntN(len(nodes))]
				busy := false
				for _, h := range held {
					busy = busy || h == node
				}
				if !busy {
					n++
					c := "churn-" + strconv.Itoa(n)
					s.changes.make(t, cp, "allocate "+c+" on "+node, func() { cp.allocate(t, c, node, "gpu-0", "gpu-1") })
					held[c] = node
				}
			}
		}
		if !now.Before(nextSample) {
			nextSample = now.Add(250 * time.Millisecond)
			st, err := cp.poolStatus(t.Context(), "l4")
			if err != nil {
				t.Fatal(err)
			}
			ages = append(ages, time.Since(st.observedAt))
		}
		time.Sleep(20 * time.Millisecond)
	}
	slices.Sort(ages)
	q := func(p float64) time.Duration { return ages[int(p*float64(len(ages)-1))].Round(100 * time.Millisecond) }
	writes := 0
	for _, st := range s.rec.all() {
		if st.pool == "l4" {
			writes++
		}
	}
	t.Logf("%s of churn (%d changes, one every 500ms), agent flags %v: l4's observedAt age over %d reads every 250ms: median %s, p90 %s, p99 %s, max %s; %d status writes of l4 seen",
		d, len(s.changes.list)-1, extra, len(ages), q(0.5), q(0.9), q(0.99), ages[len(ages)-1].Round(100*time.Millisecond), writes)
	s.changes.check(t, s.rec.all())
}
