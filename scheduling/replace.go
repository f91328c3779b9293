package scheduling

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

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

// Replacement is what the function remembers of re-placing one replica,
// kept in its ModelReplica's AnnotationReplacement, and carried over to
// the replica that replaces it on another cluster. It is dropped once the
// replica's pods are all scheduled: moves are bounded per wait.
type Replacement struct {
	// Moves is how many times the replica moved during this wait.
	Moves int `json:"moves"`
	// MovedAt is when it last moved: its wait on its new pools starts then,
	// whatever its PodsScheduled says until the agent reports again.
	MovedAt time.Time `json:"movedAt"`
	// StuckOn are the pools it was stuck on, oldest first; it never goes
	// back to one of them during this wait.
	StuckOn []PoolRef `json:"stuckOn,omitempty"`
}

// ParseReplacement reads a replica's annotation; false when there is none
// or it does not read, which is as if the replica never moved.
func ParseReplacement(annotation string) (Replacement, bool) {
	var r Replacement
	if annotation == "" || json.Unmarshal([]byte(annotation), &r) != nil || r.Moves < 0 {
		return Replacement{}, false
	}
	return r, true
}

// String is the annotation's value.
func (r Replacement) String() string {
	b, err := json.Marshal(r)
	if err != nil {
		return ""
	}
	return string(b)
}

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
