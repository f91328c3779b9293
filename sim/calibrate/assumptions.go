package main

import (
	"context"
	"fmt"
	"maps"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	schedfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// checkAssumptions checks what the binder takes from kube-scheduler as
// given against kube-scheduler itself: the allocator's feature set
// (dynamicresources.AllocatorFeatures of the default gates) and, for each
// profile, the score plugins and their weights as the framework built
// them (the binder's, and VolumeBinding, which scores 0 for every pod the
// binder accepts).
func checkAssumptions(ctx context.Context) error {
	want := dynamicresources.AllocatorFeatures(schedfeature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
	if diff := cmp.Diff(want, kube.Features()); diff != "" {
		return fmt.Errorf("kube.Features is not kube-scheduler's allocator feature set (-kube-scheduler, +kube.Features):\n%s", diff)
	}
	for _, p := range profiles() {
		r := &kubeRun{st: &state{}, bound: make(chan string, 1), failed: make(chan string, 1)}
		if err := r.start(ctx, p, 1); err != nil {
			return err
		}
		got := map[string]int64{}
		for _, pl := range r.sched.Profiles[corev1.DefaultSchedulerName].ListPlugins().Score.Enabled {
			got[pl.Name] = int64(pl.Weight)
		}
		r.stop()
		want := kube.Weights()
		maps.Copy(want, map[string]int64{"VolumeBinding": 1})
		if diff := cmp.Diff(want, got); diff != "" {
			return fmt.Errorf("%s: the binder's score plugins and weights are not the framework's (-binder, +framework):\n%s", p, diff)
		}
	}
	return nil
}
