package scheduling

import (
	"cmp"
	"slices"
	"strings"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// oracleResolve is the oracle's matching of a member to a pool: each
// request, greedily in order, takes the first device it selects that has
// count left on a node. It returns the DRA requests resolved, and false when
// a request finds no device.
func oracleResolve(p gPool, m gMember) ([]gStamp, bool) {
	remaining := make([]int64, len(p.devices))
	for k, d := range p.devices {
		remaining[k] = max(d.count, 0)
	}
	var out []gStamp
	for _, r := range m.reqs {
		found := -1
		for k, d := range p.devices {
			if remaining[k] >= r.count && r.satisfies(d) {
				found = k
				break
			}
		}
		if found < 0 {
			return nil, false
		}
		remaining[found] -= r.count
		if d := p.devices[found]; d.kind.dra {
			out = append(out, gStamp{req: r, class: d.kind.class})
		}
	}
	return out, true
}

// deviceRequests is what a member placed with stamps carries.
func deviceRequests(stamps []gStamp) []v1alpha1.DeviceRequest {
	var out []v1alpha1.DeviceRequest
	for _, s := range stamps {
		dr := v1alpha1.DeviceRequest{Name: s.req.kind.name, DeviceClassName: s.class, Count: s.req.count}
		for _, c := range s.req.cel() {
			dr.Selectors = append(dr.Selectors, v1alpha1.Selector{CEL: c})
		}
		out = append(out, dr)
	}
	return out
}

// oPlacement is a placement as the oracles compute it and the properties
// compare it: identity, pools and resolved requests.
type oPlacement struct {
	Cluster string
	Index   int
	New     bool
	Engines []oEngine
}

type oEngine struct {
	Name    string
	Members []oMember
}

type oMember struct {
	Role           string
	Pool           string
	DeviceRequests []v1alpha1.DeviceRequest
}

func fromPlan(p *Plan) []oPlacement {
	out := []oPlacement{}
	for _, r := range p.Replicas {
		op := oPlacement{Cluster: r.Cluster, Index: r.Index, New: r.New}
		for _, e := range r.Engines {
			oe := oEngine{Name: e.Name}
			for _, m := range e.Members {
				oe.Members = append(oe.Members, oMember(m))
			}
			op.Engines = append(op.Engines, oe)
		}
		out = append(out, op)
	}
	return out
}

func sortPlacements(ps []oPlacement) []oPlacement {
	ps = append([]oPlacement{}, ps...)
	slices.SortFunc(ps, func(a, b oPlacement) int {
		return cmp.Or(strings.Compare(a.Cluster, b.Cluster), a.Index-b.Index)
	})
	return ps
}

func (f gFleet) cluster(name string) *gCluster {
	for i := range f.clusters {
		if f.clusters[i].name == name {
			return &f.clusters[i]
		}
	}
	return nil
}

func (c gCluster) pool(name string) *gPool {
	for i := range c.pools {
		if c.pools[i].name == name {
			return &c.pools[i]
		}
	}
	return nil
}

func (f gFleet) ours(r gReplica) bool {
	return r.deployment == f.d.name && r.namespace == f.d.namespace
}

// untolerated reports whether a taint with one of the effects is tolerated
// by none of the tolerations, with Kubernetes semantics.
func untolerated(c *gCluster, tols []v1alpha1.Toleration, effects ...string) bool {
	for _, t := range c.taints {
		if !slices.Contains(effects, t.Effect) {
			continue
		}
		ok := false
		for _, tol := range tols {
			switch {
			case tol.Effect != "" && tol.Effect != t.Effect:
			case tol.Operator == "Exists":
				ok = ok || tol.Key == "" || tol.Key == t.Key
			default:
				ok = ok || (tol.Key == t.Key && tol.Value == t.Value)
			}
		}
		if !ok {
			return true
		}
	}
	return false
}

// sortedReplicas is the fleet's replicas by namespace and name.
func (f gFleet) sortedReplicas() []gReplica {
	rs := slices.Clone(f.replicas)
	slices.SortStableFunc(rs, func(a, b gReplica) int {
		return cmp.Or(strings.Compare(a.namespace, b.namespace), strings.Compare(a.name, b.name))
	})
	return rs
}

// oracleRetain keeps each of this deployment's replicas whose cluster exists
// and does not evict it, whose engines line up with the deployment's by name,
// member count and roles, and whose every member's pinned pool exists and
// matches; each engine must claim something. The first replica of an
// identity wins.
func oracleRetain(f gFleet) []oPlacement {
	var kept []oPlacement
	seen := map[[2]any]bool{}
	for _, r := range f.sortedReplicas() {
		if !f.ours(r) {
			continue
		}
		c := f.cluster(r.cluster)
		id := [2]any{r.cluster, r.index}
		if c == nil || seen[id] || untolerated(c, f.d.tolerations, v1alpha1.TaintNoExecute) {
			continue
		}
		if len(r.engines) != len(f.d.engines) {
			continue
		}
		op := oPlacement{Cluster: r.cluster, Index: r.index}
		ok := true
		// In the deployment's engine order, each matched by name.
		for ei, de := range f.d.engines {
			ri := slices.IndexFunc(r.engines, func(e gRepEngine) bool { return e.name == de.name })
			if ri < 0 || len(r.engines[ri].members) != len(de.members) {
				ok = false
				break
			}
			re := r.engines[ri]
			oe := oEngine{Name: re.name}
			claims := false
			for mi, rm := range re.members {
				m := f.d.engines[ei].members[mi]
				p := c.pool(rm.pool)
				if rm.role != m.role || p == nil {
					ok = false
					break
				}
				stamps, match := oracleResolve(*p, m)
				if !match {
					ok = false
					break
				}
				claims = claims || len(stamps) > 0
				oe.Members = append(oe.Members, oMember{Role: m.role, Pool: p.name, DeviceRequests: deviceRequests(stamps)})
			}
			if !ok || !claims {
				ok = false
				break
			}
			op.Engines = append(op.Engines, oe)
		}
		if !ok {
			continue
		}
		seen[id] = true
		kept = append(kept, op)
	}
	return kept
}

// oracleScaleDown keeps wanted of the kept replicas, reading docs/spec.md#scaling-down
// ("drop the highest index on the most-loaded cluster first, ties: later
// cluster name") as the order a cluster's replicas leave in: ranked on
// their cluster by index, 1 for its lowest, a replica of rank r goes when
// its cluster is down to r and no cluster holds more. So replicas leave by
// rank, highest first, and among equal ranks the later cluster's first:
// drop the first len(kept)-wanted in that order.
func oracleScaleDown(kept []oPlacement, wanted int) []oPlacement {
	if len(kept) <= wanted {
		return slices.Clone(kept)
	}
	type ranked struct {
		p    oPlacement
		rank int
	}
	byCluster := map[string][]oPlacement{}
	for _, k := range kept {
		byCluster[k.Cluster] = append(byCluster[k.Cluster], k)
	}
	var all []ranked
	for _, ps := range byCluster {
		slices.SortFunc(ps, func(a, b oPlacement) int { return cmp.Compare(a.Index, b.Index) })
		for i, p := range ps {
			all = append(all, ranked{p: p, rank: i + 1})
		}
	}
	slices.SortFunc(all, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(b.rank, a.rank), cmp.Compare(b.p.Cluster, a.p.Cluster))
	})
	leaving := map[[2]any]bool{}
	for _, r := range all[:len(kept)-wanted] {
		leaving[[2]any{r.p.Cluster, r.p.Index}] = true
	}
	var out []oPlacement
	for _, k := range kept {
		if !leaving[[2]any{k.Cluster, k.Index}] {
			out = append(out, k)
		}
	}
	return out
}

// oracleWholeNode is Modelplane v0.3's whole-node scheduler, written from
// its description: a pool has nodes free, less pods x copies of every
// claiming member charged to it; an engine costs pods x copies of its
// claiming members and goes to the first pool, in published order, that
// matches and has that many free; each new replica goes to the eligible
// cluster with the fewest of the deployment's replicas, then by name. When
// no cluster can host another, it says why for each, as docs/spec.md#why-a-replica-does-not-fit asks.
func oracleWholeNode(f gFleet) ([]oPlacement, *Shortfall) {
	wanted := int(max(f.d.replicas, 0))
	kept := oracleScaleDown(oracleRetain(f), wanted)
	out := slices.Clone(kept)
	if len(kept) >= wanted {
		return sortPlacements(out), nil
	}
	type key struct{ cluster, pool string }
	free := map[key]int64{}
	for _, c := range f.clusters {
		for _, p := range c.pools {
			free[key{c.name, p.name}] = max(p.nodes, 0)
		}
	}
	keptIDs, load, used := oracleBook(kept)
	for _, r := range f.replicas {
		if f.ours(r) && !keptIDs[[2]any{r.cluster, r.index}] {
			continue
		}
		for _, e := range r.engines {
			for _, m := range e.members {
				if _, ok := free[key{r.cluster, m.pool}]; ok && len(m.stamped) > 0 {
					pods := int64(1)
					if m.role == v1alpha1.RoleWorker {
						pods = m.workers
					}
					free[key{r.cluster, m.pool}] -= pods * e.copies
				}
			}
		}
	}
	// place tries every engine on a trial copy of the cluster's free nodes.
	place := func(c *gCluster) ([]oEngine, map[string]int64, *Reason) {
		trial := map[string]int64{}
		for _, p := range c.pools {
			trial[p.name] = free[key{c.name, p.name}]
		}
		var engines []oEngine
		for _, e := range f.d.engines {
			claimable := make([]bool, len(e.members))
			anyClaimable := false
			for mi, m := range e.members {
				for _, p := range c.pools {
					if stamps, ok := oracleResolve(p, m); ok && len(stamps) > 0 {
						claimable[mi] = true
					}
				}
				anyClaimable = anyClaimable || claimable[mi]
			}
			if !anyClaimable {
				return nil, nil, &Reason{Kind: ReasonNoPoolMatches, Engine: e.name}
			}
			var placed *oEngine
			var short []PoolShortage
			for _, p := range c.pools {
				oe := oEngine{Name: e.name}
				cost := int64(0)
				fits := true
				for mi, m := range e.members {
					stamps, ok := oracleResolve(p, m)
					if !ok || claimable[mi] && len(stamps) == 0 {
						fits = false
						break
					}
					if len(stamps) > 0 {
						cost += m.pods() * e.copies
					}
					oe.Members = append(oe.Members, oMember{Role: m.role, Pool: p.name, DeviceRequests: deviceRequests(stamps)})
				}
				if !fits {
					continue
				}
				if trial[p.name] < 0 {
					short = append(short, PoolShortage{Pool: p.name, WholeNode: true, Saturated: true})
					continue
				}
				if trial[p.name] < cost {
					short = append(short, PoolShortage{Pool: p.name, WholeNode: true, Pods: cost, Have: trial[p.name]})
					continue
				}
				trial[p.name] -= cost
				placed = &oe
				break
			}
			if placed == nil && short == nil {
				return nil, nil, &Reason{Kind: ReasonNoPoolMatches, Engine: e.name}
			}
			if placed == nil {
				return nil, nil, &Reason{Kind: ReasonCapacity, Engine: e.name, Pools: short}
			}
			engines = append(engines, *placed)
		}
		return engines, trial, nil
	}
	names := make([]string, 0, len(f.clusters))
	for _, c := range f.clusters {
		names = append(names, c.name)
	}
	slices.Sort(names)
	for range wanted - len(kept) {
		var best *gCluster
		var bestEngines []oEngine
		var bestTrial map[string]int64
		verdicts := []ClusterVerdict{}
		for _, n := range names {
			c := f.cluster(n)
			switch {
			case !c.ready:
				verdicts = append(verdicts, ClusterVerdict{Cluster: n, Reason: Reason{Kind: ReasonNotReady}})
				continue
			case !c.gateway:
				verdicts = append(verdicts, ClusterVerdict{Cluster: n, Reason: Reason{Kind: ReasonNoGateway}})
				continue
			case untolerated(c, f.d.tolerations, v1alpha1.TaintNoSchedule, v1alpha1.TaintNoExecute):
				verdicts = append(verdicts, ClusterVerdict{Cluster: n, Reason: Reason{Kind: ReasonUntoleratedTaint, Taint: c.taints[0]}})
				continue
			}
			engines, trial, why := place(c)
			if why != nil {
				verdicts = append(verdicts, ClusterVerdict{Cluster: n, Reason: *why})
				continue
			}
			if best == nil || load[c.name] < load[best.name] {
				best, bestEngines, bestTrial = c, engines, trial
			}
		}
		if best == nil {
			return sortPlacements(out), &Shortfall{Clusters: verdicts}
		}
		for p, n := range bestTrial {
			free[key{best.name, p}] = n
		}
		out = append(out, oPlacement{Cluster: best.name, Index: oracleTakeIndex(used, load, best.name), New: true, Engines: bestEngines})
	}
	return sortPlacements(out), nil
}

// podsOf is how many pods a replica member runs across an engine's copies.
func podsOf(role string, workers, copies int64) int64 {
	if role == v1alpha1.RoleWorker {
		return workers * copies
	}
	return copies
}

// stampClaim is what each pod of a member with stamped requests claims of
// each pool device: each request resolves to the first DRA device of its
// class it selects with count left; one that resolves nowhere is charged a
// whole empty node.
func stampClaim(gp gPool, stamps []gStamp) []int64 {
	claim := make([]int64, len(gp.devices))
	for _, s := range stamps {
		found := -1
		for k, d := range gp.devices {
			if d.kind.dra && d.kind.class == s.class && s.req.satisfies(d) && d.count-claim[k] >= s.req.count {
				found = k
				break
			}
		}
		if found < 0 {
			for k, d := range gp.devices {
				claim[k] = 0
				if d.kind.dra {
					claim[k] = d.count
				}
			}
			return claim
		}
		claim[found] += s.req.count
	}
	return claim
}

// oracleNodes is an independent, node-by-node reading of docs/spec.md#whole-node-accounting and docs/spec.md#free-device-accounting:
// each pool is a list of nodes, each node a list of free counts (one per
// pool device; a single 1/0 under whole-node accounting).
type oracleNodes struct {
	f       gFleet
	binding Binding
	nodes   map[string][][]int64 // cluster/pool -> nodes
	full    map[string]bool      // whole-node pools whose charged pods did not fit
	unfit   map[string]bool      // free-device pools whose charged pods did not fit
	steered map[string]bool      // pools whose report says binding Steered: best fit, whatever binding says
}

func poolKey(cluster, pool string) string { return cluster + "/" + pool }

func newOracleNodes(f gFleet, b Binding) *oracleNodes {
	o := &oracleNodes{f: f, binding: b, nodes: map[string][][]int64{}, full: map[string]bool{}, unfit: map[string]bool{}, steered: map[string]bool{}}
	for _, c := range f.clusters {
		for _, p := range c.pools {
			o.steered[poolKey(c.name, p.name)] = p.obs != nil && p.obs.Steered
			var nodes [][]int64
			if p.obs == nil {
				for range max(p.nodes, 0) {
					nodes = append(nodes, []int64{1})
				}
			} else {
				for _, bk := range p.obs.Buckets {
					for range bk.Nodes {
						free := make([]int64, len(p.devices))
						for k, d := range p.devices {
							if d.kind.dra {
								free[k] = bk.Free[d.kind.name]
							}
						}
						nodes = append(nodes, free)
					}
				}
				for range max(p.nodes-p.obs.ObservedNodes, 0) {
					free := make([]int64, len(p.devices))
					for k, d := range p.devices {
						if d.kind.dra {
							free[k] = d.count
						}
					}
					nodes = append(nodes, free)
				}
			}
			o.nodes[poolKey(c.name, p.name)] = nodes
		}
	}
	return o
}

func (o *oracleNodes) clone() *oracleNodes {
	c := &oracleNodes{f: o.f, binding: o.binding, nodes: map[string][][]int64{}, full: o.full, unfit: o.unfit, steered: o.steered}
	for k, ns := range o.nodes {
		cp := make([][]int64, len(ns))
		for i, n := range ns {
			cp[i] = slices.Clone(n)
		}
		c.nodes[k] = cp
	}
	return c
}

// better reports whether node a of pool key is a better guess than node b
// for a pod claiming c: compare the claimed kinds in device order, then all
// kinds; the fewest is best on a steered pool, whatever the binding.
func (o *oracleNodes) better(key string, a, b, c []int64) bool {
	cmpAt := func(k int) int { return cmp.Compare(a[k], b[k]) }
	r := 0
	for k := range c {
		if c[k] > 0 && r == 0 {
			r = cmpAt(k)
		}
	}
	for k := range a {
		if r == 0 {
			r = cmpAt(k)
		}
	}
	if o.binding == LeastFree || o.steered[key] {
		return r < 0
	}
	return r > 0
}

// reserve puts a gang of pods, each claiming a vector, on distinct nodes,
// or changes nothing and reports false.
func (o *oracleNodes) reserve(key string, gang [][]int64) bool {
	nodes := o.nodes[key]
	taken := make([]bool, len(nodes))
	chosen := make([]int, len(gang))
	for i, c := range gang {
		best := -1
		for j, n := range nodes {
			fits := !taken[j]
			for k := range c {
				fits = fits && n[k] >= c[k]
			}
			if fits && (best < 0 || o.better(key, n, nodes[best], c)) {
				best = j
			}
		}
		if best < 0 {
			return false
		}
		taken[best], chosen[i] = true, best
	}
	for i, c := range gang {
		for k := range c {
			nodes[chosen[i]][k] -= c[k]
		}
	}
	return true
}

// engineGangs lays an engine's claiming pods out: every pod its own gang,
// or, when any member is not Standalone, one gang per copy with its biggest
// claims first: by the sum of the claim, then the claim compared device by
// device, so that the members' order does not matter.
func engineGangs(copies int64, gang bool, members []struct {
	pods  int64
	claim []int64
},
) [][][]int64 {
	var out [][][]int64
	for range copies {
		var g [][]int64
		for _, m := range members {
			if m.claim == nil {
				continue
			}
			for range m.pods {
				if gang {
					g = append(g, m.claim)
				} else {
					out = append(out, [][]int64{m.claim})
				}
			}
		}
		if len(g) > 0 {
			bigger := func(a, b []int64) bool {
				var sa, sb int64
				for k := range a {
					sa, sb = sa+a[k], sb+b[k]
				}
				if sa != sb {
					return sa > sb
				}
				for k := range a {
					if a[k] != b[k] {
						return a[k] > b[k]
					}
				}
				return false
			}
			// Insertion sort, biggest first: nothing shared with the ledger.
			for i := 1; i < len(g); i++ {
				for j := i; j > 0 && bigger(g[j], g[j-1]); j-- {
					g[j], g[j-1] = g[j-1], g[j]
				}
			}
			out = append(out, g)
		}
	}
	return out
}

// reserveUnfit books gangs that do not all fit a free-device pool: each pod
// takes its claim on a distinct node of its gang where one has it free, and
// otherwise holds, whole, the node of its gang's remaining ones with the
// most free (claimed kinds compare as none are claimed: all kinds in
// device order).
func (o *oracleNodes) reserveUnfit(key string, gangs [][][]int64) {
	nodes := o.nodes[key]
	for _, g := range gangs {
		taken := make([]bool, len(nodes))
		for _, c := range g {
			best := -1
			for j, n := range nodes {
				fits := !taken[j]
				for k := range c {
					fits = fits && n[k] >= c[k]
				}
				if fits && (best < 0 || o.better(key, n, nodes[best], c)) {
					best = j
				}
			}
			claim := c
			if best < 0 {
				for j, n := range nodes {
					if !taken[j] && (best < 0 || slices.Compare(n, nodes[best]) > 0) {
						best = j
					}
				}
				if best < 0 {
					break
				}
				claim = slices.Clone(nodes[best])
			}
			taken[best] = true
			for k := range claim {
				nodes[best][k] -= claim[k]
			}
		}
	}
}

// reserveAll reserves gangs one by one; if one does not fit it undoes the
// others and reports false.
func (o *oracleNodes) reserveAll(key string, gangs [][][]int64) bool {
	saved := o.clone().nodes[key]
	for _, g := range gangs {
		if !o.reserve(key, g) {
			o.nodes[key] = saved
			return false
		}
	}
	return true
}

// oracleFreeDevice is the whole pass, node by node: retain and scale down
// as oracleRetain and oracleScaleDown, charge what must be charged, then
// fill one replica at a time.
func oracleFreeDevice(f gFleet, b Binding) []oPlacement {
	wanted := int(max(f.d.replicas, 0))
	kept := oracleScaleDown(oracleRetain(f), wanted)
	out := slices.Clone(kept)
	if len(kept) >= wanted {
		return sortPlacements(out)
	}
	o := oracleCharge(f, b, kept)
	_, load, used := oracleBook(kept)
	type member = struct {
		pods  int64
		claim []int64
	}
	// place reserves a new replica on a cluster, engine by engine, each on
	// the first pool that matches and has room.
	place := func(o *oracleNodes, c *gCluster) []oEngine {
		var engines []oEngine
		for _, e := range f.d.engines {
			claimable := make([]bool, len(e.members))
			for mi, m := range e.members {
				for _, p := range c.pools {
					if stamps, ok := oracleResolve(p, m); ok && len(stamps) > 0 {
						claimable[mi] = true
					}
				}
			}
			if !slices.Contains(claimable, true) {
				return nil
			}
			gang := slices.ContainsFunc(e.members, func(m gMember) bool { return m.role != v1alpha1.RoleStandalone })
			var placed *oEngine
			for _, p := range c.pools {
				oe := oEngine{Name: e.name}
				var ms []member
				fits := true
				for mi, m := range e.members {
					stamps, ok := oracleResolve(p, m)
					if !ok || claimable[mi] && len(stamps) == 0 {
						fits = false
						break
					}
					mm := member{pods: m.pods()}
					if len(stamps) > 0 {
						mm.claim = []int64{1}
						if p.obs != nil {
							mm.claim = stampClaim(p, stamps)
						}
					}
					ms = append(ms, mm)
					oe.Members = append(oe.Members, oMember{Role: m.role, Pool: p.name, DeviceRequests: deviceRequests(stamps)})
				}
				key := poolKey(c.name, p.name)
				if !fits || o.full[key] || !o.reserveAll(key, engineGangs(e.copies, gang, ms)) {
					continue
				}
				placed = &oe
				break
			}
			if placed == nil {
				return nil
			}
			engines = append(engines, *placed)
		}
		return engines
	}
	names := make([]string, 0, len(f.clusters))
	for _, c := range f.clusters {
		names = append(names, c.name)
	}
	slices.Sort(names)
	for range wanted - len(kept) {
		var best *gCluster
		for _, n := range names {
			c := f.cluster(n)
			if !c.ready || !c.gateway || untolerated(c, f.d.tolerations, v1alpha1.TaintNoSchedule, v1alpha1.TaintNoExecute) {
				continue
			}
			if place(o.clone(), c) == nil {
				continue
			}
			if best == nil || load[c.name] < load[best.name] {
				best = c
			}
		}
		if best == nil {
			break
		}
		engines := place(o, best)
		out = append(out, oPlacement{Cluster: best.name, Index: oracleTakeIndex(used, load, best.name), New: true, Engines: engines})
	}
	return sortPlacements(out)
}

// oracleBook is what both oracles track of the kept replicas: their
// identities, how many each cluster hosts, and the indices in use there.
func oracleBook(kept []oPlacement) (map[[2]any]bool, map[string]int, map[string]map[int]bool) {
	keptIDs := map[[2]any]bool{}
	load := map[string]int{}
	used := map[string]map[int]bool{}
	for _, k := range kept {
		keptIDs[[2]any{k.Cluster, k.Index}] = true
		load[k.Cluster]++
		if used[k.Cluster] == nil {
			used[k.Cluster] = map[int]bool{}
		}
		used[k.Cluster][k.Index] = true
	}
	return keptIDs, load, used
}

// oracleCharge is every pool's nodes once what holds them is charged: every
// other deployment's replica and each kept one of the deployment's, on the
// pools they are pinned to, unless the pool's report counts them already.
func oracleCharge(f gFleet, b Binding, kept []oPlacement) *oracleNodes {
	o := newOracleNodes(f, b)
	keptIDs, _, _ := oracleBook(kept)
	type member = struct {
		pods  int64
		claim []int64
	}
	for _, r := range f.sortedReplicas() {
		c := f.cluster(r.cluster)
		if c == nil || f.ours(r) && !keptIDs[[2]any{r.cluster, r.index}] {
			continue
		}
		for _, e := range r.engines {
			gang := slices.ContainsFunc(e.members, func(m gRepMember) bool { return m.role != v1alpha1.RoleStandalone })
			var pools []string
			for _, m := range e.members {
				if !slices.Contains(pools, m.pool) {
					pools = append(pools, m.pool)
				}
			}
			for _, pn := range pools {
				p := c.pool(pn)
				if p == nil || p.obs != nil && r.since != nil && r.since.Before(p.obs.ObservedAt) {
					continue
				}
				var ms []member
				for _, m := range e.members {
					if m.pool != pn {
						continue
					}
					mm := member{pods: podsOf(m.role, m.workers, 1)}
					if len(m.stamped) > 0 {
						mm.claim = []int64{1}
						if p.obs != nil {
							mm.claim = stampClaim(*p, m.stamped)
						}
					}
					ms = append(ms, mm)
				}
				key := poolKey(c.name, pn)
				switch {
				case o.full[key] || o.reserveAll(key, engineGangs(e.copies, gang, ms)):
				case p.obs == nil:
					o.full[key] = true
				default:
					o.unfit[key] = true
					o.reserveUnfit(key, engineGangs(e.copies, gang, ms))
				}
			}
		}
	}
	return o
}

// oracleTakeIndex books a new replica on a cluster at the lowest index not
// in use there, and returns it.
func oracleTakeIndex(used map[string]map[int]bool, load map[string]int, cluster string) int {
	if used[cluster] == nil {
		used[cluster] = map[int]bool{}
	}
	index := 0
	for used[cluster][index] {
		index++
	}
	used[cluster][index] = true
	load[cluster]++
	return index
}
