package controller

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	fsv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/cluster"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/metrics"
)

const (
	gpuDriver = "gpu.example.com"
	gpuClass  = "gpu.example.com"
	nicDriver = "nic.example.com"
)

// t0 is the fixtures' time: the proven time and the clock start.
var t0 = time.Date(2026, 10, 20, 20, 6, 0, 400_000_000, time.UTC)

// rv hands out increasing resourceVersions, as the API server would.
var rv struct {
	sync.Mutex

	n int
}

func nextRV() string {
	rv.Lock()
	defer rv.Unlock()
	rv.n++
	return strconv.Itoa(rv.n)
}

// env is a cluster view, a writer that stores what it writes back into the
// view, and the clock and proven time the reconcilers see.
type env struct {
	t       testing.TB
	cluster *cluster.Cluster
	writer  *recorder
	clock   *clocktesting.FakeClock
	proven  time.Time
	metrics *metrics.Metrics
}

func newEnv(tb testing.TB, namespaces ...string) *env {
	tb.Helper()
	if len(namespaces) == 0 {
		namespaces = []string{"default"}
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1alpha1.PoolObservationResource:    "PoolObservationList",
		v1alpha1.ReplicaObservationResource: "ReplicaObservationList",
	})
	c, err := cluster.New(fake.NewClientset(), dyn, cluster.Options{Namespaces: namespaces, TaintRules: true})
	if err != nil {
		tb.Fatal(err)
	}
	e := &env{t: tb, cluster: c, clock: clocktesting.NewFakeClock(t0), proven: t0}
	e.metrics = metrics.New(func() time.Time { return e.proven })
	e.writer = &recorder{env: e}
	return e
}

func (e *env) add(objs ...any) {
	e.t.Helper()
	for _, o := range objs {
		if m, ok := o.(metav1.Object); ok {
			m.SetResourceVersion(nextRV())
		}
	}
	if err := e.cluster.Inject(objs...); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) remove(objs ...any) {
	e.t.Helper()
	if err := e.cluster.Remove(objs...); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) pools() *Pools {
	return NewPools(e.cluster, e.writer, func() time.Time { return e.proven }, e.clock, logr.Discard(), e.metrics, 50*time.Second)
}

func (e *env) replicas() *Replicas {
	return NewReplicas(e.cluster, e.writer, e.clock, logr.Discard(), e.metrics)
}

// recorder writes statuses into the view, as the API server and the
// informers would, and counts them.
type recorder struct {
	env    *env
	writes int
	fail   error
}

func (r *recorder) WriteStatus(_ context.Context, _ schema.GroupVersionResource, obj *unstructured.Unstructured, status any) error {
	if r.fail != nil {
		return r.fail
	}
	s, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return err
	}
	u := obj.DeepCopy()
	u.Object["status"] = s
	r.writes++
	r.env.add(u)
	return nil
}

// poolStatus reads a PoolObservation's status from the view.
func (e *env) poolStatus(name string) v1alpha1.PoolObservationStatus {
	e.t.Helper()
	for _, u := range e.cluster.PoolObservations() {
		if u.GetName() == name {
			po, err := cluster.PoolObservationOf(u)
			if err != nil {
				e.t.Fatal(err)
			}
			return po.Status
		}
	}
	e.t.Fatalf("no PoolObservation %s", name)
	return v1alpha1.PoolObservationStatus{}
}

// replicaStatus reads a ReplicaObservation's status from the view.
func (e *env) replicaStatus(key string) v1alpha1.ReplicaObservationStatus {
	e.t.Helper()
	u := e.cluster.ReplicaObservation(key)
	if u == nil {
		e.t.Fatalf("no ReplicaObservation %s", key)
	}
	ro, err := cluster.ReplicaObservationOf(u)
	if err != nil {
		e.t.Fatal(err)
	}
	return ro.Status
}

// node is a Ready node of the pool.
func node(name, pool string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{fsv1alpha1.LabelPool: pool}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

// gpuSlice is the node's slice of n GPUs, gpu-0 to gpu-<n-1>, of the
// driver, the only slice of its resource pool, named after the node.
func gpuSlice(node, driver string, n int) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver},
		Spec: resourcev1.ResourceSliceSpec{
			Driver: driver, NodeName: &node,
			Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
		},
	}
	for i := range n {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-%d", i)})
	}
	return s
}

func class(name, driver string) *resourcev1.DeviceClass {
	return &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)},
		}}},
	}
}

// claim holds the devices of the node's resource pool.
func claim(name, node string, devices ...string) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	c.Status.Allocation = &resourcev1.AllocationResult{}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourcev1.DeviceRequestAllocationResult{
			Request: "gpu", Driver: gpuDriver, Pool: node, Device: d,
		})
	}
	return c
}

// poolObservation is the pool's PoolObservation, of devices of the GPU
// class, 8 a node, unless given.
func poolObservation(name string, devices ...map[string]any) *unstructured.Unstructured {
	if devices == nil {
		devices = []map[string]any{{"name": "gpu", "driver": gpuDriver, "deviceClassName": gpuClass, "count": int64(8)}}
	}
	d := make([]any, 0, len(devices))
	for _, x := range devices {
		d = append(d, x)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"devices": d}}}
	u.SetAPIVersion(v1alpha1.Group + "/" + v1alpha1.Version)
	u.SetKind(v1alpha1.KindPoolObservation)
	u.SetName(name)
	u.SetGeneration(1)
	return u
}

func replicaObservation(namespace, name string, pods int64, selectors ...map[string]any) *unstructured.Unstructured {
	s := make([]any, 0, len(selectors))
	for _, x := range selectors {
		s = append(s, x)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"selectors": s, "pods": pods}}}
	u.SetAPIVersion(v1alpha1.Group + "/" + v1alpha1.Version)
	u.SetKind(v1alpha1.KindReplicaObservation)
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetGeneration(1)
	return u
}

// pod is a pod of the namespace with the labels, bound to the node
// unless it is empty.
func pod(namespace, name, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}
