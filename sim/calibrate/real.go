package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	resourceslicetracker "k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"

	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// verdict is what kube-scheduler's framework decided for a state's pod.
type verdict struct {
	// feasible are the nodes that passed every filter; scores their
	// weighted totals, by node, and plugins each plugin's weighted part.
	feasible []string
	scores   map[string]int64
	plugins  map[string]map[string]int64
	// best are the feasible nodes of the highest total.
	best []string
	// rejection is why PreFilter rejected the pod, if it did.
	rejection string
	// bound is the node the framework's Bind sent the binding for, read
	// off the fake clientset; devices what its PreBind wrote into the
	// pod's claims.
	bound   string
	devices []string
}

// profile is kube-scheduler's default profile as the scheduler builds it
// from an empty configuration, with NodeResourcesFit's strategy set to
// MostAllocated for that profile.
func profile(prof kube.Profile) (*schedulerapi.KubeSchedulerProfile, error) {
	var cfg configv1.KubeSchedulerConfiguration
	if prof == kube.MostAllocated {
		cfg.Profiles = []configv1.KubeSchedulerProfile{{
			SchedulerName: new(corev1.DefaultSchedulerName),
			PluginConfig: []configv1.PluginConfig{{Name: "NodeResourcesFit", Args: runtime.RawExtension{Object: &configv1.NodeResourcesFitArgs{
				ScoringStrategy: &configv1.ScoringStrategy{Type: configv1.MostAllocated},
			}}}},
		}}
	}
	scheme.Scheme.Default(&cfg)
	var internal schedulerapi.KubeSchedulerConfiguration
	if err := scheme.Scheme.Convert(&cfg, &internal, nil); err != nil {
		return nil, fmt.Errorf("cannot convert the scheduler configuration: %w", err)
	}
	if len(internal.Profiles) != 1 {
		return nil, fmt.Errorf("the scheduler configuration has %d profiles, want 1", len(internal.Profiles))
	}
	return &internal.Profiles[0], nil
}

// schedule runs one scheduling cycle of the state's pod through the
// framework of kube-scheduler v1.37, in process: the in-tree plugins of the
// profile, a snapshot of the state's nodes and pods, the DRA manager over
// informers of a fake clientset holding every object, and the default
// binder, whose binding a reactor records.
func schedule(ctx context.Context, st *state, prof kube.Profile) (*verdict, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	logger := klog.FromContext(ctx)

	objs := st.objects()
	pod := st.pod.DeepCopy()
	objs = append(objs, pod.DeepCopy())
	for _, o := range objs {
		// The assume cache orders an object's versions by it.
		m, ok := o.(metav1.Object)
		if !ok {
			return nil, fmt.Errorf("%T has no object metadata", o)
		}
		m.SetResourceVersion("1")
	}
	client := fake.NewClientset(objs...)
	var mu sync.Mutex
	var bindings []string
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b, ok := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		if !ok {
			return true, nil, errors.New("a binding that is not a Binding")
		}
		mu.Lock()
		defer mu.Unlock()
		bindings = append(bindings, b.Target.Name)
		return true, b, nil
	})

	// As scheduler.New wires the DRA manager.
	factory := informers.NewSharedInformerFactory(client, 0)
	claimCache := assumecache.NewAssumeCache(logger, factory.Resource().V1().ResourceClaims().Informer(), "ResourceClaim", "", nil)
	trackerOpts := resourceslicetracker.Options{
		EnableDeviceTaintRules:   utilfeature.DefaultFeatureGate.Enabled(features.DRADeviceTaintRules),
		EnableConsumableCapacity: utilfeature.DefaultFeatureGate.Enabled(features.DRAConsumableCapacity),
		SliceInformer:            factory.Resource().V1().ResourceSlices(),
		KubeClient:               client,
	}
	if trackerOpts.EnableDeviceTaintRules {
		trackerOpts.TaintInformer = factory.Resource().V1().DeviceTaintRules()
	}
	tracker, err := resourceslicetracker.StartTracker(ctx, trackerOpts)
	if err != nil {
		return nil, fmt.Errorf("cannot start the resource slice tracker: %w", err)
	}
	defer tracker.Stop()
	dra := dynamicresources.NewDRAManager(ctx, claimCache, tracker, factory)

	snapshot := internalcache.NewSnapshot(st.podsCopy(), st.nodesCopy())
	p, err := profile(prof)
	if err != nil {
		return nil, err
	}
	f, err := frameworkruntime.NewFramework(ctx, plugins.NewInTreeRegistry(), p,
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithSnapshotSharedLister(snapshot),
		frameworkruntime.WithSharedDRAManager(dra),
		frameworkruntime.WithEventRecorder(&events.FakeRecorder{}),
	)
	if err != nil {
		return nil, fmt.Errorf("cannot build the framework: %w", err)
	}
	factory.Start(ctx.Done())
	// The informers sync; then the claims reach the assume cache, and
	// through it the DRA manager's record of allocated devices, and the
	// slices the tracker, by event handlers. kube-scheduler waits for the
	// same before its first cycle.
	claimsSynced := claimCache.AddEventHandler(cache.ResourceEventHandlerFuncs{}).HasSynced
	claims := len(st.claims) + len(st.podClaims)
	err = wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, ok := range factory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return false, nil
			}
		}
		return claimsSynced() && tracker.HasSynced() && len(claimCache.List(nil)) == claims, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the informers, the assume cache and the slice tracker did not sync: %w", err)
	}
	defer func() {
		cancel() // Shutdown waits for the informers, which stop on ctx.
		factory.Shutdown()
	}()
	return cycle(ctx, f, snapshot, client, pod, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(bindings)
	})
}

// cycle is schedule_one.go's scheduling and binding cycle for one pod,
// without the queue: PreFilter, Filter on every node, PreScore and Score
// on the feasible ones (when more than one), the framework's pick, then
// Reserve, PreBind and Bind.
func cycle(ctx context.Context, f framework.Framework, snapshot *internalcache.Snapshot, client *fake.Clientset, pod *corev1.Pod, bindings func() []string) (*verdict, error) {
	v := &verdict{scores: map[string]int64{}, plugins: map[string]map[string]int64{}}
	state := framework.NewCycleState()
	feasible, err := filter(ctx, f, snapshot, state, pod, v)
	if err != nil || len(feasible) == 0 {
		return v, err
	}
	host := feasible[0].Node().Name
	v.best = []string{host}
	if len(feasible) > 1 {
		if host, err = score(ctx, f, state, pod, feasible, v); err != nil {
			return nil, err
		}
	}
	if st := f.RunReservePluginsReserve(ctx, state, pod, host); !st.IsSuccess() {
		return nil, fmt.Errorf("reserve on %s: %w", host, st.AsError())
	}
	if st := f.RunPreBindPlugins(ctx, state, pod, host); !st.IsSuccess() {
		return nil, fmt.Errorf("pre-bind on %s: %w", host, st.AsError())
	}
	if st := f.RunBindPlugins(ctx, state, pod, host); !st.IsSuccess() {
		return nil, fmt.Errorf("bind on %s: %w", host, st.AsError())
	}
	b := bindings()
	if len(b) != 1 {
		return nil, fmt.Errorf("the framework sent %d bindings, want 1", len(b))
	}
	v.bound = b[0]
	for _, ref := range pod.Spec.ResourceClaims {
		rc, err := client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *ref.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("cannot read claim %s back: %w", *ref.ResourceClaimName, err)
		}
		if rc.Status.Allocation == nil {
			return nil, fmt.Errorf("pre-bind left claim %s unallocated", rc.Name)
		}
		v.devices = append(v.devices, devices(rc.Status.Allocation)...)
	}
	return v, nil
}

// filter runs PreFilter, then Filter on every node PreFilter leaves, and
// records the feasible nodes (and why the others are not, for a
// disagreement's diagnosis).
func filter(ctx context.Context, f framework.Framework, snapshot *internalcache.Snapshot, state fwk.CycleState, pod *corev1.Pod, v *verdict) ([]fwk.NodeInfo, error) {
	pre, st, _ := f.RunPreFilterPlugins(ctx, state, pod)
	if !st.IsSuccess() {
		if st.IsRejected() {
			v.rejection = st.Message()
			return nil, nil
		}
		return nil, fmt.Errorf("pre-filter: %w", st.AsError())
	}
	all, err := snapshot.NodeInfos().List()
	if err != nil {
		return nil, err
	}
	var feasible []fwk.NodeInfo
	for _, ni := range all {
		if !pre.AllNodes() && !pre.NodeNames.Has(ni.Node().Name) {
			continue
		}
		st := f.RunFilterPlugins(ctx, state, pod, ni)
		switch {
		case st.IsSuccess():
			feasible = append(feasible, ni)
			v.feasible = append(v.feasible, ni.Node().Name)
		case st.Code() == fwk.Error:
			return nil, fmt.Errorf("filter on %s: %w", ni.Node().Name, st.AsError())
		default:
			v.rejection += fmt.Sprintf("[%s: %s %s] ", ni.Node().Name, st.Plugin(), st.Message())
		}
	}
	slices.Sort(v.feasible)
	return feasible, nil
}

// score runs PreScore and Score on the feasible nodes, records every
// node's total and each plugin's part, and the best, and returns the node
// the framework picks (schedule_one.go's heap of scored nodes).
func score(ctx context.Context, f framework.Framework, state fwk.CycleState, pod *corev1.Pod, feasible []fwk.NodeInfo, v *verdict) (string, error) {
	if st := f.RunPreScorePlugins(ctx, state, pod, feasible); !st.IsSuccess() {
		return "", fmt.Errorf("pre-score: %w", st.AsError())
	}
	scores, st := f.RunScorePlugins(ctx, state, pod, feasible)
	if !st.IsSuccess() {
		return "", fmt.Errorf("score: %w", st.AsError())
	}
	var top int64 = -1
	for _, s := range scores {
		v.scores[s.Name] = s.TotalScore
		v.plugins[s.Name] = map[string]int64{}
		for _, ps := range s.Scores {
			v.plugins[s.Name][ps.Name] = ps.Score
		}
		top = max(top, s.TotalScore)
	}
	v.best = nil
	for _, s := range scores {
		if s.TotalScore == top {
			v.best = append(v.best, s.Name)
		}
	}
	slices.Sort(v.best)
	return framework.NewSortedScoredNodes(scores).Pop().Name, nil
}

// devices names an allocation's devices, driver/pool/device.
func devices(a *resourceapi.AllocationResult) []string {
	out := make([]string, 0, len(a.Devices.Results))
	for _, r := range a.Devices.Results {
		out = append(out, r.Driver+"/"+r.Pool+"/"+r.Device)
	}
	return out
}

func (st *state) podsCopy() []*corev1.Pod {
	out := make([]*corev1.Pod, len(st.pods))
	for i, p := range st.pods {
		out[i] = p.DeepCopy()
	}
	return out
}

func (st *state) nodesCopy() []*corev1.Node {
	out := make([]*corev1.Node, len(st.nodes))
	for i, n := range st.nodes {
		out[i] = n.DeepCopy()
	}
	return out
}

// objects are copies of every object of the state but the pod to
// schedule.
func (st *state) objects() []runtime.Object {
	out := copies(nil, st.nodes)
	out = copies(out, st.slices)
	out = copies(out, st.classes)
	out = copies(out, st.sets)
	out = copies(out, st.stss)
	out = copies(out, st.pods)
	out = copies(out, st.claims)
	return copies(out, st.podClaims)
}

func copies[T runtime.Object](out []runtime.Object, objs []T) []runtime.Object {
	for _, o := range objs {
		out = append(out, o.DeepCopyObject())
	}
	return out
}
