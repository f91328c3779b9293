package sim

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/modelplaneai/fleet-scheduler/agent"
)

// AgreementLegend says what the bucket-level agreement table counts.
const AgreementLegend = `Bucket-level agreement: for each claiming pod bound, whether the node it
bound to had, just before, the free GPUs of the group of nodes the ledger
assumed the pod binds to, in the call that placed its replica
(scheduling.PodNode). Where every pod agrees, the ledger's histogram is
the cluster's. A pod counts only where its replica was placed on a pool
with a usable report (a whole-node pool's ledger assumes no node's free
GPUs), so whole-node runs have no row. "In a group" matches the pod
against the groups assumed for the pods interchangeable with it: those of
the same call, pool, engine and claim. The ledger places one deployment's
new replicas in index order and the agent decides them in name order, so
two alike may swap nodes: "own replica's" matches a pod against its own
replica's pods only. Each group is matched once. Under the steering
binders the first columns count the pods the agent decided to a node. The
last two count apart the pods it released unpinned (bound later by
kube-scheduler, if at all), and those kube-default bound while no live
agent held them (a silent agent's).
`

// WriteAgreement writes, per scenario, mode and binder, how many claiming
// pods bound on a node of a group the ledger assumed for them.
func WriteAgreement(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| Scenario | Mode | Binder | Claiming pods bound | with groups assumed | in a group | in their own replica's group | released unpinned: bound / in a group | bound with no agent holding them: bound / in a group |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		g, u, h := r.Result.Binds.Groups, r.Result.Binds.Unpinned, r.Result.Binds.Unheld
		if g.Grouped == 0 && u.Pods == 0 && h.Grouped == 0 {
			continue
		}
		apart := func(a Agreement) string {
			if !r.Binder.steers() {
				return "-"
			}
			return fmt.Sprintf("%d / %d", a.Pods, a.InGroup)
		}
		share := func(n int) string {
			if g.Grouped == 0 {
				return "-"
			}
			return fmt.Sprintf("%d (%s)", n, pct1(n, g.Grouped))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %s | %s | %s | %s |\n", r.Scenario.Name, r.Mode.Name, r.Binder,
			g.Pods, g.Grouped, share(g.InGroup), share(g.InOwnGroup), apart(u), apart(h))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// pct1 is n of total as a percentage with one decimal, never rounded up
// to 100.0% short of all.
func pct1(n, total int) string {
	f := float64(n) / float64(total)
	if n < total && f > 0.9995 {
		return "99.9%"
	}
	return pct(f)
}

// SteeringLegend says what the steering table counts.
const SteeringLegend = `Steering decisions (the steered binders only): each held claiming pod is
decided once per round (the agent's window) until released. Pinned pods are
bound at their node through sim/kube's filters and allocator; "not
admitted" counts the pinned pods those turned away (the agent counts
devices, not cpu or memory), deleted and made again with their gang, and
decided again. Unpinned pods fit no node when decided, by Steer's reason: no node
has the claim free, or the gang's pods do not fit distinct nodes together.
They are released as they are and wait for kube-scheduler. With a preferred
node affinity instead of a pin (steered-preferred), "outvoted" counts pods
kube-scheduler bound to another node than the one decided.
`

// WriteSteering writes the steering binders' decisions.
func WriteSteering(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| Scenario | Mode | Binder | Decisions | pinned | not admitted at their node | unpinned (no node free / gang apart) | outvoted | bound nowhere when released |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		if !r.Binder.steers() {
			continue
		}
		st := r.Result.Steering
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %d (%d / %d) | %d | %d |\n", r.Scenario.Name, r.Mode.Name, r.Binder,
			st.Decided, st.Pinned, st.NotAdmitted, st.Unpinned, st.UnpinnedBy[agent.UnpinnedNoNode], st.UnpinnedBy[agent.UnpinnedGang], st.Outvoted, st.Unbound)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Steers says whether any row is a steering binder's.
func Steers(rows []Row) bool {
	return slices.ContainsFunc(rows, func(r Row) bool { return r.Binder.steers() })
}

// PreferredLegend says what the pin-or-prefer report compares.
const PreferredLegend = `A pin or a preference. The steering agent narrows each held pod to the
node it decided: a required node affinity by name (steered), or a
preferred one of weight 100 (steered-preferred), which fails open but
which kube-scheduler's other scores can outvote. NodeAffinity weighs 2 x
100 for the preferred node; the default spreading of one Deployment's
copies (PodTopologySpread) up to 2 x 100, ImageLocality up to 100, and
LeastAllocated and BalancedAllocation (cpu and memory, v0.3's pods
requesting none) 100 each. The scenario's replicas are many copies of one
engine, one Deployment each, where spreading counts. kube-default, with
no agent in front, is the baseline.

- Decided to a node: the pods the agent pinned, or released preferring a
  node. Contested: of those, the pods that kube-scheduler's scores but
  NodeAffinity's rank another node above theirs, where the preference
  had to outweigh them, and the most they did so by (the preference
  weighs 200); outvoted: the pods kube-scheduler bound to
  another node (steered-preferred only). A pinned pod binds at its node
  or waits.
- In a group: bucket-level agreement, as in fleetsim.md.
`

// WritePreferred writes runs of the pin-or-prefer scenario side by side.
func WritePreferred(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| Scenario | Mode | Binder | Decided to a node | contested | outvoted | GPUs allocated, mean over time | Pending pods max / end | Claiming pods with groups assumed | in a group |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		res, st, g := r.Result, r.Stats(), r.Result.Binds.Groups
		contested, outvoted := "-", "-"
		if r.Binder == SteeredPreferred && res.Steering.Pinned > 0 {
			contested = fmt.Sprintf("%d (%s), by up to %d", res.Steering.Contested, pct1(res.Steering.Contested, res.Steering.Pinned), res.Steering.Margin)
			outvoted = fmt.Sprintf("%d (%s)", res.Steering.Outvoted, pct1(res.Steering.Outvoted, res.Steering.Pinned))
		}
		inGroup := "-"
		if g.Grouped > 0 {
			inGroup = fmt.Sprintf("%d (%s)", g.InGroup, pct1(g.InGroup, g.Grouped))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %s | %d / %d | %d | %s |\n", r.Scenario.Name, r.Mode.Name, r.Binder,
			res.Steering.Pinned, contested, outvoted, pct(st.Mean), res.PendingMax, res.PendingEnd, g.Grouped, inGroup)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
