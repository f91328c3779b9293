package scheduling

import (
	"errors"
	"strings"
	"testing"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

func TestScheduleInvalidSelector(t *testing.T) {
	// Nested walks over every attribute of every domain: DRA's cost
	// estimator puts the worst case near ten times its limit.
	expensive := `device.attributes.all(d, device.attributes[d].all(k, device.attributes.all(e, device.attributes[e].all(l, k != l))))`
	cases := map[string]struct {
		reason string
		cel    string
		want   string
	}{
		"DoesNotCompile": {
			reason: "A malformed expression names the engine, member and request.",
			cel:    `device.attributes["gpu.nvidia.com"].memory >=`,
			want:   "engine main member 0 (Standalone) request gpu: selector #0: compilation failed",
		},
		"NotBoolean": {
			reason: "An expression that does not evaluate to a bool is refused as DRA refuses it.",
			cel:    `device.driver`,
			want:   "engine main member 0 (Standalone) request gpu: selector #0: must evaluate to bool",
		},
		"OverCost": {
			reason: "An expression whose estimated cost is over DRA's limit is refused.",
			cel:    expensive,
			want:   "engine main member 0 (Standalone) request gpu: selector #0: estimated cost 9705731 is over the limit of 1000000",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := fx.Deployment("m").Engines(fx.Standalone("main", fx.Request("gpu", 1, tc.cel))).Obj()
			s := snapshot(d, []*v1alpha1.InferenceCluster{fx.Cluster("a").Obj()})
			// Without a shared cache, then twice with one: a selector refused
			// once is refused again, for the same reason.
			for _, selectors := range []*Selectors{nil, NewSelectors()} {
				s.Options.Selectors = selectors
				for range 2 {
					_, err := Schedule(s)
					if _, ok := errors.AsType[*InvalidSelectorError](err); !ok {
						t.Fatalf("%s\nSchedule(...): want an InvalidSelectorError, got %v", tc.reason, err)
					}
					if !strings.Contains(err.Error(), tc.want) {
						t.Errorf("%s\nSchedule(...): error %q does not contain %q", tc.reason, err, tc.want)
					}
				}
			}
		})
	}
}
