// Package cluster holds the cluster agent's view of its cluster: informers
// over the kinds it reads (Nodes, ResourceSlices, DeviceClasses,
// ResourceClaims, DeviceTaintRules, Pods, PoolObservations and
// ReplicaObservations), the indexes its counting needs, and what each node
// of a pool is counted from.
package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/modelplaneai/fleet-scheduler/agent"
	"github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	fsv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// Index names.
const (
	indexNode   = "node"   // ResourceSlices by the nodes their devices are on
	indexPool   = "pool"   // ResourceSlices and ResourceClaims by "<driver>/<pool>"
	indexLabel  = "label"  // Pods by each "<key>=<value>" of their labels
	indexDriver = "driver" // ResourceSlices by driver
	indexHeld   = "held"   // Pods with the steering gate, by their pool ("" for none)
	indexClaim  = "claim"  // claiming Pods by their pool (their modelplane.ai/pool nodeSelector)
	indexPinned = "pinned" // Pods released pinned to a node and not bound yet, by their pool
)

// Annotations of LeaderWorkerSet (v0.9) a pod keeps in the agent's cache.
const (
	// AnnotationLWSSize is on every pod of a LeaderWorkerSet's group: how
	// many pods the group has, its leader included.
	AnnotationLWSSize = "leaderworkerset.sigs.k8s.io/size"
	// AnnotationLWSLeaderName is on a group's workers: its leader's name.
	AnnotationLWSLeaderName = "leaderworkerset.sigs.k8s.io/leader-name"
)

// Options configure what the agent reads.
type Options struct {
	// Namespaces are the namespaces whose Pods the agent reads, for the
	// ReplicaObservations there; "" reads every namespace's.
	Namespaces []string
	// TaintRules is whether the cluster serves DeviceTaintRules
	// (resource.k8s.io/v1), which then taint the devices they select.
	TaintRules bool
	// AdmissionPolicies is whether the cluster serves
	// admissionregistration.k8s.io/v1 MutatingAdmissionPolicies and their
	// bindings, which steering reads (StartSteering).
	AdmissionPolicies bool
}

// Cluster is the agent's view of its cluster, kept by informers.
type Cluster struct {
	opts Options

	factory    informers.SharedInformerFactory
	podFactory []informers.SharedInformerFactory
	dynFactory dynamicinformer.DynamicSharedInformerFactory

	nodes      cache.SharedIndexInformer
	slices     cache.SharedIndexInformer
	classes    cache.SharedIndexInformer
	claims     cache.SharedIndexInformer
	taintRules cache.SharedIndexInformer // nil without DeviceTaintRules
	pods       map[string]cache.SharedIndexInformer
	pools      cache.SharedIndexInformer
	replicas   cache.SharedIndexInformer

	// The steering policy and its binding: started only once a pool asks
	// for steering (StartSteering), and never what readiness waits for,
	// since an agent that does not steer need not be allowed to read them.
	admFactory    informers.SharedInformerFactory // nil where not served
	policies      cache.SharedIndexInformer
	bindings      cache.SharedIndexInformer
	steeringStart sync.Once
	// steeringSynced stands in for the steering informers' sync in tests
	// (MarkSteeringSynced).
	steeringSynced bool

	client kubernetes.Interface
}

// New returns the cluster's informers, not yet started.
func New(client kubernetes.Interface, dyn dynamic.Interface, opts Options) (*Cluster, error) {
	if len(opts.Namespaces) == 0 {
		return nil, errors.New("cannot read pods: no namespace to read them in")
	}
	c := &Cluster{opts: opts, client: client, pods: map[string]cache.SharedIndexInformer{}}
	c.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(dropManagedFields))
	c.nodes = c.factory.Core().V1().Nodes().Informer()
	c.slices = c.factory.Resource().V1().ResourceSlices().Informer()
	c.classes = c.factory.Resource().V1().DeviceClasses().Informer()
	c.claims = c.factory.Resource().V1().ResourceClaims().Informer()
	if opts.TaintRules {
		c.taintRules = c.factory.Resource().V1().DeviceTaintRules().Informer()
	}
	if err := c.slices.AddIndexers(cache.Indexers{indexNode: indexBy(agent.SliceNodes), indexPool: indexBy(slicePoolKeys), indexDriver: indexBy(sliceDriverKeys)}); err != nil {
		return nil, fmt.Errorf("cannot index ResourceSlices: %w", err)
	}
	if err := c.claims.AddIndexers(cache.Indexers{indexPool: indexBy(agent.ClaimPools)}); err != nil {
		return nil, fmt.Errorf("cannot index ResourceClaims: %w", err)
	}

	namespaces := slices.Clone(opts.Namespaces)
	if slices.Contains(namespaces, "") {
		namespaces = []string{""}
	}
	slices.Sort(namespaces)
	for _, ns := range slices.Compact(namespaces) {
		f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns), informers.WithTransform(slimPod))
		inf := f.Core().V1().Pods().Informer()
		if err := inf.AddIndexers(cache.Indexers{indexLabel: indexBy(podLabelKeys), indexHeld: indexBy(heldKeys), indexClaim: indexBy(claimingKeys), indexPinned: indexBy(pinnedKeys)}); err != nil {
			return nil, fmt.Errorf("cannot index Pods: %w", err)
		}
		c.podFactory = append(c.podFactory, f)
		c.pods[ns] = inf
	}

	c.dynFactory = dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	c.pools = c.dynFactory.ForResource(v1alpha1.PoolObservationResource).Informer()
	c.replicas = c.dynFactory.ForResource(v1alpha1.ReplicaObservationResource).Informer()
	for _, inf := range []cache.SharedIndexInformer{c.pools, c.replicas} {
		if err := inf.SetTransform(dropManagedFields); err != nil {
			return nil, fmt.Errorf("cannot set the agent's kinds' transform: %w", err)
		}
	}
	if opts.AdmissionPolicies {
		c.admFactory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(dropManagedFields),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + v1alpha1.SteeringPolicy }))
		c.policies = c.admFactory.Admissionregistration().V1().MutatingAdmissionPolicies().Informer()
		c.bindings = c.admFactory.Admissionregistration().V1().MutatingAdmissionPolicyBindings().Informer()
	}
	return c, nil
}

// StartSteering starts the informers of the steering policy and its
// binding, once; they stop with ctx. Nothing where the cluster does not
// serve them.
func (c *Cluster) StartSteering(ctx context.Context) {
	if c.admFactory == nil {
		return
	}
	c.steeringStart.Do(func() { c.admFactory.StartWithContext(ctx) })
}

// SteeringPolicy returns the MutatingAdmissionPolicy and the binding named
// v1alpha1.SteeringPolicy (nil where there is none), and whether they
// could be read: false until StartSteering's informers have listed them,
// and where the cluster does not serve them.
func (c *Cluster) SteeringPolicy() (*admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding, bool) {
	if c.admFactory == nil || !c.steeringSynced && (!c.policies.HasSynced() || !c.bindings.HasSynced()) {
		return nil, nil, false
	}
	p, _ := get[*admissionregistrationv1.MutatingAdmissionPolicy](c.policies.GetStore(), v1alpha1.SteeringPolicy)
	b, _ := get[*admissionregistrationv1.MutatingAdmissionPolicyBinding](c.bindings.GetStore(), v1alpha1.SteeringPolicy)
	return p, b, true
}

// Start starts every informer; they stop with ctx.
func (c *Cluster) Start(ctx context.Context) {
	c.factory.StartWithContext(ctx)
	for _, f := range c.podFactory {
		f.StartWithContext(ctx)
	}
	c.dynFactory.Start(ctx.Done())
}

// Shutdown waits for the informers' goroutines to end, once ctx of Start
// is done.
func (c *Cluster) Shutdown() {
	c.factory.Shutdown()
	if c.admFactory != nil {
		c.admFactory.Shutdown()
	}
	for _, f := range c.podFactory {
		f.Shutdown()
	}
	c.dynFactory.Shutdown()
}

// informers are every informer, with the kind each informs of.
func (c *Cluster) informers() map[string]cache.SharedIndexInformer {
	out := map[string]cache.SharedIndexInformer{
		"Node": c.nodes, "ResourceSlice": c.slices, "DeviceClass": c.classes, "ResourceClaim": c.claims,
		v1alpha1.KindPoolObservation: c.pools, v1alpha1.KindReplicaObservation: c.replicas,
	}
	if c.taintRules != nil {
		out["DeviceTaintRule"] = c.taintRules
	}
	for ns, inf := range c.pods {
		name := "Pod"
		if ns != "" {
			name += " in " + ns
		}
		out[name] = inf
	}
	return out
}

// Unsynced names the informers that have not listed their kind yet:
// none once the agent's view is whole.
func (c *Cluster) Unsynced() []string {
	var out []string
	for kind, inf := range c.informers() {
		if !inf.HasSynced() {
			out = append(out, kind)
		}
	}
	slices.Sort(out)
	return out
}

// WaitForSync waits until every informer has listed its kind.
func (c *Cluster) WaitForSync(ctx context.Context) error {
	informers := c.informers()
	synced := make([]cache.InformerSynced, 0, len(informers))
	for _, inf := range informers {
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("cannot read the cluster: these kinds never listed: %s", strings.Join(c.Unsynced(), ", "))
	}
	return nil
}

// Source is one kind the agent's reports depend on, for proving how recent
// its view of the kind is (package freshness).
type Source struct {
	// Kind names the kind, for logs and metrics.
	Kind string
	// Store is the informer's cache: LastStoreSyncResourceVersion is the
	// newest resourceVersion it holds everything up to.
	Store cache.Store
	// ListWatch lists and watches the kind on the API server.
	ListWatch cache.ListerWatcherWithContext
}

// listWatch lists and watches a cluster-scoped resource of a client's
// group and version.
func listWatch(c cache.Getter, resource string) cache.ListerWatcherWithContext {
	return cache.NewListWatchFromClient(c, resource, "", fields.Everything())
}

// Sources are the kinds a pool's report depends on: Nodes, ResourceSlices,
// DeviceClasses, ResourceClaims and, where served, DeviceTaintRules. Pods
// are not among them: a pod's devices are its claims', allocated before it
// is bound.
func (c *Cluster) Sources() []Source {
	r := c.client.ResourceV1()
	out := []Source{
		{Kind: "Node", Store: c.nodes.GetStore(), ListWatch: listWatch(c.client.CoreV1().RESTClient(), "nodes")},
		{Kind: "ResourceSlice", Store: c.slices.GetStore(), ListWatch: listWatch(r.RESTClient(), "resourceslices")},
		{Kind: "DeviceClass", Store: c.classes.GetStore(), ListWatch: listWatch(r.RESTClient(), "deviceclasses")},
		{Kind: "ResourceClaim", Store: c.claims.GetStore(), ListWatch: listWatch(r.RESTClient(), "resourceclaims")},
	}
	if c.taintRules != nil {
		out = append(out, Source{Kind: "DeviceTaintRule", Store: c.taintRules.GetStore(), ListWatch: listWatch(r.RESTClient(), "devicetaintrules")})
	}
	return out
}

// OnPoolInputs calls f after any change to what pool reports are counted
// from (and to PoolObservations), from the informers' goroutines: f must
// return quickly.
func (c *Cluster) OnPoolInputs(f func()) error {
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { f() },
		UpdateFunc: func(_, _ any) { f() },
		DeleteFunc: func(any) { f() },
	}
	for _, inf := range []cache.SharedIndexInformer{c.nodes, c.slices, c.classes, c.claims, c.taintRules, c.pools} {
		if inf == nil {
			continue
		}
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("cannot watch the pools' objects: %w", err)
		}
	}
	return nil
}

// OnReplicaInputs calls f with the keys ("<namespace>/<name>") of the
// ReplicaObservations a change may concern: a Pod's (the ones selecting it
// before or after) or one's own. From the informers' goroutines: f must
// return quickly.
func (c *Cluster) OnReplicaInputs(f func(keys []string)) error {
	pod := func(objs ...any) {
		var keys []string
		for _, o := range objs {
			p, ok := tombstone(o).(*corev1.Pod)
			if !ok {
				continue
			}
			keys = append(keys, c.replicasSelecting(p)...)
		}
		if len(keys) > 0 {
			f(keys)
		}
	}
	for _, inf := range c.pods {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { pod(o) },
			UpdateFunc: func(o, n any) { pod(o, n) },
			DeleteFunc: func(o any) { pod(o) },
		}); err != nil {
			return fmt.Errorf("cannot watch pods: %w", err)
		}
	}
	own := func(o any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
			f([]string{key})
		}
	}
	if _, err := c.replicas.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    own,
		UpdateFunc: func(_, n any) { own(n) },
		DeleteFunc: own,
	}); err != nil {
		return fmt.Errorf("cannot watch ReplicaObservations: %w", err)
	}
	return nil
}

// Nodes are every Node, sorted by name.
func (c *Cluster) Nodes() []*corev1.Node {
	return sortedByName(typed[*corev1.Node](c.nodes.GetStore().List()))
}

// DeviceClasses are every DeviceClass, sorted by name.
func (c *Cluster) DeviceClasses() []*resourcev1.DeviceClass {
	return sortedByName(typed[*resourcev1.DeviceClass](c.classes.GetStore().List()))
}

// HasDriver is whether any ResourceSlice of the cluster is of the driver.
func (c *Cluster) HasDriver(driver string) bool {
	keys, err := c.slices.GetIndexer().IndexKeys(indexDriver, driver)
	return err == nil && len(keys) > 0
}

// PoolObservations are every PoolObservation, as stored (the agent writes
// their status from these), sorted by name.
func (c *Cluster) PoolObservations() []*unstructured.Unstructured {
	return sortedByName(typed[*unstructured.Unstructured](c.pools.GetStore().List()))
}

// ReplicaObservation returns the ReplicaObservation of the key, as stored;
// nil when there is none.
func (c *Cluster) ReplicaObservation(key string) *unstructured.Unstructured {
	o, ok, err := c.replicas.GetStore().GetByKey(key)
	if err != nil || !ok {
		return nil
	}
	u, _ := o.(*unstructured.Unstructured)
	return u
}

// ReplicaObservationKeys are the keys of every ReplicaObservation.
func (c *Cluster) ReplicaObservationKeys() []string {
	keys := c.replicas.GetStore().ListKeys()
	slices.Sort(keys)
	return keys
}

// WatchesPods is whether the agent reads the namespace's pods.
func (c *Cluster) WatchesPods(namespace string) bool {
	_, one := c.pods[namespace]
	_, all := c.pods[""]
	return one || all
}

// podInformer is the informer of the namespace's pods; nil when the agent
// does not read them.
func (c *Cluster) podInformer(namespace string) cache.SharedIndexInformer {
	if inf := c.pods[namespace]; inf != nil {
		return inf
	}
	return c.pods[""]
}

// Pod returns the pod of the namespace and name; nil when there is none.
func (c *Cluster) Pod(namespace, name string) *corev1.Pod {
	inf := c.podInformer(namespace)
	if inf == nil {
		return nil
	}
	p, _ := get[*corev1.Pod](inf.GetStore(), namespace+"/"+name)
	return p
}

// HeldPods are the pods carrying the steering gate
// (v1alpha1.SchedulingGate), whole (the cache keeps a held pod whole, to
// release it with one update), sorted by namespace and name.
func (c *Cluster) HeldPods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, inf := range c.pods {
		for _, key := range inf.GetIndexer().ListIndexFuncValues(indexHeld) {
			objs, err := inf.GetIndexer().ByIndex(indexHeld, key)
			if err == nil {
				out = append(out, typed[*corev1.Pod](objs)...)
			}
		}
	}
	return sortedByName(out)
}

// PinnedPods are the live pods released pinned to a node
// (v1alpha1.AnnotationSteeredTo names one) and not bound yet, by the pool
// of their modelplane.ai/pool nodeSelector, each sorted by namespace and
// name.
func (c *Cluster) PinnedPods() map[string][]*corev1.Pod {
	out := map[string][]*corev1.Pod{}
	for _, inf := range c.pods {
		for _, pool := range inf.GetIndexer().ListIndexFuncValues(indexPinned) {
			if objs, err := inf.GetIndexer().ByIndex(indexPinned, pool); err == nil {
				out[pool] = append(out[pool], typed[*corev1.Pod](objs)...)
			}
		}
	}
	for pool := range out {
		sortedByName(out[pool])
	}
	return out
}

// ClaimingPods are the pods whose modelplane.ai/pool nodeSelector names
// the pool and that claim devices (spec.resourceClaims), sorted by
// namespace and name.
func (c *Cluster) ClaimingPods(pool string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, inf := range c.pods {
		if objs, err := inf.GetIndexer().ByIndex(indexClaim, pool); err == nil {
			out = append(out, typed[*corev1.Pod](objs)...)
		}
	}
	return sortedByName(out)
}

// LabelledPods are the pods of the namespace with the label, sorted by
// name.
func (c *Cluster) LabelledPods(namespace, key, value string) []*corev1.Pod {
	inf := c.podInformer(namespace)
	if inf == nil {
		return nil
	}
	objs, err := inf.GetIndexer().ByIndex(indexLabel, key+"="+value)
	if err != nil {
		return nil
	}
	var out []*corev1.Pod
	for _, p := range typed[*corev1.Pod](objs) {
		if p.Namespace == namespace {
			out = append(out, p)
		}
	}
	return sortedByName(out)
}

// ResourceClaim returns the claim of the namespace and name; nil when
// there is none.
func (c *Cluster) ResourceClaim(namespace, name string) *resourcev1.ResourceClaim {
	cl, _ := get[*resourcev1.ResourceClaim](c.claims.GetStore(), namespace+"/"+name)
	return cl
}

// PoolObservation returns the PoolObservation of the name, as stored; nil
// when there is none.
func (c *Cluster) PoolObservation(name string) *unstructured.Unstructured {
	u, _ := get[*unstructured.Unstructured](c.pools.GetStore(), name)
	return u
}

// ReplicaObservations are the ReplicaObservations of the namespace, as
// stored, sorted by name.
func (c *Cluster) ReplicaObservations(namespace string) []*unstructured.Unstructured {
	objs, err := c.replicas.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
	if err != nil {
		return nil
	}
	return sortedByName(typed[*unstructured.Unstructured](objs))
}

// BoundPods counts the live pods of the namespace bound to a node that
// match any of the selectors (each pod once). Live: not Succeeded or
// Failed, not being deleted.
func (c *Cluster) BoundPods(namespace string, selectors []labels.Selector) int64 {
	inf := c.pods[namespace]
	if inf == nil {
		inf = c.pods[""]
	}
	if inf == nil {
		return 0
	}
	seen := map[string]bool{}
	var n int64
	for _, sel := range selectors {
		for _, p := range c.candidates(inf, namespace, sel) {
			if p.Namespace != namespace || seen[p.Name] || !sel.Matches(labels.Set(p.Labels)) {
				continue
			}
			seen[p.Name] = true
			if bound(p) {
				n++
			}
		}
	}
	return n
}

// candidates are the pods that may match the selector: those carrying one
// of its required labels, or the namespace's all.
func (c *Cluster) candidates(inf cache.SharedIndexInformer, namespace string, sel labels.Selector) []*corev1.Pod {
	if reqs, ok := sel.Requirements(); ok {
		for _, r := range reqs {
			if r.Operator() != "=" && r.Operator() != "==" && r.Operator() != "in" || r.Values().Len() != 1 {
				continue
			}
			objs, err := inf.GetIndexer().ByIndex(indexLabel, r.Key()+"="+r.Values().UnsortedList()[0])
			if err == nil {
				return typed[*corev1.Pod](objs)
			}
		}
	}
	objs, err := inf.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
	if err != nil {
		return typed[*corev1.Pod](inf.GetStore().List())
	}
	return typed[*corev1.Pod](objs)
}

// bound is whether the pod is live and bound to a node.
func bound(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.DeletionTimestamp == nil &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// replicasSelecting are the keys of the ReplicaObservations of the pod's
// namespace that select it.
func (c *Cluster) replicasSelecting(p *corev1.Pod) []string {
	objs, err := c.replicas.GetIndexer().ByIndex(cache.NamespaceIndex, p.Namespace)
	if err != nil {
		return nil
	}
	var out []string
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		ro, err := ReplicaObservationOf(u)
		if err != nil {
			// A ReplicaObservation that cannot be read is reconciled on
			// its own events; a pod's change cannot make it readable.
			continue
		}
		for _, s := range ro.Spec.Selectors {
			sel, err := metav1.LabelSelectorAsSelector(&s)
			if err == nil && sel.Matches(labels.Set(p.Labels)) {
				out = append(out, p.Namespace+"/"+u.GetName())
				break
			}
		}
	}
	return out
}

// PoolObservationOf decodes a PoolObservation.
func PoolObservationOf(u *unstructured.Unstructured) (*v1alpha1.PoolObservation, error) {
	out := &v1alpha1.PoolObservation{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return nil, fmt.Errorf("cannot read PoolObservation %s: %w", u.GetName(), err)
	}
	return out, nil
}

// ReplicaObservationOf decodes a ReplicaObservation.
func ReplicaObservationOf(u *unstructured.Unstructured) (*v1alpha1.ReplicaObservation, error) {
	out := &v1alpha1.ReplicaObservation{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return nil, fmt.Errorf("cannot read ReplicaObservation %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return out, nil
}

// indexBy is an index of the objects of type T by the keys of each; an
// object of another type has none.
func indexBy[T any](keys func(T) []string) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		o, ok := obj.(T)
		if !ok {
			return nil, nil
		}
		return keys(o), nil
	}
}

func slicePoolKeys(s *resourcev1.ResourceSlice) []string {
	return []string{agent.ResourcePoolKey(s.Spec.Driver, s.Spec.Pool.Name)}
}

func sliceDriverKeys(s *resourcev1.ResourceSlice) []string {
	return []string{s.Spec.Driver}
}

// heldKeys indexes a pod with the steering gate by its pool.
func heldKeys(p *corev1.Pod) []string {
	if !Held(p) {
		return nil
	}
	return []string{p.Spec.NodeSelector[fsv1alpha1.LabelPool]}
}

// pinnedKeys indexes a live pod released pinned to a node (a non-empty
// v1alpha1.AnnotationSteeredTo) and not bound yet by its pool.
func pinnedKeys(p *corev1.Pod) []string {
	if p.Annotations[v1alpha1.AnnotationSteeredTo] == "" || p.Spec.NodeName != "" || p.DeletionTimestamp != nil || Held(p) {
		return nil
	}
	return []string{p.Spec.NodeSelector[fsv1alpha1.LabelPool]}
}

// claimingKeys indexes a claiming pod with a pool by its pool.
func claimingKeys(p *corev1.Pod) []string {
	pool := p.Spec.NodeSelector[fsv1alpha1.LabelPool]
	if pool == "" || len(p.Spec.ResourceClaims) == 0 {
		return nil
	}
	return []string{pool}
}

// Held is whether the pod carries the steering gate.
func Held(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == v1alpha1.SchedulingGate })
}

func podLabelKeys(p *corev1.Pod) []string {
	out := make([]string, 0, len(p.Labels))
	for k, v := range p.Labels {
		out = append(out, k+"="+v)
	}
	return out
}

// dropManagedFields drops what the agent never reads and an informer would
// otherwise keep of every object.
func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// slimPod keeps of a Pod what counting bound pods and steering read: a
// cluster's pods are most of what an agent would hold otherwise. A pod
// with the steering gate is kept whole (but its managed fields): the
// agent releases it with an update of the whole pod.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	if Held(p) {
		p.ManagedFields = nil
		return p, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, DeletionTimestamp: p.DeletionTimestamp, CreationTimestamp: p.CreationTimestamp,
		},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName, ResourceClaims: p.Spec.ResourceClaims},
		Status: corev1.PodStatus{Phase: p.Status.Phase, ResourceClaimStatuses: p.Status.ResourceClaimStatuses},
	}
	for _, k := range []string{v1alpha1.AnnotationSteeredTo, AnnotationLWSSize, AnnotationLWSLeaderName} {
		if v, ok := p.Annotations[k]; ok {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	if pool, ok := p.Spec.NodeSelector[fsv1alpha1.LabelPool]; ok {
		out.Spec.NodeSelector = map[string]string{fsv1alpha1.LabelPool: pool}
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled || cond.Type == corev1.PodReady {
			out.Status.Conditions = append(out.Status.Conditions, cond)
		}
	}
	return out, nil
}

// tombstone returns the object a deletion's tombstone holds, or the object.
func tombstone(o any) any {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return o
}

// get returns the object of the key from the store, typed.
func get[T any](s cache.Store, key string) (T, bool) {
	var zero T
	o, ok, err := s.GetByKey(key)
	if err != nil || !ok {
		return zero, false
	}
	t, ok := o.(T)
	return t, ok
}

func typed[T any](objs []any) []T {
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

func sortedByName[T metav1.Object](objs []T) []T {
	slices.SortFunc(objs, func(a, b T) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
	})
	return objs
}
