package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/sim"
	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// The scale run's environment (./hack/test-scale.sh sets it).
const (
	// envScale sizes the run: CLUSTERSxNODESxWAVES, for example 3x4x2;
	// unset, TestScale is skipped.
	envScale = "FLEET_SCALE"
	// envScaleOut is the directory the report is written to; unset, the
	// logs' scale/.
	envScaleOut = "FLEET_SCALE_OUT"
	// envScaleMargin is how far, in points of the fleet's GPUs, the live
	// runs' mean allocation may stray from fleetsim's; unset, it is not
	// checked.
	envScaleMargin = "FLEET_SCALE_MARGIN"
	// setLabel selects one set of the scale run's clusters.
	setLabel = "fleet.test/set"
)

// scaleSet is one of the scale run's two fleets: the same clusters and
// the same workload, with the agents' reports or without (whole nodes).
type scaleSet struct {
	name, prefix string
	mode         sim.Mode
	clusters     []string
}

// TestScale runs sim.Waves live, on two sets of clusters under one
// control plane: one whose agents report (free devices), one whose agents
// do not run (whole nodes). The same deployments, under two prefixes, scale
// on both at once. It then runs the same scenario through the simulator
// with kube-default's binder, and writes a report of both side by side
// (docs/scale.md).
func TestScale(t *testing.T) {
	size := os.Getenv(envScale)
	if size == "" {
		t.Skipf("SKIP: %s is not set (./hack/test-scale.sh sets it)", envScale)
	}
	ws, err := sim.ParseWaves(size)
	if err != nil {
		t.Fatalf("%s: %v", envScale, err)
	}
	sc, err := sim.Waves(ws)
	if err != nil {
		t.Fatalf("%s=%s: %v", envScale, size, err)
	}
	sets := []*scaleSet{
		{name: "reported", prefix: "r-", mode: sim.Fresh()},
		{name: "whole-node", prefix: "w-", mode: sim.WholeNode()},
	}
	var specs []workloadSpec
	for _, s := range sets {
		for _, c := range sc.Clusters {
			spec := workloadSpec{name: s.prefix + c.Name, labels: map[string]string{setLabel: s.name}, noAgent: !s.mode.Agent.Enabled}
			for _, p := range c.Pools {
				spec.pools = append(spec.pools, poolSpec{name: p.Name, class: "h100-8x", nodes: p.Nodes})
			}
			specs = append(specs, spec)
			s.clusters = append(s.clusters, spec.name)
		}
	}
	started := time.Now()
	// The function's defaults, as fleetsim runs it (MostFree, re-placing
	// after 15m).
	f := startFleetOf(t, specs, map[string]string{})
	startup := time.Since(started)

	r := &scaleRun{f: f, sc: sc, sets: sets, tick: sim.DefaultTick, runs: map[string]*liveRun{}}
	r.run(t)

	rows := make([]sim.Row, 0, 2*len(sets))
	bounds := sim.Limit(sc)
	for _, s := range sets {
		rows = append(rows, sim.Row{Scenario: sc, Mode: sim.Mode{Name: "live, " + s.mode.Name}, Binder: sim.KubeDefault, Result: r.runs[s.name].result(sc), Bounds: bounds})
	}
	for _, s := range sets {
		res, err := sim.Run(sc.Config(s.mode, sim.KubeDefault, sim.Direct{Input: sim.Input(s.mode.Binding), Cache: sim.NewCache(), Servers: sim.NewServers(1)}))
		if err != nil {
			t.Fatalf("cannot simulate %s in mode %s: %v", sc.Name, s.mode.Name, err)
		}
		rows = append(rows, sim.Row{Scenario: sc, Mode: sim.Mode{Name: "fleetsim, " + s.mode.Name}, Binder: sim.KubeDefault, Result: res, Bounds: bounds})
	}
	out := os.Getenv(envScaleOut)
	if out == "" {
		out = filepath.Join(suite.Logs(), "scale")
	}
	if err := writeScaleReport(out, size, startup, r, rows); err != nil {
		t.Fatalf("cannot write the scale report: %v", err)
	}
	t.Logf("the scale report is in %s", out)

	if m := os.Getenv(envScaleMargin); m != "" {
		margin, err := strconv.ParseFloat(m, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envScaleMargin, m, err)
		}
		for i, s := range sets {
			live, simulated := rows[i], rows[len(sets)+i]
			if d := math.Abs(live.Stats().Mean-simulated.Stats().Mean) * 100; d > margin {
				t.Errorf("%s: GPUs allocated, mean over time, live %.1f%% against fleetsim's %.1f%%: %.1f points apart, more than %s", s.name, 100*live.Stats().Mean, 100*simulated.Stats().Mean, d, m)
			}
			// A set that holds next to nothing is broken, whatever the
			// margin (whole nodes sit 11 points under fleetsim's 20.8%).
			if live.Stats().Mean < simulated.Stats().Mean/4 {
				t.Errorf("%s: GPUs allocated, mean over time, live %.1f%%: under a quarter of fleetsim's %.1f%%", s.name, 100*live.Stats().Mean, 100*simulated.Stats().Mean)
			}
			// With agents, the function places what fleetsim's does, at
			// the demand's peak and at the end: what the control plane's
			// lag moves is when, not whether.
			if !s.mode.Agent.Enabled {
				continue
			}
			peak := live.Stats().PeakRound
			if lp, sp := placedAt(live.Result.Series, peak), placedAt(simulated.Result.Series, peak); lp < sp {
				t.Errorf("%s: %d replicas placed at the demand's peak (round %d), fleetsim %d", s.name, lp, peak, sp)
			}
			if live.Result.Placed < simulated.Result.Placed {
				t.Errorf("%s: %d replicas placed at the end, fleetsim %d", s.name, live.Result.Placed, simulated.Result.Placed)
			}
		}
	}
}

// scaleRun is the scale run as it goes: what it sampled of each set.
type scaleRun struct {
	f    *fleet
	sc   sim.Scenario
	sets []*scaleSet
	tick time.Duration
	runs map[string]*liveRun
	// start and end bound the workload; usage is each process's at
	// usageAt, just before the start and just after the end.
	start, end time.Time
	usage      [2]map[string]harness.Usage
	usageAt    [2]time.Time
	// requests are the control plane's API server's requests served, at
	// start and end (the test's own reads of the InferenceClusters, one a
	// second, among them); busy the machine's CPU seconds busy at start
	// and end, negative where /proc/stat could not be read.
	requests [2]float64
	busy     [2]float64
	// reports are, per cluster and pool, when a report of each observedAt
	// was first seen in the InferenceCluster.
	reportsMu sync.Mutex
	reports   map[string][]seenReport
}

// seenReport is a pool's report as the control plane first showed it.
type seenReport struct{ observedAt, seen time.Time }

// liveRun is one set's run: its series, and the times it measured.
type liveRun struct {
	series []sim.Point
	// demand is each deployment's wanted replicas, by its sim name.
	demand map[string]int64
	// bound is when each pod was bound (PodScheduled), and where.
	bound map[string]boundPod
	// scheduled is when each ModelReplica's PodsScheduled turned True.
	scheduled map[string]time.Time
	// scaleUps are the scale-ups waiting for their last pod bound, by
	// deployment; done the time each finished took; unfinished counts
	// those a later wave or the end overtook.
	scaleUps   map[string]time.Time
	done       []time.Duration
	unfinished int
	// last is the final sample, for the result.
	last sample
	// pendingSeconds sums the pods Pending times the tick.
	pendingSeconds float64
	pendingMax     int
	// pendingWhy counts, over the samples, the Pending pods by what their
	// PodScheduled condition said.
	pendingWhy map[string]int
	// released is, for each wave that scaled a deployment down, the time
	// from the wave to the first sample with no pod left of a replica
	// the set no longer wants; releasing is the wave's time until then.
	released  []time.Duration
	releasing *time.Time
	// orphansMax is the most GPUs such pods held in a sample, and orphans
	// what they held in each.
	orphansMax int64
	orphans    []int64
	// short says, at the end, why each deployment short of its replicas
	// is: its ReplicasScheduled condition.
	short []string
}

// boundPod is a pod bound: when, its replica, its cluster and pool.
type boundPod struct {
	at                     time.Time
	replica, cluster, pool string
}

// sample is one set's state at the end of a round.
type sample struct {
	gpus, demandGPUs int64
	// orphanGPUs are held by pods of replicas deleted or being deleted;
	// allocated by the others, at most what each deployment wants.
	orphanGPUs, allocated int64
	wanted                int
	placed, running       int
	pending               int
	placedBy              map[string]int
}

func (r *scaleRun) run(t *testing.T) {
	t.Helper()
	for _, s := range r.sets {
		r.runs[s.name] = &liveRun{demand: map[string]int64{}, bound: map[string]boundPod{}, scheduled: map[string]time.Time{}, scaleUps: map[string]time.Time{}, pendingWhy: map[string]int{}}
	}
	r.reports = map[string][]seenReport{}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { r.watchReports(ctx) })
	defer func() { stop(); wg.Wait() }()

	r.requests[0] = requests(t, r.f.cp)
	r.usage[0], r.usageAt[0] = usageOf(t), time.Now()
	r.start = time.Now()
	r.busy[0] = cpuBusy()
	for round := range r.sc.Rounds {
		at := r.start.Add(time.Duration(round) * r.tick)
		for _, e := range r.sc.Events {
			if e.Round == round {
				for _, s := range r.sets {
					r.apply(t, s, e)
				}
			}
		}
		time.Sleep(time.Until(at.Add(r.tick)))
		for _, s := range r.sets {
			r.sample(t, s, round)
		}
		t.Logf("round %d: %s", round, r.summary())
	}
	r.busy[1] = cpuBusy()
	r.end = time.Now()
	r.usage[1], r.usageAt[1] = usageOf(t), time.Now()
	r.requests[1] = requests(t, r.f.cp)
	// Why each deployment short of what it wants is short, as it says.
	for _, s := range r.sets {
		lr := r.runs[s.name]
		for _, name := range slices.Sorted(maps.Keys(lr.demand)) {
			if lr.last.placedBy[name] < int(lr.demand[name]) {
				lr.short = append(lr.short, fmt.Sprintf("%s%s: %d of %d: %s", s.prefix, name, lr.last.placedBy[name], lr.demand[name], describe(r.f.xr(t, s.prefix+name), "ReplicasScheduled")))
			}
		}
	}
	for _, s := range r.sets {
		lr := r.runs[s.name]
		lr.unfinished += len(lr.scaleUps)
	}
}

// summary is one line of each set's last sample.
func (r *scaleRun) summary() string {
	var parts []string
	for _, s := range r.sets {
		l := r.runs[s.name].last
		parts = append(parts, fmt.Sprintf("%s %d/%d GPUs held (demand %d), %d of them by pods of replicas removed; %d/%d replicas placed, %d Pending", s.name, l.gpus, sim.FleetGPUs(r.sc.Clusters), l.demandGPUs, l.orphanGPUs, l.placed, l.wanted, l.pending))
	}
	return strings.Join(parts, "; ")
}

// apply creates or scales a set's deployment of an event.
func (r *scaleRun) apply(t *testing.T, s *scaleSet, e sim.Event) {
	t.Helper()
	lr := r.runs[s.name]
	name := s.prefix + e.Name
	// A scale-up a later change of its deployment overtakes did not
	// finish. Times are when the change is applied, not planned.
	now := time.Now()
	if _, open := lr.scaleUps[e.Name]; open && e.Replicas != lr.demand[e.Name] {
		lr.unfinished++
		delete(lr.scaleUps, e.Name)
	}
	if e.Replicas > lr.demand[e.Name] {
		lr.scaleUps[e.Name] = now
	}
	if e.Replicas < lr.demand[e.Name] && lr.releasing == nil {
		lr.releasing = &now
	}
	lr.demand[e.Name] = e.Replicas
	if e.Deployment == nil {
		r.f.scale(t, name, int(e.Replicas))
		return
	}
	b, err := json.Marshal(e.Deployment)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(b, &u.Object); err != nil {
		t.Fatal(err)
	}
	delete(u.Object, "status")
	u.SetAPIVersion(apiVersion)
	u.SetKind("ModelDeployment")
	u.Object["metadata"] = map[string]any{"namespace": namespace, "name": name}
	for _, f := range []struct {
		v    any
		path []string
	}{
		{e.Replicas, []string{"spec", "replicas"}},
		{map[string]any{setLabel: s.name}, []string{"spec", "template", "spec", "clusterSelector", "matchLabels"}},
	} {
		if err := unstructured.SetNestedField(u.Object, f.v, f.path...); err != nil {
			t.Fatal(err)
		}
	}
	apply(t, r.f.cp.c, u)
}

// sample reads a set's clusters and its ModelReplicas at the end of a
// round.
func (r *scaleRun) sample(t *testing.T, s *scaleSet, round int) {
	t.Helper()
	lr := r.runs[s.name]
	smp := sample{placedBy: map[string]int{}}
	for name, n := range lr.demand {
		smp.wanted += int(n)
		smp.demandGPUs += n * r.sc.Shapes[name].PerReplica()
	}
	// The set's ModelReplicas, by name, and each one's deployment; and
	// each one's name by its engine's workload name, its pods' label.
	replicas := map[string]string{}
	byWorkload := map[string]string{}
	for _, u := range harness.List(t, r.f.cp.c, apiVersion, "ModelReplica", client.InNamespace(namespace)) {
		d := u.GetLabels()["modelplane.ai/deployment"]
		if !strings.HasPrefix(d, s.prefix) || u.GetDeletionTimestamp() != nil {
			continue
		}
		replicas[u.GetName()] = strings.TrimPrefix(d, s.prefix)
		byWorkload[v1alpha1.WorkloadName(u.GetName(), "main")] = u.GetName()
		smp.placedBy[strings.TrimPrefix(d, s.prefix)]++
		if conditionString(&u, "PodsScheduled", "status") == "True" {
			if _, ok := lr.scheduled[u.GetName()]; !ok {
				lr.scheduled[u.GetName()] = conditionTime(&u, "PodsScheduled")
			}
		}
	}
	smp.placed = len(replicas)
	// Each replica's pods, bound or not, in the clusters of the set.
	podsOf := map[string][]corev1.Pod{}
	// heldBy is what each deployment's replicas not being deleted hold.
	heldBy := map[string]int64{}
	for _, cluster := range s.clusters {
		// The pods of replicas the set wants, by uid.
		replicaOfPod := map[string]string{}
		w := r.f.clusters[cluster]
		pods := &corev1.PodList{}
		if err := w.api.c.List(t.Context(), pods, client.InNamespace(v1alpha1.WorkloadNamespace)); err != nil {
			t.Fatalf("cannot list the pods of %s: %v", cluster, err)
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Labels[v1alpha1.LabelWorkload] == "" {
				continue
			}
			replica, ok := byWorkload[p.Labels[v1alpha1.LabelWorkload]]
			if ok {
				replicaOfPod[string(p.UID)] = replica
			} else {
				replica = p.Labels[v1alpha1.LabelWorkload] // a replica deleted
			}
			podsOf[replica] = append(podsOf[replica], p)
			if p.Spec.NodeName == "" {
				smp.pending++
				lr.pendingWhy[podScheduled(p)]++
				continue
			}
			if _, ok := lr.bound[string(p.UID)]; !ok {
				lr.bound[string(p.UID)] = boundPod{at: bindTime(p), replica: replica, cluster: cluster, pool: poolOf(p.Spec.NodeName)}
			}
		}
		claims := &resourcev1.ResourceClaimList{}
		if err := w.api.c.List(t.Context(), claims, client.InNamespace(v1alpha1.WorkloadNamespace)); err != nil {
			t.Fatalf("cannot list the ResourceClaims of %s: %v", cluster, err)
		}
		for _, c := range claims.Items {
			if c.Status.Allocation == nil || len(c.Status.ReservedFor) == 0 {
				continue
			}
			n := int64(len(c.Status.Allocation.Devices.Results))
			smp.gpus += n
			// A claim reserved for a pod of a replica deleted or being
			// deleted holds GPUs for nothing.
			orphan := true
			for _, owner := range c.Status.ReservedFor {
				if replica, ok := replicaOfPod[string(owner.UID)]; ok {
					heldBy[replicas[replica]] += n
					orphan = false
					break
				}
			}
			if orphan {
				smp.orphanGPUs += n
			}
		}
	}
	// A replica runs when each of its pods is bound; a scale-up is done
	// when its deployment has every replica it wants running, at the last
	// of their pods' binds.
	last := map[string]time.Time{}
	running := map[string]int{}
	for replica, d := range replicas {
		pods := podsOf[replica]
		if len(pods) == 0 {
			continue
		}
		all := true
		for _, p := range pods {
			if p.Spec.NodeName == "" {
				all = false
				break
			}
			if b := bindTime(p); b.After(last[d]) {
				last[d] = b
			}
		}
		if all {
			running[d]++
			smp.running++
		}
	}
	for d, since := range lr.scaleUps {
		if running[d] >= int(lr.demand[d]) && smp.placedBy[d] == int(lr.demand[d]) {
			lr.done = append(lr.done, max(last[d].Sub(since), 0))
			delete(lr.scaleUps, d)
		}
	}
	lr.orphansMax = max(lr.orphansMax, smp.orphanGPUs)
	// Released: every replica removed is deleted or being deleted (no
	// deployment has more placed than it wants), and none of their pods
	// holds a GPU.
	if lr.releasing != nil && !overPlaced(smp.placedBy, lr.demand) && smp.orphanGPUs == 0 {
		lr.released = append(lr.released, time.Since(*lr.releasing))
		lr.releasing = nil
	}
	lr.pendingSeconds += float64(smp.pending) * r.tick.Seconds()
	lr.pendingMax = max(lr.pendingMax, smp.pending)
	// The allocation, as fleetsim counts it, where a removed replica's
	// pods go at once: what each deployment's replicas hold, at most what
	// it wants (a replica dropped but not yet being deleted still holds).
	for d, n := range heldBy {
		smp.allocated += min(n, lr.demand[d]*r.sc.Shapes[d].PerReplica())
	}
	lr.series = append(lr.series, sim.Point{Round: round, GPUs: smp.allocated, DemandGPUs: smp.demandGPUs, Placed: smp.placed, Wanted: smp.wanted, Pending: smp.pending})
	lr.orphans = append(lr.orphans, smp.orphanGPUs)
	lr.last = smp
}

// placedAt is how many replicas were placed at the end of a round; -1 when
// the series has no point for it.
func placedAt(series []sim.Point, round int) int {
	for _, p := range series {
		if p.Round == round {
			return p.Placed
		}
	}
	return -1
}

// overPlaced says whether a deployment has more replicas placed than it
// wants: one the set removed is not yet being deleted.
func overPlaced(placed map[string]int, demand map[string]int64) bool {
	for d, n := range placed {
		if int64(n) > demand[d] {
			return true
		}
	}
	return false
}

// poolOf is the pool of a pool node, named <pool>-<index> (register).
func poolOf(node string) string {
	if i := strings.LastIndexByte(node, '-'); i > 0 {
		return node[:i]
	}
	return node
}

// bindTime is when a pod was bound: its PodScheduled condition's time, to
// the second.
func bindTime(p corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// watchReports reads the InferenceClusters every second and records when
// each pool's report of each observedAt was first seen.
func (r *scaleRun) watchReports(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		l := &unstructured.UnstructuredList{}
		l.SetAPIVersion(apiVersion)
		l.SetKind("InferenceClusterList")
		if err := r.f.cp.c.List(ctx, l); err == nil {
			now := time.Now()
			r.reportsMu.Lock()
			for _, ic := range l.Items {
				pools, _, _ := unstructured.NestedSlice(ic.Object, "status", "gpuPools")
				for _, p := range pools {
					pm, _ := p.(map[string]any)
					name, _ := pm["name"].(string)
					s, _ := pm["observedAt"].(string)
					at, err := time.Parse(time.RFC3339Nano, s)
					if err != nil {
						continue
					}
					key := ic.GetName() + "/" + name
					seen := r.reports[key]
					if len(seen) == 0 || seen[len(seen)-1].observedAt.Before(at) {
						r.reports[key] = append(seen, seenReport{observedAt: at, seen: now})
					}
				}
			}
			r.reportsMu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// result is a set's live run as fleetsim reports a run.
func (lr *liveRun) result(sc sim.Scenario) *sim.Result {
	return &sim.Result{
		Wanted: lr.last.wanted, Placed: lr.last.placed, Running: lr.last.running,
		GPUs: lr.last.allocated, FleetGPUs: sim.FleetGPUs(sc.Clusters),
		PendingMax: lr.pendingMax, PendingEnd: lr.last.pending, PendingSeconds: lr.pendingSeconds,
		Series: lr.series, PlacedBy: lr.last.placedBy,
	}
}

// reportLatency is, for each pod bound during the run in a reported
// cluster, the time from its bind to the first report of its pool that
// counts it seen in the InferenceCluster (observedAt a second or more past
// the bind, which PodScheduled gives to the second).
func (r *scaleRun) reportLatency(lr *liveRun) (latencies []time.Duration, bound int) {
	r.reportsMu.Lock()
	defer r.reportsMu.Unlock()
	var out []time.Duration
	for _, b := range lr.bound {
		if b.at.Before(r.start) {
			continue
		}
		bound++
		for _, s := range r.reports[b.cluster+"/"+b.pool] {
			if !s.observedAt.Before(b.at.Add(time.Second)) {
				out = append(out, max(s.seen.Sub(b.at), 0))
				break
			}
		}
	}
	return out, bound
}

// scheduledLatency is, for each ModelReplica whose pods bound during the
// run, the time from its last pod's bind to its PodsScheduled True.
func (r *scaleRun) scheduledLatency(lr *liveRun) (latencies []time.Duration, bound int) {
	last := map[string]time.Time{}
	for _, b := range lr.bound {
		if b.at.After(last[b.replica]) {
			last[b.replica] = b.at
		}
	}
	var out []time.Duration
	for replica, b := range last {
		if b.Before(r.start) {
			continue
		}
		bound++
		if at, ok := lr.scheduled[replica]; ok {
			out = append(out, max(at.Sub(b), 0))
		}
	}
	return out, bound
}

// usageOf reads what every running process has used so far, by name.
func usageOf(t *testing.T) map[string]harness.Usage {
	t.Helper()
	out := map[string]harness.Usage{}
	for _, p := range harness.Started() {
		if exited, _ := p.Exited(); isClosed(exited) {
			continue
		}
		u, err := p.Usage()
		if err != nil {
			t.Logf("cannot read what %s used: %v", p.Name, err)
			continue
		}
		out[p.Name] = u
	}
	return out
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// requests reads how many requests an API server has served
// (apiserver_request_total, every series).
func requests(t *testing.T, a *apiServer) float64 {
	t.Helper()
	b, err := a.kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("cannot read the metrics of %s's kube-apiserver: %v", a.name, err)
	}
	var n float64
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("cannot read %q: %v", line, err)
		}
		n += v
	}
	return n
}

// percentile is the p-th percentile (0-100) of ds, nearest rank, to the
// tenth of a second; "-" for none.
func percentile(ds []time.Duration, p float64) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := max(int(math.Ceil(p/100*float64(len(s))))-1, 0)
	return s[i].Round(100 * time.Millisecond).String()
}

// writeScaleReport writes scale.md, scale.svg and scale.json to dir.
func writeScaleReport(dir, size string, startup time.Duration, r *scaleRun, rows []sim.Row) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var svg bytes.Buffer
	if err := sim.WriteChart(&svg, rows); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "scale.svg"), svg.Bytes(), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<!-- Written by `FLEET_SCALE=%s ./hack/test-scale.sh`; do not edit. -->\n\n", size)
	fmt.Fprintf(&b, "# Scale run %s\n\n", size)
	fmt.Fprintf(&b, "Ran %s on %d cores (`%s`), load average %s at the end. %s. "+
		"Two sets of %d clusters under one control plane, the same deployments on each (prefixed `r-` and `w-`): "+
		"one set's agents report (free devices), the other's run no agent (whole nodes). "+
		"The fleet took %s to start; the workload ran %s, %d rounds of %s.\n\n",
		r.start.UTC().Format(time.RFC3339), runtime.NumCPU(), runtime.GOARCH, loadAverage(), r.sc.Summary,
		len(r.sc.Clusters), startup.Round(time.Second), r.end.Sub(r.start).Round(time.Second), r.sc.Rounds, r.tick)
	b.WriteString("![GPUs allocated over time](scale.svg)\n\n")
	b.WriteString("## GPUs allocated and Pending pods\n\n")
	b.WriteString("Live, GPUs allocated are those the replicas a set wants hold; the GPUs still held by pods of replicas removed are in the latencies' table (fleetsim removes them at once).\n\n")
	b.WriteString("| Run | Replicas placed (running) / wanted | GPUs allocated, mean over time (bound) | at the demand peak (bound) | Pending pods max / end | Pending pod-seconds |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|\n")
	for _, row := range rows {
		res, st := row.Result, row.Stats()
		fmt.Fprintf(&b, "| %s | %d (%d) / %d | %.1f%% (%.1f%%) | %.1f%% (%.1f%%) | %d / %d | %.0f |\n",
			row.Mode.Name, res.Placed, res.Running, res.Wanted, 100*st.Mean, 100*st.MeanBound, 100*st.Peak, 100*st.PeakBound,
			res.PendingMax, res.PendingEnd, res.PendingSeconds)
	}
	b.WriteString("\n")
	if err := sim.WriteShapeTable(&b, rows); err != nil {
		return err
	}
	b.WriteString("\n## Latencies\n\n")
	b.WriteString("| Set | Scale-ups to the last pod bound: done, p50 / p90 / p99 | not done before the next wave or the end | Bind to the pool's report in the InferenceCluster: pods reported of those bound, p50 / p99 of those reported | Last bind to PodsScheduled True: replicas True of those bound, p50 / p99 of those True | Scale-down wave to the last GPU of a removed replica free | most GPUs such pods held |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.sets {
		lr := r.runs[s.name]
		reported := "no agent"
		if s.mode.Agent.Enabled {
			rl, n := r.reportLatency(lr)
			reported = fmt.Sprintf("%d of %d, %s / %s", len(rl), n, percentile(rl, 50), percentile(rl, 99))
		}
		sl, n := r.scheduledLatency(lr)
		release := "not by the end"
		if len(lr.released) > 0 {
			release = percentile(lr.released, 100)
		}
		fmt.Fprintf(&b, "| %s | %d, %s / %s / %s | %d | %s | %d of %d, %s / %s | %s | %d |\n", s.name,
			len(lr.done), percentile(lr.done, 50), percentile(lr.done, 90), percentile(lr.done, 99), lr.unfinished,
			reported, len(sl), n, percentile(sl, 50), percentile(sl, 99), release, lr.orphansMax)
	}
	b.WriteString("\nWhy pods were Pending: their PodScheduled condition, counted over the samples (a pod Pending for three samples counts three times):\n\n| Set | Samples | PodScheduled |\n|---|---:|---|\n")
	for _, s := range r.sets {
		why := r.runs[s.name].pendingWhy
		for _, w := range slices.Sorted(maps.Keys(why)) {
			fmt.Fprintf(&b, "| %s | %d | %s |\n", s.name, why[w], strings.ReplaceAll(w, "|", "\\|"))
		}
	}
	b.WriteString("\nAt the end, each deployment short of its replicas, and its ReplicasScheduled condition:\n\n")
	for _, s := range r.sets {
		for _, line := range r.runs[s.name].short {
			fmt.Fprintf(&b, "- %s\n", line)
		}
	}
	wall := r.end.Sub(r.start)
	busy := "unknown"
	if r.busy[0] >= 0 && r.busy[1] >= 0 {
		busy = fmt.Sprintf("%.0f%%", 100*(r.busy[1]-r.busy[0])/wall.Seconds()/float64(runtime.NumCPU()))
	}
	window := r.usageAt[1].Sub(r.usageAt[0])
	fmt.Fprintf(&b, "\n## Cost\n\nThe machine's %d cores were %s busy during the workload. The control plane's kube-apiserver served %.0f requests (the test's own reads among them, one a second), %.1f a second. "+
		"Each process's CPU time during the workload (the %s between two reads of it), and its peak resident memory since it started; a process that ended meanwhile is left out:\n\n",
		runtime.NumCPU(), busy, r.requests[1]-r.requests[0], (r.requests[1]-r.requests[0])/wall.Seconds(), window.Round(time.Second))
	b.WriteString("| Process | CPU seconds | share of a core | peak RSS (MiB) |\n|---|---:|---:|---:|\n")
	end := r.usage[1]
	names := make([]string, 0, len(end))
	for n := range end {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		cpu := end[n].CPU - r.usage[0][n].CPU
		if _, ok := r.usage[0][n]; !ok {
			continue // started during the workload: no first read
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f%% | %d |\n", n, cpu, 100*cpu/window.Seconds(), end[n].Peak>>20)
	}
	if err := os.WriteFile(filepath.Join(dir, "scale.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	orphans := map[string][]int64{}
	for _, s := range r.sets {
		orphans[s.name] = r.runs[s.name].orphans
	}
	raw, err := json.MarshalIndent(map[string]any{"size": size, "start": r.start, "end": r.end, "rows": rowsJSON(rows), "gpusHeldByRemovedReplicas": orphans}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "scale.json"), raw, 0o644)
}

// rowsJSON are the runs' series, for whoever wants to draw them again.
func rowsJSON(rows []sim.Row) []map[string]any {
	out := make([]map[string]any, 0, len(rows))
	for _, r := range rows {
		out = append(out, map[string]any{"run": r.Mode.Name, "fleetGPUs": r.Result.FleetGPUs, "series": r.Result.Series})
	}
	return out
}

// cpuBusy is the CPU time every core has spent busy since boot, in seconds
// (/proc/stat: user, nice, system, irq, softirq), as .ci/run reads it; -1
// where it cannot be read.
func cpuBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return -1
	}
	var ticks float64
	for _, i := range []int{1, 2, 3, 6, 7} {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return -1
		}
		ticks += v
	}
	return ticks / 100 // USER_HZ
}

// loadAverage is /proc/loadavg's first three fields.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
