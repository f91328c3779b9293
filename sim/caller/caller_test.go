package caller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

// asking is a function that asks, on each call, for the requirements of
// that call's turn (the last turn's once they run out), and records what
// each call carried; it desires one ModelReplica.
type asking struct {
	turns   []map[string]*fnv1.ResourceSelector
	carried []map[string][]string
}

func (a *asking) RunFunction(_ context.Context, req *fnv1.RunFunctionRequest, _ ...grpc.CallOption) (*fnv1.RunFunctionResponse, error) {
	got := map[string][]string{}
	for name, res := range req.GetRequiredResources() {
		got[name] = []string{}
		for _, item := range res.GetItems() {
			md := item.GetResource().GetFields()["metadata"].GetStructValue().GetFields()
			got[name] = append(got[name], md["namespace"].GetStringValue()+"/"+md["name"].GetStringValue())
		}
	}
	a.carried = append(a.carried, got)
	turn := a.turns[min(len(a.carried)-1, len(a.turns)-1)]
	rsp := &fnv1.RunFunctionResponse{Requirements: &fnv1.Requirements{Resources: turn}}
	desired, err := structOf(fx.Replica("d", "c1", 0).Obj())
	if err != nil {
		return nil, err
	}
	rsp.Desired = &fnv1.State{Resources: map[string]*fnv1.Resource{"replica-c1-0": {Resource: desired}}}
	return rsp, nil
}

func byLabels(kind string, labels map[string]string, namespace *string) *fnv1.ResourceSelector {
	return &fnv1.ResourceSelector{ApiVersion: v1alpha1.APIVersion, Kind: kind, Match: &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: labels}}, Namespace: namespace}
}

func TestReconcile(t *testing.T) {
	ns := fx.Namespace
	clusters := []*v1alpha1.InferenceCluster{fx.Cluster("c1").Obj(), fx.Cluster("c2").Obj()}
	clusters[1].Metadata.Labels = map[string]string{"tier": "prod"}
	counted := fx.Replica("o", "c1", 0).Obj()
	counted.Metadata.Labels[v1alpha1.LabelCounted] = "true"
	uncounted := fx.Replica("o", "c1", 1).Namespace("elsewhere").Obj()
	uncounted.Metadata.Labels[v1alpha1.LabelCounted] = "false"
	own := fx.Replica("d", "c1", 0).Obj()
	replicas := []*v1alpha1.ModelReplica{counted, uncounted, own}
	narrow := map[string]*fnv1.ResourceSelector{
		"clusters":           byLabels(v1alpha1.KindInferenceCluster, map[string]string{"tier": "prod"}, nil),
		"own-replicas":       byLabels(v1alpha1.KindModelReplica, map[string]string{v1alpha1.LabelDeployment: "d"}, &ns),
		"uncounted-replicas": byLabels(v1alpha1.KindModelReplica, map[string]string{v1alpha1.LabelCounted: "false"}, nil),
	}
	full := map[string]*fnv1.ResourceSelector{"clusters": byLabels(v1alpha1.KindInferenceCluster, nil, nil), "all-replicas": byLabels(v1alpha1.KindModelReplica, nil, nil)}
	type want struct {
		carried []map[string][]string
		call    Call
		err     bool
	}
	cases := map[string]struct {
		reason string
		turns  []map[string]*fnv1.ResourceSelector
		want   want
	}{
		"SettlesOnTheSecond": {
			reason: "The first call carries nothing; the second carries what the first asked for, selected by labels and namespace, and asks the same: done.",
			turns:  []map[string]*fnv1.ResourceSelector{narrow},
			want: want{
				carried: []map[string][]string{{}, {"clusters": {"/c2"}, "own-replicas": {ns + "/d-c1-0"}, "uncounted-replicas": {"elsewhere/o-c1-1"}}},
				call:    Call{Deployment: ns + "/d", Iterations: 2, Narrow: true},
			},
		},
		"ChangesOnce": {
			reason: "Requirements that change once take a third call; asking for every replica is not narrow.",
			turns:  []map[string]*fnv1.ResourceSelector{narrow, full},
			want: want{
				carried: []map[string][]string{{}, {"clusters": {"/c2"}, "own-replicas": {ns + "/d-c1-0"}, "uncounted-replicas": {"elsewhere/o-c1-1"}}, {"clusters": {"/c1", "/c2"}, "all-replicas": {ns + "/o-c1-0", "elsewhere/o-c1-1", ns + "/d-c1-0"}}},
				call:    Call{Deployment: ns + "/d", Iterations: 3},
			},
		},
		"NeverSettles": {
			reason: "Requirements that change on every call give up after Crossplane's limit.",
			turns:  []map[string]*fnv1.ResourceSelector{narrow, full, narrow, full, narrow, full},
			want:   want{err: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fn := &asking{turns: tc.turns}
			c := &Caller{Client: fn}
			got, err := c.Reconcile(fx.Deployment("d").Obj(), clusters, replicas, time.Time{})
			if (err != nil) != tc.want.err {
				t.Fatalf("%s\nReconcile(...): error %v, want an error: %v", tc.reason, err, tc.want.err)
			}
			if tc.want.err {
				return
			}
			if len(got) != 1 || got[0].Metadata.Name != "d-c1-0" {
				t.Errorf("%s\nReconcile(...): desired %v, want d-c1-0", tc.reason, got)
			}
			if diff := cmp.Diff(tc.want.carried, fn.carried, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nwhat each call carried: -want, +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff([]Call{tc.want.call}, c.Calls, cmpopts.IgnoreFields(Call{}, "Bytes", "AllBytes")); diff != "" {
				t.Errorf("%s\nCalls: -want, +got:\n%s", tc.reason, diff)
			}
			if c.Calls[0].Bytes <= 0 || c.Calls[0].AllBytes < c.Calls[0].Bytes {
				t.Errorf("%s\nbytes: %d of %d in all", tc.reason, c.Calls[0].Bytes, c.Calls[0].AllBytes)
			}
		})
	}
}
