package main

import (
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/google/go-cmp/cmp"
)

func TestFlags(t *testing.T) {
	type want struct {
		namespaces []string
		heartbeat  time.Duration
		elect      bool
		err        bool
	}
	cases := map[string]struct {
		reason string
		args   []string
		want   want
	}{
		"Defaults": {
			reason: "By default the agent reads pods in default, elects a leader, and republishes every 50s.",
			want:   want{namespaces: []string{"default"}, heartbeat: 50 * time.Second, elect: true},
		},
		"AllNamespaces": {
			reason: "An empty --pod-namespaces reads every namespace's pods.",
			args:   []string{"--pod-namespaces="},
			want:   want{namespaces: []string{""}, heartbeat: 50 * time.Second, elect: true},
		},
		"Some": {
			reason: "Namespaces are comma-separated.",
			args:   []string{"--pod-namespaces=a,b", "--heartbeat=30s", "--no-leader-elect"},
			want:   want{namespaces: []string{"a", "b"}, heartbeat: 30 * time.Second},
		},
		"BadTaintRules": {
			reason: "--device-taint-rules is auto, on or off.",
			args:   []string{"--device-taint-rules=maybe"},
			want:   want{err: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := &CLI{}
			p, err := kong.New(c)
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Parse(tc.args)
			if tc.want.err {
				if err == nil {
					t.Errorf("\n%s\nParse(%q): want an error", tc.reason, tc.args)
				}
				return
			}
			if err != nil {
				t.Fatalf("\n%s\nParse(%q): %v", tc.reason, tc.args, err)
			}
			got := want{namespaces: c.namespaces(), heartbeat: c.Heartbeat, elect: c.LeaderElect}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("\n%s\nParse(%q): -want, +got:\n%s", tc.reason, tc.args, diff)
			}
		})
	}
}

// TestSteeringFlags checks steering's bounds (docs/cluster-agent.md#steering)
// and the agent's own Pod, from the downward API's variables.
func TestSteeringFlags(t *testing.T) {
	t.Setenv("POD_NAME", "cluster-agent-0")
	t.Setenv("POD_NAMESPACE", "modelplane-cluster-agent")
	c := &CLI{}
	p, err := kong.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(nil); err != nil {
		t.Fatal(err)
	}
	got := []any{c.SteeringWindow, c.SteeringMaxHold, c.SteeringGangWait, c.SteeringReplicaWait, c.SteeringPinTimeout, c.PodName, c.PodNamespace, c.Identity}
	want := []any{time.Second, 30 * time.Second, 5 * time.Second, 5 * time.Second, 30 * time.Second, "cluster-agent-0", "modelplane-cluster-agent", "cluster-agent-0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steering's flags: -want, +got:\n%s", diff)
	}
}
