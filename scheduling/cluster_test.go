package scheduling

import (
	"testing"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

func TestTolerates(t *testing.T) {
	taint := v1alpha1.Taint{Key: "gpu", Value: "maint", Effect: v1alpha1.TaintNoSchedule}
	cases := map[string]struct {
		reason string
		tol    v1alpha1.Toleration
		want   bool
	}{
		"EqualKeyValue":    {reason: "Equal (the default) matches key and value.", tol: v1alpha1.Toleration{Key: "gpu", Value: "maint"}, want: true},
		"EqualOtherValue":  {reason: "Equal does not match another value.", tol: v1alpha1.Toleration{Key: "gpu", Value: "other"}},
		"ExistsKey":        {reason: "Exists matches any value of the key.", tol: v1alpha1.Toleration{Key: "gpu", Operator: "Exists"}, want: true},
		"ExistsEmptyKey":   {reason: "Exists with an empty key matches every taint.", tol: v1alpha1.Toleration{Operator: "Exists"}, want: true},
		"EffectMismatch":   {reason: "A toleration of another effect does not tolerate the taint.", tol: v1alpha1.Toleration{Key: "gpu", Operator: "Exists", Effect: v1alpha1.TaintNoExecute}},
		"EmptyEffectMatch": {reason: "An empty effect matches every effect.", tol: v1alpha1.Toleration{Key: "gpu", Value: "maint"}, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tolerates(tc.tol, taint); got != tc.want {
				t.Errorf("%s\ntolerates(%+v, %+v): want %t, got %t", tc.reason, tc.tol, taint, tc.want, got)
			}
		})
	}
}

func TestClusterReady(t *testing.T) {
	cases := map[string]struct {
		reason  string
		cluster *v1alpha1.InferenceCluster
		want    bool
	}{
		"Ready":    {reason: "A Ready condition of status True.", cluster: fx.Cluster("a").Obj(), want: true},
		"NotReady": {reason: "A Ready condition of status False.", cluster: fx.Cluster("a").NotReady().Obj()},
		"Unknown":  {reason: "A cluster that publishes no conditions is not Ready.", cluster: func() *v1alpha1.InferenceCluster { c := fx.Cluster("a").Obj(); c.Status.Conditions = nil; return c }()},
		"OtherType": {reason: "Only the Ready condition counts.", cluster: func() *v1alpha1.InferenceCluster {
			c := fx.Cluster("a").Obj()
			c.Status.Conditions[0].Type = "Synced"
			return c
		}()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ClusterReady(tc.cluster); got != tc.want {
				t.Errorf("%s\nClusterReady(...): want %t, got %t", tc.reason, tc.want, got)
			}
		})
	}
}
