package observation

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

var (
	// now is when every case is judged.
	now = time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)
	// nowRFC is now as the agent publishes it.
	nowRFC = now.Format(time.RFC3339)
)

const maxAge = 5 * time.Minute

// l4 is a pool of ten four-GPU nodes with a Synthetic NIC, as a cluster
// publishes it before the agent reports on it.
func l4() *fixture.PoolWrapper {
	return fixture.Pool("l4", 10).Devices(fixture.GPU("gpu", 4, "24Gi"), fixture.NIC(2))
}

func TestPool(t *testing.T) {
	type args struct {
		pool   v1alpha1.GPUPool
		now    time.Time
		maxAge time.Duration
	}
	type want struct {
		obs *scheduling.PoolObservation
		rep PoolReport
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"Usable": {
			reason: "A complete, valid, fresh report is usable, and expires maxAge after it was made.",
			args: args{
				pool: l4().Observed(now.Add(-time.Minute), 3,
					fixture.NodesFree(2, "gpu", 4),
					fixture.NodesFree(1, "gpu", 1),
				).Obj(),
				now: now, maxAge: maxAge,
			},
			want: want{
				obs: &scheduling.PoolObservation{
					ObservedAt:    now.Add(-time.Minute),
					ObservedNodes: 3,
					Buckets: []scheduling.Bucket{
						{Nodes: 2, Free: map[string]int64{"gpu": 4}},
						{Nodes: 1, Free: map[string]int64{"gpu": 1}},
					},
				},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(-time.Minute).Add(maxAge)},
			},
		},
		"UsableNoBuckets": {
			reason: "An empty histogram is a report that no node has anything free, which is usable.",
			args:   args{pool: l4().Observed(now, 0).Obj(), now: now, maxAge: maxAge},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now, ObservedNodes: 0, Buckets: []scheduling.Bucket{}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(maxAge)},
			},
		},
		"UsableBucketWithoutFree": {
			reason: "A bucket that lists no free devices holds nodes with nothing free.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "2", `[{"nodes":2}]`).Obj(), now: now, maxAge: maxAge},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now, ObservedNodes: 2, Buckets: []scheduling.Bucket{{Nodes: 2, Free: map[string]int64{}}}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(maxAge)},
			},
		},
		"UsableWholeFloat": {
			reason: "A count written as a float with no fraction is a whole number.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "3.0", `[{"nodes":1.0,"free":[{"name":"gpu","count":4.0}]}]`).Obj(), now: now, maxAge: maxAge},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now, ObservedNodes: 3, Buckets: []scheduling.Bucket{{Nodes: 1, Free: map[string]int64{"gpu": 4}}}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(maxAge)},
			},
		},
		"UsableFractionalSeconds": {
			reason: "RFC 3339 allows fractional seconds.",
			args:   args{pool: l4().RawObservation(`"2026-10-20T20:05:59.5Z"`, "0", `[]`).Obj(), now: now, maxAge: maxAge},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now.Add(-500 * time.Millisecond), Buckets: []scheduling.Bucket{}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(-500 * time.Millisecond).Add(maxAge)},
			},
		},
		"UsableOtherZone": {
			reason: "An observedAt with a zone offset is the same instant in UTC.",
			args:   args{pool: l4().RawObservation(`"2026-10-20T22:05:00+02:00"`, "0", `[]`).Obj(), now: now, maxAge: maxAge},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now.Add(-time.Minute), Buckets: []scheduling.Bucket{}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(-time.Minute).Add(maxAge)},
			},
		},
		"AgeEqualsMaxAgeIsFresh": {
			reason: "A report exactly maxAge old is still fresh: stale is strictly older.",
			args:   args{pool: l4().Observed(now.Add(-maxAge), 1, fixture.NodesFree(1, "gpu", 4)).Obj(), now: now, maxAge: maxAge},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now.Add(-maxAge), ObservedNodes: 1, Buckets: []scheduling.Bucket{{Nodes: 1, Free: map[string]int64{"gpu": 4}}}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now},
			},
		},
		"OneSecondOverMaxAgeIsStale": {
			reason: "A report a second older than maxAge is stale, and says how old it is.",
			args:   args{pool: l4().Observed(now.Add(-maxAge-time.Second), 1, fixture.NodesFree(1, "gpu", 4)).Obj(), now: now, maxAge: maxAge},
			want:   want{rep: PoolReport{Pool: "l4", State: Stale, Age: maxAge + time.Second}},
		},
		"Stale": {
			reason: "A report from an agent that went silent an hour ago is stale with its age.",
			args:   args{pool: l4().Observed(now.Add(-time.Hour), 3, fixture.NodesFree(3, "gpu", 4)).Obj(), now: now, maxAge: maxAge},
			want:   want{rep: PoolReport{Pool: "l4", State: Stale, Age: time.Hour}},
		},
		"StaleWithLongerMaxAge": {
			reason: "maxAge is the input's, not a constant: an hour-old report is fresh under a two-hour maxAge.",
			args:   args{pool: l4().Observed(now.Add(-time.Hour), 0).Obj(), now: now, maxAge: 2 * time.Hour},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now.Add(-time.Hour), Buckets: []scheduling.Bucket{}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(time.Hour)},
			},
		},
		"FutureWithinMaxAge": {
			reason: "An agent clock running up to maxAge ahead is tolerated; the report expires maxAge after its own time.",
			args:   args{pool: l4().Observed(now.Add(maxAge), 0).Obj(), now: now, maxAge: maxAge},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now.Add(maxAge), Buckets: []scheduling.Bucket{}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(2 * maxAge)},
			},
		},
		"FutureBeyondMaxAge": {
			reason: "A timestamp further in the future than maxAge is invalid.",
			args:   args{pool: l4().Observed(now.Add(maxAge+time.Second), 0).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "observedAt: 2026-10-20T20:11:01Z is 5m1s in the future",
			}},
		},
		"UsableSteered": {
			reason: "A usable report that says binding Steered is steered.",
			args:   args{pool: l4().Observed(now, 1, fixture.NodesFree(1, "gpu", 4)).Steered().Obj(), now: now, maxAge: maxAge},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now, ObservedNodes: 1, Buckets: []scheduling.Bucket{{Nodes: 1, Free: map[string]int64{"gpu": 4}}}, Steered: true},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(maxAge)},
			},
		},
		"BindingOtherValueIgnored": {
			reason: "A binding other than Steered leaves the counts usable, not steered, and is a defect naming the field.",
			args:   args{pool: l4().Observed(now, 1, fixture.NodesFree(1, "gpu", 4)).RawBinding(`"LeastFree"`).Obj(), now: now, maxAge: maxAge},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now, ObservedNodes: 1, Buckets: []scheduling.Bucket{{Nodes: 1, Free: map[string]int64{"gpu": 4}}}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(maxAge), BindingDefect: `binding: "LeastFree" is not Steered, the one binding there is`},
			},
		},
		"BindingWrongTypeIgnored": {
			reason: "A binding of the wrong type leaves the counts usable, not steered, and is a defect naming the field.",
			args:   args{pool: l4().Observed(now, 1, fixture.NodesFree(1, "gpu", 4)).RawBinding(`true`).Obj(), now: now, maxAge: maxAge},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now, ObservedNodes: 1, Buckets: []scheduling.Bucket{{Nodes: 1, Free: map[string]int64{"gpu": 4}}}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(maxAge), BindingDefect: "binding: a boolean is not a string"},
			},
		},
		"BindingNullIsAbsent": {
			reason: "An explicit null binding is no binding, and no defect.",
			args:   args{pool: l4().Observed(now, 0).RawBinding("null").Obj(), now: now, maxAge: maxAge},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now, Buckets: []scheduling.Bucket{}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(maxAge)},
			},
		},
		"SteeredButStale": {
			reason: "Steered says nothing for a report that is not usable: the pool is on whole nodes.",
			args:   args{pool: l4().Observed(now.Add(-time.Hour), 0).Steered().Obj(), now: now, maxAge: maxAge},
			want:   want{rep: PoolReport{Pool: "l4", State: Stale, Age: time.Hour}},
		},
		"SteeredWithoutAReport": {
			reason: "A binding without a report is missing, quietly: Steered alone is no report.",
			args:   args{pool: l4().Steered().Obj(), now: now, maxAge: maxAge},
			want:   want{rep: PoolReport{Pool: "l4", State: Missing}},
		},
		"BadBindingOnAnInvalidReport": {
			reason: "A binding's defect is named whatever the report's state, beside the report's own defect.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "-1", `[]`).RawBinding(`"steered"`).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid, Defect: "observedNodes: -1 is negative",
				BindingDefect: `binding: "steered" is not Steered, the one binding there is`,
			}},
		},
		"Missing": {
			reason: "A pool the agent published nothing for is missing, not invalid.",
			args:   args{pool: l4().Obj(), now: now, maxAge: maxAge},
			want:   want{rep: PoolReport{Pool: "l4", State: Missing}},
		},
		"MissingAllNull": {
			reason: "Explicit nulls are the same as absent fields.",
			args:   args{pool: l4().RawObservation("null", " null ", "null").Obj(), now: now, maxAge: maxAge},
			want:   want{rep: PoolReport{Pool: "l4", State: Missing}},
		},
		"PartlyNoObservedAt": {
			reason: "A report without observedAt cannot be judged fresh; it is invalid and names the field.",
			args:   args{pool: l4().RawObservation("", "3", `[]`).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "observedAt: missing while the pool's other observation fields are set",
			}},
		},
		"PartlyNoObservedNodes": {
			reason: "A report without observedNodes is invalid and names the field.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "", `[]`).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "observedNodes: missing while the pool's other observation fields are set",
			}},
		},
		"PartlyNoHistogram": {
			reason: "A report without nodesByFreeDevices is invalid and names the field.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "3", "null").Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "nodesByFreeDevices: missing while the pool's other observation fields are set",
			}},
		},
		"PartlyOnlyHistogram": {
			reason: "With two fields missing, the first in field order is named.",
			args:   args{pool: l4().RawObservation("", "", `[]`).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "observedAt: missing while the pool's other observation fields are set",
			}},
		},
		"OnlyObservedAtIsMissing": {
			reason: "An agent that stamps observedAt but publishes neither count nor histogram is not reporting on the pool: missing, no warning.",
			args:   args{pool: l4().RawObservation(`"2026-10-20T20:06:00Z"`, "", "").Obj(), now: now, maxAge: maxAge},
			want:   want{rep: PoolReport{Pool: "l4", State: Missing}},
		},
		"ObservedAtGarbage": {
			reason: "An observedAt that is not RFC 3339 is invalid.",
			args:   args{pool: l4().RawObservation(`"yesterday"`, "3", `[]`).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: `observedAt: "yesterday" is not an RFC 3339 time`,
			}},
		},
		"ObservedAtLowerCase": {
			reason: "RFC 3339 5.6 allows a lower-case t and z: the report is usable.",
			args:   args{pool: l4().RawObservation(strconv.Quote(strings.ToLower(now.Add(-time.Minute).Format(time.RFC3339))), "2", `[{"nodes":2,"free":[{"name":"gpu","count":4}]}]`).Obj(), now: now, maxAge: maxAge},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now.Add(-time.Minute), ObservedNodes: 2, Buckets: []scheduling.Bucket{{Nodes: 2, Free: map[string]int64{"gpu": 4}}}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(-time.Minute).Add(maxAge)},
			},
		},
		"ObservedAtSpace": {
			reason: "A space for the T is not RFC 3339's grammar: invalid.",
			args:   args{pool: l4().RawObservation(`"2026-10-20 20:06:00Z"`, "3", `[]`).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: `observedAt: "2026-10-20 20:06:00Z" is not an RFC 3339 time`,
			}},
		},
		"ObservedAtNoZone": {
			reason: "RFC 3339 requires a zone; a local time is ambiguous and invalid.",
			args:   args{pool: l4().RawObservation(`"2026-10-20T20:06:00"`, "3", `[]`).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: `observedAt: "2026-10-20T20:06:00" is not an RFC 3339 time`,
			}},
		},
		"ObservedAtEmptyString": {
			reason: "An empty observedAt is present but not a time.",
			args:   args{pool: l4().RawObservation(`""`, "3", `[]`).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: `observedAt: "" is not an RFC 3339 time`,
			}},
		},
		"ObservedAtNumber": {
			reason: "A Unix timestamp is not the RFC 3339 string the schema asks for.",
			args:   args{pool: l4().RawObservation(fmt.Sprint(now.Unix()), "3", `[]`).Obj(), now: now, maxAge: maxAge},
			want:   want{rep: PoolReport{Pool: "l4", State: Invalid, Defect: "observedAt: not a string"}},
		},
		"ObservedNodesNegative": {
			reason: "A negative node count is invalid.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "-1", `[]`).Obj(), now: now, maxAge: maxAge},
			want:   want{rep: PoolReport{Pool: "l4", State: Invalid, Defect: "observedNodes: -1 is negative"}},
		},
		"ObservedNodesFractional": {
			reason: "Nodes come whole.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "2.5", `[]`).Obj(), now: now, maxAge: maxAge},
			want:   want{rep: PoolReport{Pool: "l4", State: Invalid, Defect: "observedNodes: 2.5 is not a whole number"}},
		},
		"ObservedNodesString": {
			reason: "A quoted number is a string, not a count.",
			args:   args{pool: l4().RawObservation(q(nowRFC), `"3"`, `[]`).Obj(), now: now, maxAge: maxAge},
			want:   want{rep: PoolReport{Pool: "l4", State: Invalid, Defect: `observedNodes: "3" is not a number`}},
		},
		"ObservedNodesBool": {
			reason: "A boolean is not a count.",
			args:   args{pool: l4().RawObservation(q(nowRFC), `true`, `[]`).Obj(), now: now, maxAge: maxAge},
			want:   want{rep: PoolReport{Pool: "l4", State: Invalid, Defect: `observedNodes: true is not a number`}},
		},
		"ObservedNodesHuge": {
			reason: "A count past the schema's bound is invalid rather than overflowing the ledger.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "1e30", `[]`).Obj(), now: now, maxAge: maxAge},
			want:   want{rep: PoolReport{Pool: "l4", State: Invalid, Defect: "observedNodes: 1e+30 is more than 1048576"}},
		},
		"ObservedNodesInfinite": {
			reason: "A protobuf double can be infinite; it is a defect, not a panic or an overflow.",
			args:   args{pool: withObservedNodes(l4().RawObservation(q(nowRFC), "0", `[]`).Obj(), math.Inf(1)), now: now, maxAge: maxAge},
			want:   want{rep: PoolReport{Pool: "l4", State: Invalid, Defect: "observedNodes: +Inf is more than 1048576"}},
		},
		"ObservedNodesNaN": {
			reason: "A protobuf double can be NaN, which is no count.",
			args:   args{pool: withObservedNodes(l4().RawObservation(q(nowRFC), "0", `[]`).Obj(), math.NaN()), now: now, maxAge: maxAge},
			want:   want{rep: PoolReport{Pool: "l4", State: Invalid, Defect: "observedNodes: NaN is not a whole number"}},
		},
		"ObservedNodesAtBound": {
			reason: "The bound itself is allowed.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "1048576", `[]`).Obj(), now: now, maxAge: maxAge},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now, ObservedNodes: 1 << 20, Buckets: []scheduling.Bucket{}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(maxAge)},
			},
		},
		"HistogramNotAList": {
			reason: "A histogram must be a list of buckets.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "3", `{"nodes":3}`).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "nodesByFreeDevices: not a list of {nodes, free} buckets",
			}},
		},
		"HistogramBucketNotAnObject": {
			reason: "Each bucket must be an object.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "3", `[3]`).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "nodesByFreeDevices: not a list of {nodes, free} buckets",
			}},
		},
		"HistogramFreeNotAList": {
			reason: "A bucket's free devices must be a list.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "3", `[{"nodes":1,"free":{"gpu":4}}]`).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "nodesByFreeDevices: not a list of {nodes, free} buckets",
			}},
		},
		"TooManyBuckets": {
			reason: "The schema caps the histogram at 64 buckets.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "100", rawBuckets(65, 1)).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "nodesByFreeDevices: 65 buckets, more than 64",
			}},
		},
		"SixtyFourBuckets": {
			reason: "64 buckets is the most the schema allows, and is usable.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "64", rawBuckets(64, 1)).Obj(), now: now, maxAge: maxAge},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now, ObservedNodes: 64, Buckets: wantBuckets(64, 1)},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(maxAge)},
			},
		},
		"TooManyFree": {
			reason: "The schema caps a bucket at 16 free entries, one per pool device.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "1", `[{"nodes":1,"free":[`+strings.Repeat(`{"name":"gpu","count":1},`, 16)+`{"name":"gpu","count":1}]}]`).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "nodesByFreeDevices[0].free: 17 devices, more than 16",
			}},
		},
		"BucketNodesNegative": {
			reason: "A bucket of negative nodes is invalid.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "3", `[{"nodes":-1,"free":[]}]`).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "nodesByFreeDevices[0].nodes: -1 is negative",
			}},
		},
		"BucketNodesMissing": {
			reason: "A bucket must say how many nodes it holds.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "3", `[{"nodes":1},{"free":[]}]`).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "nodesByFreeDevices[1].nodes: missing",
			}},
		},
		"BucketNodesNull": {
			reason: "A null node count is missing, not zero.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "3", `[{"nodes":null,"free":[]}]`).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "nodesByFreeDevices[0].nodes: missing",
			}},
		},
		"FreeCountMissing": {
			reason: "A free entry must say how many are free.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "3", `[{"nodes":1,"free":[{"name":"gpu"}]}]`).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "nodesByFreeDevices[0].free[0].count: missing",
			}},
		},
		"UnknownDevice": {
			reason: "A free device the pool does not publish is invalid.",
			args: args{
				pool: l4().Observed(now, 1, agentv1alpha1.Bucket{Nodes: 1, Free: []agentv1alpha1.Free{{Name: "gpu", Count: 1}, {Name: "tpu", Count: 1}}}).Obj(),
				now:  now, maxAge: maxAge,
			},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: `nodesByFreeDevices[0].free[1].name: pool has no device "tpu"`,
			}},
		},
		"EmptyDeviceName": {
			reason: "A free entry must name a device.",
			args:   args{pool: l4().RawObservation(q(nowRFC), "1", `[{"nodes":1,"free":[{"count":1}]}]`).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "nodesByFreeDevices[0].free[0].name: not a device name",
			}},
		},
		"SyntheticDevice": {
			reason: "Synthetic devices are never claimed, so the agent cannot count them free.",
			args:   args{pool: l4().Observed(now, 1, fixture.NodesFree(1, "nic", 1)).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: `nodesByFreeDevices[0].free[0].name: device "nic" is not claimed through DRA`,
			}},
		},
		"DuplicateDevice": {
			reason: "A device listed twice in one bucket has two free counts; neither can be trusted.",
			args: args{
				pool: l4().Observed(now, 1, agentv1alpha1.Bucket{Nodes: 1, Free: []agentv1alpha1.Free{{Name: "gpu", Count: 1}, {Name: "gpu", Count: 2}}}).Obj(),
				now:  now, maxAge: maxAge,
			},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: `nodesByFreeDevices[0].free[1].name: device "gpu" is listed twice`,
			}},
		},
		"SameDeviceInTwoBuckets": {
			reason: "A device appears once per bucket, in every bucket.",
			args: args{
				pool: l4().Observed(now, 2, fixture.NodesFree(1, "gpu", 1), fixture.NodesFree(1, "gpu", 2)).Obj(),
				now:  now, maxAge: maxAge,
			},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now, ObservedNodes: 2, Buckets: []scheduling.Bucket{
					{Nodes: 1, Free: map[string]int64{"gpu": 1}}, {Nodes: 1, Free: map[string]int64{"gpu": 2}},
				}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(maxAge)},
			},
		},
		"NegativeFree": {
			reason: "A negative free count is invalid.",
			args:   args{pool: l4().Observed(now, 1, fixture.NodesFree(1, "gpu", -1)).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "nodesByFreeDevices[0].free[0].count: -1 is negative",
			}},
		},
		"FreeAbovePerNodeCount": {
			reason: "A node cannot have more free than it has.",
			args:   args{pool: l4().Observed(now, 1, fixture.NodesFree(1, "gpu", 5)).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "nodesByFreeDevices[0].free[0].count: 5 free gpu is more than the 4 a node has",
			}},
		},
		"FreeOfDeviceWithoutCount": {
			reason: "A device that publishes no per-node count has none to be free.",
			args: args{
				pool: fixture.Pool("l4", 1).Devices(v1alpha1.Device{Name: "gpu", Driver: "gpu.nvidia.com"}).Observed(now, 1, fixture.NodesFree(1, "gpu", 1)).Obj(),
				now:  now, maxAge: maxAge,
			},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "nodesByFreeDevices[0].free[0].count: 1 free gpu is more than the 0 a node has",
			}},
		},
		"FreeAtPerNodeCount": {
			reason: "An idle node has exactly its per-node count free.",
			args:   args{pool: l4().Observed(now, 1, fixture.NodesFree(1, "gpu", 4)).Obj(), now: now, maxAge: maxAge},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now, ObservedNodes: 1, Buckets: []scheduling.Bucket{{Nodes: 1, Free: map[string]int64{"gpu": 4}}}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(maxAge)},
			},
		},
		"DefaultClaimIsDRA": {
			reason: "A device without a claim is claimed through DRA and may be counted free.",
			args: args{
				pool: fixture.Pool("l4", 1).Devices(v1alpha1.Device{Name: "gpu", Driver: "gpu.nvidia.com", Count: new(int64(2))}).Observed(now, 1, fixture.NodesFree(1, "gpu", 2)).Obj(),
				now:  now, maxAge: maxAge,
			},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now, ObservedNodes: 1, Buckets: []scheduling.Bucket{{Nodes: 1, Free: map[string]int64{"gpu": 2}}}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(maxAge)},
			},
		},
		"BucketsAboveObservedNodes": {
			reason: "The histogram cannot hold more nodes than the pool has.",
			args:   args{pool: l4().Observed(now, 3, fixture.NodesFree(2, "gpu", 4), fixture.NodesFree(2, "gpu", 1)).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "nodesByFreeDevices: buckets hold 4 nodes, more than observedNodes 3",
			}},
		},
		"BucketsBelowObservedNodes": {
			reason: "Fewer nodes in the histogram than observed is normal: the rest are booting, unready or cordoned.",
			args:   args{pool: l4().Observed(now, 5, fixture.NodesFree(2, "gpu", 4)).Obj(), now: now, maxAge: maxAge},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now, ObservedNodes: 5, Buckets: []scheduling.Bucket{{Nodes: 2, Free: map[string]int64{"gpu": 4}}}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(maxAge)},
			},
		},
		"ObservedNodesAboveNodes": {
			reason: "During a surge upgrade a pool may have more nodes than its maximum; that is not a defect.",
			args:   args{pool: l4().Observed(now, 12, fixture.NodesFree(12, "gpu", 4)).Obj(), now: now, maxAge: maxAge},
			want: want{
				obs: &scheduling.PoolObservation{ObservedAt: now, ObservedNodes: 12, Buckets: []scheduling.Bucket{{Nodes: 12, Free: map[string]int64{"gpu": 4}}}},
				rep: PoolReport{Pool: "l4", State: Usable, ExpiresAt: now.Add(maxAge)},
			},
		},
		"InvalidAndStale": {
			reason: "A defect is reported even when the report is also stale, so the warning names it.",
			args:   args{pool: l4().Observed(now.Add(-time.Hour), 1, fixture.NodesFree(1, "gpu", 9)).Obj(), now: now, maxAge: maxAge},
			want: want{rep: PoolReport{
				Pool: "l4", State: Invalid,
				Defect: "nodesByFreeDevices[0].free[0].count: 9 free gpu is more than the 4 a node has",
			}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := tc.args.pool
			obs, rep := Pool(&p, tc.args.now, tc.args.maxAge)
			if diff := cmp.Diff(tc.want.obs, obs); diff != "" {
				t.Errorf("\n%s\nPool(...): -want observation, +got observation:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.rep, rep); diff != "" {
				t.Errorf("\n%s\nPool(...): -want report, +got report:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestReason(t *testing.T) {
	cases := map[string]struct {
		reason string
		rep    PoolReport
		want   string
	}{
		"Usable":  {reason: "A usable report needs no excuse.", rep: PoolReport{State: Usable}, want: "usable"},
		"Missing": {reason: "A missing report says so.", rep: PoolReport{State: Missing}, want: "no observation"},
		"Stale": {
			reason: "A stale report says for how long, to the second.",
			rep:    PoolReport{State: Stale, Age: 7*time.Minute + 300*time.Millisecond}, want: "observation stale for 7m0s",
		},
		"StaleHours": {
			reason: "Long silences read in hours.",
			rep:    PoolReport{State: Stale, Age: 26*time.Hour + 5*time.Second}, want: "observation stale for 26h0m5s",
		},
		"Invalid": {
			reason: "An invalid report carries its defect.",
			rep:    PoolReport{State: Invalid, Defect: "observedNodes: -1 is negative"}, want: "invalid observation: observedNodes: -1 is negative",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.rep.Reason()); diff != "" {
				t.Errorf("\n%s\nReason(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestClusters(t *testing.T) {
	type want struct {
		observed map[string]map[string]*scheduling.PoolObservation
		reports  []PoolReport
	}
	cases := map[string]struct {
		reason string
		args   []*v1alpha1.InferenceCluster
		want   want
	}{
		"None": {
			reason: "No clusters, nothing to judge.",
			want:   want{observed: map[string]map[string]*scheduling.PoolObservation{}},
		},
		"MixedVerdicts": {
			reason: "Every pool is judged, in input order; only usable ones reach the scheduler, and each report knows its cluster and whether it is Ready.",
			args: []*v1alpha1.InferenceCluster{
				fixture.Cluster("b").NotReady().Pools(
					l4().Observed(now, 1, fixture.NodesFree(1, "gpu", 4)).Obj(),
				).Obj(),
				fixture.Cluster("a").Pools(
					fixture.Pool("h100", 2).Devices(fixture.GPU("gpu", 8, "80Gi")).Obj(),
					l4().Observed(now.Add(-time.Hour), 1).Obj(),
					fixture.Pool("l40", 2).Devices(fixture.GPU("gpu", 2, "48Gi")).RawObservation(q(nowRFC), "-2", "[]").Obj(),
				).Obj(),
			},
			want: want{
				observed: map[string]map[string]*scheduling.PoolObservation{
					"b": {"l4": {ObservedAt: now, ObservedNodes: 1, Buckets: []scheduling.Bucket{{Nodes: 1, Free: map[string]int64{"gpu": 4}}}}},
					"a": {},
				},
				reports: []PoolReport{
					{Cluster: "b", Pool: "l4", State: Usable, ClusterReady: false, ExpiresAt: now.Add(maxAge)},
					{Cluster: "a", Pool: "h100", State: Missing, ClusterReady: true},
					{Cluster: "a", Pool: "l4", State: Stale, ClusterReady: true, Age: time.Hour},
					{Cluster: "a", Pool: "l40", State: Invalid, ClusterReady: true, Defect: "observedNodes: -2 is negative"},
				},
			},
		},
		"DuplicatePoolName": {
			reason: "When a cluster publishes one pool name twice, the first usable report wins, and both are judged.",
			args: []*v1alpha1.InferenceCluster{
				fixture.Cluster("a").Pools(
					l4().Observed(now, 1, fixture.NodesFree(1, "gpu", 4)).Obj(),
					l4().Observed(now, 2, fixture.NodesFree(2, "gpu", 1)).Obj(),
				).Obj(),
			},
			want: want{
				observed: map[string]map[string]*scheduling.PoolObservation{
					"a": {"l4": {ObservedAt: now, ObservedNodes: 1, Buckets: []scheduling.Bucket{{Nodes: 1, Free: map[string]int64{"gpu": 4}}}}},
				},
				reports: []PoolReport{
					{Cluster: "a", Pool: "l4", State: Usable, ClusterReady: true, ExpiresAt: now.Add(maxAge)},
					{Cluster: "a", Pool: "l4", State: Usable, ClusterReady: true, ExpiresAt: now.Add(maxAge)},
				},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clusters, reports := Clusters(tc.args, now, maxAge)
			got := map[string]map[string]*scheduling.PoolObservation{}
			for i, c := range clusters {
				if c.Object != tc.args[i] {
					t.Errorf("\n%s\nClusters(...)[%d].Object is not the input cluster", tc.reason, i)
				}
				got[c.Object.Metadata.Name] = c.Observed
			}
			if diff := cmp.Diff(tc.want.observed, got); diff != "" {
				t.Errorf("\n%s\nClusters(...): -want observed, +got observed:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want.reports, reports); diff != "" {
				t.Errorf("\n%s\nClusters(...): -want reports, +got reports:\n%s", tc.reason, diff)
			}
		})
	}
}

// q quotes s as a JSON string.
// withObservedNodes sets observedNodes to a number JSON cannot carry but a
// protobuf double can.
func withObservedNodes(p v1alpha1.GPUPool, n float64) v1alpha1.GPUPool {
	p.ObservedNodes = n
	return p
}

func q(s string) string { return `"` + s + `"` }

// rawBuckets is a raw histogram of n one-node buckets with free GPUs 0, 1, ...,
// wrapping at per.
func rawBuckets(n int, per int64) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`{"nodes":1,"free":[{"name":"gpu","count":%d}]}`, int64(i)%(per+1))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func wantBuckets(n int, per int64) []scheduling.Bucket {
	out := make([]scheduling.Bucket, n)
	for i := range out {
		out[i] = scheduling.Bucket{Nodes: 1, Free: map[string]int64{"gpu": int64(i) % (per + 1)}}
	}
	return out
}

func TestJudgeAtAnyTime(t *testing.T) {
	// Reports read once are judged at any time as if read then: a caller
	// keeps a cluster's reports across calls while the clock moves on.
	future := now.Add(time.Hour).Format(time.RFC3339)
	clusters := []*v1alpha1.InferenceCluster{
		fixture.Cluster("a").Pools(
			l4().Observed(now, 1, fixture.NodesFree(1, "gpu", 4)).Obj(),
			fixture.Pool("h100", 2).Devices(fixture.GPU("gpu", 8, "80Gi")).Obj(),
			fixture.Pool("bad", 2).Devices(fixture.GPU("gpu", 2, "48Gi")).RawObservation(q(nowRFC), "-2", "[]").Obj(),
			// From the future and malformed: which defect is named depends
			// on the clock.
			fixture.Pool("ahead", 2).Devices(fixture.GPU("gpu", 2, "48Gi")).RawObservation(q(future), "-2", "[]").Obj(),
			fixture.Pool("garbled", 2).Devices(fixture.GPU("gpu", 2, "48Gi")).RawObservation(q("yesterday"), "2", "[]").Obj(),
		).Obj(),
		fixture.Cluster("b").NotReady().Pools(l4().Observed(now.Add(-time.Minute), 2, fixture.NodesFree(2, "gpu", 4)).Obj()).Obj(),
	}
	read := make([]*ClusterReports, 0, len(clusters))
	for _, c := range clusters {
		read = append(read, ReadCluster(c))
	}
	for _, at := range []time.Time{now.Add(-2 * time.Hour), now, now.Add(3 * time.Minute), now.Add(2 * time.Hour)} {
		wantClusters, wantReports := Clusters(clusters, at, maxAge)
		gotClusters, gotReports := Judge(read, at, maxAge)
		if diff := cmp.Diff(wantClusters, gotClusters); diff != "" {
			t.Errorf("Judge(..., %s): clusters, Clusters' -want, +got:\n%s", at, diff)
		}
		if diff := cmp.Diff(wantReports, gotReports); diff != "" {
			t.Errorf("Judge(..., %s): reports, Clusters' -want, +got:\n%s", at, diff)
		}
	}
	// The clock decides between the two defects of the report from the
	// future.
	_, early := Judge(read, now, maxAge)
	_, late := Judge(read, now.Add(2*time.Hour), maxAge)
	if !strings.Contains(early[3].Defect, "in the future") || !strings.Contains(late[3].Defect, "negative") {
		t.Errorf("Judge(...): pool %s judged now: %q, two hours later: %q; want the future, then the negative count", early[3].Pool, early[3].Defect, late[3].Defect)
	}
}
