package sim

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/modelplaneai/fleet-scheduler/agent"
	"github.com/modelplaneai/fleet-scheduler/sim/kube"
)

// TestAgentCountsWithTheBindersFeatures holds the cluster agent's DRA
// allocator features to the simulator's binder's, which sim/calibrate
// checks against kube-scheduler's own: an agent that allocated with a
// feature kube-scheduler has off could count a device free that no pod
// can be given.
func TestAgentCountsWithTheBindersFeatures(t *testing.T) {
	if diff := cmp.Diff(kube.Features(), agent.Features()); diff != "" {
		t.Errorf("agent.Features() differs from kube-scheduler v1.37's default (sim/kube.Features): -binder, +agent:\n%s", diff)
	}
}
