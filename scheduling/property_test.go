package scheduling

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/nodeorder"
)

// Objects: the fleet as Schedule reads it.

// Oracles.

// Properties (docs/spec.md#invariants). Every fleet comes from a fixed seed, so a
// failure names the seed that reproduces it.

const propertySeeds = 1000

// TestPropertyWholeNodeEqualsModelplane: with no observations anywhere, the
// plan is the whole-node plan of Modelplane v0.3.
func TestPropertyWholeNodeEqualsModelplane(t *testing.T) {
	placedSome := 0
	for seed := range uint64(propertySeeds) {
		f := genFleet(seeded(seed), genOptions{})
		plan, err := Schedule(f.snapshot())
		if err != nil {
			t.Fatalf("seed %d: Schedule: %v", seed, err)
		}
		got := fromPlan(plan)
		want, short := oracleWholeNode(f)
		if diff := gocmp.Diff(want, got); diff != "" {
			t.Errorf("seed %d: Schedule(...) against the whole-node oracle: -want, +got:\n%s", seed, diff)
		}
		if diff := gocmp.Diff(short, plan.Shortfall, cmpopts.EquateEmpty(), ignoreUnmatched); diff != "" {
			t.Errorf("seed %d: Schedule(...) shortfall against the whole-node oracle: -want, +got:\n%s", seed, diff)
		}
		if slices.ContainsFunc(got, func(p oPlacement) bool { return p.New }) {
			placedSome++
		}
	}
	// The generator must exercise placement, not only retention.
	if placedSome < propertySeeds/6 {
		t.Errorf("only %d of %d fleets placed a new replica; the generator is too tight", placedSome, propertySeeds)
	}
}

// TestPropertyRetainedNeverMove: every retainable replica of the deployment
// keeps its cluster, index and pools, whatever capacity, readiness, other
// replicas and observations say.
func TestPropertyRetainedNeverMove(t *testing.T) {
	retainedSome := 0
	for seed := range uint64(propertySeeds) {
		rng := seeded(seed)
		f := genFleet(rng, genOptions{observe: true})
		want := sortPlacements(oracleScaleDown(oracleRetain(f), int(max(f.d.replicas, 0))))
		if len(want) > 0 {
			retainedSome++
		}
		check := func(what string, f gFleet) {
			t.Helper()
			plan, err := Schedule(f.snapshot())
			if err != nil {
				t.Fatalf("seed %d (%s): Schedule: %v", seed, what, err)
			}
			got := []oPlacement{}
			for _, p := range fromPlan(plan) {
				if !p.New {
					got = append(got, p)
				}
			}
			if diff := gocmp.Diff(want, got); diff != "" {
				t.Errorf("seed %d (%s): retained replicas: -want, +got:\n%s", seed, what, diff)
			}
		}
		check("as generated", f)

		// Everything retention must ignore changes at once.
		g := f
		g.clusters = slices.Clone(f.clusters)
		for i := range g.clusters {
			c := &g.clusters[i]
			c.ready, c.gateway = rng.IntN(2) == 0, rng.IntN(2) == 0
			c.pools = slices.Clone(c.pools)
			for j := range c.pools {
				p := &c.pools[j]
				p.nodes = int64(rng.IntN(2))
				p.obs = nil
				if rng.IntN(2) == 0 {
					p.obs = &PoolObservation{ObservedAt: genAt, ObservedNodes: 1}
				}
			}
		}
		g.replicas = nil
		for _, r := range f.replicas {
			if f.ours(r) {
				r.since = nil
				g.replicas = append(g.replicas, r)
			}
		}
		for range 3 {
			g.replicas = append(g.replicas, gReplica{
				deployment: "squatter", namespace: fx.Namespace, name: fmt.Sprintf("squatter-%d", len(g.replicas)),
				cluster: g.clusters[0].name, engines: []gRepEngine{{name: "main", copies: 50, members: []gRepMember{{
					role: v1alpha1.RoleStandalone, pool: g.clusters[0].pools[0].name,
					stamped: []gStamp{{req: gRequest{kind: kindGPU, count: 1}, class: fx.GPUClass}},
				}}}},
			})
		}
		check("capacity, readiness and other replicas changed", g)
	}
	if retainedSome < propertySeeds/6 {
		t.Errorf("only %d of %d fleets retained a replica; the generator is too loose", retainedSome, propertySeeds)
	}
}

// TestPropertyDeterministic: the same inputs in any order give the same
// plan, and Schedule changes none of its inputs.
func TestPropertyDeterministic(t *testing.T) {
	for seed := range uint64(propertySeeds) {
		rng := seeded(seed)
		f := genFleet(rng, genOptions{observe: true})
		binding := pick(rng, MostFree, LeastFree)
		s := f.snapshot()
		s.Options.Binding = binding
		want, err := Schedule(s)
		if err != nil {
			t.Fatalf("seed %d: Schedule: %v", seed, err)
		}
		before := f.snapshot()
		before.Options.Binding = binding
		if !reflect.DeepEqual(before, s) {
			diff := gocmp.Diff(before, s)
			t.Fatalf("seed %d: Schedule changed its input: -before, +after:\n%s", seed, diff)
		}
		for shuffle := range 2 {
			s := shuffled(rng, f.snapshot())
			s.Options.Binding = binding
			got, err := Schedule(s)
			if err != nil {
				t.Fatalf("seed %d shuffle %d: Schedule: %v", seed, shuffle, err)
			}
			if reflect.DeepEqual(want, got) {
				continue
			}
			if diff := gocmp.Diff(want, got); diff != "" {
				t.Errorf("seed %d shuffle %d: Schedule(shuffled): -want, +got:\n%s", seed, shuffle, diff)
				break
			}
		}
	}
}

// shuffled reorders everything whose order carries no meaning: clusters,
// replicas, and each histogram's buckets.
func shuffled(rng *rand.Rand, s Snapshot) Snapshot {
	rng.Shuffle(len(s.Clusters), func(i, j int) { s.Clusters[i], s.Clusters[j] = s.Clusters[j], s.Clusters[i] })
	rng.Shuffle(len(s.Replicas), func(i, j int) { s.Replicas[i], s.Replicas[j] = s.Replicas[j], s.Replicas[i] })
	for _, c := range s.Clusters {
		for name, obs := range c.Observed {
			o := *obs
			o.Buckets = slices.Clone(o.Buckets)
			rng.Shuffle(len(o.Buckets), func(i, j int) { o.Buckets[i], o.Buckets[j] = o.Buckets[j], o.Buckets[i] })
			c.Observed[name] = &o
		}
	}
	return s
}

// TestPropertyNeverOvercommits: the ledger a pass ends with has no node
// below zero or above its devices, holds exactly the nodes the pool started
// with, and has lost exactly the devices charged and placed on it.
func TestPropertyNeverOvercommits(t *testing.T) {
	checked := 0
	for seed := range uint64(propertySeeds) {
		f := genFleet(seeded(seed), genOptions{observe: true})
		for _, b := range []Binding{MostFree, LeastFree} {
			s := f.snapshot()
			s.Options.Binding = b
			plan, p, err := schedule(s)
			if err != nil {
				t.Fatalf("seed %d: schedule: %v", seed, err)
			}
			if p.ledger == nil {
				continue
			}
			checked++
			for _, msg := range overcommits(f, plan, p, true) {
				t.Errorf("seed %d, %s: %s", seed, b, msg)
			}
		}
	}
	if checked < propertySeeds/2 {
		t.Errorf("only %d passes built a ledger; the generator is too loose", checked)
	}
}

// overcommits lists every way the ledger a pass ended with breaks the
// invariants. With exact, it also checks device conservation, which holds
// only while no count is clamped at maxCount.
func overcommits(f gFleet, plan *Plan, p *pass, exact bool) []string {
	var out []string
	// Which free-device pools hold charged pods that do not all fit, read
	// off the node-by-node oracle (for exact checks only: it lays out every
	// node): those pods take what is free, and the ones that fit no node
	// hold one whole.
	var unfit map[string]bool
	if exact {
		var kept []oPlacement
		for _, k := range fromPlan(plan) {
			if !k.New {
				kept = append(kept, k)
			}
		}
		unfit = oracleCharge(f, p.binding, kept).unfit
	}
	for _, c := range f.clusters {
		ledgers := p.ledger[c.name]
		if len(ledgers) != len(c.pools) {
			out = append(out, fmt.Sprintf("cluster %s has %d pool ledgers, want %d", c.name, len(ledgers), len(c.pools)))
			continue
		}
		for pi, gp := range c.pools {
			l := ledgers[pi]
			pl := p.clusters[c.name].pools[pi]
			var start *poolLedger
			if gp.obs != nil {
				start = newFreeDeviceLedger(pl, gp.obs)
			} else {
				start = newWholeNodeLedger(pl.nodes)
			}
			where := fmt.Sprintf("cluster %s pool %s", c.name, gp.name)
			if l.whole != start.whole {
				out = append(out, where+": accounting changed during the pass")
				continue
			}
			width := 1
			if !l.whole {
				width = len(pl.devices)
			}
			for _, g := range l.groups {
				if g.count < 0 || len(g.free) != width {
					out = append(out, fmt.Sprintf("%s: group %+v", where, g))
				}
				for k, n := range g.free {
					limit := int64(1)
					if !l.whole {
						limit = emptyNode(pl)[k]
					}
					if n < 0 || n > limit {
						out = append(out, fmt.Sprintf("%s: a node has %d free of device %d, outside [0, %d]", where, n, k, limit))
					}
				}
			}
			if !exact {
				continue
			}
			before, after := totals(start), totals(l)
			if before.nodes != after.nodes {
				out = append(out, fmt.Sprintf("%s: holds %d nodes, started with %d", where, after.nodes, before.nodes))
			}
			charged := chargedClaims(f, plan, c, gp, pl, l.whole)
			placed := placedClaims(f, plan, c, gp, pl, l.whole)
			for k := range before.free {
				used := before.free[k] - after.free[k]
				switch {
				case l.saturated && placed[k] != 0:
					out = append(out, fmt.Sprintf("%s: saturated, yet %d of device %d placed on it", where, placed[k], k))
				case l.saturated && used > charged[k]:
					out = append(out, fmt.Sprintf("%s: saturated, yet %d of device %d used, more than the %d charged", where, used, k, charged[k]))
				case unfit[poolKey(c.name, gp.name)] && used < placed[k]:
					out = append(out, fmt.Sprintf("%s: %d of device %d used, less than the %d placed", where, used, k, placed[k]))
				case !l.saturated && !unfit[poolKey(c.name, gp.name)] && used != charged[k]+placed[k]:
					out = append(out, fmt.Sprintf("%s: %d of device %d used, want %d charged + %d placed", where, used, k, charged[k], placed[k]))
				}
			}
		}
	}
	return out
}

type ledgerTotals struct {
	nodes int64
	free  []int64 // whole-node: free nodes
}

func totals(l *poolLedger) ledgerTotals {
	var t ledgerTotals
	for _, g := range l.groups {
		t.nodes += g.count
		if t.free == nil {
			t.free = make([]int64, len(g.free))
		}
		for k, n := range g.free {
			t.free[k] += g.count * n
		}
	}
	return t
}

// chargedClaims is, per pool device (per node for a whole-node pool), what
// the observed replicas the pass must count hold on a pool: every other
// deployment's and each retained one of this deployment, less those the
// pool's histogram already counts.
func chargedClaims(f gFleet, plan *Plan, c gCluster, gp gPool, pl *pool, whole bool) []int64 {
	kept := map[[2]any]bool{}
	for _, r := range plan.Replicas {
		if !r.New {
			kept[[2]any{r.Cluster, r.Index}] = true
		}
	}
	out := make([]int64, max(len(pl.devices), 1))
	for _, r := range f.replicas {
		if r.cluster != c.name || f.ours(r) && !kept[[2]any{r.cluster, r.index}] {
			continue
		}
		if gp.obs != nil && r.since != nil && r.since.Before(gp.obs.ObservedAt) {
			continue
		}
		for _, e := range r.engines {
			for _, m := range e.members {
				if m.pool != gp.name || len(m.stamped) == 0 {
					continue
				}
				pods := podsOf(m.role, m.workers, e.copies)
				if whole {
					out[0] += pods
					continue
				}
				for k, n := range stampClaim(gp, m.stamped) {
					out[k] += pods * n
				}
			}
		}
	}
	return out
}

// placedClaims is what the pass's new placements claim on a pool, read off
// the plan: each resolved request names its device by class.
func placedClaims(f gFleet, plan *Plan, c gCluster, gp gPool, pl *pool, whole bool) []int64 {
	out := make([]int64, max(len(pl.devices), 1))
	for _, r := range plan.Replicas {
		if !r.New || r.Cluster != c.name {
			continue
		}
		for ei, e := range r.Engines {
			de := f.d.engines[ei]
			for mi, m := range e.Members {
				if m.Pool != gp.name || len(m.DeviceRequests) == 0 {
					continue
				}
				dm := de.members[mi]
				pods := podsOf(dm.role, dm.workers, de.copies)
				if whole {
					out[0] += pods
					continue
				}
				for _, dr := range m.DeviceRequests {
					k := slices.IndexFunc(gp.devices, func(d gDevice) bool { return d.kind.class == dr.DeviceClassName })
					out[k] += pods * dr.Count
				}
			}
		}
	}
	return out
}

// TestPropertyGangsTakeDistinctNodes: a gang reserved on any ledger moves
// one node per pod, each from a node that was there before the gang, so no
// two of its pods share a node; a gang that does not fit changes nothing.
func TestPropertyGangsTakeDistinctNodes(t *testing.T) {
	fits := 0
	for seed := range uint64(20 * propertySeeds) {
		rng := seeded(seed)
		width := 1 + rng.IntN(3)
		l := &poolLedger{}
		for range 1 + rng.IntN(4) {
			free := make([]int64, width)
			for k := range free {
				free[k] = int64(rng.IntN(9))
			}
			l.add(int64(1+rng.IntN(3)), free)
		}
		var gang [][]int64
		for range 1 + rng.IntN(5) {
			c := make([]int64, width)
			for k := range c {
				c[k] = int64(rng.IntN(5))
			}
			gang = append(gang, c)
		}
		// Biggest claims first, as gangsOf lays a gang out.
		slices.SortStableFunc(gang, func(a, b []int64) int { return cmp.Compare(sum(b), sum(a)) })
		b := pick(rng, MostFree, LeastFree)
		before := ledgerNodes(l)
		moves, ok := l.reserveGang(gang, b)
		after := ledgerNodes(l)
		if !ok {
			if diff := gocmp.Diff(before, after); diff != "" {
				t.Errorf("seed %d: a gang %v that did not fit changed the ledger: -before, +after:\n%s", seed, gang, diff)
			}
			// With one device kind, biggest claim first onto the most (or
			// the least fitting) free node is complete: a gang is refused
			// only when no assignment to distinct nodes exists. With more
			// kinds the greedy can refuse a gang that fits, as the cluster's
			// scheduler binding pods one at a time can; that is safe.
			if width == 1 && distinctFit(before, gang) {
				t.Errorf("seed %d (%s): one-kind gang %v fits %v on distinct nodes, yet was refused", seed, b, gang, before)
			}
			continue
		}
		fits++
		if len(moves) != len(gang) {
			t.Errorf("seed %d: %d moves for a gang of %d", seed, len(moves), len(gang))
			continue
		}
		// Replay: every move takes a node that existed before the gang
		// (with multiplicity: distinct nodes) and leaves it with its claim
		// taken; the result is the ledger after.
		replay := maps.Clone(before)
		claims := slices.Clone(gang)
		for _, m := range moves {
			from, to := fmt.Sprint(m.from), fmt.Sprint(m.to)
			if replay[from] == 0 {
				t.Errorf("seed %d: gang %v on %v: a move takes a node with %s free that is not there (pods share a node?)", seed, gang, before, from)
				break
			}
			replay[from]--
			if replay[from] == 0 {
				delete(replay, from)
			}
			replay[to]++
			ci := slices.IndexFunc(claims, func(c []int64) bool {
				for k := range c {
					if m.from[k]-c[k] != m.to[k] {
						return false
					}
				}
				return true
			})
			if ci < 0 {
				t.Errorf("seed %d: move %v -> %v is no pod's claim of gang %v", seed, m.from, m.to, gang)
				break
			}
			claims = slices.Delete(claims, ci, ci+1)
			for _, n := range m.to {
				if n < 0 {
					t.Errorf("seed %d: move %v -> %v leaves a node negative", seed, m.from, m.to)
				}
			}
		}
		if diff := gocmp.Diff(replay, after); diff != "" {
			t.Errorf("seed %d: replaying the moves of gang %v on distinct nodes of %v: -replay, +ledger:\n%s", seed, gang, before, diff)
		}
	}
	if fits < propertySeeds {
		t.Errorf("only %d gangs fit; the generator is too tight", fits)
	}
}

// distinctFit reports whether the pods of a gang can each take a distinct
// node of the multiset with their claim free, by brute force.
func distinctFit(nodes map[string]int64, gang [][]int64) bool {
	var free [][]int64
	for k, n := range nodes {
		var v []int64
		for f := range strings.FieldsSeq(strings.Trim(k, "[]")) {
			var x int64
			fmt.Sscan(f, &x)
			v = append(v, x)
		}
		for range n {
			free = append(free, v)
		}
	}
	usedNode := make([]bool, len(free))
	var try func(i int) bool
	try = func(i int) bool {
		if i == len(gang) {
			return true
		}
		for j := range free {
			if !usedNode[j] && nodeorder.Covers(free[j], gang[i]) {
				usedNode[j] = true
				if try(i + 1) {
					return true
				}
				usedNode[j] = false
			}
		}
		return false
	}
	return try(0)
}

// TestPropertyGangOnIdenticalNodes: a gang of k pods each claiming c, placed
// by a whole pass on a pool of n identical nodes with f free, takes exactly
// k distinct nodes when k <= n and c <= f, and nothing otherwise, even when
// one node could hold several of its pods.
func TestPropertyGangOnIdenticalNodes(t *testing.T) {
	for n := int64(1); n <= 4; n++ {
		for k := int64(2); k <= 5; k++ {
			for _, f := range []int64{2, 4, 8} {
				for _, c := range []int64{1, 2, 4} {
					for _, b := range []Binding{MostFree, LeastFree} {
						d := fx.Deployment("m").Engines(fx.Gang("main", k-1, fx.Request("gpu", c, `device.driver == "gpu.nvidia.com"`))).Obj()
						pool := fx.Pool("p", n).Devices(fx.GPU("gpu", f, "80Gi")).Obj()
						obs := &PoolObservation{ObservedAt: genAt, ObservedNodes: n, Buckets: []Bucket{{Nodes: n, Free: map[string]int64{"gpu": f}}}}
						s := Snapshot{Deployment: d, Clusters: []Cluster{{Object: fx.Cluster("a").Pools(pool).Obj(), Observed: map[string]*PoolObservation{"p": obs}}}}
						s.Options.Binding = b
						plan, p, err := schedule(s)
						if err != nil {
							t.Fatal(err)
						}
						fits := k <= n && c <= f
						want := map[string]int64{fmt.Sprint([]int64{f}): n}
						if fits {
							want = map[string]int64{fmt.Sprint([]int64{f - c}): k}
							if n > k {
								want[fmt.Sprint([]int64{f})] = n - k
							}
						}
						name := fmt.Sprintf("gang of %d pods x %d gpu on %d nodes x %d free, %s", k, c, n, f, b)
						if got := len(plan.Replicas) == 1; got != fits {
							t.Errorf("%s: placed %t, want %t", name, got, fits)
						}
						if diff := gocmp.Diff(want, ledgerNodes(p.ledger["a"][0])); diff != "" {
							t.Errorf("%s: ledger: -want, +got:\n%s", name, diff)
						}
					}
				}
			}
		}
	}
}

// TestPropertyPlanIsAFixedPoint: once a plan's replicas exist, the next
// reconcile over the same fleet keeps every one of them exactly where it
// is, and when the first plan placed every wanted replica, the next plan is
// the same plan with nothing new.
func TestPropertyPlanIsAFixedPoint(t *testing.T) {
	for seed := range uint64(propertySeeds / 2) {
		rng := seeded(seed)
		f := genFleet(rng, genOptions{observe: seed%2 == 0})
		binding := pick(rng, MostFree, LeastFree)
		s := f.snapshot()
		s.Options.Binding = binding
		first, err := Schedule(s)
		if err != nil {
			t.Fatalf("seed %d: Schedule: %v", seed, err)
		}

		// The fleet once Crossplane has applied the plan: other deployments'
		// replicas as they were, this deployment's exactly as planned.
		g := f
		g.replicas = nil
		for _, r := range f.replicas {
			if !f.ours(r) {
				g.replicas = append(g.replicas, r)
			}
		}
		for _, p := range first.Replicas {
			g.replicas = append(g.replicas, replicaOf(f, p))
		}
		s = g.snapshot()
		s.Options.Binding = binding
		second, err := Schedule(s)
		if err != nil {
			t.Fatalf("seed %d: Schedule (second): %v", seed, err)
		}

		want := fromPlan(first)
		for i := range want {
			want[i].New = false
		}
		got := fromPlan(second)
		if first.Shortfall != nil {
			// More may fit now; what was placed must stay.
			got = slices.DeleteFunc(got, func(p oPlacement) bool { return p.New })
		}
		if diff := gocmp.Diff(want, got); diff != "" {
			t.Errorf("seed %d (%s): the second reconcile moved the first's replicas: -first, +second:\n%s", seed, binding, diff)
		}
	}
}

// replicaOf is the ModelReplica a placement composes, as it is observed on
// the next reconcile: not yet scheduled.
func replicaOf(f gFleet, p Placement) gReplica {
	r := gReplica{
		deployment: f.d.name, namespace: f.d.namespace, cluster: p.Cluster, index: p.Index,
		name: fmt.Sprintf("%s-%s-%d-planned", f.d.name, p.Cluster, p.Index),
	}
	for ei, e := range p.Engines {
		de := f.d.engines[ei]
		re := gRepEngine{name: e.Name, copies: de.copies}
		for mi, m := range e.Members {
			dm := de.members[mi]
			rm := gRepMember{role: m.Role, workers: dm.workers, pool: m.Pool}
			for _, dr := range m.DeviceRequests {
				ri := slices.IndexFunc(dm.reqs, func(q gRequest) bool { return q.kind.name == dr.Name })
				rm.stamped = append(rm.stamped, gStamp{req: dm.reqs[ri], class: dr.DeviceClassName})
			}
			re.members = append(re.members, rm)
		}
		r.engines = append(r.engines, re)
	}
	return r
}

// TestPropertySteeredIgnoresAssumedBinding: where every usable report says
// binding Steered, the assumed binding changes nothing: the same plan and
// the same ledger under MostFree and LeastFree (docs/spec.md#assumed-binding).
func TestPropertySteeredIgnoresAssumedBinding(t *testing.T) {
	differ := 0
	for seed := range uint64(propertySeeds) {
		f := genFleet(seeded(seed), genOptions{observe: true})
		plans := map[Binding]*Plan{}
		for _, steered := range []bool{true, false} {
			for _, c := range f.clusters {
				for _, p := range c.pools {
					if p.obs != nil {
						p.obs.Steered = steered
					}
				}
			}
			for _, b := range []Binding{MostFree, LeastFree} {
				s := f.snapshot()
				s.Options.Binding, s.Options.Capacity = b, CapacityGroups
				plan, err := Schedule(s)
				if err != nil {
					t.Fatalf("seed %d: Schedule: %v", seed, err)
				}
				plans[b] = plan
			}
			diff := gocmp.Diff(plans[MostFree], plans[LeastFree])
			switch {
			case steered && diff != "":
				t.Errorf("seed %d: every report steered, MostFree against LeastFree: -MostFree, +LeastFree:\n%s", seed, diff)
			case !steered && diff != "":
				differ++
			}
		}
	}
	// Else the fleets would not tell the bindings apart, and the property
	// would hold for want of a difference.
	if differ < propertySeeds/20 {
		t.Errorf("only %d of %d fleets planned differently under MostFree and LeastFree unsteered; the generator is too loose", differ, propertySeeds)
	}
}

// TestPropertyFreeDeviceEqualsNodeOracle: with agent reports, the plan is
// the one a node-by-node reading of the contract gives.
func TestPropertyFreeDeviceEqualsNodeOracle(t *testing.T) {
	for seed := range uint64(propertySeeds) {
		rng := seeded(seed)
		f := genFleet(rng, genOptions{observe: true})
		b := pick(rng, MostFree, LeastFree)
		s := f.snapshot()
		s.Options.Binding = b
		plan, err := Schedule(s)
		if err != nil {
			t.Fatalf("seed %d: Schedule: %v", seed, err)
		}
		if diff := gocmp.Diff(oracleFreeDevice(f, b), fromPlan(plan)); diff != "" {
			t.Errorf("seed %d (%s): Schedule(...) against the node-by-node oracle: -want, +got:\n%s", seed, b, diff)
		}
	}
}

// withWaits makes random replicas of a snapshot wait for their pods (some
// long enough to be stuck, some Ready, some having moved before), at a
// random clock.
func withWaits(rng *rand.Rand, s Snapshot) Snapshot {
	s.Now = genAt.Add(time.Duration(rng.IntN(48)) * time.Hour)
	s.Options.ReplaceUnscheduledAfter = pick(rng, 0, time.Minute, 15*time.Minute, 15*time.Minute)
	for i := range s.Replicas {
		r := &s.Replicas[i]
		if rng.IntN(2) == 0 {
			continue
		}
		since := s.Now.Add(-time.Duration(rng.IntN(600)) * time.Minute)
		r.ScheduledSince, r.UnscheduledSince = nil, &since
		r.Ready = rng.IntN(8) == 0
		if rng.IntN(3) == 0 {
			m := Replacement{Moves: rng.IntN(MaxMoves + 1), MovedAt: s.Now.Add(-time.Duration(rng.IntN(120)) * time.Minute)}
			for _, c := range s.Clusters {
				for _, p := range c.Object.Status.GPUPools {
					if rng.IntN(3) == 0 {
						m.StuckOn = append(m.StuckOn, PoolRef{Cluster: c.Object.Metadata.Name, Pool: p.Name})
					}
				}
			}
			obj := *r.Object
			obj.Metadata.Annotations = map[string]string{v1alpha1.AnnotationReplacement: m.String()}
			r.Object = &obj
		}
	}
	return s
}

// TestPropertyReplacing: over random fleets, waits and clocks, re-placing
// moves each stuck replica at most once, never a replica whose pods are all
// bound or that is Ready, never onto a pool it is or was stuck on, and never
// lowers the number of the deployment's replicas carried over: as many as
// are kept with the rule off.
func TestPropertyReplacing(t *testing.T) {
	moved := 0
	for seed := range uint64(propertySeeds) {
		rng := seeded(seed)
		f := genFleet(rng, genOptions{observe: rng.IntN(2) == 0})
		s := withWaits(rng, f.snapshot())
		on, p, err := schedule(s)
		if err != nil {
			t.Fatalf("seed %d: schedule: %v", seed, err)
		}
		offSnapshot := s
		offSnapshot.Options.ReplaceUnscheduledAfter = 0
		off, err := Schedule(offSnapshot)
		if err != nil {
			t.Fatalf("seed %d: Schedule: %v", seed, err)
		}
		byName := map[string]Replica{}
		for _, r := range s.Replicas {
			byName[r.Object.Metadata.Name] = r
		}
		names := map[string]bool{}
		for _, m := range on.Moves {
			moved++
			r, ok := byName[m.Name]
			switch {
			case !ok:
				t.Errorf("seed %d: moved %q, no replica of the fleet", seed, m.Name)
				continue
			case names[m.Name]:
				t.Errorf("seed %d: %s moved twice in one call", seed, m.Name)
			case r.UnscheduledSince == nil || r.Ready:
				t.Errorf("seed %d: %s moved, but its pods are all bound or it is Ready", seed, m.Name)
			}
			names[m.Name] = true
			memory, _ := ParseReplacement(r.Object.Metadata.Annotations[v1alpha1.AnnotationReplacement])
			for _, to := range m.To {
				if slices.Contains(m.From, to) || slices.Contains(memory.StuckOn, to) {
					t.Errorf("seed %d: %s moved onto %s, where it was stuck", seed, m.Name, to)
				}
			}
		}
		carried := func(plan *Plan) int {
			n := 0
			for _, r := range plan.Replicas {
				if !r.New || (r.Replacement != nil && r.Replacement.MovedAt.Equal(s.Now)) {
					n++
				}
			}
			return n
		}
		if got, want := carried(on), carried(off); got != want {
			t.Errorf("seed %d: %d of the deployment's replicas carried over with re-placing, %d without", seed, got, want)
		}
		if p.ledger != nil {
			for _, msg := range overcommits(f, on, p, false) {
				t.Errorf("seed %d: %s", seed, msg)
			}
		}
	}
	if moved < propertySeeds/40 {
		t.Errorf("only %d moves over %d fleets: the generator rarely makes a stuck replica that can move", moved, propertySeeds)
	}
}
