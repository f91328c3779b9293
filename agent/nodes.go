package agent

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// unschedulable says why a new pod of the pool cannot land on the node, or
// returns "" when it can, as far as the Node object tells: it is Ready, not
// cordoned, and has no NoSchedule or NoExecute taint the pool's pods do not
// tolerate. Whether its devices can be had is for the slices and the
// allocator to say.
func unschedulable(n *corev1.Node, tolerations []corev1.Toleration) string {
	if !ready(n) {
		return "not Ready"
	}
	if n.Spec.Unschedulable {
		return "cordoned"
	}
	for i := range n.Spec.Taints {
		t := &n.Spec.Taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !tolerated(t, tolerations) {
			return fmt.Sprintf("untolerated taint %s", t.ToString())
		}
	}
	return ""
}

// ready is whether the node's Ready condition is True. A node that reports
// no Ready condition is not ready, as kube-scheduler's node lifecycle sees it.
func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func tolerated(t *corev1.Taint, tolerations []corev1.Toleration) bool {
	for i := range tolerations {
		// The comparison operators (Gt, Lt) are alpha and off by default
		// in Kubernetes 1.37.
		if tolerations[i].ToleratesTaint(klog.Background(), t, false) {
			return true
		}
	}
	return false
}
