// Package sim is a fleet simulator that runs the real scheduler in a loop
// against simulated GPU clusters, to measure what free-device accounting
// gains over whole-node accounting and whether it stays correct when the
// cluster agent lags or goes silent.
//
// Each round (a Tick of simulated time) the simulator:
//
//  1. applies the demand events due (deployments arriving or scaling);
//  2. publishes, per pool, the agent's newest report whose lag has passed;
//  3. reconciles every deployment in name order through a Reconciler (by
//     default observation + scheduling, the path fn.go takes; bench_test.go
//     also drives the real RunFunction), creating the ModelReplicas it adds
//     and deleting the ones it drops;
//  4. binds pending pods to nodes as kube-scheduler would (Binder), one
//     second into the round, and sets each replica's PodsScheduled;
//  5. lets the agent sample every pool's histogram, five seconds into the
//     round, when its heartbeat is due and it has not stopped.
//
// The fleet has one DRA device kind per pool, "gpu".
package sim

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/fixture"
)

// DeviceName is the one DRA device every simulated pool has.
const DeviceName = "gpu"

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

// node is one node of a pool: its free GPUs and the pods bound to it.
type node struct {
	free int64
	pods []*pod
}

func (n *node) hostsGang(gang string) bool {
	if gang == "" {
		return false
	}
	return slices.ContainsFunc(n.pods, func(p *pod) bool { return p.gang == gang })
}

// simPool is a pool's nodes and what its agent has sampled and published.
type simPool struct {
	spec    PoolSpec
	nodes   []*node
	samples []sample
	// published is the report on the InferenceCluster, nil before the first.
	published *sample
}

// sample is one agent report of a pool.
type sample struct {
	observedAt time.Time
	visibleAt  time.Time
	nodes      int
	// byFree counts nodes by free GPUs, index = free count.
	byFree []int64
}

func (p *simPool) sample(at, visible time.Time) sample {
	s := sample{observedAt: at, visibleAt: visible, nodes: len(p.nodes), byFree: make([]int64, p.spec.GPUsPerNode+1)}
	for _, n := range p.nodes {
		s.byFree[n.free]++
	}
	return s
}

type simCluster struct {
	name  string
	pools []*simPool
}

func (c *simCluster) pool(name string) *simPool {
	for _, p := range c.pools {
		if p.spec.Name == name {
			return p
		}
	}
	return nil
}

// object renders the cluster as the InferenceCluster the function reads:
// Ready, with a gateway, each pool with its published report if any.
func (c *simCluster) object() *v1alpha1.InferenceCluster {
	pools := make([]v1alpha1.GPUPool, 0, len(c.pools))
	for _, p := range c.pools {
		w := fixture.Pool(p.spec.Name, int64(len(p.nodes))).Devices(fixture.GPU(DeviceName, p.spec.GPUsPerNode, p.spec.Memory))
		if s := p.published; s != nil {
			var buckets []fixture.Bucket
			for free, nodes := range slices.Backward(s.byFree) {
				if nodes > 0 {
					buckets = append(buckets, fixture.NodesFree(nodes, DeviceName, int64(free)))
				}
			}
			w.Observed(s.observedAt, int64(s.nodes), buckets...)
		}
		pools = append(pools, w.Obj())
	}
	return fixture.Cluster(c.name).Pools(pools...).Obj()
}

// pod is one pod of a replica, pinned to a pool, bound to a node or Pending.
type pod struct {
	replica *replica
	pool    *simPool
	// gang names the engine copy whose claiming pods need distinct nodes;
	// empty for a Standalone engine.
	gang  string
	claim int64
	node  *node
}

// replica is a ModelReplica and its pods.
type replica struct {
	obj        *v1alpha1.ModelReplica
	deployment string
	seq        int
	pods       []*pod
	// scheduledAt is when PodsScheduled became True; nil while it is False.
	scheduledAt *time.Time
}

func (r *replica) bound() bool {
	for _, p := range r.pods {
		if p.node == nil {
			return false
		}
	}
	return true
}

// newReplica makes the pods of a ModelReplica the scheduler asked for: per
// engine copy and member, one pod (a Worker: worker.nodes pods), claiming the
// sum of its stamped device requests.
func newReplica(c *simCluster, obj *v1alpha1.ModelReplica, deployment string, seq int) *replica {
	r := &replica{obj: obj, deployment: deployment, seq: seq}
	for _, e := range obj.Spec.Engines {
		copies := int64(1)
		if e.Copies != nil && *e.Copies > 0 {
			copies = *e.Copies
		}
		gang := slices.ContainsFunc(e.Members, func(m v1alpha1.ReplicaMember) bool {
			return m.Role == v1alpha1.RoleLeader || m.Role == v1alpha1.RoleWorker
		})
		for cp := range copies {
			gangID := ""
			if gang {
				gangID = obj.Metadata.Name + "/" + e.Name + "/" + strconv.FormatInt(cp, 10)
			}
			for _, m := range e.Members {
				pods := int64(1)
				if m.Role == v1alpha1.RoleWorker && m.Worker != nil {
					pods = m.Worker.Nodes
				}
				var claim int64
				for _, dr := range m.DeviceRequests {
					claim += dr.Count
				}
				for range pods {
					r.pods = append(r.pods, &pod{replica: r, pool: c.pool(m.NodePoolName), gang: gangID, claim: claim})
				}
			}
		}
	}
	return r
}

func (r *replica) release() {
	for _, p := range r.pods {
		if p.node == nil {
			continue
		}
		p.node.free += p.claim
		p.node.pods = slices.DeleteFunc(p.node.pods, func(q *pod) bool { return q == p })
		p.node = nil
	}
}
