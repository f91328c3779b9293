package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// podVerdict is what kube-scheduler decided for one pod of a state.
type podVerdict struct {
	// scored are the nodes the framework scored, in name order (the
	// feasible nodes its search kept), or its one feasible node; scores
	// their weighted totals and plugins each plugin's weighted part,
	// as its cycle logged them.
	scored  []string
	scores  map[string]int64
	plugins map[string]map[string]int64
	// best are the scored nodes of the highest total, in name order.
	best []string
	// evaluated is how many nodes its search went through
	// (ScheduleResult.EvaluatedNodes); 0 when the pod did not fit.
	evaluated int
	// bound is the node the framework bound the pod to ("" when it did
	// not fit); devices what its PreBind wrote into the pod's claims,
	// driver/pool/device, the claim made for its extended resources last.
	bound   string
	devices []string
	// rejection is why the pod did not fit, as the framework says it.
	rejection string
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

// schedule runs kube-scheduler v1.37.2 in process on a state: a Scheduler
// from scheduler.New over informers of a fake clientset (the in-tree
// registry, the profile, its own cache, queue, DRA manager and binder),
// the state's nodes created one after another in the state's order (the
// order its node tree lists them in), then the state's pods to schedule,
// one at a time, each through ScheduleOne: its queue's Pop, the
// scheduling cycle (schedulePod's search with its nextStartNodeIndex and
// percentageOfNodesToScore, and its pick) and the binding cycle (Reserve,
// PreBind, Bind), which a reactor on the clientset answers as an API
// server would. A pod that does not fit is deleted before the next.
func schedule(ctx context.Context, st *state, prof kube.Profile, parallelism int32) ([]podVerdict, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &kubeRun{st: st, bound: make(chan string, 1), failed: make(chan string, 1)}
	if err := r.start(ctx, prof, parallelism); err != nil {
		return nil, err
	}
	defer r.stop()
	var out []podVerdict
	for i := range st.incoming {
		v, err := r.scheduleOne(ctx, i)
		if err != nil {
			return nil, fmt.Errorf("pod %s: %w", st.incoming[i].pod.Name, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// kubeRun is one state's kube-scheduler.
type kubeRun struct {
	st      *state
	client  *fake.Clientset
	factory informers.SharedInformerFactory
	sched   *scheduler.Scheduler
	cancel  context.CancelFunc
	// snapshot is the scheduler's snapshot of its cache, which filter
	// refreshes.
	snapshot *internalcache.Snapshot

	// result is the last ScheduleResult, or the error schedulePod
	// returned; sink the scores its cycle logged.
	mu     sync.Mutex
	result scheduler.ScheduleResult
	err    error
	sink   *scoreSink
	// bound gets the node of each binding; failed the message of each
	// failure.
	bound, failed chan string
	names         int
}

func (r *kubeRun) start(ctx context.Context, prof kube.Profile, parallelism int32) error {
	objs := r.st.apiObjects()
	for _, o := range objs {
		// The assume cache orders an object's versions by it.
		if m, ok := o.(metav1.Object); ok {
			m.SetResourceVersion("1")
		}
	}
	// NewClientset would track managed fields: many times slower.
	r.client = fake.NewSimpleClientset(objs...)
	r.reactors() //nolint:contextcheck // A reactor is given no context: see reactors.
	r.factory = informers.NewSharedInformerFactory(r.client, 0)
	p, err := profile(prof)
	if err != nil {
		return err
	}
	// The scheduler's own logger stays quiet; each cycle's context
	// carries the sink that reads its scores.
	quiet := klog.NewContext(ctx, logr.Discard())
	schedCtx, cancel := context.WithCancel(quiet)
	r.cancel = cancel
	r.snapshot = internalcache.NewEmptySnapshot()
	r.sched, err = scheduler.New(schedCtx, r.client, r.factory, nil,
		func(string) events.EventRecorderLogger { return &events.FakeRecorder{} },
		scheduler.WithProfiles(*p), scheduler.WithParallelism(parallelism), scheduler.WithNodeInfoSnapshot(r.snapshot))
	if err != nil {
		return fmt.Errorf("cannot build the scheduler: %w", err)
	}
	schedulePod := r.sched.SchedulePod
	r.sched.SchedulePod = func(ctx context.Context, f framework.Framework, state fwk.CycleState, pi *framework.QueuedPodInfo) (scheduler.ScheduleResult, error) {
		res, err := schedulePod(ctx, f, state, pi)
		r.mu.Lock()
		r.result, r.err = res, err
		r.mu.Unlock()
		return res, err
	}
	failure := r.sched.FailureHandler
	r.sched.FailureHandler = func(ctx context.Context, f framework.Framework, pi *framework.QueuedPodInfo, status *fwk.Status, ni *fwk.NominatingInfo, start time.Time) {
		failure(ctx, f, pi, status, ni, start)
		r.failed <- status.Message()
	}
	r.factory.Start(schedCtx.Done())
	for typ, ok := range r.factory.WaitForCacheSync(schedCtx.Done()) {
		if !ok {
			return fmt.Errorf("the informer of %v did not sync", typ)
		}
	}
	// WaitForHandlersSync polls every 100ms after its first look; a state
	// takes less.
	if err := r.until(ctx, "the scheduler's handlers synced", func() bool {
		once, cancel := context.WithTimeout(schedCtx, time.Millisecond)
		defer cancel()
		return r.sched.WaitForHandlersSync(once) == nil
	}); err != nil {
		return err
	}
	r.sched.SchedulingQueue.Run(klog.FromContext(quiet))
	// Nodes one at a time, in order: the scheduler's node tree lists them
	// in the order it learns of them, zone by zone.
	for i, n := range r.st.nodes {
		n = n.DeepCopy()
		n.ResourceVersion = "1"
		if _, err := r.client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("cannot create node %s: %w", n.Name, err)
		}
		// The fake watch buffers 100 events and panics beyond.
		if i%50 == 49 {
			store := r.factory.Core().V1().Nodes().Informer().GetStore()
			if err := r.until(ctx, "the node informer caught up", func() bool { return len(store.ListKeys()) == i+1 }); err != nil {
				return err
			}
		}
	}
	// The cache makes a node's entry for its pods before the node itself
	// arrives: every entry must have its node.
	return r.until(ctx, "the scheduler's cache holds every node and bound pod", func() bool {
		pods, err := r.sched.Cache.PodCount()
		if err != nil || pods != len(r.st.pods) || r.sched.Cache.NodeCount() != len(r.st.nodes) {
			return false
		}
		for _, ni := range r.sched.Cache.Dump().Nodes {
			if ni.Node() == nil {
				return false
			}
		}
		return true
	})
}

func (r *kubeRun) stop() {
	r.cancel()
	r.sched.SchedulingQueue.Close()
	r.factory.Shutdown()
}

// until polls a condition for up to 30 seconds.
func (r *kubeRun) until(ctx context.Context, what string, cond func() bool) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Microsecond, 30*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		return fmt.Errorf("waiting until %s: %w", what, err)
	}
	return nil
}

// reactors answer the clientset as an API server would where the fake
// tracker does not: a binding sets the pod's node, a claim created with a
// generated name gets one, and a device with binding conditions has them
// met when its claim is allocated (a driver attaching at once).
func (r *kubeRun) reactors() {
	r.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b, ok := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		if !ok {
			return true, nil, errors.New("a binding that is not a Binding")
		}
		obj, err := r.client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		stored, ok := obj.(*corev1.Pod)
		if !ok {
			return true, nil, fmt.Errorf("cannot bind %s/%s: the tracker holds a %T", b.Namespace, b.Name, obj)
		}
		pod := stored.DeepCopy()
		pod.Spec.NodeName = b.Target.Name
		if err := r.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), pod, b.Namespace); err != nil {
			return true, nil, err
		}
		r.bound <- b.Target.Name
		return true, b, nil
	})
	r.client.PrependReactor("create", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		rc, ok := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceClaim)
		if !ok {
			return false, nil, nil
		}
		// The assume cache orders an object's versions by it; the fake
		// tracker leaves it as given.
		if rc.ResourceVersion == "" {
			rc.ResourceVersion = "1"
		}
		if rc.Name != "" || rc.GenerateName == "" {
			return false, nil, nil
		}
		r.names++
		rc.Name = rc.GenerateName + strconv.Itoa(r.names)
		// The claim made for a pod's extended resources: PreBind looks
		// for it in the assume cache at once, then every second. An API
		// server may answer after the watch delivered it; this one does.
		if err := r.client.Tracker().Create(resourceapi.SchemeGroupVersion.WithResource("resourceclaims"), rc, rc.Namespace); err != nil {
			return true, nil, err
		}
		dra := r.sched.Profiles[corev1.DefaultSchedulerName].SharedDRAManager()
		// A reactor is given no context; until gives up after its timeout.
		err := r.until(context.Background(), "the assume cache holds the claim made for extended resources", func() bool {
			_, err := dra.ResourceClaims().Get(rc.Namespace, rc.Name)
			return err == nil
		})
		return true, rc.DeepCopy(), err
	})
	r.client.PrependReactor("update", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "status" {
			return false, nil, nil
		}
		rc, ok := a.(k8stesting.UpdateAction).GetObject().(*resourceapi.ResourceClaim)
		if ok && rc.Status.Allocation != nil {
			rc.Status.Devices = r.st.attached(rc.Status.Allocation, rc.Status.Devices)
		}
		return false, nil, nil
	})
}

// scheduleOne creates the state's i-th pod to schedule, after its claims,
// and runs one ScheduleOne for it.
func (r *kubeRun) scheduleOne(ctx context.Context, i int) (podVerdict, error) {
	in := r.st.incoming[i]
	dra := r.sched.Profiles[corev1.DefaultSchedulerName].SharedDRAManager()
	for _, rc := range in.claims {
		if _, err := r.client.ResourceV1().ResourceClaims(rc.Namespace).Create(ctx, rc.DeepCopy(), metav1.CreateOptions{}); err != nil {
			return podVerdict{}, fmt.Errorf("cannot create claim %s: %w", rc.Name, err)
		}
	}
	if err := r.until(ctx, "the DRA manager holds the pod's claims", func() bool {
		for _, rc := range in.claims {
			if _, err := dra.ResourceClaims().Get(rc.Namespace, rc.Name); err != nil {
				return false
			}
		}
		return true
	}); err != nil {
		return podVerdict{}, err
	}
	pod := in.pod.DeepCopy()
	pod.ResourceVersion = "1"
	if _, err := r.client.CoreV1().Pods(in.pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return podVerdict{}, fmt.Errorf("cannot create the pod: %w", err)
	}
	if err := r.until(ctx, "the pod is the only one pending", func() bool {
		pending, _ := r.sched.SchedulingQueue.PendingPods()
		return len(pending) == 1 && pending[0].Name == in.pod.Name
	}); err != nil {
		return podVerdict{}, err
	}
	r.sink = &scoreSink{plugins: map[string]map[string]int64{}, totals: map[string]int64{}}
	r.mu.Lock()
	r.result, r.err = scheduler.ScheduleResult{}, nil
	r.mu.Unlock()
	r.sched.ScheduleOne(klog.NewContext(ctx, logr.New(r.sink)))

	v := podVerdict{scores: map[string]int64{}, plugins: map[string]map[string]int64{}}
	select {
	case v.bound = <-r.bound:
	case msg := <-r.failed:
		v.rejection = msg
	case <-time.After(60 * time.Second):
		return v, errors.New("neither bound nor failed after a minute")
	case <-ctx.Done():
		return v, ctx.Err()
	}
	r.mu.Lock()
	res, serr := r.result, r.err
	r.mu.Unlock()
	switch {
	case v.bound != "" && res.SuggestedHost != v.bound:
		return v, fmt.Errorf("bound to %s, but the cycle suggested %s", v.bound, res.SuggestedHost)
	case v.bound == "" && serr == nil:
		return v, fmt.Errorf("the binding cycle failed: %s", v.rejection)
	}
	v.evaluated = res.EvaluatedNodes
	r.sink.verdict(&v)
	if v.bound == "" {
		err := r.client.CoreV1().Pods(in.pod.Namespace).Delete(ctx, in.pod.Name, metav1.DeleteOptions{})
		if err != nil {
			return v, fmt.Errorf("cannot delete the pod that did not fit: %w", err)
		}
		return v, r.until(ctx, "the pod that did not fit left the queue", func() bool {
			pending, _ := r.sched.SchedulingQueue.PendingPods()
			return len(pending) == 0
		})
	}
	if res.FeasibleNodes == 1 {
		v.scored, v.best = []string{v.bound}, []string{v.bound}
	}
	var err error
	v.devices, err = r.devices(ctx, in.pod)
	return v, err
}

// devices reads back what PreBind wrote into the pod's claims and into
// the claim it made for the pod's extended resources.
func (r *kubeRun) devices(ctx context.Context, p *corev1.Pod) ([]string, error) {
	var names []string
	for _, in := range r.st.incoming {
		if in.pod.Name == p.Name {
			for _, rc := range in.claims {
				names = append(names, rc.Name)
			}
		}
	}
	pod, err := r.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("cannot read the pod back: %w", err)
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		names = append(names, st.ResourceClaimName)
	}
	var out []string
	for _, name := range names {
		rc, err := r.client.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("cannot read claim %s back: %w", name, err)
		}
		if rc.Status.Allocation == nil {
			return nil, fmt.Errorf("pre-bind left claim %s unallocated", rc.Name)
		}
		out = append(out, devices(rc.Status.Allocation)...)
	}
	return out, nil
}

// timedOut is filter's answer for a node where the DynamicResources
// filter gave up.
const timedOut = "DynamicResources: timed out trying to allocate devices"

// scoreSink is a logr sink that reads the scores kube-scheduler's
// prioritizeNodes logs at verbosity 10 ("Plugin scored node for pod",
// "Calculated node's final score for pod"): each plugin's weighted score
// of each node, and the totals. It enables level 10 alone, so that the
// cycle logs nothing else.
type scoreSink struct {
	mu      sync.Mutex
	plugins map[string]map[string]int64
	totals  map[string]int64
}

func (s *scoreSink) Init(logr.RuntimeInfo)          {}
func (s *scoreSink) Enabled(level int) bool         { return level == 10 }
func (s *scoreSink) Error(error, string, ...any)    {}
func (s *scoreSink) WithValues(...any) logr.LogSink { return s }
func (s *scoreSink) WithName(string) logr.LogSink   { return s }
func (s *scoreSink) Info(_ int, msg string, kv ...any) {
	var node, plugin string
	var score int64
	var scored bool
	for i := 0; i+1 < len(kv); i += 2 {
		switch kv[i] {
		case "node":
			node, _ = kv[i+1].(string)
		case "plugin":
			plugin, _ = kv[i+1].(string)
		case "score":
			score, scored = kv[i+1].(int64)
		}
	}
	if node == "" || !scored {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch msg {
	case "Plugin scored node for pod":
		if s.plugins[node] == nil {
			s.plugins[node] = map[string]int64{}
		}
		s.plugins[node][plugin] = score
	case "Calculated node's final score for pod":
		s.totals[node] = score
	}
}

// verdict records the scores the sink read, and the best nodes.
func (s *scoreSink) verdict(v *podVerdict) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var top int64 = -1
	for n, total := range s.totals {
		v.scored = append(v.scored, n)
		v.scores[n] = total
		v.plugins[n] = s.plugins[n]
		top = max(top, total)
	}
	slices.Sort(v.scored)
	for _, n := range v.scored {
		if v.scores[n] == top {
			v.best = append(v.best, n)
		}
	}
}

// devices names an allocation's devices, driver/pool/device, with what a
// share of a device consumes of its capacity ({memory=4Gi,...}).
func devices(a *resourceapi.AllocationResult) []string {
	out := make([]string, 0, len(a.Devices.Results))
	for _, r := range a.Devices.Results {
		d := r.Driver + "/" + r.Pool + "/" + r.Device
		if len(r.ConsumedCapacity) > 0 {
			parts := make([]string, 0, len(r.ConsumedCapacity))
			for _, name := range slices.Sorted(maps.Keys(r.ConsumedCapacity)) {
				q := r.ConsumedCapacity[name]
				parts = append(parts, string(name)+"="+q.String())
			}
			d += "{" + strings.Join(parts, ",") + "}"
		}
		out = append(out, d)
	}
	return out
}

// filter runs the framework's PreFilter and then Filter on every node (or
// the named nodes only) for a pod that is not created, its claims created
// first (and left), as schedule_one.go's findNodesThatPassFilters runs
// them on each node, and returns why each node does not fit ("" where it
// fits), as the plugin that rejected it says.
func (r *kubeRun) filter(ctx context.Context, pod *corev1.Pod, claims []*resourceapi.ResourceClaim, only ...string) (map[string]string, error) {
	dra := r.sched.Profiles[corev1.DefaultSchedulerName].SharedDRAManager()
	for _, rc := range claims {
		rc = rc.DeepCopy()
		rc.ResourceVersion = "1"
		if _, err := r.client.ResourceV1().ResourceClaims(rc.Namespace).Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("cannot create claim %s: %w", rc.Name, err)
		}
	}
	if err := r.until(ctx, "the DRA manager holds the probe's claims", func() bool {
		for _, rc := range claims {
			if _, err := dra.ResourceClaims().Get(rc.Namespace, rc.Name); err != nil {
				return false
			}
		}
		return true
	}); err != nil {
		return nil, err
	}
	f := r.sched.Profiles[corev1.DefaultSchedulerName]
	logger := klog.FromContext(ctx)
	if err := r.sched.Cache.UpdateSnapshot(logger, r.snapshot); err != nil {
		return nil, fmt.Errorf("cannot snapshot the cache: %w", err)
	}
	nodes, err := r.snapshot.NodeInfos().List()
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(nodes))
	state := framework.NewCycleState()
	pre, st, _ := f.RunPreFilterPlugins(ctx, state, pod)
	if !st.IsSuccess() {
		if !st.IsRejected() {
			return nil, fmt.Errorf("pre-filter: %w", st.AsError())
		}
		for _, ni := range nodes {
			out[ni.Node().Name] = st.Plugin() + ": " + st.Message()
		}
		return out, nil
	}
	for _, ni := range nodes {
		name := ni.Node().Name
		if len(only) > 0 && !slices.Contains(only, name) {
			continue
		}
		if !pre.AllNodes() && !pre.NodeNames.Has(name) {
			out[name] = "PreFilter: not among its nodes"
			continue
		}
		st := f.RunFilterPluginsWithNominatedPods(ctx, state, pod, ni)
		switch {
		case st.IsSuccess():
			out[name] = ""
		case st.Code() == fwk.Error && strings.Contains(st.Message(), "timed out trying to allocate devices"):
			// Its DynamicResources filter gives up after its filter
			// timeout, as it would on a cluster: no answer.
			out[name] = timedOut
		case st.Code() == fwk.Error:
			return nil, fmt.Errorf("filter on %s: %w", name, st.AsError())
		default:
			out[name] = st.Plugin() + ": " + st.Message()
		}
	}
	return out, nil
}
