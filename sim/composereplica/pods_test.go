package composereplica

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

// podView is what a test checks of a pod.
type podView struct {
	Name, Owner, Workload, Template, Gang string
	Picker                                bool
	Labels                                map[string]string
	Pool                                  string
	Tolerates                             bool
}

func viewPods(t *testing.T, pods []Pod) []podView {
	t.Helper()
	out := make([]podView, 0, len(pods))
	for _, p := range pods {
		v := podView{
			Name: p.Pod.Name, Owner: p.Owner.Kind + "/" + p.Owner.Name, Workload: p.Workload, Gang: p.Gang,
			Picker: p.EndpointPicker, Labels: p.Pod.Labels, Pool: p.Pod.Spec.NodeSelector[v1alpha1.LabelPool],
		}
		if p.ClaimTemplate != nil {
			v.Template = p.ClaimTemplate.Name
		}
		for _, tol := range p.Pod.Spec.Tolerations {
			if tol.Key == v1alpha1.GPUTaintKey && tol.Operator == corev1.TolerationOpExists && tol.Effect == corev1.TaintEffectNoSchedule {
				v.Tolerates = true
			}
		}
		out = append(out, v)
	}
	return out
}

func TestPods(t *testing.T) {
	const (
		main      = "qwen-1a2b3-main-1d4fc"
		mainClaim = "qwen-1a2b3-main-standalone-devices-614ea"
	)
	standalone := fixture.PinnedStandalone("main", "l4", fixture.Stamped(1))
	standalone.Copies = new(int64(2))
	cases := map[string]struct {
		reason  string
		replica *v1alpha1.ModelReplica
		// hash is the pod-template-hash of the Deployment's pods, which the
		// test does not recompute.
		want func(hash, pickerHash, gangKey string) []podView
	}{
		"Standalone": {
			reason:  "a Deployment of two copies: two pods of its ReplicaSet, selected by v0.3's workload label, pinned, tolerating, claiming; the picker's one pod, neither pinned nor tolerating",
			replica: replica(standalone).Obj(),
			want: func(hash, pickerHash, _ string) []podView {
				labels := map[string]string{v1alpha1.LabelServing: "qwen-1a2b3", v1alpha1.LabelWorkload: main, "pod-template-hash": hash}
				return []podView{
					{Name: main + "-" + hash + "-0", Owner: "ReplicaSet/" + main + "-" + hash, Workload: main, Template: mainClaim, Labels: labels, Pool: "l4", Tolerates: true},
					{Name: main + "-" + hash + "-1", Owner: "ReplicaSet/" + main + "-" + hash, Workload: main, Template: mainClaim, Labels: labels, Pool: "l4", Tolerates: true},
					{
						Name: "qwen-1a2b3-epp-" + pickerHash + "-0", Owner: "ReplicaSet/qwen-1a2b3-epp-" + pickerHash, Workload: "qwen-1a2b3-epp", Picker: true,
						Labels: map[string]string{"app": "qwen-1a2b3-epp", "pod-template-hash": pickerHash},
					},
				}
			},
		},
		"Gang": {
			reason:  "a LeaderWorkerSet of one copy and two workers: a leader and two workers, all labelled by LeaderWorkerSet's name, only the leader by v0.3's serving and role labels",
			replica: replica(fixture.PinnedGang("main", "h100", 2, fixture.Stamped(8))).Obj(),
			want: func(_, pickerHash, key string) []podView {
				lws := func(i string) map[string]string {
					return map[string]string{v1alpha1.LabelLWSName: main, LabelLWSGroupIndex: "0", LabelLWSWorkerIndex: i, LabelLWSGroupKey: key}
				}
				leader := lws("0")
				leader[v1alpha1.LabelServing], leader[v1alpha1.LabelLWSRole] = "qwen-1a2b3", "leader"
				return []podView{
					{Name: main + "-0", Owner: "StatefulSet/" + main, Workload: main, Gang: key, Template: "qwen-1a2b3-main-leader-devices-b6d93", Labels: leader, Pool: "h100", Tolerates: true},
					{Name: main + "-0-1", Owner: "StatefulSet/" + main + "-0", Workload: main, Gang: key, Template: "qwen-1a2b3-main-worker-devices-dc662", Labels: lws("1"), Pool: "h100", Tolerates: true},
					{Name: main + "-0-2", Owner: "StatefulSet/" + main + "-0", Workload: main, Gang: key, Template: "qwen-1a2b3-main-worker-devices-dc662", Labels: lws("2"), Pool: "h100", Tolerates: true},
					{
						Name: "qwen-1a2b3-epp-" + pickerHash + "-0", Owner: "ReplicaSet/qwen-1a2b3-epp-" + pickerHash, Workload: "qwen-1a2b3-epp", Picker: true,
						Labels: map[string]string{"app": "qwen-1a2b3-epp", "pod-template-hash": pickerHash},
					},
				}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rs, err := Compose(tc.replica, Options{})
			if err != nil {
				t.Fatal(err)
			}
			pods, err := Pods(rs)
			if err != nil {
				t.Fatal(err)
			}
			var hash, pickerHash, key string
			for _, p := range pods {
				switch {
				case p.EndpointPicker:
					pickerHash = p.Pod.Labels["pod-template-hash"]
				case p.Gang != "":
					key = p.Gang
				default:
					hash = p.Pod.Labels["pod-template-hash"]
				}
			}
			if diff := cmp.Diff(tc.want(hash, pickerHash, key), viewPods(t, pods)); diff != "" {
				t.Errorf("%s\nPods(...): -want, +got:\n%s", tc.reason, diff)
			}
			for _, p := range pods {
				for _, c := range p.Pod.Spec.Containers {
					if len(c.Resources.Requests) > 0 || len(c.Resources.Limits) > 0 {
						t.Errorf("pod %s container %s requests %v, limits %v; v0.3's pods request nothing", p.Pod.Name, c.Name, c.Resources.Requests, c.Resources.Limits)
					}
				}
			}
		})
	}
}

func TestPodsSized(t *testing.T) {
	sizing := &Sizing{BaseCPU: resource.MustParse("2"), BaseMemory: resource.MustParse("8Gi"), PerDeviceCPU: resource.MustParse("2"), PerDeviceMemory: resource.MustParse("24Gi")}
	leader := fixture.PinnedGang("main", "h100", 1, fixture.Stamped(4))
	leader.Members[0].DeviceRequests = nil // a coordinator-only leader claims nothing
	rs, err := Compose(replica(leader).Obj(), Options{Sizing: sizing})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := Pods(rs)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]corev1.ResourceList{}
	for _, p := range pods {
		got[p.Pod.Name] = p.Pod.Spec.Containers[0].Resources.Requests
	}
	want := map[string]corev1.ResourceList{
		"qwen-1a2b3-main-1d4fc-0":   nil, // claims nothing: v0.3 gives it no resources at all
		"qwen-1a2b3-main-1d4fc-0-1": {corev1.ResourceCPU: resource.MustParse("10"), corev1.ResourceMemory: resource.MustParse("104Gi")},
	}
	for name, p := range got {
		if _, ok := want[name]; !ok {
			if len(p) > 0 {
				t.Errorf("pod %s (the endpoint picker) requests %v, want nothing", name, p)
			}
			delete(got, name)
		}
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("requests by pod: -want, +got:\n%s", diff)
	}
}

func TestClaim(t *testing.T) {
	rs, err := Compose(replica(fixture.PinnedStandalone("main", "l4", fixture.Stamped(2))).Obj(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := Pods(rs)
	if err != nil {
		t.Fatal(err)
	}
	p := pods[0]
	c := p.Claim()
	if c == nil {
		t.Fatal("Claim() of a claiming pod is nil")
	}
	if got, want := c.Name, p.Pod.Name+"-devices"; got != want {
		t.Errorf("claim name: want %s, got %s", want, got)
	}
	if got := c.Spec.Devices.Requests; len(got) != 1 || got[0].Exactly == nil || got[0].Exactly.Count != 2 {
		t.Errorf("claim requests: want one request of 2 devices, got %+v", got)
	}
	if ref := c.OwnerReferences; len(ref) != 1 || ref[0].UID != p.Pod.UID || ref[0].Controller == nil || !*ref[0].Controller {
		t.Errorf("claim owner: want the pod as controller, got %+v", ref)
	}
	st := p.Pod.Status.ResourceClaimStatuses
	if len(st) != 1 || st[0].Name != "devices" || st[0].ResourceClaimName == nil || *st[0].ResourceClaimName != c.Name {
		t.Errorf("pod status: want the claim recorded under devices, got %+v", st)
	}
	if picker := pods[len(pods)-1]; picker.Claim() != nil {
		t.Errorf("the endpoint picker claims nothing, got a claim")
	}
}
