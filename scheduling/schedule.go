package scheduling

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// identity is a replica's (cluster, index).
type identity struct {
	cluster string
	index   int
}

// pass is the state of one scheduling pass.
type pass struct {
	deployment  *v1alpha1.ModelDeployment
	engines     []engine
	clusters    map[string]*cluster
	clusterList []*cluster
	replicas    []Replica
	binding     Binding

	ledger   map[string][]*poolLedger
	programs programCache
	stamped  map[string][]int64

	// now and replaceAfter steer re-placing (replace.go); exclude are the
	// pools a replica being re-placed may not go to.
	now          time.Time
	replaceAfter time.Duration
	exclude      map[PoolRef]bool
}

// Schedule places a deployment's replicas. It keeps every replica it can
// retain, drops the surplus when the deployment shrank, and fills any
// shortfall one replica at a time, spreading before packing. It returns an
// *InvalidSelectorError when a nodeSelector does not compile; being unable to
// place a replica is not an error but a Plan with a Shortfall.
func Schedule(s Snapshot) (*Plan, error) {
	plan, _, err := schedule(s)
	return plan, err
}

// schedule is Schedule, also returning the pass so tests can inspect the
// ledger it ended with.
func schedule(s Snapshot) (*Plan, *pass, error) {
	engines, err := compileEngines(s.Deployment, s.Options.Selectors)
	if err != nil {
		return nil, nil, err
	}
	p := newPass(s, engines)

	wanted := int(min(max(s.Deployment.Spec.Replicas, 0), maxCount))
	asObserved, kept := p.retain()
	// What could not be read is never dropped: dropping it would make
	// Crossplane delete a replica that may be running.
	if len(asObserved)+len(kept) > wanted {
		kept = p.scaleDown(kept, max(wanted-len(asObserved), 0))
	}
	plan := &Plan{Wanted: int64(wanted)}
	stuck := slices.ContainsFunc(kept, func(k keptReplica) bool { return k.stuck })
	if !s.Options.RetainOnly && (len(asObserved)+len(kept) < wanted || stuck) {
		// A stuck replica is charged only if it stays (p.replace).
		ids := make(map[identity]bool, len(asObserved)+len(kept))
		for _, k := range asObserved {
			ids[identity{k.Cluster, k.Index}] = true
		}
		for _, k := range kept {
			if !k.stuck {
				ids[identity{k.Cluster, k.Index}] = true
			}
		}
		p.buildLedger(ids)
		kept, plan.Moves = p.replace(asObserved, kept)
		placements := append(slices.Clone(asObserved), placementsOf(kept)...)
		var placed []Placement
		placed, plan.Shortfall = p.fill(placements, wanted-len(placements))
		kept = append(kept, keptOf(placed)...)
		plan.Capacity = p.capacity(s.Options.Capacity)
	}
	for i := range kept {
		kept[i].Counted = p.counted(kept[i])
	}
	plan.Replicas = append(slices.Clone(asObserved), placementsOf(kept)...)
	plan.Waiting = p.waiting(kept)
	slices.SortFunc(plan.Replicas, func(a, b Placement) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Index, b.Index))
	})
	return plan, p, nil
}

func newPass(s Snapshot, engines []engine) *pass {
	p := &pass{
		deployment:   s.Deployment,
		engines:      engines,
		clusters:     map[string]*cluster{},
		binding:      s.Options.Binding,
		programs:     programCache{shared: s.Options.Selectors, programs: map[string]*program{}},
		now:          s.Now,
		replaceAfter: s.Options.ReplaceUnscheduledAfter,
		stamped:      map[string][]int64{},
	}
	// Sort every input first: the plan must not depend on the order the
	// inputs arrived in.
	kinds := newDeviceKinds()
	clusters := slices.Clone(s.Clusters)
	slices.SortStableFunc(clusters, func(a, b Cluster) int { return cmp.Compare(a.Object.Metadata.Name, b.Object.Metadata.Name) })
	for _, c := range clusters {
		if _, dup := p.clusters[c.Object.Metadata.Name]; dup {
			continue
		}
		cl := newCluster(c, kinds)
		p.clusters[cl.name] = cl
		p.clusterList = append(p.clusterList, cl)
	}
	// Only this deployment's replicas and those that may charge a pool
	// matter; a fleet's other replicas are mostly counted by every report of
	// their cluster, and are left out before the sort.
	countedBefore := make(map[string]time.Time, len(p.clusterList))
	for _, cl := range p.clusterList {
		if before, ok := CountedBefore(Cluster{Object: cl.obj, Observed: cl.observed}); ok {
			countedBefore[cl.name] = before
		}
	}
	p.replicas = make([]Replica, 0, len(s.Replicas)+len(s.Assumed))
	for _, r := range s.Assumed {
		r.Assumed = true
		p.replicas = append(p.replicas, r)
	}
	for _, r := range s.Replicas {
		before, ok := countedBefore[r.Object.Spec.ClusterName]
		if p.ours(r) || !ok || !r.CountedBy(before) {
			p.replicas = append(p.replicas, r)
		}
	}
	slices.SortStableFunc(p.replicas, func(a, b Replica) int {
		return cmp.Or(cmp.Compare(a.Object.Metadata.Namespace, b.Object.Metadata.Namespace),
			cmp.Compare(a.Object.Metadata.Name, b.Object.Metadata.Name))
	})
	return p
}

// ours reports whether a replica is this deployment's.
func (s *pass) ours(r Replica) bool {
	return !r.Assumed && Ours(s.deployment, r.Object.Metadata.Namespace, r.Object.Metadata.Labels[v1alpha1.LabelDeployment], r.Deleting)
}

// Ours reports whether a replica in namespace, whose modelplane.ai/deployment
// label is deployment, is d's (docs/spec.md#whose-replica): every other replica is another
// deployment's, and only ever charged, and so is one being deleted, whose
// pods may still hold devices. It is the one test of the rule, for readers
// that have only a replica's metadata as much as for the scheduler.
func Ours(d *v1alpha1.ModelDeployment, namespace, deployment string, deleting bool) bool {
	return !deleting && deployment == d.Metadata.Name && namespace == d.Metadata.Namespace
}

// identityOf reads a replica's (cluster, index). A missing or malformed index
// label reads as 0, the single-replica-per-cluster case it came from.
func identityOf(r *v1alpha1.ModelReplica) identity {
	return identity{cluster: r.Spec.ClusterName, index: parseIndex(r.Metadata.Labels[v1alpha1.LabelReplicaIndex])}
}

// parseIndex reads an index label as Modelplane v0.3 (Python's int) does: a
// sign and underscores between digits are allowed; anything else, or a
// number past an int, reads as 0.
func parseIndex(s string) int {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "__") || strings.HasSuffix(s, "_") || strings.HasPrefix(strings.TrimLeft(s, "+-"), "_") {
		return 0
	}
	i, err := strconv.Atoi(strings.ReplaceAll(s, "_", ""))
	if err != nil {
		return 0
	}
	return i
}

// retain keeps each of this deployment's replicas whose cluster still exists
// and does not evict it, whose engines and members still line up with the
// deployment's, and whose every pinned pool still exists and matches.
// Retention ignores capacity, readiness and the gateway. A replica, or one
// on a cluster, that could not be read is kept as observed, apart
// (asObserved).
func (s *pass) retain() (asObserved []Placement, kept []keptReplica) {
	seen := map[identity]bool{}
	tolerations := s.deployment.Spec.Template.Spec.Tolerations
	for i := range s.replicas {
		r := s.replicas[i]
		if !s.ours(r) {
			continue
		}
		id := identityOf(r.Object)
		if seen[id] {
			continue
		}
		cl := s.clusters[id.cluster]
		if r.Unreadable != "" || (cl != nil && cl.unreadable != "") {
			// A replica, or a cluster, that did not read cannot be judged:
			// it stays as observed. One whose cluster did not read is known
			// by name only, and does not take an identity from another.
			if id.cluster != "" {
				seen[id] = true
			}
			asObserved = append(asObserved, observedPlacement(r, id))
			continue
		}
		if cl == nil {
			continue
		}
		if cl.untolerated(tolerations, v1alpha1.TaintNoExecute) != nil {
			continue
		}
		engines, ok := s.retainedEngines(cl, r.Object)
		if !ok {
			continue
		}
		seen[id] = true
		kept = append(kept, s.keep(Placement{
			Cluster:       id.cluster,
			Index:         id.index,
			Gateway:       cl.gateway(),
			ClusterLabels: cl.placementLabels(),
			Engines:       engines,
			Name:          r.Object.Metadata.Name,
		}, &s.replicas[i]))
	}
	return asObserved, kept
}

// AsObserved are the deployment's replicas that did not read, each kept
// exactly as observed, as Schedule keeps them: for a caller with no cluster
// to schedule on.
func AsObserved(d *v1alpha1.ModelDeployment, replicas []Replica) []Placement {
	var out []Placement
	for _, r := range replicas {
		if r.Unreadable != "" && Ours(d, r.Object.Metadata.Namespace, r.Object.Metadata.Labels[v1alpha1.LabelDeployment], r.Deleting) {
			out = append(out, observedPlacement(r, identityOf(r.Object)))
		}
	}
	return out
}

// observedPlacement is a replica kept exactly as observed, its engines as
// it lists them.
func observedPlacement(r Replica, id identity) Placement {
	p := Placement{Cluster: id.cluster, Index: id.index, AsObserved: true, Name: r.Object.Metadata.Name}
	for _, e := range r.Object.Spec.Engines {
		ep := EnginePlacement{Name: e.Name}
		for _, m := range e.Members {
			ep.Members = append(ep.Members, MemberPlacement{Role: roleOf(m.Role), Pool: m.NodePoolName, DeviceRequests: m.DeviceRequests})
		}
		p.Engines = append(p.Engines, ep)
	}
	return p
}

// retainedEngines re-resolves an observed replica's members against their
// pinned pools with the deployment's current nodeSelectors, in the
// deployment's engine order (docs/spec.md#composed-modelreplicas: engines mirror the deployment's),
// whatever order the replica lists them in. The replica's engines must be
// the deployment's: as many, of the same names.
func (s *pass) retainedEngines(cl *cluster, r *v1alpha1.ModelReplica) ([]EnginePlacement, bool) {
	if len(r.Spec.Engines) != len(s.engines) {
		return nil, false
	}
	out := make([]EnginePlacement, 0, len(s.engines))
	for ei := range s.engines {
		oi := slices.IndexFunc(r.Spec.Engines, func(e v1alpha1.ReplicaEngine) bool { return e.Name == s.engines[ei].name })
		if oi < 0 || len(r.Spec.Engines[oi].Members) != len(s.engines[ei].members) {
			return nil, false
		}
		observed := r.Spec.Engines[oi]
		ep := EnginePlacement{Name: observed.Name}
		matches := make([]*memberMatch, 0, len(observed.Members))
		for mi, om := range observed.Members {
			m := &s.engines[ei].members[mi]
			if roleOf(om.Role) != m.role || om.NodePoolName == "" {
				return nil, false
			}
			p := cl.poolByID[om.NodePoolName]
			if p == nil {
				return nil, false
			}
			mm := cl.match(p, s.engines, ei, mi)
			if mm == nil {
				return nil, false
			}
			matches = append(matches, mm)
			ep.Members = append(ep.Members, MemberPlacement{Role: m.role, Pool: p.name, DeviceRequests: mm.requests})
		}
		if !engineClaims(matches) {
			return nil, false
		}
		out = append(out, ep)
	}
	return out, true
}

// scaleDown drops replicas until wanted remain, as a ReplicaSet ranks its
// pods (docs/spec.md#re-placing): stuck replicas first, then those whose pods are not
// all scheduled, then each time the highest index on the cluster hosting
// the most, ties going to the later cluster name (docs/spec.md#scaling-down). With no
// PodsScheduled False anywhere, that is 4.1's order alone.
func (s *pass) scaleDown(kept []keptReplica, wanted int) []keptReplica {
	kept = slices.Clone(kept)
	for len(kept) > wanted {
		load := map[string]int{}
		for _, k := range kept {
			load[k.Cluster]++
		}
		victim := 0
		for i, k := range kept {
			v := kept[victim]
			if c := cmp.Or(cmp.Compare(k.dropFirst(), v.dropFirst()), cmp.Compare(load[k.Cluster], load[v.Cluster]), cmp.Compare(k.Cluster, v.Cluster), cmp.Compare(k.Index, v.Index)); c > 0 {
				victim = i
			}
		}
		kept = slices.Delete(kept, victim, victim+1)
	}
	return kept
}

// fill places n new replicas one at a time, each on the eligible cluster
// hosting the fewest of this deployment's replicas (ties: cluster name) at
// the lowest free index there. It stops early when no cluster can host
// another, and says why for each.
func (s *pass) fill(kept []Placement, n int) ([]Placement, *Shortfall) {
	load, used := loadOf(kept)
	// No index below from[cluster] is free there: fill only takes indexes,
	// so each search starts where the last ended, not at 0 (a deployment of
	// a million replicas searched 5e11 indexes).
	from := map[string]int{}
	var placed []Placement
	for range n {
		best, res, verdicts := s.chooseCluster(load)
		if best == nil {
			return placed, newShortfall(verdicts)
		}
		if used[best.name] == nil {
			used[best.name] = map[int]bool{}
		}
		index := lowestFreeIndex(used[best.name], from[best.name])
		used[best.name][index] = true
		from[best.name] = index + 1
		load[best.name]++
		placed = append(placed, Placement{
			Cluster:       best.name,
			Index:         index,
			Gateway:       best.gateway(),
			ClusterLabels: best.placementLabels(),
			Engines:       res.engines,
			New:           true,
		})
	}
	return placed, nil
}

// chooseCluster finds the cluster a new replica goes to: of those that pass
// the filters and fit it, the best by fillScore. It returns the cluster and
// the replica reserved on it, or, when none can host it, why each cannot.
func (s *pass) chooseCluster(load map[string]int) (*cluster, *reservation, []ClusterVerdict) {
	tolerations := s.deployment.Spec.Template.Spec.Tolerations
	var best *cluster
	var verdicts []ClusterVerdict
	for _, cl := range s.clusterList {
		if why := cl.newReplicaFilter(tolerations); why != nil {
			verdicts = append(verdicts, ClusterVerdict{Cluster: cl.name, Reason: *why})
			continue
		}
		res, why := s.reserveReplica(cl)
		if why != nil {
			verdicts = append(verdicts, ClusterVerdict{Cluster: cl.name, Reason: *why})
			continue
		}
		res.undo()
		if best == nil || fillScore(load, cl) > fillScore(load, best) {
			best = cl
		}
	}
	if best == nil {
		return nil, nil, verdicts
	}
	// The trial on best was undone exactly, so reserving again gives the
	// same placement; a failure here would be a ledger bug, and places
	// nothing rather than a replica the ledger did not book.
	res, why := s.reserveReplica(best)
	if why != nil {
		return nil, nil, []ClusterVerdict{{Cluster: best.name, Reason: *why}}
	}
	return best, res, nil
}

// loadOf is how many replicas each cluster hosts, and the indices in use.
func loadOf(placements []Placement) (map[string]int, map[string]map[int]bool) {
	load := map[string]int{}
	used := map[string]map[int]bool{}
	for _, k := range placements {
		load[k.Cluster]++
		if used[k.Cluster] == nil {
			used[k.Cluster] = map[int]bool{}
		}
		used[k.Cluster][k.Index] = true
	}
	return load, used
}

// fillScore ranks a cluster that can host a new replica: the fewer of the
// deployment's replicas it hosts, the better. Of clusters that score the
// same the first by name wins, the order fill tries them in.
func fillScore(load map[string]int, cl *cluster) int { return -load[cl.name] }

// lowestFreeIndex is the lowest replica index not in use on a cluster, of
// those from on.
func lowestFreeIndex(used map[int]bool, from int) int {
	index := from
	for used[index] {
		index++
	}
	return index
}
