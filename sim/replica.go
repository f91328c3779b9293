package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/sim/composereplica"
	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// pod is one pod of a replica, pinned to a pool, bound to a node or
// Pending.
type pod struct {
	replica *replica
	pool    *simPool
	// claim is how many GPUs the pod's claim asks for.
	claim int64
	kube  *kube.Pod
	// engine is the index of the pod's engine in its replica, and gang
	// its LeaderWorkerSet group ("" for a Deployment's pod): where the
	// ledger charges it (agent.ChargeOrder).
	engine int
	gang   string
	// steer is what a steering agent did with the pod (Steered).
	steer steerState
	// groups are the free devices of the nodes the ledger assumed, in the
	// call that placed the replica, for the pods interchangeable with
	// this one (same engine, pool and claim); ownGroups those it assumed
	// for the pods of this replica's engine of the same claim. Shared by
	// those pods, each group matched once; nil where it assumed none.
	groups, ownGroups groups
}

func (p *pod) bound() bool { return p.kube.Node() != "" }

// replica is a ModelReplica, its pods and their controllers.
type replica struct {
	obj        *v1alpha1.ModelReplica
	deployment string
	seq        int
	// origin is the seq of the replica this one replaces when the
	// function re-placed it (its own seq otherwise), and paired is true
	// once a replacement was counted against this one.
	origin  int
	paired  bool
	cluster *simCluster
	pods    []*pod
	owners  []metav1.Object
	// scheduledAt is when PodsScheduled became True; nil while it is False,
	// as it has been since pendingSince.
	scheduledAt  *time.Time
	pendingSince time.Time
}

func (r *replica) bound() bool {
	for _, p := range r.pods {
		if !p.bound() {
			return false
		}
	}
	return true
}

// newReplica makes the pods of a ModelReplica the scheduler asked for, as
// Modelplane v0.3 and the cluster's controllers would: compose-model-replica's
// workloads (sim/composereplica, sized by opts), each pod its
// Deployment's ReplicaSet or its LeaderWorkerSet's StatefulSets make, with
// the claim the resourceclaim controller makes from its template. The
// endpoint picker's pod is left out: it tolerates no GPU taint, so it runs
// outside the GPU pools, which is all the simulator has.
func newReplica(c *simCluster, obj *v1alpha1.ModelReplica, deployment string, seq int, opts composereplica.Options) (*replica, error) {
	r := &replica{obj: obj, deployment: deployment, seq: seq, cluster: c}
	composed, err := composereplica.Compose(obj, opts)
	if err != nil {
		return nil, err
	}
	pods, err := composereplica.Pods(composed)
	if err != nil {
		return nil, fmt.Errorf("cannot make the pods of replica %s: %w", obj.Metadata.Name, err)
	}
	owners := map[string]bool{}
	for _, cp := range pods {
		if cp.EndpointPicker {
			continue
		}
		p, claim, err := binderPod(cp)
		if err != nil {
			return nil, fmt.Errorf("cannot make the pods of replica %s: %w", obj.Metadata.Name, err)
		}
		engine := slices.IndexFunc(obj.Spec.Engines, func(e v1alpha1.ReplicaEngine) bool {
			return v1alpha1.WorkloadName(obj.Metadata.Name, e.Name) == cp.Workload
		})
		r.pods = append(r.pods, &pod{replica: r, pool: r.cluster.pool(cp.Pod.Spec.NodeSelector[v1alpha1.LabelPool]), claim: claim, kube: p, engine: engine, gang: cp.Gang})
		if o := cp.Owner; !owners[o.Kind+"/"+o.Name] {
			owners[o.Kind+"/"+o.Name] = true
			r.owners = append(r.owners, ownerOf(cp.Pod.Namespace, o))
		}
	}
	for _, o := range r.owners {
		if err := c.kube.AddOwner(o); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// ownerOf is a pod's controller, as the binder reads it.
func ownerOf(ns string, o composereplica.Owner) metav1.Object {
	meta := metav1.ObjectMeta{Namespace: ns, Name: o.Name, UID: types.UID(ns + "/" + o.Kind + "/" + o.Name)}
	sel := &metav1.LabelSelector{MatchLabels: o.Selector}
	if o.Kind == "StatefulSet" {
		return &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{Selector: sel}}
	}
	return &appsv1.ReplicaSet{ObjectMeta: meta, Spec: appsv1.ReplicaSetSpec{Selector: sel}}
}

// binderPod is a pod as the binder reads it, with its claim, and how many
// GPUs the claim asks for. Its claim made from its template is named in
// its spec, and its emptyDir volumes (/dev/shm) are left out: the binder
// models neither, and kube-scheduler's volume plugins pass a pod's
// emptyDir volumes by.
func binderPod(cp composereplica.Pod) (*kube.Pod, int64, error) {
	p := cp.Pod.DeepCopy()
	p.Spec.Volumes = slices.DeleteFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.EmptyDir != nil })
	claim := cp.Claim()
	if claim == nil {
		kp, err := kube.NewPod(p)
		return kp, 0, err
	}
	var gpus int64
	for _, r := range claim.Spec.Devices.Requests {
		if r.Exactly != nil {
			gpus += r.Exactly.Count
			if r.Exactly.AllocationMode == "" {
				// As the API server defaults the template's requests.
				r.Exactly.AllocationMode = resourceapi.DeviceAllocationModeExactCount
			}
		}
	}
	for i := range p.Spec.ResourceClaims {
		if p.Spec.ResourceClaims[i].ResourceClaimTemplateName != nil {
			p.Spec.ResourceClaims[i].ResourceClaimTemplateName, p.Spec.ResourceClaims[i].ResourceClaimName = nil, &claim.Name
		}
	}
	p.Status.ResourceClaimStatuses = nil
	claim.OwnerReferences, claim.Annotations = nil, nil
	kp, err := kube.NewPod(p, claim)
	return kp, gpus, err
}

// claim adds what the replica's pods claim to their pools' claimed GPUs,
// and returns how many of them went to a pool whose pods then claim more
// than it has (Result.Overcommit).
func (r *replica) claim() int {
	need := map[*simPool]int64{}
	pods := map[*simPool]int{}
	for _, p := range r.pods {
		if p.pool == nil || p.claim == 0 {
			continue
		}
		need[p.pool] += p.claim
		pods[p.pool]++
	}
	over := 0
	for pool, n := range need {
		pool.claimed += n
		if pool.claimed > pool.gpus() {
			over += pods[pool]
		}
	}
	return over
}

// release deletes the replica's pods, freeing what their nodes gave them,
// and its controllers.
func (r *replica) release() error {
	for _, p := range r.pods {
		if p.pool != nil {
			p.pool.claimed -= p.claim
		}
	}
	for _, p := range r.pods {
		if !p.bound() {
			continue
		}
		if err := r.cluster.kube.RemovePod(p.kube); err != nil {
			return err
		}
	}
	for _, o := range r.owners {
		r.cluster.kube.RemoveOwner(o)
	}
	return nil
}

// What holds a pod Pending at the end of a run.
const (
	StuckOnGPUs      = "no node of its pool has its GPUs free"
	StuckOnResources = "its GPUs are free only on nodes without its cpu or memory"
	StuckOnPool      = "its pool does not exist"
)

// stuck says what a Pending pod needs and the most its pool's nodes have
// free, and what holds it.
func (p *pod) stuck() (string, string) {
	if p.pool == nil {
		return fmt.Sprintf("pod %s: its pool does not exist", p.kube.Obj.Name), StuckOnPool
	}
	var most int64
	// Of the nodes with the GPUs free, why NodeResourcesFit turns each away:
	// the function charges devices only, and no report says a node's cpu
	// or memory.
	short := map[string]int{}
	var reasons []string
	for _, n := range p.pool.nodes {
		free := p.pool.cluster.freeGPUs(n)
		most = max(most, free)
		if free < p.claim {
			continue
		}
		if why := n.ResourcesFit(p.kube); why != "" {
			if short[why] == 0 {
				reasons = append(reasons, why)
			}
			short[why]++
		}
	}
	var msg strings.Builder
	fmt.Fprintf(&msg, "%s/%s: a pod of replica %s (deployment %s) needs %d GPUs on one node; the pool's nodes have at most %d free",
		p.pool.cluster.name, p.pool.spec.Name, p.replica.obj.Metadata.Name, p.replica.deployment, p.claim, most)
	slices.Sort(reasons)
	for _, why := range reasons {
		fmt.Fprintf(&msg, "; %s on %d of the nodes with them free", why, short[why])
	}
	if most < p.claim {
		return msg.String(), StuckOnGPUs
	}
	return msg.String(), StuckOnResources
}
