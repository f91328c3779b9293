package sim

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWaves(t *testing.T) {
	type want struct {
		rounds    int
		fleetGPUs int64
		pools     []int
		// demand is the GPUs wanted after each wave.
		demand []int64
	}
	cases := map[string]struct {
		reason string
		spec   WavesSpec
		want   want
	}{
		"CI": {
			reason: "3 clusters of 4 nodes (two pools of 2), 96 GPUs: 95% is 91, 50% is 48, each to the GPU where a 1-GPU deployment has room left (the third wave's are full at 10 replicas: 90).",
			spec:   WavesSpec{Clusters: 3, Nodes: 4, Waves: 3, Deployments: 10, Seed: 1},
			want:   want{rounds: 3*WaveRounds + wavesTailRounds, fleetGPUs: 96, pools: []int{2, 2}, demand: []int64{91, 48, 90}},
		},
		"OddNodes": {
			reason: "5 nodes: the first pool takes the odd one.",
			spec:   WavesSpec{Clusters: 1, Nodes: 5, Waves: 1, Deployments: 4, Seed: 7},
			want:   want{rounds: WaveRounds + wavesTailRounds, fleetGPUs: 40, pools: []int{3, 2}, demand: []int64{38}},
		},
		"OneWaveNoLow": {
			reason: "One wave has no low wave: ten deployments fit a 32-GPU fleet's 95% (30) though not its 50%; each wants one replica at least, which takes the demand to 31.",
			spec:   WavesSpec{Clusters: 1, Nodes: 4, Waves: 1, Deployments: 10, Seed: 1},
			want:   want{rounds: WaveRounds + wavesTailRounds, fleetGPUs: 32, pools: []int{2, 2}, demand: []int64{31}},
		},
		"OneNode": {
			reason: "One node is one pool.",
			spec:   WavesSpec{Clusters: 2, Nodes: 1, Waves: 2, Deployments: 2, Seed: 1},
			want:   want{rounds: 2*WaveRounds + wavesTailRounds, fleetGPUs: 16, pools: []int{1}, demand: []int64{15, 8}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sc, err := Waves(tc.spec)
			if err != nil {
				t.Fatalf("%s\nWaves(...): %v", tc.reason, err)
			}
			got := want{rounds: sc.Rounds, fleetGPUs: FleetGPUs(sc.Clusters)}
			for _, p := range sc.Clusters[0].Pools {
				got.pools = append(got.pools, p.Nodes)
			}
			demand := map[string]int64{}
			for w := range tc.spec.Waves {
				for _, e := range sc.Events {
					if e.Round == w*WaveRounds {
						demand[e.Name] = e.Replicas
					}
				}
				var gpus int64
				for n, r := range demand {
					gpus += r * sc.Shapes[n].PerReplica()
				}
				got.demand = append(got.demand, gpus)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\nWaves(...): -want, +got:\n%s", tc.reason, diff)
			}
			again, err := Waves(tc.spec)
			if err != nil || !cmp.Equal(sc.Events, again.Events) {
				t.Errorf("%s\nWaves(...) twice with one seed: the events differ", tc.reason)
			}
		})
	}
}

func TestWavesShapes(t *testing.T) {
	sc, err := Waves(WavesSpec{Clusters: 2, Nodes: 4, Waves: 1, Deployments: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := map[int64]int{}
	for _, s := range sc.Shapes {
		got[s.GPUs]++
	}
	if diff := cmp.Diff(map[int64]int{1: 5, 2: 2, 4: 2, 8: 1}, got); diff != "" {
		t.Errorf("ten deployments by GPUs per replica: -want, +got:\n%s", diff)
	}
}

func TestWavesRefusesBadSizes(t *testing.T) {
	for name, spec := range map[string]WavesSpec{
		"NoClusters":        {Nodes: 1, Waves: 1, Deployments: 1},
		"NegativeNodes":     {Clusters: 1, Nodes: -1, Waves: 1, Deployments: 1},
		"NoWaves":           {Clusters: 1, Nodes: 1, Deployments: 1},
		"TooManyNodes":      {Clusters: 1, Nodes: 1001, Waves: 1, Deployments: 1},
		"TooManyWaves":      {Clusters: 1, Nodes: 1, Waves: 101, Deployments: 1},
		"NoDeployments":     {Clusters: 1, Nodes: 1, Waves: 1},
		"HugeDeployment":    {Clusters: 1, Nodes: 1, Waves: 1, Deployments: 1 << 30},
		"TooFewDeployments": {Clusters: 10, Nodes: 10, Waves: 1, Deployments: 1},
		"TooManyForTheLow":  {Clusters: 1, Nodes: 1, Waves: 2, Deployments: 10},
	} {
		if _, err := Waves(spec); err == nil {
			t.Errorf("%s: Waves(%+v) gave no error", name, spec)
		}
	}
}

func TestParseWaves(t *testing.T) {
	cases := map[string]struct {
		reason string
		size   string
		want   WavesSpec
		err    bool
	}{
		"CI":         {reason: "The CI size.", size: "3x4x2", want: WavesSpec{Clusters: 3, Nodes: 4, Waves: 2, Deployments: 10, Seed: 1}},
		"TwoParts":   {reason: "The waves are missing.", size: "3x4", err: true},
		"NotANumber": {reason: "Nodes not a number.", size: "3xfourx2", err: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseWaves(tc.size)
			if (err != nil) != tc.err {
				t.Fatalf("%s\nParseWaves(%q): error %v, want an error: %t", tc.reason, tc.size, err, tc.err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nParseWaves(%q): -want, +got:\n%s", tc.reason, tc.size, diff)
			}
		})
	}
}
