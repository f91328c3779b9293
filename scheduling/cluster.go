package scheduling

import (
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// cluster is a candidate cluster prepared for one pass.
type cluster struct {
	name     string
	obj      *v1alpha1.InferenceCluster
	pools    []*pool
	poolByID map[string]*pool
	observed map[string]*PoolObservation
	// matches caches matchMember per pool, engine and member.
	matches map[matchKey]*memberMatch
	// unreadable says why the cluster could not be read; empty when it was.
	unreadable string
}

// pool is a published GPU pool of a cluster.
type pool struct {
	index   int
	name    string
	nodes   int64
	devices []poolDevice
}

// A cluster caches what matching (match.go) finds; the cache's types live
// here so that this file needs nothing of match.go, which uses it.

// memberMatch is a member matched to a pool: the DRA requests it resolves
// and, per pool device, what each of its pods claims.
type memberMatch struct {
	requests []v1alpha1.DeviceRequest
	claim    []int64
}

func (m *memberMatch) claims() bool { return len(m.requests) > 0 }

type matchKey struct{ pool, engine, member int }

func newCluster(c Cluster, kinds *deviceKinds) *cluster {
	cl := &cluster{
		name:       c.Object.Metadata.Name,
		obj:        c.Object,
		poolByID:   map[string]*pool{},
		observed:   c.Observed,
		matches:    map[matchKey]*memberMatch{},
		unreadable: c.Unreadable,
	}
	for i, gp := range c.Object.Status.GPUPools {
		p := &pool{index: i, name: gp.Name, nodes: clampCount(gp.Nodes)}
		for _, d := range gp.Devices {
			p.devices = append(p.devices, kinds.newPoolDevice(d))
		}
		cl.pools = append(cl.pools, p)
		if _, dup := cl.poolByID[gp.Name]; !dup {
			cl.poolByID[gp.Name] = p
		}
	}
	return cl
}

// gateway is the cluster's gateway hostname, else its address.
func (c *cluster) gateway() string {
	g := c.obj.Status.Gateway
	if g == nil {
		return ""
	}
	if g.Hostname != "" {
		return g.Hostname
	}
	return g.Address
}

func (c *cluster) ready() bool { return ClusterReady(c.obj) }

// ClusterReady reports whether a cluster's Ready condition is True: only a
// Ready cluster takes new replicas, and only its pools count toward
// CapacityObserved.
func ClusterReady(c *v1alpha1.InferenceCluster) bool {
	cond := v1alpha1.FindCondition(c.Status.Conditions, "Ready")
	return cond != nil && cond.Status == "True"
}

func (c *cluster) placementLabels() map[string]string {
	if c.obj.Spec.Placement == nil {
		return nil
	}
	return c.obj.Spec.Placement.Metadata.Labels
}

// untolerated returns the first taint with one of the effects that no
// toleration matches, or nil.
func (c *cluster) untolerated(tolerations []v1alpha1.Toleration, effects ...string) *v1alpha1.Taint {
	for i := range c.obj.Spec.Taints {
		t := &c.obj.Spec.Taints[i]
		hit := false
		for _, e := range effects {
			hit = hit || t.Effect == e
		}
		if !hit {
			continue
		}
		tolerated := false
		for _, tol := range tolerations {
			tolerated = tolerated || tolerates(tol, *t)
		}
		if !tolerated {
			return t
		}
	}
	return nil
}

// tolerates follows Kubernetes: an empty effect matches every effect;
// Exists matches any value of the key (an empty key every taint); Equal, the
// default, matches key and value.
func tolerates(tol v1alpha1.Toleration, t v1alpha1.Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	if tol.Operator == "Exists" {
		return tol.Key == "" || tol.Key == t.Key
	}
	return tol.Key == t.Key && tol.Value == t.Value
}

// newReplicaFilter says why the cluster cannot take a new replica, or nil.
func (c *cluster) newReplicaFilter(tolerations []v1alpha1.Toleration) *Reason {
	switch {
	case c.unreadable != "":
		return &Reason{Kind: ReasonUnreadable, Defect: c.unreadable}
	case !c.ready():
		return &Reason{Kind: ReasonNotReady}
	case c.gateway() == "":
		return &Reason{Kind: ReasonNoGateway}
	}
	if t := c.untolerated(tolerations, v1alpha1.TaintNoSchedule, v1alpha1.TaintNoExecute); t != nil {
		return &Reason{Kind: ReasonUntoleratedTaint, Taint: *t}
	}
	return nil
}
