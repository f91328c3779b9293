package sim

import (
	"strconv"
	"strings"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// Bucket-level agreement: whether the node a claiming pod bound to had,
// just before, the free devices of the group of nodes the ledger assumed
// the pod binds to, in the call that placed its replica
// (scheduling.PodNode). Where the binder and the ledger agree on every
// pod, the ledger's histogram is the cluster's.

// Agreement counts claiming pods bound against the groups the ledger
// assumed for them.
type Agreement struct {
	// Pods counts the claiming pods bound, and Grouped those the ledger
	// assumed groups for: their replica was placed on a pool with a
	// usable report (a whole-node pool's ledger assumes no node's free
	// devices).
	Pods, Grouped int
	// InGroup counts the pods whose node had the free devices of a group
	// the ledger assumed for a pod interchangeable with it: one of the same
	// call, pool, engine and claim (one deployment's replicas are alike,
	// and the ledger places them in their order, the agent in their
	// names'). InOwnGroup counts those whose node had the free devices of
	// a group assumed for a pod of its own replica's engine and claim.
	// Each group is matched once.
	InGroup, InOwnGroup int
}

func (a *Agreement) record(p *pod, free []int64) {
	a.Pods++
	if p.ownGroups == nil {
		return
	}
	a.Grouped++
	if p.groups.match(free) {
		a.InGroup++
	}
	if p.ownGroups.match(free) {
		a.InOwnGroup++
	}
}

// groups are the groups of nodes the ledger assumed some pods bind to, as
// how many of each free-device vector (by vectorKey) are left to match.
type groups map[string]int

// match takes one group of the free devices, if one is left.
func (g groups) match(free []int64) bool {
	k := vectorKey(free)
	if g[k] == 0 {
		return false
	}
	g[k]--
	return true
}

// vectorKey is a vector of counts as a map key.
func vectorKey(v []int64) string {
	var b strings.Builder
	for i, n := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(n, 10))
	}
	return b.String()
}

// replicaPodNodes are where one call's ledger assumed each new replica's
// claiming pods bind: by replica name, then engine name.
type replicaPodNodes map[string]map[string][]scheduling.PodNode

// podNodesReconciler is a Reconciler that also says where its ledger
// assumed the claiming pods of each replica it composed anew bind.
type podNodesReconciler interface {
	reconcilePodNodes(d *v1alpha1.ModelDeployment, clusters []*v1alpha1.InferenceCluster, replicas []*v1alpha1.ModelReplica, now time.Time) ([]*v1alpha1.ModelReplica, replicaPodNodes, error)
}

// assume gives a new replica's claiming pods the groups the call's ledger
// assumed for them (engines, by engine name): those of the call's pods
// interchangeable with them (calls, kept by the caller for the call, by
// cluster, pool, engine and claim) and those of their own engine and
// claim.
func (r *replica) assume(engines map[string][]scheduling.PodNode, calls map[string]groups) {
	if engines == nil {
		return
	}
	own := map[string]groups{}
	key := func(pool string, engine int, claim []int64) (string, string) {
		k := strconv.Itoa(engine) + "/" + vectorKey(claim)
		return k, r.cluster.name + "/" + pool + "/" + k
	}
	for ei, e := range r.obj.Spec.Engines {
		if len(e.Members) == 0 {
			continue
		}
		for _, pn := range engines[e.Name] {
			ok, ck := key(e.Members[0].NodePoolName, ei, pn.Claim)
			if own[ok] == nil {
				own[ok] = groups{}
			}
			if calls[ck] == nil {
				calls[ck] = groups{}
			}
			own[ok][vectorKey(pn.Free)]++
			calls[ck][vectorKey(pn.Free)]++
		}
	}
	for _, p := range r.pods {
		if p.claim == 0 || p.pool == nil {
			continue
		}
		ok, ck := key(p.pool.spec.Name, p.engine, []int64{p.claim})
		p.ownGroups, p.groups = own[ok], calls[ck]
	}
}
