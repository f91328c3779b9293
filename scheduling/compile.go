package scheduling

import (
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// engine is a deployment engine reduced to what placement needs, its CEL
// compiled once for every pool of every cluster.
type engine struct {
	name    string
	copies  int64
	members []member
	// gang is true when a copy of the engine is a Leader with its Workers,
	// whose claiming pods must take distinct nodes.
	gang bool
}

type member struct {
	role     string
	pods     int64 // per copy
	requests []request
}

type request struct {
	name      string
	count     int64
	selectors []string
	programs  []*program
}

// compileEngines compiles every member's nodeSelector once. A selector that
// does not compile, or costs too much, is returned as an InvalidSelectorError.
func compileEngines(d *v1alpha1.ModelDeployment, selectors *Selectors) ([]engine, error) {
	engines := make([]engine, 0, len(d.Spec.Template.Spec.Engines))
	for _, e := range d.Spec.Template.Spec.Engines {
		ce := engine{name: e.Name, copies: countOr(e.Copies, 1)}
		for mi, m := range e.Members {
			cm := member{role: roleOf(m.Role), pods: memberPods(m.Role, m.Worker)}
			if cm.role != v1alpha1.RoleStandalone {
				ce.gang = true
			}
			if m.NodeSelector != nil {
				for _, dev := range m.NodeSelector.Devices {
					r := request{name: dev.Name, count: countOr(dev.Count, 1)}
					for si, s := range dev.Selectors {
						if s.CEL == "" {
							continue
						}
						p, detail := selectors.compile(s.CEL)
						if p == nil {
							return nil, &InvalidSelectorError{Engine: e.Name, Member: mi, Role: cm.role, Request: dev.Name, Selector: si, Detail: detail}
						}
						r.selectors = append(r.selectors, s.CEL)
						r.programs = append(r.programs, p)
					}
					cm.requests = append(cm.requests, r)
				}
			}
			ce.members = append(ce.members, cm)
		}
		engines = append(engines, ce)
	}
	return engines, nil
}

func roleOf(role string) string {
	if role == "" {
		return v1alpha1.RoleStandalone
	}
	return role
}

// memberPods is how many pods one copy of a member runs: a Worker's node
// span, else one.
func memberPods(role string, w *v1alpha1.Worker) int64 {
	if roleOf(role) == v1alpha1.RoleWorker && w != nil {
		return min(max(w.Nodes, 0), maxCount)
	}
	return 1
}

// countOr reads a requested count that defaults to def; the XRD floors it at
// one, and a value below that reads as the default.
func countOr(v *int64, def int64) int64 {
	if v == nil || *v < 1 {
		return def
	}
	return min(*v, maxCount)
}
