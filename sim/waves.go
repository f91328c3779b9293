package sim

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

// WavesSpec sizes the scale run's workload (Waves).
type WavesSpec struct {
	// Clusters is how many workload clusters; Nodes how many 8xH100 nodes
	// each has, in two pools (the first one more when Nodes is odd).
	Clusters, Nodes int
	// Waves is how many times the demand changes: up to High, down to
	// Low, up again, and so on.
	Waves int
	// Deployments is how many ModelDeployments share the demand.
	Deployments int
	// Seed draws each wave's split of the demand among the deployments.
	Seed uint64
}

// The scale run's demand, as shares of the fleet's GPUs, and how long each
// wave lasts: two minutes, which a live control plane with cores to spare
// needs to compose a wave; on a saturated 2-core machine most scale-ups
// were not done within it (docs/scale.md).
const (
	WavesHigh       = 0.95
	WavesLow        = 0.5
	WaveRounds      = 12
	wavesTailRounds = 6
)

// ParseWaves reads a scale run's size, CLUSTERSxNODESxWAVES (3x4x2), as
// fleetsim's -waves and the live scale run (FLEET_SCALE) take it: ten
// deployments for every 160 GPUs, at least ten; seed 1.
func ParseWaves(s string) (WavesSpec, error) {
	parts := strings.Split(s, "x")
	if len(parts) != 3 {
		return WavesSpec{}, fmt.Errorf("cannot read the size %q: want CLUSTERSxNODESxWAVES, for example 3x4x2", s)
	}
	n := make([]int, 3)
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil {
			return WavesSpec{}, fmt.Errorf("cannot read the size %q: %w", s, err)
		}
		n[i] = v
	}
	return WavesSpec{Clusters: n[0], Nodes: n[1], Waves: n[2], Deployments: wavesDeployments(8 * int64(n[0]) * int64(n[1])), Seed: 1}, nil
}

// A ModelDeployment's replicas, as Modelplane v0.3's XRD bounds them.
const (
	minReplicas = 1
	maxReplicas = 10
)

// wavesDeployments is how many deployments a fleet of fleetGPUs takes: ten
// for every 160 GPUs, at least ten, so that each wave's demand needs no
// deployment past maxReplicas (ten deployments of ten replicas in turn
// claim 250 GPUs).
func wavesDeployments(fleetGPUs int64) int {
	return 10 * max(1, int((fleetGPUs+159)/160))
}

// wavesSize is the i-th deployment's GPUs per replica, in turn 1, 2, 4, 8,
// 1, 1, 2, 4, 1, 1: 50, 20, 20 and 10% of every ten, as mixed.
func wavesSize(i int) int64 {
	return []int64{1, 2, 4, 8, 1, 1, 2, 4, 1, 1}[i%10]
}

// Waves is the scale run's workload (docs/scale.md): Deployments
// deployments of one Standalone engine claiming 1, 2, 4 or 8 H100s,
// scaled together in waves of WaveRounds rounds, the first at round 0, to
// WavesHigh of the fleet's GPUs, then WavesLow, then WavesHigh again.
// Each wave splits its demand among the deployments by random weights from
// the seed, each taking whole replicas, and the GPUs left over go a
// replica at a time to the deployments they still fit, smallest first,
// so the demand is the wave's share to the GPU whenever a 1-GPU
// deployment has room; it is more where a deployment's one replica, the
// least it may want, takes it past its share. A deployment wants 1 to 10 replicas, as
// Modelplane's XRD allows. Nodes report no images (ImageSize -1), as the live
// fleet's KWOK nodes do not.
func Waves(s WavesSpec) (Scenario, error) {
	switch {
	case s.Clusters < 1 || s.Nodes < 1 || s.Waves < 1 || s.Deployments < 1:
		return Scenario{}, fmt.Errorf("cannot size the waves: clusters %d, nodes %d, waves %d and deployments %d must each be at least 1", s.Clusters, s.Nodes, s.Waves, s.Deployments)
	case s.Clusters > 100 || s.Nodes > 1000 || s.Waves > 100 || s.Deployments > 1000:
		return Scenario{}, fmt.Errorf("cannot size the waves: clusters %d (at most 100), nodes %d (1000), waves %d (100) or deployments %d (1000) too many", s.Clusters, s.Nodes, s.Waves, s.Deployments)
	}
	pools := []PoolSpec{h100Pool("h100-a", (s.Nodes+1)/2)}
	if s.Nodes > 1 {
		pools = append(pools, h100Pool("h100-b", s.Nodes/2))
	}
	sc := Scenario{
		Name:     fmt.Sprintf("waves-%dx%dx%d", s.Clusters, s.Nodes, s.Waves),
		Summary:  fmt.Sprintf("%d clusters x %d 8xH100 nodes; %d deployments of 1-8 GPUs per replica scaled in %d waves to %.0f%% and %.0f%% of the fleet", s.Clusters, s.Nodes, s.Deployments, s.Waves, 100*WavesHigh, 100*WavesLow),
		Clusters: Fleet(s.Clusters, pools...),
		Shapes:   map[string]Shape{},
		Rounds:   s.Waves*WaveRounds + wavesTailRounds,
		// KWOK's nodes list no images: ImageLocality scores nothing.
		ImageSize: -1,
	}
	names := make([]string, s.Deployments)
	gpus := make([]int64, s.Deployments)
	for i := range names {
		gpus[i] = wavesSize(i)
		names[i] = fmt.Sprintf("wave-%02d-%dgpu", i, gpus[i])
		sc.Shapes[names[i]] = Shape{1, 1, gpus[i], false}
	}
	fleet := FleetGPUs(sc.Clusters)
	var least, most int64
	for _, g := range gpus {
		least += minReplicas * g
		most += maxReplicas * g
	}
	low := int64(WavesLow * float64(fleet))
	if s.Waves == 1 {
		low = most // no low wave
	}
	if high := int64(WavesHigh * float64(fleet)); least > low || most < high {
		return Scenario{}, fmt.Errorf("cannot split the waves' demand of %d and %d GPUs among %d deployments of %d to %d replicas: they claim %d to %d", high, int64(WavesLow*float64(fleet)), s.Deployments, minReplicas, maxReplicas, least, most)
	}
	rng := rand.New(rand.NewPCG(s.Seed, s.Seed)) //nolint:gosec // A reproducible workload, not security.
	for w := range s.Waves {
		share := WavesHigh
		if w%2 == 1 {
			share = WavesLow
		}
		replicas := split(int64(share*float64(fleet)), gpus, rng)
		for i, n := range names {
			e := Event{Round: w * WaveRounds, Name: n, Replicas: replicas[i]}
			if w == 0 {
				e.Deployment = standalone(gpus[i], fixture.MemAtLeast80Gi)
			}
			sc.Events = append(sc.Events, e)
		}
	}
	return sc, nil
}

// split divides a demand of target GPUs among deployments of gpus per
// replica by random weights, in whole replicas from minReplicas to
// maxReplicas, then gives what is left a replica at a time to the smallest
// deployment it still fits.
func split(target int64, gpus []int64, rng *rand.Rand) []int64 {
	weights := make([]float64, len(gpus))
	var sum float64
	for i := range weights {
		weights[i] = 0.5 + rng.Float64()
		sum += weights[i]
	}
	out := make([]int64, len(gpus))
	var used int64
	for i, g := range gpus {
		out[i] = min(max(int64(float64(target)*weights[i]/sum/float64(g)), minReplicas), maxReplicas)
		used += out[i] * g
	}
	for {
		best := -1
		for i, g := range gpus {
			if used+g <= target && out[i] < maxReplicas && (best < 0 || g < gpus[best]) {
				best = i
			}
		}
		if best < 0 {
			return out
		}
		out[best]++
		used += gpus[best]
	}
}
