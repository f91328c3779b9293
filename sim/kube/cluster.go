package kube

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
)

// Profile is a kube-scheduler profile: which NodeResourcesFit scoring
// strategy it uses, everything else being the default profile.
type Profile string

// The profiles.
const (
	// Default is kube-scheduler v1.37's default profile: NodeResourcesFit
	// scores LeastAllocated.
	Default Profile = "kube-default"
	// MostAllocated is the default profile with NodeResourcesFit scoring
	// MostAllocated, as bin-packing clusters configure it.
	MostAllocated Profile = "kube-most-allocated"
)

// Features is the structured allocator's feature set as kube-scheduler
// v1.37 enables it by default (dynamicresources.AllocatorFeatures of the
// default feature gates, which sim/calibrate checks). FractionalCapacity-
// Range is off: its gate's v1.37 default is on only at compatibility
// version 1.37, and kube-scheduler v1.37.2's default gates have it off.
func Features() structured.Features {
	return structured.Features{
		AdminAccess:            true,
		PrioritizedList:        true,
		PartitionableDevices:   true,
		DeviceTaints:           true,
		DeviceBindingAndStatus: true,
		ConsumableCapacity:     true,
	}
}

// Cluster is one cluster as kube-scheduler's cache sees it: its nodes with
// their ResourceSlices, the pods bound to them with their allocated claims,
// the DeviceClasses, the controllers pods may have, and the images nodes
// hold.
type Cluster struct {
	nodes  []*Node
	byName map[string]*Node
	// zones are the zone keys in the order they first appeared, and
	// inZone each one's nodes in the order they were added.
	zones  []string
	inZone map[string][]*Node
	// inserted are the nodes in the order they were added.
	inserted []*Node

	classes classes
	// extended maps extended resources to the DeviceClasses that back
	// them, as the DynamicResources plugin's cache does.
	extended *extendedresourcecache.ExtendedResourceCache
	// taintRules are the DeviceTaintRules, applied to the slices the
	// allocator sees as kube-scheduler's slice tracker applies them.
	taintRules []*resourceapi.DeviceTaintRule
	allocated  structured.AllocatedState
	owners     map[ownerKey]labels.Selector
	// antiPods are the bound pods with required anti-affinity terms;
	// affinityPods those with any inter-pod affinity term.
	antiPods, affinityPods map[*Pod]bool
	// imageNodes counts the nodes holding each image name.
	imageNodes map[string]int
	// imageSizes is what a node that pulls an image records it as.
	imageSizes map[string]int64
	// nextStart is where the next search of a large cluster starts
	// (kube-scheduler's nextStartNodeIndex).
	nextStart int
	cel       *cel.Cache
	// mutation is the deliberate break the binder runs with, if any.
	mutation Mutation
	weights  map[string]int64
}

// Node is a node and what is bound to it.
type Node struct {
	Obj    *corev1.Node
	Slices []*resourceapi.ResourceSlice
	Pods   []*Pod

	allocatable res
	pods        int64
	// requested sums the pods' requests; nonZero the same with the
	// scheduler's defaults for containers that request nothing.
	requested, nonZero res
	// scalarAllocatable and scalarRequested are the same for extended
	// resources.
	scalarAllocatable, scalarRequested map[corev1.ResourceName]int64
	// images are the node's image names and their sizes.
	images map[string]int64
	// generation counts the pods bound to and removed from the node.
	generation uint64
}

// Generation changes whenever a pod is bound to the node or removed: what
// the node has free is the same while it does not.
func (n *Node) Generation() uint64 { return n.generation }

type ownerKey struct{ kind, namespace, name string }

// celCache compiles CEL selectors as the DynamicResources plugin builds
// its cache: one per process, shared by every cluster (it is safe for
// concurrent use), as kube-scheduler has one for all its cycles.
var celCache = sync.OnceValue(func() *cel.Cache { //nolint:gochecknoglobals // One compiler and cache per process.
	return cel.NewCache(1000, cel.Features{EnableConsumableCapacity: Features().ConsumableCapacity})
})

// NewCluster is an empty cluster with the DeviceClasses.
func NewCluster(cls ...*resourceapi.DeviceClass) *Cluster {
	c := &Cluster{
		byName:   map[string]*Node{},
		inZone:   map[string][]*Node{},
		classes:  classes{},
		extended: extendedresourcecache.NewExtendedResourceCache(klog.Background()),
		allocated: structured.AllocatedState{
			AllocatedDevices:         sets.New[structured.DeviceID](),
			AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
			AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
		},
		owners:       map[ownerKey]labels.Selector{},
		antiPods:     map[*Pod]bool{},
		affinityPods: map[*Pod]bool{},
		imageNodes:   map[string]int{},
		imageSizes:   map[string]int64{},
		cel:          celCache(),
		weights:      Weights(),
	}
	for _, dc := range cls {
		c.classes[dc.Name] = dc
		c.extended.OnAdd(dc, true)
	}
	return c
}

// AddDeviceTaintRule adds a DeviceTaintRule: its taint is added to the
// devices it selects, as kube-scheduler's ResourceSlice tracker adds it,
// before the allocator sees them.
func (c *Cluster) AddDeviceTaintRule(r *resourceapi.DeviceTaintRule) {
	c.taintRules = append(c.taintRules, r)
}

// patched is a slice with the DeviceTaintRules' taints added to the
// devices they select (tracker.applyPatches): a rule without a selector
// selects nothing; driver, pool and device, where set, must match.
func (c *Cluster) patched(s *resourceapi.ResourceSlice) *resourceapi.ResourceSlice {
	if c.mutation == IgnoreDeviceTaintRules {
		return s
	}
	out := s
	for _, r := range c.taintRules {
		sel := r.Spec.DeviceSelector
		if sel == nil || sel.Driver != nil && *sel.Driver != s.Spec.Driver || sel.Pool != nil && *sel.Pool != s.Spec.Pool.Name {
			continue
		}
		for i, d := range s.Spec.Devices {
			if sel.Device != nil && *sel.Device != d.Name {
				continue
			}
			if out == s {
				out = s.DeepCopy()
			}
			out.Spec.Devices[i].Taints = append(out.Spec.Devices[i].Taints, r.Spec.Taint)
		}
	}
	return out
}

// SetImageSize sets the size a node records for an image it pulls.
func (c *Cluster) SetImageSize(image string, bytes int64) {
	c.imageSizes[normalizedImageName(image)] = bytes
}

// AddNode adds a node with its ResourceSlices. The images in its status are
// the images it holds.
func (c *Cluster) AddNode(n *corev1.Node, slices ...*resourceapi.ResourceSlice) error {
	if _, ok := c.byName[n.Name]; ok {
		return fmt.Errorf("cannot add node %s: it exists", n.Name)
	}
	nd := &Node{Obj: n, Slices: slices, images: map[string]int64{}, scalarRequested: map[corev1.ResourceName]int64{}}
	nd.allocatable = res{milliCPU: n.Status.Allocatable.Cpu().MilliValue(), memory: n.Status.Allocatable.Memory().Value()}
	nd.pods = n.Status.Allocatable.Pods().Value()
	for name, q := range n.Status.Allocatable {
		if IsExtendedResourceName(name) {
			if nd.scalarAllocatable == nil {
				nd.scalarAllocatable = map[corev1.ResourceName]int64{}
			}
			nd.scalarAllocatable[name] = q.Value()
		}
	}
	for _, img := range n.Status.Images {
		for _, name := range img.Names {
			if _, ok := nd.images[name]; !ok {
				nd.images[name] = img.SizeBytes
				c.imageNodes[name]++
			}
		}
	}
	c.byName[n.Name] = nd
	c.insert(nd)
	return nil
}

// insert puts a node where kube-scheduler's node tree lists it: zones in the
// order they first appeared, one node of each in turn.
func (c *Cluster) insert(nd *Node) {
	zone := nodeZone(nd.Obj)
	if _, ok := c.inZone[zone]; !ok {
		c.zones = append(c.zones, zone)
	}
	c.inZone[zone] = append(c.inZone[zone], nd)
	c.inserted = append(c.inserted, nd)
	c.nodes = c.nodes[:0]
	for i := 0; len(c.nodes) < len(c.byName); i++ {
		for _, z := range c.zones {
			if in := c.inZone[z]; i < len(in) {
				c.nodes = append(c.nodes, in[i])
			}
		}
	}
}

// nodeZone is the node tree's zone key: region and zone labels.
func nodeZone(n *corev1.Node) string {
	region, zone := n.Labels[corev1.LabelTopologyRegion], n.Labels[corev1.LabelTopologyZone]
	if region == "" && zone == "" {
		return ""
	}
	return region + ":\x00:" + zone
}

// Nodes are the cluster's nodes in the order kube-scheduler lists them.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Node is the node of that name, or nil.
func (c *Cluster) Node(name string) *Node { return c.byName[name] }

// AddOwner records a controller pods may name as their owner: a ReplicaSet,
// StatefulSet or ReplicationController, whose selector PodTopologySpread's
// system defaults spread by.
func (c *Cluster) AddOwner(obj metav1.Object) error {
	kind, sel, err := ownerSelector(obj)
	if err != nil {
		return fmt.Errorf("cannot add owner %s: %w", obj.GetName(), err)
	}
	c.owners[ownerKey{kind, obj.GetNamespace(), obj.GetName()}] = sel
	return nil
}

// ownerSelector is a controller's kind and the selector
// helper.DefaultSelector spreads its pods by: merged into the (here empty)
// selector of the Services that select the pod.
func ownerSelector(obj metav1.Object) (string, labels.Selector, error) {
	var ls *metav1.LabelSelector
	switch o := obj.(type) {
	case *appsv1.ReplicaSet:
		ls = o.Spec.Selector
	case *appsv1.StatefulSet:
		ls = o.Spec.Selector
	case *corev1.ReplicationController:
		return "ReplicationController", labels.Set(o.Spec.Selector).AsSelector(), nil
	default:
		return "", nil, fmt.Errorf("%T is not a ReplicaSet, StatefulSet or ReplicationController", obj)
	}
	kind := "ReplicaSet"
	if _, ok := obj.(*appsv1.StatefulSet); ok {
		kind = "StatefulSet"
	}
	sel, err := requirements(labels.NewSelector(), ls)
	return kind, sel, err
}

// requirements adds a label selector's requirements to a selector, as
// helper.DefaultSelector does: a selector that selects nothing adds none.
func requirements(sel labels.Selector, ls *metav1.LabelSelector) (labels.Selector, error) {
	s, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, err
	}
	if r, ok := s.Requirements(); ok {
		sel = sel.Add(r...)
	}
	return sel, nil
}

// RemoveOwner forgets a controller AddOwner recorded.
func (c *Cluster) RemoveOwner(obj metav1.Object) {
	if kind, _, err := ownerSelector(obj); err == nil {
		delete(c.owners, ownerKey{kind, obj.GetNamespace(), obj.GetName()})
	}
}

// AddPod adds a pod already bound (spec.nodeName set) with its claims, each
// allocated. The node's images are what its status says.
func (c *Cluster) AddPod(p *Pod) error {
	n := c.byName[p.Obj.Spec.NodeName]
	if n == nil {
		return fmt.Errorf("cannot add pod %s: no node %q", p.Obj.Name, p.Obj.Spec.NodeName)
	}
	for _, rc := range p.Claims {
		if rc.Status.Allocation == nil {
			return fmt.Errorf("cannot add pod %s: claim %s is not allocated", p.Obj.Name, rc.Name)
		}
	}
	c.assume(p, n)
	return nil
}

// Pulled records that a node holds images now, as its kubelet reports the
// images it pulled: ImageLocality reads them.
func (c *Cluster) Pulled(node string, images ...string) {
	n := c.byName[node]
	if n == nil {
		return
	}
	for _, name := range images {
		if _, ok := n.images[name]; ok {
			continue
		}
		size := c.imageSizes[name]
		n.images[name] = size
		c.imageNodes[name]++
		n.Obj.Status.Images = append(n.Obj.Status.Images, corev1.ContainerImage{Names: []string{name}, SizeBytes: size})
	}
}

// assume adds a pod to its node: its requests and its claims' devices.
func (c *Cluster) assume(p *Pod, n *Node) {
	p.node = n
	p.Obj.Spec.NodeName = n.Obj.Name
	n.Pods = append(n.Pods, p)
	n.generation++
	if len(p.affinity.antiRequired) > 0 {
		c.antiPods[p] = true
	}
	if p.affinity.any() {
		c.affinityPods[p] = true
	}
	n.requested = n.requested.add(p.requests)
	n.nonZero = n.nonZero.add(p.nonZero)
	for name, q := range p.scalar {
		n.scalarRequested[name] += q
	}
	for _, rc := range p.Claims {
		c.hold(rc, true)
	}
}

// RemovePod deletes a bound pod: its node gets back its requests and its
// claims' devices are freed. The node keeps the images.
func (c *Cluster) RemovePod(p *Pod) error {
	n := p.node
	if n == nil {
		return errors.New("cannot remove a pod that is not bound")
	}
	i := -1
	for j, q := range n.Pods {
		if q == p {
			i = j
		}
	}
	if i < 0 {
		return fmt.Errorf("cannot remove pod %s: node %s does not hold it", p.Obj.Name, n.Obj.Name)
	}
	n.Pods = append(n.Pods[:i], n.Pods[i+1:]...)
	n.generation++
	delete(c.antiPods, p)
	delete(c.affinityPods, p)
	n.requested = n.requested.sub(p.requests)
	n.nonZero = n.nonZero.sub(p.nonZero)
	for name, q := range p.scalar {
		n.scalarRequested[name] -= q
	}
	for _, rc := range p.Claims {
		c.hold(rc, false)
		rc.Status = resourceapi.ResourceClaimStatus{}
	}
	p.Obj.Spec.NodeName = ""
	p.node = nil
	return nil
}

// hold records the devices a claim's allocation holds as allocated, or no
// longer, as the DynamicResources plugin tracks them with consumable
// capacity on: a shared allocation by its share and consumed capacity, any
// other by its device. Admin access holds nothing.
func (c *Cluster) hold(rc *resourceapi.ResourceClaim, held bool) {
	if rc.Status.Allocation == nil {
		return
	}
	a := &c.allocated
	for _, r := range rc.Status.Allocation.Devices.Results {
		if r.AdminAccess != nil && *r.AdminAccess && c.mutation != AdminAccessHolds {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if c.mutation == SharesHoldWholeDevices {
			r.ShareID = nil
		}
		switch {
		case r.ShareID == nil && held:
			a.AllocatedDevices.Insert(id)
		case r.ShareID == nil:
			a.AllocatedDevices.Delete(id)
		case held:
			a.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
		default:
			a.AllocatedSharedDeviceIDs.Delete(structured.MakeSharedDeviceID(id, r.ShareID))
		}
		if r.ShareID == nil || r.ConsumedCapacity == nil {
			continue
		}
		consumed := structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity)
		if held {
			a.AggregatedCapacity.Insert(consumed)
		} else {
			a.AggregatedCapacity.Remove(consumed)
		}
	}
}

// Allocated reports whether a device is allocated to some claim.
func (c *Cluster) Allocated(driver, pool, device string) bool {
	return structured.IsDeviceAllocated(structured.MakeDeviceID(driver, pool, device), &c.allocated)
}

// classes lists DeviceClasses for the allocator.
type classes map[string]*resourceapi.DeviceClass

func (cl classes) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(cl))
	for _, dc := range cl {
		out = append(out, dc)
	}
	return out, nil
}

func (cl classes) Get(name string) (*resourceapi.DeviceClass, error) {
	if dc, ok := cl[name]; ok {
		return dc, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// Class is the DeviceClass of that name, or nil.
func (c *Cluster) Class(name string) *resourceapi.DeviceClass { return c.classes[name] }

// res is cpu and memory.
type res struct{ milliCPU, memory int64 }

func (r res) add(o res) res { return res{r.milliCPU + o.milliCPU, r.memory + o.memory} }
func (r res) sub(o res) res { return res{r.milliCPU - o.milliCPU, r.memory - o.memory} }

// Clone is a copy of the cluster to bind more pods in, leaving this one as
// it is, running without a mutation: its nodes, pods and claims are
// copied; the ResourceSlice, DeviceClass and DeviceTaintRule objects, and
// a node's labels and spec, are shared, as the binder only reads them.
func (c *Cluster) Clone() *Cluster {
	out := &Cluster{
		byName:     make(map[string]*Node, len(c.byName)),
		inZone:     make(map[string][]*Node, len(c.inZone)),
		zones:      slices.Clone(c.zones),
		classes:    c.classes,
		extended:   c.extended,
		taintRules: slices.Clone(c.taintRules),
		allocated: structured.AllocatedState{
			AllocatedDevices:         c.allocated.AllocatedDevices.Clone(),
			AllocatedSharedDeviceIDs: c.allocated.AllocatedSharedDeviceIDs.Clone(),
			AggregatedCapacity:       c.allocated.AggregatedCapacity.Clone(),
		},
		owners:       maps.Clone(c.owners),
		antiPods:     make(map[*Pod]bool, len(c.antiPods)),
		affinityPods: make(map[*Pod]bool, len(c.affinityPods)),
		imageNodes:   maps.Clone(c.imageNodes),
		imageSizes:   maps.Clone(c.imageSizes),
		nextStart:    c.nextStart,
		cel:          c.cel,
		weights:      Weights(),
	}
	nodes := make(map[*Node]*Node, len(c.inserted))
	for _, n := range c.inserted {
		obj := *n.Obj
		// Pulled appends to the images: a slice of the copy's own.
		obj.Status.Images = slices.Clone(n.Obj.Status.Images)
		nn := *n
		nn.Obj, nn.Pods = &obj, make([]*Pod, 0, len(n.Pods))
		nn.images, nn.scalarRequested = maps.Clone(n.images), maps.Clone(n.scalarRequested)
		nodes[n] = &nn
		out.byName[nn.Obj.Name] = &nn
		out.inserted = append(out.inserted, &nn)
	}
	for _, n := range c.nodes {
		out.nodes = append(out.nodes, nodes[n])
	}
	for z, in := range c.inZone {
		for _, n := range in {
			out.inZone[z] = append(out.inZone[z], nodes[n])
		}
	}
	for _, n := range c.inserted {
		for _, p := range n.Pods {
			np := *p
			np.Obj = p.Obj.DeepCopy()
			np.Claims = make([]*resourceapi.ResourceClaim, len(p.Claims))
			for i, rc := range p.Claims {
				np.Claims[i] = rc.DeepCopy()
			}
			np.node = nodes[n]
			np.node.Pods = append(np.node.Pods, &np)
			if c.antiPods[p] {
				out.antiPods[&np] = true
			}
			if c.affinityPods[p] {
				out.affinityPods[&np] = true
			}
		}
	}
	return out
}
