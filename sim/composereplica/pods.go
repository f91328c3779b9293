package composereplica

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// Labels LeaderWorkerSet puts on a gang's pods besides LabelLWSName.
const (
	LabelLWSGroupIndex  = "leaderworkerset.sigs.k8s.io/group-index"
	LabelLWSWorkerIndex = "leaderworkerset.sigs.k8s.io/worker-index"
	LabelLWSGroupKey    = "leaderworkerset.sigs.k8s.io/group-key"
)

// Owner is a pod's controller and the pods it selects, which
// kube-scheduler's default topology spreading counts.
type Owner struct {
	Kind     string // ReplicaSet or StatefulSet
	Name     string
	Selector map[string]string
}

// Pod is one pod the workload cluster's controllers make of what Compose
// returns: a Deployment's ReplicaSet makes its copies, a LeaderWorkerSet
// makes per copy a leader and size-1 workers (through StatefulSets). Names
// follow the controllers' patterns; the suffixes they draw at random are
// the pod's index here.
type Pod struct {
	Pod *corev1.Pod
	// ClaimTemplate is the template the resourceclaim controller makes the
	// pod's claim PodClaimName from; nil when the pod claims nothing.
	ClaimTemplate *resourceapi.ResourceClaimTemplate
	Owner         Owner
	// Workload is the name of the Deployment or LeaderWorkerSet.
	Workload string
	// EndpointPicker marks the replica's endpoint picker, which runs
	// outside the GPU pools.
	EndpointPicker bool
	// Gang is the gang a LeaderWorkerSet pod belongs to (its group key);
	// empty for a Deployment's pods.
	Gang string
}

// leaderWorkerSet is the part of a LeaderWorkerSet that makes pods.
type leaderWorkerSet struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		Replicas             int64 `json:"replicas"`
		LeaderWorkerTemplate struct {
			Size           int64                  `json:"size"`
			LeaderTemplate corev1.PodTemplateSpec `json:"leaderTemplate"`
			WorkerTemplate corev1.PodTemplateSpec `json:"workerTemplate"`
		} `json:"leaderWorkerTemplate"`
	} `json:"spec"`
}

// Pods returns the pods of what Compose returned, in its order.
func Pods(composed []Resource) ([]Pod, error) {
	templates := map[string]*resourceapi.ResourceClaimTemplate{}
	for _, r := range composed {
		if r.Manifest["kind"] != "ResourceClaimTemplate" {
			continue
		}
		t := &resourceapi.ResourceClaimTemplate{}
		if err := decode(r.Manifest, t); err != nil {
			return nil, fmt.Errorf("cannot read %s: %w", r.Key, err)
		}
		templates[t.Name] = t
	}
	var out []Pod
	for _, r := range composed {
		var pods []Pod
		var err error
		switch r.Manifest["kind"] {
		case KindDeployment:
			pods, err = deploymentPods(r, templates)
		case KindLeaderWorkerSet:
			pods, err = gangPods(r, templates)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cannot make the pods of %s: %w", r.Key, err)
		}
		out = append(out, pods...)
	}
	return out, nil
}

func decode(manifest map[string]any, into any) error {
	b, err := json.Marshal(manifest)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

// deploymentPods are a Deployment's copies, made by its ReplicaSet.
func deploymentPods(r Resource, templates map[string]*resourceapi.ResourceClaimTemplate) ([]Pod, error) {
	d := &appsv1.Deployment{}
	if err := decode(r.Manifest, d); err != nil {
		return nil, err
	}
	hash, err := templateHash(d.Spec.Template)
	if err != nil {
		return nil, err
	}
	rs := d.Name + "-" + hash
	selector := map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: hash}
	if d.Spec.Selector != nil {
		maps.Copy(selector, d.Spec.Selector.MatchLabels)
	}
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	owner := Owner{Kind: "ReplicaSet", Name: rs, Selector: selector}
	out := make([]Pod, 0, replicas)
	for i := range replicas {
		p, err := pod(d.Spec.Template, fmt.Sprintf("%s-%d", rs, i), map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: hash}, owner, templates)
		if err != nil {
			return nil, err
		}
		p.Workload, p.EndpointPicker = d.Name, r.Key == EndpointPickerKey
		out = append(out, p)
	}
	return out, nil
}

// templateHash stands in for the Deployment controller's pod-template-hash:
// a hash of the template (the controller's own hashes it otherwise).
func templateHash(t corev1.PodTemplateSpec) (string, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return "", err
	}
	h := fnv.New32a()
	_, _ = h.Write(b)
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10)), nil
}

// gangPods are a LeaderWorkerSet's gangs: per copy g a leader <name>-<g>,
// from its leader StatefulSet, and workers <name>-<g>-<i> for i from 1 to
// size-1, from the gang's worker StatefulSet.
func gangPods(r Resource, templates map[string]*resourceapi.ResourceClaimTemplate) ([]Pod, error) {
	l := &leaderWorkerSet{}
	if err := decode(r.Manifest, l); err != nil {
		return nil, err
	}
	name := l.Metadata.Name
	replicas := max(l.Spec.Replicas, 1)
	var out []Pod
	for g := range replicas {
		leader := fmt.Sprintf("%s-%d", name, g)
		sum := sha256.Sum256([]byte(v1alpha1.WorkloadNamespace + "/" + leader))
		key := hex.EncodeToString(sum[:])[:40]
		group := strconv.FormatInt(g, 10)
		labels := map[string]string{v1alpha1.LabelLWSName: name, LabelLWSGroupIndex: group, LabelLWSGroupKey: key}
		for i := range max(l.Spec.LeaderWorkerTemplate.Size, 1) {
			tmpl, podName := l.Spec.LeaderWorkerTemplate.WorkerTemplate, fmt.Sprintf("%s-%d", leader, i)
			owner := Owner{Kind: "StatefulSet", Name: leader, Selector: map[string]string{v1alpha1.LabelLWSName: name, LabelLWSGroupKey: key}}
			if i == 0 {
				tmpl, podName = l.Spec.LeaderWorkerTemplate.LeaderTemplate, leader
				owner = Owner{Kind: "StatefulSet", Name: name, Selector: map[string]string{v1alpha1.LabelLWSName: name, LabelLWSWorkerIndex: "0"}}
			}
			own := maps.Clone(labels)
			own[LabelLWSWorkerIndex] = strconv.FormatInt(i, 10)
			p, err := pod(tmpl, podName, own, owner, templates)
			if err != nil {
				return nil, err
			}
			p.Workload, p.Gang = name, key
			out = append(out, p)
		}
	}
	return out, nil
}

// pod is a pod of a template, with the controller's labels, and the claim
// template it names.
func pod(tmpl corev1.PodTemplateSpec, name string, labels map[string]string, owner Owner, templates map[string]*resourceapi.ResourceClaimTemplate) (Pod, error) {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: *tmpl.ObjectMeta.DeepCopy(),
		Spec:       *tmpl.Spec.DeepCopy(),
	}
	p.Name, p.Namespace, p.UID = name, v1alpha1.WorkloadNamespace, types.UID(v1alpha1.WorkloadNamespace+"/"+name)
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	maps.Copy(p.Labels, labels)
	p.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: owner.Kind, Name: owner.Name,
		UID: types.UID(v1alpha1.WorkloadNamespace + "/" + owner.Kind + "/" + owner.Name), Controller: new(true),
	}}
	out := Pod{Pod: p, Owner: owner}
	for _, ref := range p.Spec.ResourceClaims {
		if ref.ResourceClaimTemplateName == nil {
			continue
		}
		t, ok := templates[*ref.ResourceClaimTemplateName]
		if !ok {
			return Pod{}, fmt.Errorf("pod %s: no ResourceClaimTemplate %s", name, *ref.ResourceClaimTemplateName)
		}
		out.ClaimTemplate = t
	}
	return out, nil
}

// Claim is the ResourceClaim the resourceclaim controller makes for a pod
// from its template, named <pod>-<claim> (the controller adds a random
// suffix), owned by the pod; it records the claim in the pod's status, as
// the controller does. Nil for a pod that claims nothing.
func (p Pod) Claim() *resourceapi.ResourceClaim {
	if p.ClaimTemplate == nil {
		return nil
	}
	name := p.Pod.Name + "-" + PodClaimName
	c := &resourceapi.ResourceClaim{
		TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: p.Pod.Namespace, Name: name, UID: types.UID(p.Pod.Namespace + "/" + name),
			Annotations: map[string]string{resourceapi.PodResourceClaimAnnotation: PodClaimName},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: p.Pod.Name, UID: p.Pod.UID, Controller: new(true), BlockOwnerDeletion: new(true),
			}},
		},
		Spec: *p.ClaimTemplate.Spec.Spec.DeepCopy(),
	}
	p.Pod.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: PodClaimName, ResourceClaimName: &name}}
	return c
}
