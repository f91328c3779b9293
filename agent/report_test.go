package agent

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/poolreport"
)

// report computes the pool's report of a view with the fixture classes,
// synced at syncedAt, its summary checked (checkSummary) and left out, for
// comparing with a histogram.
func report(t *testing.T, pool Pool, v View) Report {
	t.Helper()
	r := fullReport(t, pool, v)
	r.Devices = nil
	return r
}

// fullReport is report with its summary, for comparing with another way
// of computing it.
func fullReport(t *testing.T, pool Pool, v View) Report {
	t.Helper()
	if v.DeviceClasses == nil {
		v.DeviceClasses = classes()
	}
	if v.SyncedAt.IsZero() {
		v.SyncedAt = syncedAt
	}
	r, err := PoolReport(t.Context(), pool, v)
	if err != nil {
		t.Fatalf("PoolReport: %v", err)
	}
	checkSummary(t, pool, r)
	return r
}

// checkSummary checks a report's per-device summary against its
// histogram, which the tests that use report compare without it: a device
// per counted pool device, in order; total, the observed nodes times its
// count; free, what the buckets list when none were merged, and no less
// (merging only lowers a bucket's counts) nor more than total otherwise.
func checkSummary(t *testing.T, pool Pool, r Report) {
	t.Helper()
	devices, err := pool.devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Devices) != len(devices) {
		t.Fatalf("summary of %d devices, want the pool's %d: %+v", len(r.Devices), len(devices), r.Devices)
	}
	for k, d := range devices {
		var listed int64
		for _, b := range r.NodesByFreeDevices {
			for _, f := range b.Free {
				if f.Name == d.name {
					listed += b.Nodes * f.Count
				}
			}
		}
		got := r.Devices[k]
		merged := len(r.NodesByFreeDevices) == poolreport.MaxBuckets
		switch {
		case got.Name != d.name:
			t.Errorf("summary[%d] is of %q, want %q", k, got.Name, d.name)
		case got.Total != r.ObservedNodes*d.count:
			t.Errorf("summary[%s].total %d, want %d nodes times %d", d.name, got.Total, r.ObservedNodes, d.count)
		case !merged && got.Free != listed:
			t.Errorf("summary[%s].free %d, want the histogram's %d", d.name, got.Free, listed)
		case merged && (got.Free < listed || got.Free > got.Total):
			t.Errorf("summary[%s].free %d, want between the merged histogram's %d and the total %d", d.name, got.Free, listed, got.Total)
		}
	}
}

// histogram is a report of observed nodes and the buckets, at syncedAt.
func histogram(observed int64, b ...agentv1alpha1.Bucket) Report {
	if b == nil {
		b = []agentv1alpha1.Bucket{}
	}
	return Report{ObservedNodes: observed, ObservedAt: syncedAt, NodesByFreeDevices: b}
}

// without returns the report with the nodes left out, for the reasons:
// node name and reason pairs.
func (r Report) without(nodeAndReason ...string) Report {
	r.LeftOut = map[string]string{}
	for i := 0; i+1 < len(nodeAndReason); i += 2 {
		r.LeftOut[nodeAndReason[i]] = nodeAndReason[i+1]
	}
	return r
}

func TestNodesInTheHistogram(t *testing.T) {
	type args struct {
		pool  Pool
		nodes []*nodeWrapper
	}
	cases := map[string]struct {
		reason string
		args   args
		want   Report
	}{
		"ReadyNodesAreGrouped": {
			reason: "Ready, uncordoned, untainted nodes with the same free devices are one bucket.",
			args:   args{pool: gpuPool(), nodes: []*nodeWrapper{node("n1"), node("n2")}},
			want:   histogram(2, bucket(2, "gpu", 8)),
		},
		"UnreadyNodesCountButAreLeftOut": {
			reason: "observedNodes counts a node whose Ready is False or Unknown, or that reports no Ready condition; the histogram does not.",
			args: args{pool: gpuPool(), nodes: []*nodeWrapper{
				node("n1"), node("n2").ready(corev1.ConditionFalse), node("n3").ready(corev1.ConditionUnknown), node("n4").noConditions(),
			}},
			want: histogram(4, bucket(1, "gpu", 8)).without("n2", "not Ready", "n3", "not Ready", "n4", "not Ready"),
		},
		"CordonedNodesAreLeftOut": {
			reason: "A cordoned node (spec.unschedulable) takes no new pod.",
			args:   args{pool: gpuPool(), nodes: []*nodeWrapper{node("n1"), node("n2").cordoned()}},
			want:   histogram(2, bucket(1, "gpu", 8)).without("n2", "cordoned"),
		},
		"NoScheduleAndNoExecuteTaintsLeaveNodesOut": {
			reason: "A NoSchedule or NoExecute taint repels a new pod; PreferNoSchedule does not.",
			args: args{pool: gpuPool(), nodes: []*nodeWrapper{
				node("n1").taint("maintenance", corev1.TaintEffectNoSchedule),
				node("n2").taint("draining", corev1.TaintEffectNoExecute),
				node("n3").taint("spot", corev1.TaintEffectPreferNoSchedule),
			}},
			want: histogram(3, bucket(1, "gpu", 8)).without(
				"n1", "untolerated taint maintenance=true:NoSchedule",
				"n2", "untolerated taint draining=true:NoExecute",
			),
		},
		"TaintsThePoolToleratesKeepNodesIn": {
			reason: "A taint every pod of the pool tolerates does not keep them off; one more that they do not does.",
			args: args{
				pool: Pool{Name: h100, Devices: gpuPool().Devices, Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}},
				nodes: []*nodeWrapper{
					node("n1").taint("nvidia.com/gpu", corev1.TaintEffectNoSchedule),
					node("n2").taint("nvidia.com/gpu", corev1.TaintEffectNoSchedule).taint("maintenance", corev1.TaintEffectNoSchedule),
				},
			},
			want: histogram(2, bucket(1, "gpu", 8)).without("n2", "untolerated taint maintenance=true:NoSchedule"),
		},
		"OnlyThePoolsNodes": {
			reason: "Nodes labelled for another pool, or not at all, are not the pool's.",
			args: args{pool: gpuPool(), nodes: []*nodeWrapper{
				node("n1"), node("n2").pool("l4"), {Node: corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n3"}}},
			}},
			want: histogram(1, bucket(1, "gpu", 8)),
		},
		"ASelectorPicksTheNodes": {
			reason: "A pool's own selector replaces the pool label.",
			args: args{
				pool:  Pool{Name: h100, Nodes: labels.SelectorFromSet(labels.Set{v1alpha1.LabelPool: "l4"}), Devices: gpuPool().Devices},
				nodes: []*nodeWrapper{node("n1"), node("n2").pool("l4")},
			},
			want: histogram(1, bucket(1, "gpu", 8)),
		},
		"NoNodes": {
			reason: "A pool with no nodes reports none, with an empty histogram: a report, not a missing one.",
			args:   args{pool: gpuPool()},
			want:   histogram(0),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v := View{}
			for _, n := range tc.args.nodes {
				v.Nodes = append(v.Nodes, n.obj())
				v.ResourceSlices = append(v.ResourceSlices, gpuSlice(n.Name, 8).obj())
			}
			got := report(t, tc.args.pool, v)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("\n%s\nPoolReport(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestIncompleteResourcePools(t *testing.T) {
	cases := map[string]struct {
		reason string
		slices []*sliceWrapper
		want   Report
	}{
		"Complete": {
			reason: "Both slices of generation 1 are there: the node's 4+4 GPUs count.",
			slices: []*sliceWrapper{
				slice("a", gpuDriver, "n1").pool("n1", 1, 2).devices(gpus(0, 4, "H100")...),
				slice("b", gpuDriver, "n1").pool("n1", 1, 2).devices(gpus(4, 4, "H100")...),
			},
			want: histogram(1, bucket(1, "gpu", 8)),
		},
		"ASliceIsMissing": {
			reason: "One of two slices of the current generation: the pool is incomplete and the node left out, as a cordoned one is.",
			slices: []*sliceWrapper{slice("a", gpuDriver, "n1").pool("n1", 1, 2).devices(gpus(0, 4, "H100")...)},
			want:   histogram(1).without("n1", "resource pool gpu.example.com/n1 is incomplete"),
		},
		"ANewGenerationIsBeingPublished": {
			reason: "A complete generation 1 and one of two slices of generation 2: generation 2 is current, and incomplete.",
			slices: []*sliceWrapper{
				slice("old", gpuDriver, "n1").pool("n1", 1, 1).devices(gpus(0, 8, "H100")...),
				slice("new-a", gpuDriver, "n1").pool("n1", 2, 2).devices(gpus(0, 4, "H100")...),
			},
			want: histogram(1).without("n1", "resource pool gpu.example.com/n1 is incomplete"),
		},
		"AnOldGenerationLeftBehind": {
			reason: "Generation 2 is complete; a stale slice of generation 1 is ignored, its devices not counted.",
			slices: []*sliceWrapper{
				slice("old", gpuDriver, "n1").pool("n1", 1, 1).devices(gpus(0, 8, "H100")...),
				slice("new", gpuDriver, "n1").pool("n1", 2, 1).devices(gpus(0, 2, "H100")...),
			},
			want: histogram(1, bucket(1, "gpu", 2)),
		},
		"SlicesDisagreeOnTheCount": {
			reason: "Two slices of one generation, one saying the pool has 2 and one 3: not complete.",
			slices: []*sliceWrapper{
				slice("a", gpuDriver, "n1").pool("n1", 1, 2).devices(gpus(0, 4, "H100")...),
				slice("b", gpuDriver, "n1").pool("n1", 1, 3).devices(gpus(4, 4, "H100")...),
			},
			want: histogram(1).without("n1", "resource pool gpu.example.com/n1 is incomplete"),
		},
		"AnotherDriversPoolIsIncomplete": {
			reason: "Every resource pool of the node must be complete, whichever driver publishes it.",
			slices: []*sliceWrapper{
				gpuSlice("n1", 8),
				slice("n1-nic", nicDriver, "n1").pool("n1", 1, 2).devices(nic("nic-0").obj()),
			},
			want: histogram(1).without("n1", "resource pool nic.example.com/n1 is incomplete"),
		},
		"NoSlicesAtAll": {
			reason: "A node whose driver has published nothing yet is schedulable, with nothing free.",
			want:   histogram(1, bucket(1)),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := report(t, gpuPool(), View{Nodes: nodes(node("n1")), ResourceSlices: resourceSlices(tc.slices...)})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("\n%s\nPoolReport(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestFreeDevices(t *testing.T) {
	type args struct {
		pool   Pool
		slices []*sliceWrapper
		claims []*claimWrapper
	}
	cases := map[string]struct {
		reason string
		args   args
		want   Report
	}{
		"AllFree": {
			reason: "No claim holds any of the 8 GPUs.",
			args:   args{pool: gpuPool(), slices: []*sliceWrapper{gpuSlice("n1", 8)}},
			want:   histogram(1, bucket(1, "gpu", 8)),
		},
		"AClaimHoldsDevices": {
			reason: "A claim allocated 3 GPUs on the node: 5 are left.",
			args: args{
				pool:   gpuPool(),
				slices: []*sliceWrapper{gpuSlice("n1", 8)},
				claims: []*claimWrapper{claim("a").allocated(gpuDriver, "n1", "gpu-0", "gpu-3", "gpu-7")},
			},
			want: histogram(1, bucket(1, "gpu", 5)),
		},
		"AClaimOnAnotherNode": {
			reason: "A claim on another node's pool takes nothing from this one.",
			args: args{
				pool:   gpuPool(),
				slices: []*sliceWrapper{gpuSlice("n1", 8)},
				claims: []*claimWrapper{claim("a").allocated(gpuDriver, "n2", "gpu-0")},
			},
			want: histogram(1, bucket(1, "gpu", 8)),
		},
		"AdminAccessTakesNothing": {
			reason: "A device allocated with admin access (monitoring) can still be allocated to a workload, as kube-scheduler counts it.",
			args: args{
				pool:   gpuPool(),
				slices: []*sliceWrapper{gpuSlice("n1", 8)},
				claims: []*claimWrapper{claim("monitor").admin(gpuDriver, "n1", "gpu-0")},
			},
			want: histogram(1, bucket(1, "gpu", 8)),
		},
		"TheClassSelects": {
			reason: "A class of H100s only: the node's 4 A100s are not the pool device.",
			args: args{
				pool:   gpuPool(poolDev("gpu", gpuDriver, "h100.gpu.example.com", 8)),
				slices: []*sliceWrapper{slice("n1-gpu", gpuDriver, "n1").devices(gpus(0, 4, "H100")...).devices(gpus(4, 4, "A100")...)},
			},
			want: histogram(1, bucket(1, "gpu", 4)),
		},
		"TheDriverSelects": {
			reason: "A class without selectors matches every driver's devices; the pool device's driver rules out the others.",
			args: args{
				pool: gpuPool(poolDev("gpu", gpuDriver, "any-device", 8)),
				slices: []*sliceWrapper{
					slice("n1-gpu", gpuDriver, "n1").pool("n1-gpu", 1, 1).devices(gpus(0, 2, "H100")...),
					slice("n1-other", "other.example.com", "n1").pool("n1-other", 1, 1).devices(gpus(0, 6, "H100")...),
				},
			},
			want: histogram(1, bucket(1, "gpu", 2)),
		},
		"DeviceTaints": {
			reason: "A device tainted NoSchedule or NoExecute is not allocated to a claim that does not tolerate it; effect None is information only.",
			args: args{
				pool: gpuPool(),
				slices: []*sliceWrapper{slice("n1-gpu", gpuDriver, "n1").devices(
					gpu("gpu-0", "H100").taint("ecc", resourcev1.DeviceTaintEffectNoSchedule).obj(),
					gpu("gpu-1", "H100").taint("xid", resourcev1.DeviceTaintEffectNoExecute).obj(),
					gpu("gpu-2", "H100").taint("note", resourcev1.DeviceTaintEffectNone).obj(),
					gpu("gpu-3", "H100").obj(),
				)},
			},
			want: histogram(1, bucket(1, "gpu", 2)),
		},
		"NeverAboveThePoolsCount": {
			reason: "The node has 10 GPUs, the pool publishes 8 a node: the function refuses a report of more.",
			args:   args{pool: gpuPool(), slices: []*sliceWrapper{gpuSlice("n1", 10)}},
			want:   histogram(1, bucket(1, "gpu", 8)),
		},
		"DevicesOfEveryNodeAreNotCounted": {
			reason: "Devices a slice offers to all nodes would be free on each of them at once, for one device: none is counted.",
			args: args{pool: gpuPool(), slices: []*sliceWrapper{
				gpuSlice("n1", 2),
				slice("shared", gpuDriver, "n1").pool("shared", 1, 1).allNodes().devices(gpus(0, 4, "H100")...),
			}},
			want: histogram(1, bucket(1, "gpu", 2)),
		},
		"AnInvalidResourcePool": {
			reason: "A pool with two devices of one name is invalid: the allocator allocates none of its devices, and the report counts none.",
			args: args{pool: gpuPool(), slices: []*sliceWrapper{
				slice("n1-gpu", gpuDriver, "n1").devices(gpu("gpu-0", "H100").obj(), gpu("gpu-0", "H100").obj(), gpu("gpu-1", "H100").obj()),
			}},
			want: histogram(1, bucket(1)),
		},
		"SyntheticDevicesAreNotReported": {
			reason: "A Synthetic pool device is never claimed through DRA; a report names DRA devices only.",
			args: args{
				pool:   gpuPool(poolDev("gpu", gpuDriver, gpuClass, 8), v1alpha1.Device{Name: "ib", Claim: v1alpha1.ClaimSynthetic, Driver: nicDriver, Count: new(int64(4))}),
				slices: []*sliceWrapper{gpuSlice("n1", 8)},
			},
			want: histogram(1, bucket(1, "gpu", 8)),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cls := append(classes(),
				class("h100.gpu.example.com", `device.driver == "gpu.example.com"`, `device.attributes["gpu.example.com"].model == "H100"`),
				class("any-device"),
			)
			got := report(t, tc.args.pool, View{
				Nodes: nodes(node("n1")), ResourceSlices: resourceSlices(tc.args.slices...),
				DeviceClasses: cls, ResourceClaims: claims(tc.args.claims...),
			})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("\n%s\nPoolReport(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// partitioned is a node's GPUs gpu-0 and gpu-1, each one counter set of 80Gi
// that the whole GPU uses up and each of its seven 1g partitions takes 10Gi
// of: a MIG-style partitionable device.
func partitioned(nodeName string) []*sliceWrapper {
	counters := slice(nodeName+"-counters", gpuDriver, nodeName).pool(nodeName, 1, 2)
	devices := slice(nodeName+"-gpu", gpuDriver, nodeName).pool(nodeName, 1, 2)
	for _, g := range []string{"gpu-0", "gpu-1"} {
		counters.counters(g, map[string]string{"memory": "80Gi"})
		devices.devices(gpu(g, "H100").consumes(g, map[string]string{"memory": "80Gi"}).obj())
		for p := range 7 {
			devices.devices(mig(g+"-1g-"+string(rune('0'+p))).consumes(g, map[string]string{"memory": "10Gi"}).obj())
		}
	}
	return []*sliceWrapper{counters, devices}
}

func TestPartitionableDevices(t *testing.T) {
	whole := poolDev("gpu", gpuDriver, gpuClass, 2)
	part := poolDev("mig", gpuDriver, migClass, 14)
	cases := map[string]struct {
		reason  string
		devices []v1alpha1.Device
		claims  []*claimWrapper
		want    Report
	}{
		"WholeGPUsFree": {
			reason:  "No partition in use: both whole GPUs can be had.",
			devices: []v1alpha1.Device{whole},
			want:    histogram(1, bucket(1, "gpu", 2)),
		},
		"APartitionInUseTakesItsWholeGPU": {
			reason:  "A claim holds one 1g partition of gpu-0: its counters no longer leave room for the whole gpu-0.",
			devices: []v1alpha1.Device{whole},
			claims:  []*claimWrapper{claim("a").allocated(gpuDriver, "n1", "gpu-0-1g-3")},
			want:    histogram(1, bucket(1, "gpu", 1)),
		},
		"PartitionsLeft": {
			reason:  "One 1g partition of gpu-0 and the whole gpu-1 in use: six partitions of gpu-0 are left.",
			devices: []v1alpha1.Device{part},
			claims:  []*claimWrapper{claim("a").allocated(gpuDriver, "n1", "gpu-0-1g-0"), claim("b").allocated(gpuDriver, "n1", "gpu-1")},
			want:    histogram(1, bucket(1, "mig", 6)),
		},
		"KindsThatShareCountersAreReportedJointly": {
			reason:  "Whole GPUs and partitions of the same GPUs: both whole GPUs free leave no partition that could be had with them.",
			devices: []v1alpha1.Device{whole, part},
			want:    histogram(1, bucket(1, "gpu", 2)),
		},
		"KindsInTheOtherOrder": {
			reason:  "Partitions first: 14 of them use the counters of both GPUs, so no whole GPU can be had with them.",
			devices: []v1alpha1.Device{part, whole},
			want:    histogram(1, bucket(1, "mig", 14)),
		},
		"JointWithAPartitionInUse": {
			reason:  "A partition of gpu-0 in use: the whole gpu-1, and six partitions of gpu-0.",
			devices: []v1alpha1.Device{whole, part},
			claims:  []*claimWrapper{claim("a").allocated(gpuDriver, "n1", "gpu-0-1g-6")},
			want:    histogram(1, bucket(1, "gpu", 1, "mig", 6)),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := report(t, gpuPool(tc.devices...), View{Nodes: nodes(node("n1")), ResourceSlices: resourceSlices(partitioned("n1")...), ResourceClaims: claims(tc.claims...)})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("\n%s\nPoolReport(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestConsumableCapacity(t *testing.T) {
	// gpu-0 and gpu-1 can each be shared by many claims, 10Gi of memory
	// each by default.
	shared := func() []*sliceWrapper {
		return []*sliceWrapper{slice("n1-gpu", gpuDriver, "n1").devices(gpu("gpu-0", "H100").shared().obj(), gpu("gpu-1", "H100").shared().obj())}
	}
	cases := map[string]struct {
		reason string
		claims []*claimWrapper
		want   Report
	}{
		"Unshared": {
			reason: "No claim shares either device: both are whole-free.",
			want:   histogram(1, bucket(1, "gpu", 2)),
		},
		"AShareInUse": {
			reason: "A claim holds a 10Gi share of gpu-0: it is not whole-free, though more shares of it could be had.",
			claims: []*claimWrapper{claim("a").share(gpuDriver, "n1", "gpu-0", "10Gi")},
			want:   histogram(1, bucket(1, "gpu", 1)),
		},
		"BothShared": {
			reason: "Shares of both devices in use: nothing whole-free.",
			claims: []*claimWrapper{claim("a").share(gpuDriver, "n1", "gpu-0", "10Gi"), claim("b").share(gpuDriver, "n1", "gpu-1", "1Gi")},
			want:   histogram(1, bucket(1)),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := report(t, gpuPool(poolDev("gpu", gpuDriver, gpuClass, 2)), View{Nodes: nodes(node("n1")), ResourceSlices: resourceSlices(shared()...), ResourceClaims: claims(tc.claims...)})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("\n%s\nPoolReport(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestMultiKindPools(t *testing.T) {
	// Every node has 8 GPUs and 4 NICs, of two drivers.
	var slices []*sliceWrapper
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		slices = append(slices, gpuSlice(n, 8), slice(n+"-nic", nicDriver, n).devices(nic("nic-0").obj(), nic("nic-1").obj(), nic("nic-2").obj(), nic("nic-3").obj()))
	}
	pool := gpuPool(poolDev("gpu", gpuDriver, gpuClass, 8), poolDev("nic", nicDriver, nicClass, 4))
	got := report(t, pool, View{
		Nodes:          nodes(node("n1"), node("n2"), node("n3"), node("n4").cordoned()),
		ResourceSlices: resourceSlices(slices...),
		ResourceClaims: claims(
			claim("a").allocated(nicDriver, "n2", "nic-1"),
			claim("b").allocated(gpuDriver, "n3", "gpu-2", "gpu-5"),
		),
	})
	want := histogram(4,
		bucket(1, "gpu", 8, "nic", 4),
		bucket(1, "gpu", 8, "nic", 3),
		bucket(1, "gpu", 6, "nic", 4),
	).without("n4", "cordoned")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("\nEach kind is counted from its own driver and class, the cordoned n4 left out.\nPoolReport(...): -want, +got:\n%s", diff)
	}
}

func TestObservedAt(t *testing.T) {
	cases := map[string]struct {
		reason   string
		syncedAt time.Time
		want     time.Time
	}{
		"WholeSecond": {
			reason:   "A sync on the second is the report's time.",
			syncedAt: syncedAt,
			want:     syncedAt,
		},
		"RoundedDown": {
			reason:   "Never later than the sync: 20:06:00.999 is reported as 20:06:00.",
			syncedAt: syncedAt.Add(999 * time.Millisecond),
			want:     syncedAt,
		},
		"InUTC": {
			reason:   "A sync time in another zone is reported in UTC.",
			syncedAt: syncedAt.Add(1500 * time.Millisecond).In(time.FixedZone("CEST", 2*3600)),
			want:     syncedAt.Add(time.Second),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := report(t, gpuPool(), View{SyncedAt: tc.syncedAt}).ObservedAt
			if !got.Equal(tc.want) || got.Location() != time.UTC || got.After(tc.syncedAt) {
				t.Errorf("\n%s\nObservedAt: want %s (UTC, not after %s), got %s", tc.reason, tc.want, tc.syncedAt, got)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	good := func() View {
		return View{Nodes: nodes(node("n1")), ResourceSlices: resourceSlices(gpuSlice("n1", 8)), DeviceClasses: classes(), SyncedAt: syncedAt}
	}
	cases := map[string]struct {
		reason string
		pool   Pool
		view   func(v *View)
		want   string
	}{
		"NoSyncTime": {
			reason: "A view must say when it is complete as of.",
			view:   func(v *View) { v.SyncedAt = time.Time{} },
			want:   "view: SyncedAt is not set",
		},
		"UnknownClass": {
			reason: "A pool device's class must be in the view.",
			pool:   gpuPool(poolDev("gpu", gpuDriver, "missing.example.com", 8)),
			want:   `pool h100: devices[gpu].deviceClassName: no DeviceClass "missing.example.com" in the view`,
		},
		"MalformedClassSelector": {
			reason: "A class selector that does not compile names the class and the field.",
			view: func(v *View) {
				v.DeviceClasses = []*resourcev1.DeviceClass{class(gpuClass, `device.driver ==`)}
			},
			want: "pool h100: DeviceClass gpu.example.com: spec.selectors[0].cel.expression: compilation failed",
		},
		"ClassSelectorFailsOnADevice": {
			reason: "A class selector that fails at run time on a device (an attribute it lacks) fails allocation, as in kube-scheduler; the error names the node, class and device.",
			view: func(v *View) {
				v.DeviceClasses = []*resourcev1.DeviceClass{class(gpuClass, `device.attributes["gpu.example.com"].vendor == "x"`)}
			},
			want: "pool h100: cannot count free gpu on Node n1: the DRA allocator failed: class gpu.example.com: selector #0 on device gpu.example.com/n1/gpu-0: CEL runtime error",
		},
		"SliceOfABadDriver": {
			reason: "A slice's driver must be a DNS subdomain.",
			view: func(v *View) {
				v.ResourceSlices = resourceSlices(slice("n1-gpu", "GPU_Driver", "n1").devices(gpus(0, 8, "H100")...))
			},
			want: `view.ResourceSlices[0]: ResourceSlice n1-gpu: spec.driver: "GPU_Driver" is not a DRA driver name`,
		},
		"SliceWithoutAPool": {
			reason: "A slice belongs to a named pool.",
			view:   func(v *View) { v.ResourceSlices = resourceSlices(gpuSlice("n1", 8).pool("", 1, 1)) },
			want:   "view.ResourceSlices[0]: ResourceSlice n1-gpu: spec.pool.name: empty",
		},
		"SliceCountZero": {
			reason: "A pool has at least one slice.",
			view:   func(v *View) { v.ResourceSlices = resourceSlices(gpuSlice("n1", 8).pool("n1", 1, 0)) },
			want:   "view.ResourceSlices[0]: ResourceSlice n1-gpu: spec.pool.resourceSliceCount: 0 is less than 1",
		},
		"NilSlice": {
			reason: "A nil entry is named by index.",
			view:   func(v *View) { v.ResourceSlices = append(v.ResourceSlices, nil) },
			want:   "view.ResourceSlices[1]: nil",
		},
		"NilNode": {
			reason: "A nil entry is named by index.",
			view:   func(v *View) { v.Nodes = append(v.Nodes, nil) },
			want:   "view.Nodes[1]: nil",
		},
		"NodeTwice": {
			reason: "Two Nodes of one name are not a cluster's.",
			view:   func(v *View) { v.Nodes = append(v.Nodes, node("n1").obj()) },
			want:   "view.Nodes[1]: Node n1 is listed twice",
		},
		"NilClass": {
			reason: "A nil entry is named by index.",
			view:   func(v *View) { v.DeviceClasses = append(v.DeviceClasses, nil) },
			want:   "pool h100: view.DeviceClasses[3]: nil",
		},
		"ClaimResultWithoutADevice": {
			reason: "An allocation result names its device.",
			view: func(v *View) {
				v.ResourceClaims = claims(claim("a").allocated(gpuDriver, "n1", ""))
			},
			want: "ResourceClaim ml-team/a: status.allocation.devices.results[0]: driver, pool and device must all be set",
		},
		"PoolDeviceTwice": {
			reason: "A pool lists each device once.",
			pool:   gpuPool(poolDev("gpu", gpuDriver, gpuClass, 8), poolDev("gpu", gpuDriver, gpuClass, 8)),
			want:   "pool h100: devices[gpu]: listed twice",
		},
		"PoolDeviceWithoutADriver": {
			reason: "A DRA pool device names its driver.",
			pool:   gpuPool(poolDev("gpu", "", gpuClass, 8)),
			want:   `pool h100: devices[gpu].driver: "" is not a DRA driver name`,
		},
		"PoolDeviceWithoutAClass": {
			reason: "A DRA pool device names the class its claims request.",
			pool:   gpuPool(poolDev("gpu", gpuDriver, "", 8)),
			want:   "pool h100: devices[gpu].deviceClassName: empty",
		},
		"NegativeCount": {
			reason: "A per-node count is not negative.",
			pool:   gpuPool(poolDev("gpu", gpuDriver, gpuClass, -1)),
			want:   "pool h100: devices[gpu].count: -1 is not between 0 and 1048576",
		},
		"TooManyDevices": {
			reason: "A bucket lists at most 16 devices.",
			pool: func() Pool {
				var d []v1alpha1.Device
				for i := range 17 {
					d = append(d, poolDev("gpu"+string(rune('a'+i)), gpuDriver, gpuClass, 1))
				}
				return gpuPool(d...)
			}(),
			want: "pool h100: devices: 17 DRA devices, more than the 16 a bucket can list",
		},
		"UnknownClaimKind": {
			reason: "A device is claimed through DRA or Synthetic.",
			pool:   gpuPool(v1alpha1.Device{Name: "gpu", Claim: "Magic", Driver: gpuDriver, DeviceClassName: gpuClass}),
			want:   `pool h100: devices[gpu].claim: "Magic" is neither DRA nor Synthetic`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v := good()
			if tc.view != nil {
				tc.view(&v)
			}
			pool := tc.pool
			if pool.Name == "" {
				pool = gpuPool()
			}
			_, err := PoolReport(t.Context(), pool, v)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("\n%s\nPoolReport(...): want an error containing %q, got %v", tc.reason, tc.want, err)
			}
		})
	}
}

// The summary behind kubectl's FREE and TOTAL: exact free devices over the
// nodes a new pod could land on, and the pool's nodes times its count.
func TestDeviceSummary(t *testing.T) {
	type args struct {
		pool   Pool
		nodes  []*nodeWrapper
		claims []*claimWrapper
	}
	cases := map[string]struct {
		reason string
		args   args
		want   []agentv1alpha1.DeviceSummary
	}{
		"FreeAndHeld": {
			reason: "Two nodes of 8: one whole, one with 3 held. Free 13 of 16.",
			args: args{
				pool:   gpuPool(),
				nodes:  []*nodeWrapper{node("n1"), node("n2")},
				claims: []*claimWrapper{claim("a").allocated(gpuDriver, "n2", "gpu-0", "gpu-1", "gpu-2")},
			},
			want: []agentv1alpha1.DeviceSummary{{Name: "gpu", Free: 13, Total: 16}},
		},
		"LeftOutNodesHaveNoneFree": {
			reason: "A cordoned node's devices count in the total, none as free: a new pod could not have them.",
			args:   args{pool: gpuPool(), nodes: []*nodeWrapper{node("n1"), node("n2").cordoned()}},
			want:   []agentv1alpha1.DeviceSummary{{Name: "gpu", Free: 8, Total: 16}},
		},
		"NoNodes": {
			reason: "A pool without nodes: 0 of 0.",
			args:   args{pool: gpuPool()},
			want:   []agentv1alpha1.DeviceSummary{{Name: "gpu", Free: 0, Total: 0}},
		},
		"SyntheticDevicesAreNotSummed": {
			reason: "Only counted (DRA) devices are summed, in the spec's order.",
			args: args{
				pool:  gpuPool(v1alpha1.Device{Name: "efa", Claim: v1alpha1.ClaimSynthetic}, poolDev("gpu", gpuDriver, gpuClass, 8)),
				nodes: []*nodeWrapper{node("n1")},
			},
			want: []agentv1alpha1.DeviceSummary{{Name: "gpu", Free: 8, Total: 8}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v := View{DeviceClasses: classes(), SyncedAt: syncedAt, ResourceClaims: claims(tc.args.claims...)}
			for _, n := range tc.args.nodes {
				v.Nodes = append(v.Nodes, n.obj())
				v.ResourceSlices = append(v.ResourceSlices, gpuSlice(n.Name, 8).obj())
			}
			got, err := PoolReport(t.Context(), tc.args.pool, v)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Devices); diff != "" {
				t.Errorf("\n%s\nPoolReport(...).Devices: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// Merged buckets lower what the histogram lists; the summary stays exact.
func TestDeviceSummaryIsExactWhenBucketsMerge(t *testing.T) {
	pool := gpuPool(poolDev("gpu", gpuDriver, gpuClass, 8), poolDev("nic", nicDriver, nicClass, 8))
	v := View{DeviceClasses: classes(), SyncedAt: syncedAt}
	var free [2]int64
	// 81 distinct free vectors, more than poolreport.MaxBuckets.
	for g := range 9 {
		for n := range 9 {
			name := "n" + strconv.Itoa(g) + strconv.Itoa(n)
			v.Nodes = append(v.Nodes, node(name).obj())
			nics := make([]resourcev1.Device, 0, n)
			for i := range n {
				nics = append(nics, nic("nic-"+strconv.Itoa(i)).obj())
			}
			v.ResourceSlices = append(v.ResourceSlices, gpuSlice(name, g).obj(), slice(name+"-nic", nicDriver, name).devices(nics...).obj())
			free[0] += int64(g)
			free[1] += int64(n)
		}
	}
	r, err := PoolReport(t.Context(), pool, v)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.NodesByFreeDevices) != poolreport.MaxBuckets {
		t.Fatalf("%d buckets, want %d merged ones", len(r.NodesByFreeDevices), poolreport.MaxBuckets)
	}
	want := []agentv1alpha1.DeviceSummary{{Name: "gpu", Free: free[0], Total: 81 * 8}, {Name: "nic", Free: free[1], Total: 81 * 8}}
	if diff := cmp.Diff(want, r.Devices); diff != "" {
		t.Errorf("the summary of a merged histogram: -want, +got:\n%s", diff)
	}
}
