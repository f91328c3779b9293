package scheduling

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// Why an engine's nodeSelector matches no pool, said as data
// (docs/spec.md#a-selector-that-matches-no-pool): found only once a
// shortfall names an engine that no pool matches, so a call that places
// pays nothing for it.

// UnmatchedRequest is a request of the deployment's nodeSelector that no
// device of the pools of the clusters where its engine matched no pool
// meets.
type UnmatchedRequest struct {
	Engine  string
	Member  int
	Role    string
	Request string
	// Clusters are the clusters whose pools were searched: every readable
	// one of the pass, sorted.
	Clusters []string

	// Selector is the index of the first selector that alone meets no
	// device, and Expression its CEL; -1 and "" when each meets some
	// device, but no device meets them all, or none has Count on a node,
	// or there are no devices.
	Selector   int
	Expression string
	// EvalError is the first CEL runtime error Selector gave, and the
	// device it gave it on, when it gave one on every device searched:
	// DRA takes such a device as no match.
	EvalError string

	// Count is how many devices the request claims on one node, and
	// MostOnANode how many a device that meets every selector has on one
	// node; SelectorsMet is whether any device meets them all.
	Count, MostOnANode int64
	SelectorsMet       bool
	// NoDevices is true when the pools searched publish no device.
	NoDevices bool

	// Offered are, for each attribute Expression names, the values the
	// pools' devices publish.
	Offered []AttributeValues
	// Misspelt are the attribute names and domains Expression spells in
	// a way no device publishes, with what the devices publish instead.
	Misspelt []Misspelling
}

// AttributeValues are the values the searched pools publish for one
// attribute, sorted, at most maxOfferedValues.
type AttributeValues struct {
	Name   string
	Values []string
	// More is how many values were left out.
	More int
}

// Misspelling is a name a selector uses that no device publishes, and the
// names the devices publish that it comes closest to.
type Misspelling struct {
	Used      string
	Published []string
}

// Bounds of a diagnosis, so a fleet of many device kinds still gives a
// warning of a readable size.
const (
	maxOfferedValues   = 8
	maxUnmatchedEngine = 4
)

// attributeDomain matches a selector's device.attributes["<domain>"] and
// device.capacity["<domain>"].
var attributeDomain = regexp.MustCompile(`device\.(?:attributes|capacity)\[\s*"([^"]*)"\s*\]`)

// stringLiteral matches a CEL string literal, whose words name nothing.
var stringLiteral = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)

// identifier matches a CEL identifier: an attribute name a selector uses.
var identifier = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

// unmatched diagnoses, for each engine the verdicts say no pool matched
// on some cluster, its requests that no device of any readable cluster of
// the pass (ready or not, with room or not) meets. A request of an engine
// that matches pools somewhere (an H100 selector on a fleet of H100 and L4
// clusters, all full) is met there: it is not diagnosed.
func (s *pass) unmatched(verdicts []ClusterVerdict) []UnmatchedRequest {
	named := map[string]bool{}
	for _, v := range verdicts {
		if v.Reason.Kind == ReasonNoPoolMatches {
			named[v.Reason.Engine] = true
		}
	}
	if len(named) == 0 {
		return nil
	}
	clusters, devices := s.readableDevices()
	var out []UnmatchedRequest
	for ei := range s.engines {
		e := &s.engines[ei]
		if !named[e.name] {
			continue
		}
		found := 0
		for mi := range e.members {
			for ri := range e.members[mi].requests {
				if found == maxUnmatchedEngine {
					break
				}
				if u, ok := diagnoseRequest(&e.members[mi].requests[ri], devices); ok {
					u.Engine, u.Member, u.Role, u.Clusters = e.name, mi, e.members[mi].role, clusters
					out = append(out, u)
					found++
				}
			}
		}
	}
	return out
}

// readableDevices are the names of the pass's readable clusters, sorted,
// and every device of their pools.
func (s *pass) readableDevices() ([]string, []*poolDevice) {
	var clusters []string
	var devices []*poolDevice
	for _, cl := range s.clusterList {
		if cl.unreadable != "" {
			continue
		}
		clusters = append(clusters, cl.name)
		for _, p := range cl.pools {
			for i := range p.devices {
				devices = append(devices, &p.devices[i])
			}
		}
	}
	return clusters, devices
}

// diagnoseRequest says why no device meets a request, or false when one
// does: then its member failed with the requests before it, which took
// the device it needed.
func diagnoseRequest(r *request, devices []*poolDevice) (UnmatchedRequest, bool) {
	u := UnmatchedRequest{Request: r.name, Count: r.count, Selector: -1, NoDevices: len(devices) == 0}
	for _, d := range devices {
		if d.satisfies(r.programs) {
			u.SelectorsMet = true
			u.MostOnANode = max(u.MostOnANode, d.count)
		}
	}
	switch {
	case u.MostOnANode >= r.count && u.SelectorsMet:
		return u, false
	case u.SelectorsMet || u.NoDevices:
		return u, true
	}
	for si, p := range r.programs {
		meets, evalErr, failed := false, "", 0
		// Devices of one kind evaluate alike: each kind once.
		seen := map[*deviceKind]bool{}
		for _, d := range devices {
			if seen[d.kind] {
				continue
			}
			seen[d.kind] = true
			matched, err := evaluate(p, d)
			if err != "" {
				failed++
				if evalErr == "" {
					evalErr = fmt.Sprintf("on device %s: %s", d.spec.Name, err)
				}
			}
			if matched {
				meets = true
				break
			}
		}
		if !meets {
			if failed < len(seen) {
				// It evaluated on some device: the others' errors are those
				// of devices it was never meant for (a GPU's selector on a
				// NIC), which DRA's device class would not even offer it.
				evalErr = ""
			}
			u.Selector, u.Expression, u.EvalError = si, r.selectors[si], evalErr
			u.Offered, u.Misspelt = offered(u.Expression, devices)
			return u, true
		}
	}
	return u, true
}

// evaluate evaluates one compiled selector on a device, as DRA does, and
// returns its runtime error, if any.
func evaluate(p *program, d *poolDevice) (bool, string) {
	if p == nil {
		return false, "the selector did not compile"
	}
	matched, _, err := p.result.DeviceMatches(context.Background(), d.kind.input)
	if err != nil {
		return false, err.Error()
	}
	return matched, ""
}

// offered reads what a selector names: for each attribute of the devices
// it names, or names in another case, the values they publish; and each
// name it uses that no device publishes but one does in another case, and
// each attribute domain no device has, with the domains they have.
func offered(expr string, devices []*poolDevice) ([]AttributeValues, []Misspelling) {
	values, domains := published(devices)
	used := map[string]bool{}
	for _, w := range identifier.FindAllString(stringLiteral.ReplaceAllString(attributeDomain.ReplaceAllString(expr, ""), ""), -1) {
		used[w] = true
	}
	var misspelt []Misspelling
	named := map[string]bool{}
	for _, w := range slices.Sorted(maps.Keys(used)) {
		if values[w] != nil {
			named[w] = true
			continue
		}
		if nearest := otherCase(w, values); len(nearest) > 0 {
			for _, n := range nearest {
				named[n] = true
			}
			misspelt = append(misspelt, Misspelling{Used: w, Published: nearest})
		}
	}
	out := make([]AttributeValues, 0, len(named))
	for _, name := range slices.Sorted(maps.Keys(named)) {
		vs := slices.Sorted(maps.Keys(values[name]))
		out = append(out, AttributeValues{Name: name, Values: vs[:min(len(vs), maxOfferedValues)], More: max(len(vs)-maxOfferedValues, 0)})
	}
	for _, m := range attributeDomain.FindAllStringSubmatch(expr, -1) {
		if !domains[m[1]] && !slices.ContainsFunc(misspelt, func(x Misspelling) bool { return x.Used == m[1] }) {
			all := slices.Sorted(maps.Keys(domains))
			misspelt = append(misspelt, Misspelling{Used: m[1], Published: all[:min(len(all), maxOfferedValues)]})
		}
	}
	return out, misspelt
}

// published are the devices' attributes, by name without domain, each with
// the values the devices publish, and the devices' attribute domains.
func published(devices []*poolDevice) (map[string]map[string]bool, map[string]bool) {
	values := map[string]map[string]bool{}
	domains := map[string]bool{}
	for _, d := range devices {
		domains[d.spec.Driver] = true
		for name, a := range d.spec.Attributes {
			domain, short := splitQualified(name)
			domains[domain] = true
			if values[short] == nil {
				values[short] = map[string]bool{}
			}
			if v, ok := attributeString(a); ok {
				values[short][v] = true
			}
		}
		for name := range d.spec.Capacity {
			domain, _ := splitQualified(name)
			domains[domain] = true
		}
	}
	delete(domains, "")
	return values, domains
}

// otherCase are the published names that spell w in another case, sorted.
func otherCase(w string, values map[string]map[string]bool) []string {
	var out []string
	for name := range values {
		if strings.EqualFold(name, w) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// splitQualified splits a qualified attribute name, domain/name, as DRA
// does; an unqualified name has the device's driver as its domain.
func splitQualified(name string) (string, string) {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[:i], name[i+1:]
	}
	return "", name
}

// attributeString renders an attribute's value as CEL sees it
// (attributeValue's order), spelt as CEL would; false for one CEL cannot
// read.
func attributeString(a v1alpha1.DeviceAttribute) (string, bool) {
	v, defect := attributeValue(a)
	switch {
	case defect != "":
		return "", false
	case v.IntValue != nil:
		return strconv.FormatInt(*v.IntValue, 10), true
	case v.BoolValue != nil:
		return strconv.FormatBool(*v.BoolValue), true
	case v.StringValue != nil:
		return strconv.Quote(*v.StringValue), true
	case v.VersionValue != nil:
		return fmt.Sprintf("semver(%q)", *v.VersionValue), true
	}
	return "", false
}

// String renders a diagnosis for a warning.
func (u UnmatchedRequest) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "engine %s member %d (%s) request %s matches no pool of %s", u.Engine, u.Member, u.Role, u.Request, namesList(u.Clusters))
	switch {
	case u.NoDevices:
		b.WriteString(": their pools publish no device")
	case u.SelectorsMet:
		fmt.Fprintf(&b, ": devices meet its selectors, but it claims %d on one node and a pool has at most %d", u.Count, u.MostOnANode)
	case u.Selector < 0:
		b.WriteString(": each of its selectors meets some device, but no device meets them all")
	default:
		fmt.Fprintf(&b, ": selector #%d %s meets no device", u.Selector, strconv.Quote(u.Expression))
		if u.EvalError != "" {
			fmt.Fprintf(&b, " (evaluating it failed %s)", u.EvalError)
		}
	}
	for _, m := range u.Misspelt {
		fmt.Fprintf(&b, "; it uses %q, the devices publish %s", m.Used, strings.Join(m.Published, ", "))
	}
	for _, a := range u.Offered {
		fmt.Fprintf(&b, "; the devices' %s: %s", a.Name, strings.Join(a.Values, ", "))
		if a.More > 0 {
			fmt.Fprintf(&b, " and %d more", a.More)
		}
	}
	return b.String()
}

// namesList joins cluster names as a shortfall does: past
// maxNamesPerReason the rest are counted.
func namesList(names []string) string {
	list := strings.Join(names[:min(len(names), maxNamesPerReason)], ", ")
	if len(names) > maxNamesPerReason {
		list += fmt.Sprintf(" and %d more", len(names)-maxNamesPerReason)
	}
	return list
}
