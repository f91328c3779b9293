package sim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/sim/composereplica"
)

// TraceOptions say how to replay a trace.
type TraceOptions struct {
	// Clusters is how many clusters the nodes are spread over.
	Clusters int
	// Speed is how many times faster than recorded the trace runs.
	Speed float64
	// Tick is the simulated time per round; zero means 10s.
	Tick time.Duration
	// RoundUpSharing replays GPU-sharing pods (gpu_milli < 1000) as
	// claiming one whole GPU; by default they are left out.
	RoundUpSharing bool
	// MaxRounds stops the replay; zero means when the last pod is gone
	// (and 30 rounds more), at most 2,000 rounds.
	MaxRounds int
	// NoDeletion keeps every pod once it arrived, as the FGD simulator
	// replays these traces (a workload that only grows).
	NoDeletion bool
}

// TraceNode is one row of a trace's node file.
type TraceNode struct {
	Name             string
	MilliCPU, MemMiB int64
	GPUs             int64
	Model            string
}

// TracePod is one row of a trace's pod file. HasTimes is false for files
// of the first five columns only.
type TracePod struct {
	Name                  string
	MilliCPU, MemMiB      int64
	GPUs, GPUMilli        int64
	GPUSpec               []string
	Creation, Deletion    int64
	HasTimes, HasDeletion bool
	Phase                 string
}

// LoadTrace reads a trace in the Alibaba cluster-trace-gpu-v2023 (openb)
// CSV format: nodes "sn,cpu_milli,memory_mib,gpu,model" and pods
// "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
// creation_time,deletion_time,scheduled_time" (or the first five pod
// columns only), each with or without its header line, and makes it a
// scenario.
func LoadTrace(nodesFile, podsFile string, o TraceOptions) (Scenario, error) {
	nodes, err := readCSV(nodesFile, "sn", parseNode, func(n TraceNode) string { return n.Name })
	if err != nil {
		return Scenario{}, err
	}
	// Pods become deployments by their names lower-cased: two that differ
	// only in case would be one.
	pods, err := readCSV(podsFile, "name", parsePod, func(p TracePod) string { return strings.ToLower(p.Name) })
	if err != nil {
		return Scenario{}, err
	}
	return TraceScenario(nodes, pods, o)
}

// readCSV parses every record of a CSV file but a header whose first field
// is header. A bad row, or one whose key another row has, is an error
// naming the file and the line.
func readCSV[T any](name, header string, parse func([]string) (T, error), key func(T) string) ([]T, error) {
	f, err := os.Open(name) //nolint:gosec // The trace the user asked to replay.
	if err != nil {
		return nil, fmt.Errorf("cannot read trace: %w", err)
	}
	defer func() { _ = f.Close() }()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	var out []T
	lineOf := map[string]int{}
	for first := true; ; first = false {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		line, _ := r.FieldPos(0)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if first && len(rec) > 0 && strings.TrimSpace(rec[0]) == header {
			continue
		}
		v, err := parse(rec)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		k := key(v)
		if lineOf[k] != 0 {
			return nil, fmt.Errorf("%s:%d: %q again: line %d has it", name, line, k, lineOf[k])
		}
		lineOf[k] = line
		out = append(out, v)
	}
}

func parseNode(rec []string) (TraceNode, error) {
	if len(rec) != 5 {
		return TraceNode{}, fmt.Errorf("%d fields, want 5 (sn,cpu_milli,memory_mib,gpu,model)", len(rec))
	}
	n := TraceNode{Name: strings.TrimSpace(rec[0]), Model: strings.TrimSpace(rec[4])}
	if n.Name == "" {
		return n, errors.New("sn: empty")
	}
	if n.Model == "nan" {
		n.Model = ""
	}
	var err error
	if n.MilliCPU, err = count("cpu_milli", rec[1]); err != nil {
		return n, err
	}
	if n.MemMiB, err = count("memory_mib", rec[2]); err != nil {
		return n, err
	}
	if n.GPUs, err = count("gpu", rec[3]); err != nil {
		return n, err
	}
	if n.GPUs > 0 && n.Model == "" {
		return n, fmt.Errorf("model: empty for a node of %d GPUs", n.GPUs)
	}
	if n.GPUs > 64 {
		return n, fmt.Errorf("gpu: %d GPUs on one node is more than 64", n.GPUs)
	}
	return n, nil
}

func parsePod(rec []string) (TracePod, error) {
	if len(rec) != 5 && len(rec) != 11 {
		return TracePod{}, fmt.Errorf("%d fields, want 5 (name,cpu_milli,memory_mib,num_gpu,gpu_milli) or 11 (and gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time)", len(rec))
	}
	p := TracePod{Name: strings.TrimSpace(rec[0])}
	if p.Name == "" {
		return p, errors.New("name: empty")
	}
	var err error
	for _, f := range []struct {
		name string
		dst  *int64
		raw  string
	}{{"cpu_milli", &p.MilliCPU, rec[1]}, {"memory_mib", &p.MemMiB, rec[2]}, {"num_gpu", &p.GPUs, rec[3]}, {"gpu_milli", &p.GPUMilli, rec[4]}} {
		if *f.dst, err = count(f.name, f.raw); err != nil {
			return p, err
		}
	}
	if p.GPUMilli > 1000 {
		return p, fmt.Errorf("gpu_milli: %d is more than a whole GPU (1000)", p.GPUMilli)
	}
	if len(rec) == 5 {
		return p, nil
	}
	if spec := strings.TrimSpace(rec[5]); spec != "" && spec != "nan" {
		for m := range strings.SplitSeq(spec, "|") {
			if m = strings.TrimSpace(m); m == "" || strings.ContainsAny(m, `"\`) {
				return p, fmt.Errorf("gpu_spec: %q is not a list of GPU models separated by |", spec)
			}
			p.GPUSpec = append(p.GPUSpec, strings.TrimSpace(m))
		}
	}
	p.Phase = strings.TrimSpace(rec[7])
	p.HasTimes = true
	if p.Creation, err = count("creation_time", rec[8]); err != nil {
		return p, err
	}
	if d := strings.TrimSpace(rec[9]); d != "" && d != "nan" {
		if p.Deletion, err = count("deletion_time", d); err != nil {
			return p, err
		}
		if p.Deletion < p.Creation {
			return p, fmt.Errorf("deletion_time: %d is before creation_time %d", p.Deletion, p.Creation)
		}
		p.HasDeletion = true
	}
	return p, nil
}

// count parses a whole number that is not negative.
func count(field, raw string) (int64, error) {
	v, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a whole number", field, raw)
	}
	if v < 0 || v > 1<<40 {
		return 0, fmt.Errorf("%s: %d is out of range", field, v)
	}
	return v, nil
}

// poolKey is a kind of node: pools are made of identical ones.
type poolKey struct {
	model            string
	gpus, cpu, memMi int64
}

// TraceScenario makes a trace a scenario. Nodes with GPUs become pools of
// identical nodes (by model, GPU count, cpu and memory), each kind's nodes
// dealt out over the clusters in turn. Each GPU pod becomes a one-replica
// ModelDeployment of one Standalone member claiming its GPUs with its cpu
// and memory, its gpu_spec a CEL selector on the model attribute, arriving
// at its creation_time and deleted at its deletion_time; time runs Speed
// times faster. Pods without times all arrive at the start and stay.
// CPU-only pods and GPU-sharing pods (unless RoundUpSharing) are left out,
// and every count is reported in Skipped.
func TraceScenario(nodes []TraceNode, pods []TracePod, o TraceOptions) (Scenario, error) {
	if o.Clusters < 1 {
		return Scenario{}, fmt.Errorf("cannot spread a trace over %d clusters", o.Clusters)
	}
	if o.Speed <= 0 || math.IsInf(o.Speed, 0) || math.IsNaN(o.Speed) {
		return Scenario{}, fmt.Errorf("cannot replay a trace at speed %v", o.Speed)
	}
	if o.Tick == 0 {
		o.Tick = 10 * time.Second
	}
	clusters, fleetNotes, err := tracePools(nodes, o.Clusters)
	if err != nil {
		return Scenario{}, err
	}
	sc := Scenario{Name: "trace", Clusters: clusters, Shapes: map[string]Shape{}, Tick: o.Tick}
	var cpuOnly, sharing, rounded, replayed int
	var t0 int64 = math.MaxInt64
	for _, p := range pods {
		if p.GPUs > 0 && p.HasTimes {
			t0 = min(t0, p.Creation)
		}
	}
	// A round past maxTraceRound is past any run (runs stop at 2,000
	// rounds); clamping keeps a tiny -speed from overflowing int.
	const maxTraceRound = 1 << 30
	roundOf := func(t int64) int {
		return int(min(float64(t-t0)/o.Speed/o.Tick.Seconds(), maxTraceRound))
	}
	last := 0
	for _, p := range pods {
		gpus := p.GPUs
		switch {
		case gpus == 0:
			cpuOnly++
			continue
		case p.GPUMilli < 1000 && !o.RoundUpSharing:
			sharing++
			continue
		case p.GPUMilli < 1000:
			rounded++
			gpus = max(gpus, 1)
		}
		replayed++
		var sel []string
		if len(p.GPUSpec) > 0 {
			sel = append(sel, modelSelector(p.GPUSpec))
		}
		d := withTemplates(fixture.Deployment(p.Name).Engines(fixture.Standalone("main", fixture.Request(DeviceName, gpus, sel...))).Obj())
		name := strings.ToLower(p.Name)
		arrive := 0
		if p.HasTimes {
			arrive = roundOf(p.Creation)
		}
		// The trace's pods request what it recorded, whatever the run's
		// sizing: that is the trace (v0.3's pods request nothing).
		sc.Events = append(sc.Events, Event{Round: arrive, Name: name, Replicas: 1, Deployment: d, Sizing: requests(p.MilliCPU, p.MemMiB)})
		sc.Shapes[name] = Shape{1, 1, gpus, false}
		last = max(last, arrive)
		if p.HasTimes && p.HasDeletion && !o.NoDeletion {
			leave := max(roundOf(p.Deletion), arrive+1)
			sc.Events = append(sc.Events, Event{Round: leave, Name: name, Delete: true})
			last = max(last, leave)
		}
	}
	sc.Rounds = min(last+30, 2000)
	if o.MaxRounds > 0 {
		sc.Rounds = o.MaxRounds
	}
	share := "left out"
	if o.RoundUpSharing {
		share = "rounded up to one GPU"
	}
	sc.Summary = fmt.Sprintf("trace replay, %d pods, %d clusters, %gx speed", replayed, o.Clusters, o.Speed)
	sc.Skipped = fmt.Sprintf("Trace: %s Pods: %d in the file; %d CPU-only left out; %d GPU-sharing (gpu_milli < 1000) %s; %d replayed as one-replica deployments, whole GPUs only (published results that count GPU sharing are not comparable); time %gx faster than recorded, %s per round, %d rounds%s.",
		fleetNotes, len(pods), cpuOnly, sharing+rounded, share, replayed, o.Speed, o.Tick, sc.Rounds, map[bool]string{true: ", no pod ever deleted", false: ""}[o.NoDeletion])
	return sc, nil
}

// tracePools deals the trace's GPU nodes out over the clusters as pools.
func tracePools(nodes []TraceNode, clusters int) ([]ClusterSpec, string, error) {
	var keys []poolKey
	count := map[poolKey]int{}
	cpuOnly := 0
	var gpus int64
	for _, n := range nodes {
		if n.GPUs == 0 {
			cpuOnly++
			continue
		}
		k := poolKey{n.Model, n.GPUs, n.MilliCPU, n.MemMiB}
		if count[k] == 0 {
			keys = append(keys, k)
		}
		count[k]++
		gpus += n.GPUs
	}
	if len(keys) == 0 {
		return nil, "", errors.New("the trace has no node with GPUs")
	}
	names := map[poolKey]string{}
	seen := map[string]int{}
	for _, k := range keys {
		base := fmt.Sprintf("%s-%dx", sanitize(k.model), k.gpus)
		seen[base]++
		names[k] = base
		if seen[base] > 1 {
			names[k] = fmt.Sprintf("%s-%c", base, 'a'+seen[base]-1)
		}
	}
	out := make([]ClusterSpec, clusters)
	for i := range out {
		out[i].Name = clusterName(i)
		for _, k := range keys {
			n := count[k] / clusters
			if i < count[k]%clusters {
				n++
			}
			if n == 0 {
				continue
			}
			out[i].Pools = append(out[i].Pools, PoolSpec{
				Name: names[k], Nodes: n, GPUsPerNode: k.gpus, Memory: gpuMemory(k.model), Model: k.model,
				CPU: fmt.Sprintf("%dm", k.cpu), NodeMemory: fmt.Sprintf("%dMi", k.memMi),
			})
		}
	}
	notes := fmt.Sprintf("%d nodes with %d GPUs in %d kinds of node, dealt over %d clusters as pools; %d CPU-only nodes left out.", len(nodes)-cpuOnly, gpus, len(keys), clusters, cpuOnly)
	return out, notes, nil
}

// gpuMemory is a model's memory where it is public; the undisclosed
// models (G1-G3) and others get 0, which no selector here reads.
func gpuMemory(model string) string {
	switch model {
	case "V100M16", "P100", "T4":
		return "16Gi"
	case "V100M32":
		return "32Gi"
	case "A10":
		return "24Gi"
	}
	return "0"
}

// sanitize makes a model a DNS-label-safe part of a pool name.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-")
}

// modelSelector is a CEL selector of the GPU models a pod accepts.
func modelSelector(models []string) string {
	quoted := make([]string, len(models))
	for i, m := range models {
		quoted[i] = strconv.Quote(m)
	}
	return fmt.Sprintf(`device.attributes[%q].model in [%s]`, GPUDriver, strings.Join(quoted, ", "))
}

// requests is a trace pod's cpu and memory, whatever its GPUs.
func requests(milliCPU, memMiB int64) *composereplica.Sizing {
	return &composereplica.Sizing{
		BaseCPU:    *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
		BaseMemory: *resource.NewQuantity(memMiB<<20, resource.BinarySI),
	}
}
