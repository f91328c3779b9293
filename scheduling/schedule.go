package scheduling

import (
	"cmp"
	"slices"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// Schedule and the steps of a pass, in the order it takes them: retaining
// (docs/spec.md#retaining), scaling down (docs/spec.md#scaling-down),
// re-placing and filling (docs/spec.md#filling). The pass's state and its
// ledger, which the steps decide on, are in pass.go.

// Schedule places a deployment's replicas. It keeps every replica it can
// retain, drops the surplus when the deployment shrank, and fills any
// shortfall one replica at a time, spreading before packing. It returns an
// *InvalidSelectorError when a nodeSelector does not compile; being unable to
// place a replica is not an error but a Plan with a Shortfall.
func Schedule(s Snapshot) (*Plan, error) {
	plan, _, err := schedule(s)
	return plan, err
}

// BeyondWholeNode is how many more replicas plan, Schedule's of s,
// composes than the same pass would if every pool were accounted by whole
// nodes: the replicas free-device accounting found room for that Modelplane
// v0.3 would have left unplaced, for a server's metrics. Only a plan that
// placed a replica anew on a fleet with a usable report can differ
// (retaining ignores capacity), so only then is s planned again. Whole
// nodes may also place more than free devices do, where a report shows a
// pool fuller than its replicas say; that is no saving, and counts 0.
func BeyondWholeNode(s Snapshot, plan *Plan) (int, error) {
	placedAnew := slices.ContainsFunc(plan.Replicas, func(p Placement) bool { return p.New })
	observed := slices.ContainsFunc(s.Clusters, func(c Cluster) bool { return len(c.Observed) > 0 })
	if !placedAnew || !observed {
		return 0, nil
	}
	whole := s
	whole.Clusters = make([]Cluster, len(s.Clusters))
	for i, c := range s.Clusters {
		c.Observed = nil
		whole.Clusters[i] = c
	}
	whole.Options.Capacity, whole.Options.PodNodes = CapacityNone, false
	wholePlan, _, err := schedule(whole)
	if err != nil {
		return 0, err
	}
	return max(len(plan.Replicas)-len(wholePlan.Replicas), 0), nil
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

// Re-placing (docs/spec.md#re-placing): re-placing a replica whose pods stay unscheduled. A replica
// of the deployment is stuck when its PodsScheduled is False for longer
// than ReplaceUnscheduledAfter and it is not Ready. It is re-placed by the
// fill rules, never onto a pool it is or was stuck on; where nothing else
// fits it stays. What must be remembered (the pools it was stuck on, when
// it moved, how often) is kept in its ModelReplica's annotation.

// MaxMoves bounds how often one wait moves a replica: after that many
// moves it stays where it is until its pods are scheduled, as Armada stops
// after maxRetries (3). The wait before each next move doubles (15, 30, 60
// minutes at the default), as Kueue's requeue backoff grows, so a pool that
// is only slow to boot a node is given longer each time.
const MaxMoves = 3

// keptReplica is a placement of the deployment and what placing it read of
// the replica it keeps, if any.
type keptReplica struct {
	Placement

	// replica is the replica kept; nil for one placed by this pass.
	replica *Replica
	// memory is what the replica remembers of moving.
	memory Replacement
	// waitingSince is when its pods began to wait where they are: the
	// later of PodsScheduled's False and its last move. Zero when they are
	// not known to be waiting.
	waitingSince time.Time
	// stuck is whether it has waited too long and may move.
	stuck bool
}

// keep is a replica retained at a placement, judged stuck or not.
func (s *pass) keep(p Placement, r *Replica) keptReplica {
	k := keptReplica{Placement: p, replica: r}
	k.memory, _ = ParseReplacement(r.Object.Metadata.Annotations[v1alpha1.AnnotationReplacement])
	if r.ScheduledSince == nil && k.memory.Moves > 0 {
		// Still the same wait: remembered.
		memory := k.memory
		k.Replacement = &memory
	}
	if r.UnscheduledSince == nil || r.Ready {
		return k
	}
	k.waitingSince = *r.UnscheduledSince
	if k.memory.MovedAt.After(k.waitingSince) {
		k.waitingSince = k.memory.MovedAt
	}
	k.stuck = s.replaceAfter > 0 && !s.now.IsZero() && k.memory.Moves < MaxMoves &&
		s.now.Sub(k.waitingSince) > s.replaceAfter<<k.memory.Moves
	return k
}

// dropFirst ranks a replica for scale-down: stuck ones go first, then those
// whose pods are not all scheduled.
func (k keptReplica) dropFirst() int {
	switch {
	case k.stuck:
		return 2
	case k.replica != nil && k.replica.UnscheduledSince != nil:
		return 1
	}
	return 0
}

// replace re-places each stuck replica, in turn, by the fill rules, never
// onto a pool it is or was stuck on: to another pool of its own cluster it
// is the same replica; to another cluster, a new one, and it is dropped.
// Where nothing else fits it stays, and is charged where it is. It returns
// the replicas kept and the moves made; never fewer replicas, and at most
// one move each.
func (s *pass) replace(asObserved []Placement, kept []keptReplica) ([]keptReplica, []Move) {
	var moves []Move
	for i := range kept {
		k := &kept[i]
		if !k.stuck {
			continue
		}
		others := slices.Concat(asObserved, placementsOf(kept[:i]), placementsOf(kept[i+1:]))
		load, used := loadOf(others)
		from := poolsOf(k.Placement)
		s.exclude = map[PoolRef]bool{}
		for _, p := range slices.Concat(from, k.memory.StuckOn) {
			s.exclude[p] = true
		}
		best, res, _ := s.chooseCluster(load)
		s.exclude = nil
		if best == nil {
			s.charge(*k.replica)
			continue
		}
		memory := Replacement{Moves: k.memory.Moves + 1, MovedAt: s.now.UTC().Truncate(time.Second), StuckOn: appendNew(slices.Clone(k.memory.StuckOn), from...)}
		move := Placement{
			Cluster: best.name, Index: k.Index, Gateway: best.gateway(), ClusterLabels: best.placementLabels(),
			Engines: res.engines, Name: k.Name, Replacement: &memory, Moved: true,
		}
		if best.name != k.Cluster {
			move.Index = lowestFreeIndex(used[best.name], 0)
			move.New, move.Name = true, ""
		}
		moves = append(moves, Move{
			Name: k.Name, From: from, To: poolsOf(move), Unscheduled: s.now.Sub(k.waitingSince),
			SameReplica: best.name == k.Cluster,
		})
		*k = keptReplica{Placement: move, memory: memory, waitingSince: s.now}
	}
	return kept, moves
}

// appendNew appends the pools not already in list.
func appendNew(list []PoolRef, pools ...PoolRef) []PoolRef {
	for _, p := range pools {
		if !slices.Contains(list, p) {
			list = append(list, p)
		}
	}
	return list
}

// poolsOf are the pools a placement's engines are on, each once, in
// engine order.
func poolsOf(p Placement) []PoolRef {
	var out []PoolRef
	for _, e := range p.Engines {
		for _, m := range e.Members {
			out = appendNew(out, PoolRef{Cluster: p.Cluster, Pool: m.Pool})
		}
	}
	return out
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
			sf := newShortfall(verdicts)
			sf.Unmatched = s.unmatched(sf.Clusters)
			return placed, sf
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

// counted reports whether a kept replica's pods are counted by the usable
// report of every pool it holds: a replica placed or moved by this pass
// holds nothing yet.
func (s *pass) counted(k keptReplica) bool {
	cl := s.clusters[k.Cluster]
	if k.replica == nil || k.New || k.Moved || cl == nil {
		return false
	}
	holds := false
	for _, e := range k.Engines {
		for _, m := range e.Members {
			if !counted(*k.replica, cl.observed[m.Pool]) {
				return false
			}
			holds = true
		}
	}
	return holds
}

// waiting counts the replicas whose pods wait to be scheduled, and the
// longest wait.
func (s *pass) waiting(kept []keptReplica) Waiting {
	var w Waiting
	for _, k := range kept {
		if k.waitingSince.IsZero() {
			continue
		}
		w.Replicas++
		if !s.now.IsZero() {
			w.Longest = max(w.Longest, s.now.Sub(k.waitingSince))
		}
	}
	return w
}

// placementsOf are the placements of kept replicas.
func placementsOf(kept []keptReplica) []Placement {
	out := make([]Placement, 0, len(kept))
	for _, k := range kept {
		out = append(out, k.Placement)
	}
	return out
}

// keptOf are new placements as kept replicas of nothing observed.
func keptOf(placed []Placement) []keptReplica {
	out := make([]keptReplica, 0, len(placed))
	for _, p := range placed {
		out = append(out, keptReplica{Placement: p})
	}
	return out
}
