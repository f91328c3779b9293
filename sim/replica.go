package sim

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// Labels of the simulated pods: which replica and engine they run, and the
// gang (one copy of a multi-node engine) whose pods keep to distinct
// nodes.
const (
	labelReplica = "modelplane.ai/replica"
	labelEngine  = "modelplane.ai/engine"
	labelGang    = "modelplane.ai/gang"
)

// pod is one pod of a replica, pinned to a pool, bound to a node or
// Pending.
type pod struct {
	replica *replica
	pool    *simPool
	// claim is how many GPUs the pod's claim asks for.
	claim int64
	kube  *kube.Pod
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
// Modelplane's controllers on the cluster would: per engine copy and member
// one pod (a Worker: worker.nodes pods) from the member's template, pinned
// to its pool by node selector, with a ResourceClaim of its stamped device
// requests. A Standalone engine's copies are one ReplicaSet's pods; a
// gang's (a Leader with its Workers) are a StatefulSet's, with a required
// anti-affinity that keeps them on distinct nodes.
func newReplica(c *simCluster, obj *v1alpha1.ModelReplica, deployment string, seq int) (*replica, error) {
	r := &replica{obj: obj, deployment: deployment, seq: seq, cluster: c}
	for ei, e := range obj.Spec.Engines {
		if err := r.addEngine(ei, e); err != nil {
			return nil, fmt.Errorf("cannot make the pods of replica %s: %w", obj.Metadata.Name, err)
		}
	}
	for _, o := range r.owners {
		if err := c.kube.AddOwner(o); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// addEngine adds the pods of every copy of an engine, and their
// controller.
func (r *replica) addEngine(ei int, e v1alpha1.ReplicaEngine) error {
	obj := r.obj
	copies := int64(1)
	if e.Copies != nil && *e.Copies > 0 {
		copies = *e.Copies
	}
	gang := slices.ContainsFunc(e.Members, func(m v1alpha1.ReplicaMember) bool {
		return m.Role == v1alpha1.RoleLeader || m.Role == v1alpha1.RoleWorker
	})
	selector := map[string]string{labelReplica: obj.Metadata.Name, labelEngine: e.Name}
	owner := ownerOf(obj.Metadata.Namespace, fmt.Sprintf("%s-%d", obj.Metadata.Name, ei), selector, gang)
	r.owners = append(r.owners, owner)
	for cp := range copies {
		gangID := ""
		if gang {
			// A label value: short, whatever the replica's name.
			gangID = fmt.Sprintf("r%d-%d-%d", r.seq, ei, cp)
		}
		for mi, m := range e.Members {
			n := int64(1)
			if m.Role == v1alpha1.RoleWorker && m.Worker != nil {
				n = m.Worker.Nodes
			}
			var claim int64
			for _, dr := range m.DeviceRequests {
				claim += dr.Count
			}
			for i := range n {
				name := fmt.Sprintf("%s-%d-%d-%d-%d", obj.Metadata.Name, ei, cp, mi, i)
				p, err := newPod(obj.Metadata.Namespace, name, m, selector, gangID, owner)
				if err != nil {
					return err
				}
				r.pods = append(r.pods, &pod{replica: r, pool: r.cluster.pool(m.NodePoolName), claim: claim, kube: p})
			}
		}
	}
	return nil
}

func ownerOf(ns, name string, selector map[string]string, gang bool) metav1.Object {
	meta := metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name)}
	sel := &metav1.LabelSelector{MatchLabels: selector}
	if gang {
		return &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{Selector: sel}}
	}
	return &appsv1.ReplicaSet{ObjectMeta: meta, Spec: appsv1.ReplicaSetSpec{Selector: sel}}
}

// newPod builds one pod of a member and its claim.
func newPod(ns, name string, m v1alpha1.ReplicaMember, selector map[string]string, gang string, owner metav1.Object) (*kube.Pod, error) {
	var tmpl corev1.PodTemplateSpec
	if len(m.Template) > 0 {
		if err := json.Unmarshal(m.Template, &tmpl); err != nil {
			return nil, fmt.Errorf("pod template of pod %s: %w", name, err)
		}
	}
	labels := map[string]string{}
	maps.Copy(labels, tmpl.Labels)
	maps.Copy(labels, selector)
	kind := "ReplicaSet"
	if _, ok := owner.(*appsv1.StatefulSet); ok {
		kind = "StatefulSet"
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID(ns + "/" + name), Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: owner.GetName(), UID: owner.GetUID(), Controller: new(true)}},
		},
		Spec: tmpl.Spec,
	}
	p.Spec.NodeSelector = map[string]string{PoolLabel: m.NodePoolName}
	if gang != "" {
		labels[labelGang] = gang
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labelGang: gang}}, TopologyKey: corev1.LabelHostname,
		}}}}
	}
	var claims []*resourceapi.ResourceClaim
	if len(m.DeviceRequests) > 0 {
		var reqs []resourceapi.DeviceRequest
		for _, dr := range m.DeviceRequests {
			var cel []string
			for _, s := range dr.Selectors {
				cel = append(cel, s.CEL)
			}
			reqs = append(reqs, kube.Exactly(dr.Name, dr.DeviceClassName, dr.Count, cel...))
		}
		claim := kube.NewClaim(ns, name, reqs...)
		claims = append(claims, claim)
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "devices", ResourceClaimName: &claim.Name}}
	}
	return kube.NewPod(p, claims...)
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
