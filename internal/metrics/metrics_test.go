package metrics

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// values is every series a gatherer exports but the histogram's buckets,
// as name{label="value",...} to its value.
func values(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather(): %v", err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			name := f.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[name] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[f.GetName()+"_count{"+strings.Join(labels, ",")+"}"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func TestMetrics(t *testing.T) {
	pools := func(at time.Time) []Pool {
		return []Pool{
			{Cluster: "a", Pool: "h100", Ready: true, ObservedAt: at.Add(-30 * time.Second), Free: []DeviceCount{{Device: "h100", Count: 12, Total: 24}, {Device: "nic", Count: 4, Total: 6}}},
			// A stale report's counts are not the pool's: not exported.
			{Cluster: "b", Pool: "h100", Ready: true, WholeNode: ReasonStale, ObservedAt: at.Add(-time.Hour), Free: []DeviceCount{{Device: "h100", Count: 8, Total: 8}}},
			{Cluster: "c", Pool: "l4", Ready: true, WholeNode: ReasonInvalid},
			{Cluster: "d", Pool: "l4", WholeNode: ReasonMissing},
		}
	}
	free := []PoolFree{
		{Cluster: "a", Pool: "h100", Devices: []string{"h100", "nic"}, Largest: []int64{4, 2}},
		{Cluster: "b", Pool: "h100", Devices: []string{"h100"}, Largest: []int64{8}},
		{Cluster: "c", Pool: "l4", Devices: []string{"l4", "nic"}, Largest: []int64{1, 1}},
	}
	type call struct {
		after time.Duration
		c     Call
	}
	cases := map[string]struct {
		reason string
		calls  []call
		// scrape is how long after t0 the scrape is.
		scrape time.Duration
		held   int
		want   map[string]float64
	}{
		"NoCalls": {
			reason: "Every result's counter is exported at 0 before any call, so that a rate over it is defined.",
			want: map[string]float64{
				`fleet_scheduler_calls_total{result="ok"}`: 0, `fleet_scheduler_calls_total{result="fatal"}`: 0, `fleet_scheduler_calls_total{result="error"}`: 0,
				`fleet_scheduler_call_duration_seconds_count{}`: 0, `fleet_scheduler_assumed_placements{}`: 0,
				`fleet_scheduler_pools_whole_node{reason="invalid"}`: 0, `fleet_scheduler_pools_whole_node{reason="missing"}`: 0, `fleet_scheduler_pools_whole_node{reason="stale"}`: 0,
				`fleet_scheduler_replicas_beyond_whole_node_total{}`: 0,
			},
		},
		"Calls": {
			reason: "A Fatal call and an error count apart from ok ones; a first iteration is counted but not timed; a deployment's unplaced replicas are its last call's, its re-placements add up; whole-node pools count only in Ready clusters; every pool says how it is accounted, and one with a usable report its free and all its devices; the replicas beyond whole-node accounting add up over calls that read their fleet, each of a deployment once, however many calls place it anew; the largest free shape of a model is the most over pools, of the last call that built each pool's ledger.",
			calls: []call{
				{c: Call{Result: OK, OnlyAsked: true, Duration: time.Millisecond}},
				{c: Call{Result: OK, Duration: time.Second, Deployment: "ns/a", Unplaced: 2, Replaced: 1, PlacedAnew: []string{"a/0", "a/1"}, BeyondWholeNode: []string{"a/0", "a/1"}, Pools: slices.Values(pools(t0)), Free: slices.Values(free)}},
				{after: time.Minute, c: Call{Result: OK, Duration: time.Second, Deployment: "ns/a", Unplaced: 0, Replaced: 2, PlacedAnew: []string{"a/1", "b/3"}, BeyondWholeNode: []string{"a/1", "b/3"}, Pools: slices.Values(pools(t0.Add(time.Minute))), Free: slices.Values(free[2:])}},
				{after: time.Minute, c: Call{Result: OK, Duration: time.Second, Deployment: "ns/b", PlacedAnew: []string{"a/0"}, BeyondWholeNode: []string{"a/0"}, Free: slices.Values([]PoolFree{{Cluster: "a", Pool: "h100", Devices: []string{"h100", "nic"}, Largest: []int64{3, 0}}})}},
				{after: time.Minute, c: Call{Result: Fatal, Duration: time.Millisecond, BeyondWholeNode: []string{"a/5"}}},
				{after: time.Minute, c: Call{Result: Error, Duration: time.Millisecond}},
			},
			scrape: 2 * time.Minute,
			held:   3,
			want: map[string]float64{
				`fleet_scheduler_calls_total{result="ok"}`: 4, `fleet_scheduler_calls_total{result="fatal"}`: 1, `fleet_scheduler_calls_total{result="error"}`: 1,
				`fleet_scheduler_call_duration_seconds_count{}`: 5, `fleet_scheduler_assumed_placements{}`: 3,
				`fleet_scheduler_replicas_unplaced{deployment="ns/a"}`:                      0,
				`fleet_scheduler_replacements_total{deployment="ns/a"}`:                     3,
				`fleet_scheduler_deployment_last_call_timestamp_seconds{deployment="ns/a"}`: float64(t0.Add(time.Minute).Unix()),
				`fleet_scheduler_replicas_unplaced{deployment="ns/b"}`:                      0,
				`fleet_scheduler_replacements_total{deployment="ns/b"}`:                     0,
				`fleet_scheduler_deployment_last_call_timestamp_seconds{deployment="ns/b"}`: float64(t0.Add(time.Minute).Unix()),
				`fleet_scheduler_pools_whole_node{reason="invalid"}`:                        1, `fleet_scheduler_pools_whole_node{reason="missing"}`: 0, `fleet_scheduler_pools_whole_node{reason="stale"}`: 1,
				`fleet_scheduler_pool_report_age_seconds{cluster="a",pool="h100"}`:             90,
				`fleet_scheduler_pool_report_age_seconds{cluster="b",pool="h100"}`:             3660,
				`fleet_scheduler_pool_free_devices{cluster="a",device="h100",pool="h100"}`:     12,
				`fleet_scheduler_pool_free_devices{cluster="a",device="nic",pool="h100"}`:      4,
				`fleet_scheduler_pool_devices{cluster="a",device="h100",pool="h100"}`:          24,
				`fleet_scheduler_pool_devices{cluster="a",device="nic",pool="h100"}`:           6,
				`fleet_scheduler_replicas_beyond_whole_node_total{}`:                           4,
				`fleet_scheduler_pool_accounting{cluster="a",mode="free-devices",pool="h100"}`: 1,
				`fleet_scheduler_pool_accounting{cluster="b",mode="whole-node",pool="h100"}`:   1,
				`fleet_scheduler_pool_accounting{cluster="c",mode="whole-node",pool="l4"}`:     1,
				`fleet_scheduler_pool_accounting{cluster="d",mode="whole-node",pool="l4"}`:     1,
				`fleet_scheduler_largest_free_devices{model="h100"}`:                           8,
				`fleet_scheduler_largest_free_devices{model="l4"}`:                             1,
				`fleet_scheduler_largest_free_devices{model="nic"}`:                            1,
			},
		},
		"BeyondCountedOncePerPlacement": {
			reason: "A replica two calls place anew is counted once; once a call no longer places it anew (composed), placing it anew again is another placement, counted again.",
			calls: []call{
				{c: Call{Result: OK, Deployment: "ns/a", PlacedAnew: []string{"a/0", "a/1"}, BeyondWholeNode: []string{"a/1"}}},
				{after: time.Minute, c: Call{Result: OK, Deployment: "ns/a", PlacedAnew: []string{"a/0", "a/1"}, BeyondWholeNode: []string{"a/1"}}},
				{after: 2 * time.Minute, c: Call{Result: OK, Deployment: "ns/a"}},
				{after: 3 * time.Minute, c: Call{Result: OK, Deployment: "ns/a", PlacedAnew: []string{"a/1"}, BeyondWholeNode: []string{"a/1"}}},
			},
			scrape: 3 * time.Minute,
			want: map[string]float64{
				`fleet_scheduler_calls_total{result="ok"}`: 4, `fleet_scheduler_calls_total{result="fatal"}`: 0, `fleet_scheduler_calls_total{result="error"}`: 0,
				`fleet_scheduler_call_duration_seconds_count{}`: 4, `fleet_scheduler_assumed_placements{}`: 0,
				`fleet_scheduler_replicas_unplaced{deployment="ns/a"}`:                      0,
				`fleet_scheduler_replacements_total{deployment="ns/a"}`:                     0,
				`fleet_scheduler_deployment_last_call_timestamp_seconds{deployment="ns/a"}`: float64(t0.Add(3 * time.Minute).Unix()),
				`fleet_scheduler_pools_whole_node{reason="invalid"}`:                        0, `fleet_scheduler_pools_whole_node{reason="missing"}`: 0, `fleet_scheduler_pools_whole_node{reason="stale"}`: 0,
				`fleet_scheduler_replicas_beyond_whole_node_total{}`: 2,
			},
		},
		"StaleSeriesDropped": {
			reason: "A deployment, and the pools, no call has read for StaleAfter are no longer exported: another pod serves them, or they are gone.",
			calls: []call{
				{c: Call{Result: OK, Deployment: "ns/a", Unplaced: 2, Pools: slices.Values(pools(t0))}},
				{after: StaleAfter, c: Call{Result: OK, Deployment: "ns/b", Unplaced: 1}},
			},
			scrape: StaleAfter + time.Second,
			want: map[string]float64{
				`fleet_scheduler_calls_total{result="ok"}`: 2, `fleet_scheduler_calls_total{result="fatal"}`: 0, `fleet_scheduler_calls_total{result="error"}`: 0,
				`fleet_scheduler_call_duration_seconds_count{}`: 2, `fleet_scheduler_assumed_placements{}`: 0,
				`fleet_scheduler_replicas_unplaced{deployment="ns/b"}`:                      1,
				`fleet_scheduler_replacements_total{deployment="ns/b"}`:                     0,
				`fleet_scheduler_deployment_last_call_timestamp_seconds{deployment="ns/b"}`: float64(t0.Add(StaleAfter).Unix()),
				`fleet_scheduler_pools_whole_node{reason="invalid"}`:                        0, `fleet_scheduler_pools_whole_node{reason="missing"}`: 0, `fleet_scheduler_pools_whole_node{reason="stale"}`: 0,
				`fleet_scheduler_replicas_beyond_whole_node_total{}`: 0,
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			now := t0
			m := New(func() time.Time { return now }, func(time.Time) int { return tc.held })
			for _, c := range tc.calls {
				now = t0.Add(c.after)
				c.c.At = now
				m.Record(c.c)
			}
			now = t0.Add(tc.scrape)
			r := prometheus.NewPedanticRegistry()
			r.MustRegister(m)
			if diff := cmp.Diff(tc.want, values(t, r)); diff != "" {
				t.Errorf("%s\nscraped: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
