package scheduling

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

// A random fleet, described by a small model that the property tests'
// oracles read directly, and turned into the objects Schedule reads. The
// model keeps every device request identifiable: each pool has at most one
// device per driver, and every request selects its driver, so a resolved
// request's DeviceClassName names the one device it claims.

// chooser is the source of every random choice: *rand.Rand in the property
// tests, fuzz bytes in the fuzz target.
type chooser interface {
	IntN(n int) int
}

// byteChooser draws choices from fuzz bytes; once they run out every choice
// is 0, so any input decodes to some small fleet.
type byteChooser struct {
	b []byte
}

func (c *byteChooser) IntN(n int) int {
	if n <= 1 {
		return 0
	}
	if len(c.b) == 0 {
		return 0
	}
	v := int(c.b[0])
	c.b = c.b[1:]
	if n > 256 && len(c.b) > 0 {
		v = v<<8 | int(c.b[0])
		c.b = c.b[1:]
	}
	return v % n
}

var _ chooser = (*rand.Rand)(nil)

// genAt is when every pool in a generated fleet was observed.
var genAt = time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)

// Device kinds: the driver a request selects, and whether the device is
// claimed through DRA.
type kind struct {
	name, driver, class string
	dra                 bool
}

var (
	kindGPU  = kind{name: "gpu", driver: "gpu.nvidia.com", class: fx.GPUClass, dra: true}
	kindNVMe = kind{name: "nvme", driver: "nvme.example.com", class: "nvme.example.com", dra: true}
	kindNIC  = kind{name: "nic", driver: "nic.nvidia.com"}
)

type gDevice struct {
	kind  kind
	count int64
	memGi int64 // GPUs only
}

type gPool struct {
	name    string
	nodes   int64
	devices []gDevice
	obs     *PoolObservation
}

type gCluster struct {
	name    string
	ready   bool
	gateway bool
	taints  []v1alpha1.Taint
	pools   []gPool
}

// gRequest asks for count devices of a kind, of at least 80Gi when need80.
// With orNIC it also takes a NIC, which is Synthetic: a member whose only
// request it is claims on a pool that lists its GPU first and claims nothing
// on one that lists its NIC first.
type gRequest struct {
	kind   kind
	count  int64
	need80 bool
	orNIC  bool
}

func (r gRequest) cel() []string {
	if r.orNIC {
		return []string{fmt.Sprintf("device.driver == %q || device.driver == %q", r.kind.driver, kindNIC.driver)}
	}
	out := []string{fmt.Sprintf("device.driver == %q", r.kind.driver)}
	if r.need80 {
		out = append(out, fx.MemAtLeast80Gi)
	}
	return out
}

// satisfies is the oracle's reading of a request's selectors.
func (r gRequest) satisfies(d gDevice) bool {
	if r.orNIC && d.kind == kindNIC {
		return true
	}
	return d.kind.driver == r.kind.driver && (!r.need80 || d.memGi >= 80)
}

type gMember struct {
	role     string
	workers  int64
	selector bool // false: no nodeSelector at all
	reqs     []gRequest
}

func (m gMember) pods() int64 {
	if m.role == v1alpha1.RoleWorker {
		return m.workers
	}
	return 1
}

type gEngine struct {
	name    string
	copies  int64
	members []gMember
}

type gDeployment struct {
	name, namespace string
	replicas        int64
	engines         []gEngine
	tolerations     []v1alpha1.Toleration
}

// gStamp is a member's stamped request: the model request it was resolved
// from, and the class it resolved to.
type gStamp struct {
	req   gRequest
	class string
}

type gRepMember struct {
	role    string
	workers int64
	pool    string
	stamped []gStamp
}

type gRepEngine struct {
	name    string
	copies  int64
	members []gRepMember
}

type gReplica struct {
	deployment, namespace, name, cluster string
	index                                int
	engines                              []gRepEngine
	since                                *time.Time
}

type gFleet struct {
	d        gDeployment
	clusters []gCluster
	replicas []gReplica
}

// genOptions shape a generated fleet.
type genOptions struct {
	// observe lets pools carry a usable agent report.
	observe bool
	// huge lets counts reach far past any real fleet.
	huge bool
}

func pick[T any](c chooser, xs ...T) T { return xs[c.IntN(len(xs))] }

func genFleet(c chooser, o genOptions) gFleet {
	f := gFleet{}
	nc := 1 + c.IntN(4)
	for i := range nc {
		f.clusters = append(f.clusters, genCluster(c, o, fmt.Sprintf("c%d", i)))
	}
	f.d = genDeployment(c)
	nr := c.IntN(8)
	serial := 0
	for range nr {
		serial++
		f.replicas = append(f.replicas, genReplica(c, f, serial))
	}
	return f
}

func genCluster(c chooser, o genOptions, name string) gCluster {
	cl := gCluster{name: name, ready: c.IntN(10) > 0, gateway: c.IntN(10) > 0}
	switch c.IntN(10) {
	case 0:
		cl.taints = append(cl.taints, v1alpha1.Taint{Key: "gpu", Value: "true", Effect: v1alpha1.TaintNoSchedule})
	case 1:
		cl.taints = append(cl.taints, v1alpha1.Taint{Key: "gpu", Value: "true", Effect: v1alpha1.TaintNoExecute})
	case 2:
		cl.taints = append(cl.taints, v1alpha1.Taint{Key: "spot", Effect: v1alpha1.TaintNoSchedule})
	}
	np := 1 + c.IntN(3)
	for i := range np {
		cl.pools = append(cl.pools, genPool(c, o, fmt.Sprintf("p%d", i)))
	}
	return cl
}

func genPool(c chooser, o genOptions, name string) gPool {
	p := gPool{name: name, nodes: int64(c.IntN(7))}
	if o.huge && c.IntN(4) == 0 {
		p.nodes = pick[int64](c, 1<<20, 1<<20+1, 1<<40, -3)
	}
	// At most one device per kind, in a random order; a GPU most of the time.
	order := []kind{kindGPU, kindNVMe, kindNIC}
	for i := len(order) - 1; i > 0; i-- {
		j := c.IntN(i + 1)
		order[i], order[j] = order[j], order[i]
	}
	for _, k := range order {
		if k == kindGPU && c.IntN(8) == 0 || k != kindGPU && c.IntN(2) == 0 {
			continue
		}
		d := gDevice{kind: k, count: int64(1 + c.IntN(4))}
		if k == kindGPU {
			d.count = pick[int64](c, 1, 2, 4, 8)
			d.memGi = pick[int64](c, 24, 80, 141, 141)
		}
		if o.huge && c.IntN(8) == 0 {
			d.count = pick[int64](c, 0, 1<<20, 1<<30)
		}
		p.devices = append(p.devices, d)
	}
	if o.observe && c.IntN(3) > 0 {
		p.obs = genObservation(c, o, p)
	}
	return p
}

// genObservation is a report the observation package would find usable:
// buckets hold at most observedNodes nodes, and no device more free than
// it has.
func genObservation(c chooser, o genOptions, p gPool) *PoolObservation {
	nodes := min(max(p.nodes, 0), 8)
	obs := &PoolObservation{ObservedAt: genAt, ObservedNodes: int64(c.IntN(int(nodes) + 3))}
	left := obs.ObservedNodes
	for range c.IntN(4) {
		if left == 0 {
			break
		}
		b := Bucket{Nodes: 1 + int64(c.IntN(int(left))), Free: map[string]int64{}}
		left -= b.Nodes
		for _, d := range p.devices {
			if !d.kind.dra || c.IntN(5) == 0 {
				continue
			}
			b.Free[d.kind.name] = int64(c.IntN(int(min(d.count, 16)) + 1))
		}
		obs.Buckets = append(obs.Buckets, b)
	}
	if o.huge && c.IntN(8) == 0 {
		obs.ObservedNodes = 1 << 20
		obs.Buckets = append(obs.Buckets, Bucket{Nodes: 1<<20 - 16, Free: map[string]int64{}})
	}
	// A third of the reports say the agent steers the pool.
	obs.Steered = c.IntN(3) == 0
	return obs
}

func genRequests(c chooser) []gRequest {
	var reqs []gRequest
	switch c.IntN(10) {
	case 0:
		reqs = append(reqs, gRequest{kind: kindNIC, count: 1})
	case 1:
		reqs = append(reqs, gRequest{kind: kindGPU, count: int64(1 + c.IntN(2)), need80: c.IntN(2) == 0}, gRequest{kind: kindNVMe, count: 1})
	case 2:
		reqs = append(reqs, gRequest{kind: kindGPU, count: 1}, gRequest{kind: kindNIC, count: 1})
	case 3:
		reqs = append(reqs, gRequest{kind: kindGPU, count: 1, orNIC: true})
	case 4:
		reqs = append(reqs, gRequest{kind: kindNVMe, count: 1})
	default:
		reqs = append(reqs, gRequest{kind: kindGPU, count: pick[int64](c, 1, 1, 1, 2, 4), need80: c.IntN(3) == 0})
	}
	return reqs
}

func genMember(c chooser, role string, claimless bool) gMember {
	m := gMember{role: role}
	if role == v1alpha1.RoleWorker {
		m.workers = int64(1 + c.IntN(3))
	}
	if !claimless {
		m.selector, m.reqs = true, genRequests(c)
	}
	return m
}

func genEngine(c chooser, name string) gEngine {
	e := gEngine{name: name, copies: pick[int64](c, 1, 1, 1, 2, 3)}
	switch c.IntN(5) {
	case 0, 1:
		e.members = []gMember{genMember(c, v1alpha1.RoleStandalone, false)}
	case 2:
		e.members = []gMember{genMember(c, v1alpha1.RoleLeader, false), genMember(c, v1alpha1.RoleWorker, false)}
		if c.IntN(2) == 0 {
			e.members[1].reqs = e.members[0].reqs
		}
	case 3:
		e.members = []gMember{genMember(c, v1alpha1.RoleLeader, true), genMember(c, v1alpha1.RoleWorker, false)}
	case 4:
		e.members = []gMember{genMember(c, v1alpha1.RoleStandalone, false), genMember(c, v1alpha1.RoleStandalone, c.IntN(2) == 0)}
	}
	return e
}

func genDeployment(c chooser) gDeployment {
	d := gDeployment{name: "d", namespace: fx.Namespace, replicas: int64(c.IntN(7))}
	for i := range 1 + c.IntN(2) {
		d.engines = append(d.engines, genEngine(c, fmt.Sprintf("e%d", i)))
	}
	switch c.IntN(4) {
	case 0:
		d.tolerations = []v1alpha1.Toleration{{Key: "gpu", Operator: "Exists"}}
	case 1:
		d.tolerations = []v1alpha1.Toleration{{Key: "gpu", Value: "true", Effect: v1alpha1.TaintNoSchedule}}
	}
	return d
}

// genReplica is an observed replica: one of this deployment's, mostly
// retainable, or another deployment's.
func genReplica(c chooser, f gFleet, serial int) gReplica {
	r := gReplica{deployment: f.d.name, namespace: f.d.namespace, index: c.IntN(3)}
	switch c.IntN(4) {
	case 0:
		r.deployment = pick(c, "other", "another")
	case 1:
		// Same name, another namespace: another deployment's.
		r.namespace = "elsewhere"
	}
	cl := f.clusters[c.IntN(len(f.clusters))]
	r.cluster = cl.name
	if c.IntN(12) == 0 {
		r.cluster = "gone"
	}
	r.name = fmt.Sprintf("%s-%s-%d-%d", r.deployment, r.cluster, r.index, serial)
	engines := f.d.engines
	if r.deployment != f.d.name {
		engines = []gEngine{genEngine(c, "main")}
	}
	for _, e := range engines {
		re := gRepEngine{name: e.name, copies: e.copies}
		p := cl.pools[c.IntN(len(cl.pools))]
		pool := p.name
		if c.IntN(15) == 0 {
			pool = "deleted"
		}
		for _, m := range e.members {
			rm := gRepMember{role: m.role, workers: m.workers, pool: pool}
			if stamps, ok := oracleResolve(p, m); ok {
				rm.stamped = stamps
			} else if m.selector {
				// Pinned where it no longer matches: stamped as it was.
				rm.stamped = append(rm.stamped, gStamp{req: gRequest{kind: kindGPU, count: 1}, class: fx.GPUClass})
			}
			re.members = append(re.members, rm)
		}
		r.engines = append(r.engines, re)
	}
	switch c.IntN(8) {
	case 0:
		// An edited deployment: an engine renamed.
		r.engines[0].name = "renamed"
	case 1:
		// A member's role changed.
		if len(r.engines[0].members) > 1 {
			r.engines[0].members[0].role = v1alpha1.RoleStandalone
		}
	}
	if len(r.engines) > 1 && c.IntN(3) == 0 {
		// Engines listed in another order than the deployment's.
		slices.Reverse(r.engines)
	}
	switch c.IntN(5) {
	case 0:
		r.since = new(genAt.Add(-time.Minute))
	case 1:
		r.since = new(genAt)
	case 2:
		r.since = new(genAt.Add(time.Minute))
	}
	return r
}

func (f gFleet) snapshot() Snapshot {
	s := Snapshot{Deployment: f.d.object()}
	for _, c := range f.clusters {
		s.Clusters = append(s.Clusters, c.cluster())
	}
	for _, r := range f.replicas {
		s.Replicas = append(s.Replicas, Replica{Object: r.object(), ScheduledSince: r.since})
	}
	return s
}

func (d gDeployment) object() *v1alpha1.ModelDeployment {
	var engines []v1alpha1.Engine
	for _, e := range d.engines {
		ve := v1alpha1.Engine{Name: e.name, Copies: new(e.copies)}
		for _, m := range e.members {
			var sel []v1alpha1.DeviceSelector
			for _, r := range m.reqs {
				sel = append(sel, fx.Request(r.kind.name, r.count, r.cel()...))
			}
			ve.Members = append(ve.Members, fx.Member(m.role, m.workers, sel...))
		}
		engines = append(engines, ve)
	}
	return fx.Deployment(d.name).Namespace(d.namespace).Replicas(d.replicas).Engines(engines...).Tolerations(d.tolerations...).Obj()
}

func (c gCluster) cluster() Cluster {
	w := fx.Cluster(c.name)
	if !c.ready {
		w = w.NotReady()
	}
	if !c.gateway {
		w.Status.Gateway = nil
	}
	for _, t := range c.taints {
		w = w.Taint(t.Key, t.Value, t.Effect)
	}
	var pools []v1alpha1.GPUPool
	obs := map[string]*PoolObservation{}
	for _, p := range c.pools {
		var devices []v1alpha1.Device
		for _, d := range p.devices {
			devices = append(devices, d.object())
		}
		pools = append(pools, fx.Pool(p.name, p.nodes).Devices(devices...).Obj())
		if p.obs != nil {
			obs[p.name] = p.obs
		}
	}
	return Cluster{Object: w.Pools(pools...).Obj(), Observed: obs}
}

func (d gDevice) object() v1alpha1.Device {
	switch d.kind {
	case kindGPU:
		return fx.GPU("gpu", d.count, fmt.Sprintf("%dGi", d.memGi))
	case kindNIC:
		return fx.NIC(d.count)
	}
	return v1alpha1.Device{Name: d.kind.name, Claim: v1alpha1.ClaimDRA, Driver: d.kind.driver, DeviceClassName: d.kind.class, Count: new(d.count)}
}

func (r gReplica) object() *v1alpha1.ModelReplica {
	var engines []v1alpha1.ReplicaEngine
	for _, e := range r.engines {
		ve := v1alpha1.ReplicaEngine{Name: e.name, Copies: new(e.copies)}
		for _, m := range e.members {
			vm := v1alpha1.ReplicaMember{Role: m.role, NodePoolName: m.pool, Template: fx.PodTemplate()}
			if m.role == v1alpha1.RoleWorker {
				vm.Worker = &v1alpha1.Worker{Nodes: m.workers}
			}
			vm.DeviceRequests = deviceRequests(m.stamped)
			ve.Members = append(ve.Members, vm)
		}
		engines = append(engines, ve)
	}
	return fx.Replica(r.deployment, r.cluster, r.index).Name(r.name).Namespace(r.namespace).Engines(engines...).Obj()
}

func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }
