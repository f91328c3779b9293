// Package sim is a fleet simulator that runs the real scheduler in a loop
// against simulated GPU clusters, to measure what free-device accounting
// gains over whole-node accounting and whether it stays correct when the
// cluster agent lags or goes silent.
//
// The clusters are made of Kubernetes objects: each node a Node with cpu
// and memory allocatable and a resource.k8s.io/v1 ResourceSlice of its GPUs
// (with the model and memory a CEL selector reads), each pool device a
// DeviceClass, each pod a Pod built from its member's template with a
// ResourceClaim of the member's resolved device requests. Pods bind as
// kube-scheduler binds them (sim/kube), or by the GPU-ranked binders kept
// for comparison.
//
// Each round (a Tick of simulated time) the simulator:
//
//  1. applies the demand events due (deployments arriving, scaling or
//     leaving);
//  2. publishes, per pool, the agent's newest report whose lag has passed;
//  3. reconciles every deployment in name order through a Reconciler (by
//     default observation + scheduling, the path fn.go takes; bench_test.go
//     also drives the real RunFunction), creating the ModelReplicas it adds
//     (and their pods) and deleting the ones it drops: one after another,
//     or Config.Concurrent at a time, each of those reading the same
//     fleet, optionally through function servers' ledgers of assumed
//     placements (Direct.Servers);
//  4. binds pending pods, oldest first, one second into the round, and sets
//     each replica's PodsScheduled;
//  5. lets the agent report every pool, five seconds into the round, when
//     its heartbeat is due and it has not stopped: the agent package's
//     PoolReport over the cluster's Nodes, ResourceSlices, DeviceClasses
//     and ResourceClaims, as a cluster agent computes it.
//
// The fleet has one DRA device kind per pool, "gpu".
package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/modelplaneai/fleet-scheduler/agent"
	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// DeviceName is the one DRA device every simulated pool has.
const DeviceName = "gpu"

// GPUDriver is the DRA driver of every simulated GPU; its DeviceClass is
// fixture.GPUClass.
const GPUDriver = "gpu.nvidia.com"

// PoolLabel is the node label that says which pool a node is in, and pins
// pods to a pool: the agent package's.
const PoolLabel = v1alpha1.LabelPool

// ClusterSpec is a simulated InferenceCluster.
type ClusterSpec struct {
	Name  string
	Pools []PoolSpec
}

// PoolSpec is a pool of identical nodes.
type PoolSpec struct {
	Name        string
	Nodes       int
	GPUsPerNode int64
	// Memory is each GPU's memory, a Kubernetes quantity such as 80Gi.
	Memory string
	// Model is the GPU's model attribute, which CEL selectors may read;
	// empty means "GPU".
	Model string
	// CPU and NodeMemory are each node's allocatable cpu and memory, as
	// Kubernetes quantities; empty means 24 cores and 256Gi per GPU.
	CPU, NodeMemory string
}

func (p PoolSpec) model() string {
	if p.Model == "" {
		return "GPU"
	}
	return p.Model
}

func (p PoolSpec) allocatable() (cpu, memory resource.Quantity, err error) {
	c, m := p.CPU, p.NodeMemory
	if c == "" {
		c = fmt.Sprint(24 * max(p.GPUsPerNode, 1))
	}
	if m == "" {
		m = fmt.Sprintf("%dGi", 256*max(p.GPUsPerNode, 1))
	}
	if cpu, err = resource.ParseQuantity(c); err != nil {
		return cpu, memory, fmt.Errorf("pool %s: cpu %q: %w", p.Name, c, err)
	}
	if memory, err = resource.ParseQuantity(m); err != nil {
		return cpu, memory, fmt.Errorf("pool %s: node memory %q: %w", p.Name, m, err)
	}
	return cpu, memory, nil
}

// Fleet is n clusters, each with the given pools.
func Fleet(n int, pools ...PoolSpec) []ClusterSpec {
	out := make([]ClusterSpec, n)
	for i := range out {
		out[i] = ClusterSpec{Name: clusterName(i), Pools: slices.Clone(pools)}
	}
	return out
}

func clusterName(i int) string {
	return fmt.Sprintf("cluster-%02d", i)
}

// FleetGPUs is how many GPUs the fleet has.
func FleetGPUs(cs []ClusterSpec) int64 {
	var n int64
	for _, c := range cs {
		for _, p := range c.Pools {
			n += int64(p.Nodes) * p.GPUsPerNode
		}
	}
	return n
}

// simPool is a pool's nodes and what its agent has sampled and published.
type simPool struct {
	spec    PoolSpec
	cluster *simCluster
	nodes   []*kube.Node
	samples []sample
	// published is the report on the InferenceCluster, nil before the first.
	published *sample
	// last is the newest report computed, and generations the pool's
	// nodes' generations it was computed at.
	last        *agent.Report
	generations []uint64
	// claimed is what the pods pinned to the pool claim, bound or
	// Pending.
	claimed int64
	// counter counts the pool's nodes as a steering agent does, and
	// counted is its last count of each node (steerNodes).
	counter *agent.Counter
	counted map[*kube.Node]countedNode
}

// gpus is how many GPUs the pool's nodes have.
func (p *simPool) gpus() int64 { return int64(len(p.nodes)) * p.spec.GPUsPerNode }

// sample is one agent report of a pool and when it reaches the
// InferenceCluster.
type sample struct {
	report    agent.Report
	visibleAt time.Time
}

// freeGPUs counts a node's GPUs that no claim holds, for the GPU-ranked
// binders (the agent's reports come from the agent package).
func (c *simCluster) freeGPUs(n *kube.Node) int64 {
	var free int64
	for _, s := range n.Slices {
		if s.Spec.Driver != GPUDriver {
			continue
		}
		for _, d := range s.Spec.Devices {
			if !c.kube.Allocated(s.Spec.Driver, s.Spec.Pool.Name, d.Name) {
				free++
			}
		}
	}
	return free
}

// sample is the agent's report of the pool as of at, from the cluster's
// view, by the agent package, visible from visible on. A pool none of
// whose nodes changed since the last report gets that report again, as of
// at: it is a function of what changed.
func (p *simPool) sample(ctx context.Context, view func() agent.View, at, visible time.Time) (sample, error) {
	gens := make([]uint64, len(p.nodes))
	for i, n := range p.nodes {
		gens[i] = n.Generation()
	}
	if p.last == nil || !slices.Equal(gens, p.generations) {
		r, err := agent.PoolReport(ctx, agent.Pool{Name: p.spec.Name, Devices: []v1alpha1.Device{p.device()}}, view())
		if err != nil {
			return sample{}, fmt.Errorf("cannot report pool %s/%s: %w", p.cluster.name, p.spec.Name, err)
		}
		p.last, p.generations = &r, gens
	}
	r := *p.last
	r.ObservedAt = at.UTC().Truncate(time.Second)
	return sample{report: r, visibleAt: visible}, nil
}

// device is the pool's GPU as the InferenceCluster publishes it.
func (p *simPool) device() v1alpha1.Device {
	dev := fixture.GPU(DeviceName, p.spec.GPUsPerNode, p.spec.Memory)
	dev.Attributes = map[string]v1alpha1.DeviceAttribute{}
	for k, v := range gpuAttributes(p.spec) {
		dev.Attributes[string(k)] = v1alpha1.DeviceAttribute{String: v.StringValue}
	}
	return dev
}

// view is the cluster as its agent's informers hold it as of at: every
// Node, ResourceSlice, DeviceClass and ResourceClaim.
func (c *simCluster) view(at time.Time) agent.View {
	v := agent.View{DeviceClasses: []*resourceapi.DeviceClass{c.kube.Class(fixture.GPUClass)}, SyncedAt: at}
	for _, n := range c.kube.Nodes() {
		v.Nodes = append(v.Nodes, n.Obj)
		v.ResourceSlices = append(v.ResourceSlices, n.Slices...)
		for _, p := range n.Pods {
			v.ResourceClaims = append(v.ResourceClaims, p.Claims...)
		}
	}
	return v
}

type simCluster struct {
	name  string
	pools []*simPool
	kube  *kube.Cluster
	// steered is whether an agent steers every pool of the cluster
	// (Steered, SteeredPreferred).
	steered bool
}

func (c *simCluster) pool(name string) *simPool {
	for _, p := range c.pools {
		if p.spec.Name == name {
			return p
		}
	}
	return nil
}

// newCluster builds a cluster's nodes, their slices and the GPU class.
func newCluster(spec ClusterSpec, image string, imageSize int64) (*simCluster, error) {
	c := &simCluster{name: spec.Name, kube: kube.NewCluster(kube.NewClass(fixture.GPUClass, GPUDriver))}
	c.kube.SetImageSize(image, imageSize)
	for _, ps := range spec.Pools {
		cpu, mem, err := ps.allocatable()
		if err != nil {
			return nil, fmt.Errorf("cannot build cluster %s: %w", spec.Name, err)
		}
		gpuMem, err := resource.ParseQuantity(ps.Memory)
		if err != nil {
			return nil, fmt.Errorf("cannot build cluster %s: pool %s: GPU memory %q: %w", spec.Name, ps.Name, ps.Memory, err)
		}
		p := &simPool{spec: ps, cluster: c}
		for i := range ps.Nodes {
			name := fmt.Sprintf("%s-%s-%03d", spec.Name, ps.Name, i)
			node := kube.NewNode(name, cpu, mem, map[string]string{PoolLabel: ps.Name, corev1.LabelTopologyZone: spec.Name + "-a"})
			slice := kube.NewSlice(name, GPUDriver, kube.NewDevices("gpu", int(ps.GPUsPerNode), gpuAttributes(ps),
				map[resourceapi.QualifiedName]resource.Quantity{"memory": gpuMem})...)
			if err := c.kube.AddNode(node, slice); err != nil {
				return nil, err
			}
			p.nodes = append(p.nodes, c.kube.Node(name))
		}
		c.pools = append(c.pools, p)
	}
	return c, nil
}

// gpuAttributes are what a pool's GPUs publish, in their ResourceSlices and
// on the InferenceCluster alike: the product name and the model.
func gpuAttributes(ps PoolSpec) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	product, model := "NVIDIA "+ps.model()+" "+ps.Memory, ps.model()
	return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"productName": {StringValue: &product}, "model": {StringValue: &model}}
}

// object renders the cluster as the InferenceCluster the function reads:
// Ready, with a gateway, each pool with its published report if any.
func (c *simCluster) object() *v1alpha1.InferenceCluster {
	pools := make([]v1alpha1.GPUPool, 0, len(c.pools))
	for _, p := range c.pools {
		pool := fixture.Pool(p.spec.Name, int64(len(p.nodes))).Devices(p.device()).Obj()
		if s := p.published; s != nil {
			s.report.Fill(&pool)
			if c.steered {
				reportSteered(&pool)
			}
		}
		pools = append(pools, pool)
	}
	obj := fixture.Cluster(c.name).Pools(pools...).Obj()
	// A uid, as the API server gives every InferenceCluster: the
	// function's assumed placements key on it.
	obj.Metadata.UID = "uid-" + c.name
	return obj
}

// reportSteered makes the report of a pool an agent steers say binding:
// Steered (docs/spec.md#steering), as the agent's does while steering is in
// force, so the function accounts the pool by best fit whatever its
// assumedBinding. The steering binders still run only in the modes whose
// ledger assumes LeastFree (Binder.Runs), which best fit equals.
func reportSteered(p *v1alpha1.GPUPool) { p.Binding = agentv1alpha1.BindingSteered }
