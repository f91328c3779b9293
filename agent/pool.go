package agent

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/poolreport"
)

// Pool describes one GPU pool of the cluster: which Nodes are its own and
// the devices each of them has, as the InferenceCluster publishes them.
type Pool struct {
	// Name is the pool's name, status.gpuPools[].name.
	Name string

	// Nodes selects the pool's Nodes. Nil selects those labelled
	// v1alpha1.LabelPool=Name.
	Nodes labels.Selector

	// Devices are the pool's devices as published in
	// status.gpuPools[].devices. Only those claimed through DRA (claim DRA
	// or unset) are counted; Synthetic ones are never in a report.
	Devices []v1alpha1.Device

	// Tolerations are the taints the pool's pods tolerate. A Node tainted
	// NoSchedule or NoExecute is left out of the histogram unless they
	// tolerate every such taint (GPU nodes often carry one that every GPU
	// pod tolerates, such as nvidia.com/gpu:NoSchedule). None: any such
	// taint leaves the node out.
	Tolerations []corev1.Toleration
}

// poolDevice is one DRA device of the pool, ready to count.
type poolDevice struct {
	name   string
	driver string
	class  string
	// count is how many a node has: no free count is reported above it.
	count int64
	// probe is a claim for one device of the class from the driver, which
	// the allocator is asked to allocate, one device at a time.
	probe *resourcev1.ResourceClaim
}

// probeNamespace is the namespace of the claims the allocator is asked to
// allocate. They are never created; the name shows in allocator logs.
const probeNamespace = "fleet-scheduler-agent"

// selector returns the pool's node selector.
func (p Pool) selector() labels.Selector {
	if p.Nodes != nil {
		return p.Nodes
	}
	return labels.SelectorFromSet(labels.Set{v1alpha1.LabelPool: p.Name})
}

// devices checks the pool's description and returns its DRA devices, in
// published order.
func (p Pool) devices() ([]poolDevice, error) {
	if p.Name == "" && p.Nodes == nil {
		return nil, fmt.Errorf("pool has no name and no node selector")
	}
	out := make([]poolDevice, 0, len(p.Devices))
	seen := make(map[string]bool, len(p.Devices))
	for i, d := range p.Devices {
		field := fmt.Sprintf("devices[%d]", i)
		if d.Name == "" {
			return nil, fmt.Errorf("%s.name: empty", field)
		}
		field = fmt.Sprintf("devices[%s]", d.Name)
		if seen[d.Name] {
			return nil, fmt.Errorf("%s: listed twice", field)
		}
		seen[d.Name] = true
		switch d.Claim {
		case "", v1alpha1.ClaimDRA:
		case v1alpha1.ClaimSynthetic:
			continue
		default:
			return nil, fmt.Errorf("%s.claim: %q is neither %s nor %s", field, d.Claim, v1alpha1.ClaimDRA, v1alpha1.ClaimSynthetic)
		}
		if errs := validation.IsDNS1123Subdomain(d.Driver); len(errs) > 0 {
			return nil, fmt.Errorf("%s.driver: %q is not a DRA driver name: %s", field, d.Driver, strings.Join(errs, "; "))
		}
		if d.DeviceClassName == "" {
			return nil, fmt.Errorf("%s.deviceClassName: empty: a DRA device needs the DeviceClass its claims request", field)
		}
		var count int64
		if d.Count != nil {
			count = *d.Count
		}
		if count < 0 || count > poolreport.MaxCount {
			return nil, fmt.Errorf("%s.count: %d is not between 0 and %d", field, count, poolreport.MaxCount)
		}
		out = append(out, poolDevice{name: d.Name, driver: d.Driver, class: d.DeviceClassName, count: count, probe: probe(d)})
	}
	if len(out) > poolreport.MaxFreePerBucket {
		return nil, fmt.Errorf("devices: %d DRA devices, more than the %d a bucket can list", len(out), poolreport.MaxFreePerBucket)
	}
	return out, nil
}

// probe is a claim for one whole device of the device's class from its
// driver: what a pod claiming one such device asks the scheduler for. The
// driver, a DNS subdomain, needs no escaping in a CEL string.
func probe(d v1alpha1.Device) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: probeNamespace, Name: "probe-" + d.Name},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "device",
			Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: d.DeviceClassName,
				AllocationMode:  resourcev1.DeviceAllocationModeExactCount,
				Count:           1,
				Selectors: []resourcev1.DeviceSelector{{
					CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", d.Driver)},
				}},
			},
		}}}},
	}
}
