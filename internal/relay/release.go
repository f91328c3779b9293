package relay

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/modelplaneai/fleet-scheduler/input/v1beta1"
)

// Keys of the composed resources that install the cluster agent with an
// InferenceCluster (docs/cluster-agent.md#a-release-with-every-cluster).
const (
	KeyAgentRelease               = "agent-release"
	KeyAgentReleaseProviderConfig = "agent-release-provider-config"
)

// provider-helm's namespaced Release and the cluster-scoped provider config
// it goes through, and provider-kubernetes' whose credentials it takes.
const (
	HelmAPIVersion = "helm.m.crossplane.io/v1beta1"
	KindRelease    = "Release"

	// AgentReleaseName is the Helm release's name in every workload
	// cluster: the name the project's design gives it, and the README's
	// `helm install`, so that a Release takes over an agent installed by
	// hand instead of installing a second one.
	AgentReleaseName = "mp-cluster-agent"

	// annotationExternalName is the annotation provider-helm reads the
	// Helm release's name from.
	annotationExternalName = "crossplane.io/external-name"
)

// chartReference is what AgentRelease.Chart must look like: an OCI
// repository with a path, ending in the chart's name.
var chartReference = regexp.MustCompile(`^oci://[^/\s]+/(\S+/)?[^/\s]+$`)

// namespaceName is a namespace's name, a DNS-1123 label of at most 63.
var namespaceName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// keepAgentRelease keeps in out the agent's Release composed before, as it
// exists, when the input asks for one but the call cannot compose it (the
// cluster has no provider config yet, or no more): a Release no longer
// desired would be deleted, and the agent uninstalled.
func keepAgentRelease(in ClusterInput, out *ClusterOutput) {
	if in.AgentRelease == nil && in.AgentReleaseErr == nil {
		return
	}
	maps.Copy(out.Resources, composedAgentRelease(in.Composed))
}

// composedAgentRelease is the agent's Release and its provider config as
// composed before, by key; empty when there are none.
func composedAgentRelease(composed map[string]map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, key := range []string{KeyAgentRelease, KeyAgentReleaseProviderConfig} {
		if o, ok := composed[key]; ok {
			out[key] = asComposed(o)
		}
	}
	return out
}

// addAgentRelease adds to out the agent's Release, when the input asks
// for one, or the warning that says why there is none.
func addAgentRelease(in ClusterInput, ns, pc string, out *ClusterOutput) {
	if in.AgentRelease == nil && in.AgentReleaseErr == nil {
		return
	}
	release, warning := agentRelease(in.AgentRelease, in.AgentReleaseErr, ns, pc, in.Desired, in.Composed)
	maps.Copy(out.Resources, release)
	if warning != "" {
		out.Warnings = append(out.Warnings, warning)
	}
}

// agentRelease composes the Release that installs the agent's chart in
// the InferenceCluster's workload cluster, in namespace ns of the control
// plane, and the provider-helm ClusterProviderConfig it goes through:
// named pc, as the provider-kubernetes ClusterProviderConfig the cluster's
// status names, with its credentials and identity, so that the Release
// reaches the cluster as the relay's Objects do, whatever its source. It
// says in a warning why it composes neither; a Release that exists is then
// kept as it is, never deleted because its input went wrong: inputErr,
// when set, is why the input could not be read.
func agentRelease(r *v1beta1.AgentRelease, inputErr error, ns, pc string, desired, composed map[string]map[string]any) (map[string]map[string]any, string) {
	kept := func(why string) (map[string]map[string]any, string) {
		out := composedAgentRelease(composed)
		if len(out) > 0 {
			why += "; the Release composed before is kept as it is"
		}
		return out, "the cluster agent's Release is not composed: " + why
	}
	if inputErr != nil {
		return kept(inputErr.Error())
	}
	if err := validAgentRelease(r); err != nil {
		return kept(err.Error())
	}
	source := kubernetesProviderConfig(pc, desired, composed)
	if source == nil {
		return kept(fmt.Sprintf("no provider-kubernetes ClusterProviderConfig %s is composed with the InferenceCluster to take its credentials from", pc))
	}
	creds := mapAt(source, "spec", "credentials")
	if creds == nil {
		return kept(fmt.Sprintf("provider-kubernetes ClusterProviderConfig %s has no spec.credentials", pc))
	}
	pcSpec := map[string]any{"credentials": creds}
	if id := mapAt(source, "spec", "identity"); id != nil {
		pcSpec["identity"] = id
	}

	values := chartValues(r)
	namespace := v1beta1.DefaultAgentReleaseNamespace
	if r.Namespace != nil && *r.Namespace != "" {
		namespace = *r.Namespace
	}
	i := strings.LastIndex(r.Chart, "/")
	forProvider := map[string]any{
		"chart":     map[string]any{"repository": r.Chart[:i], "name": r.Chart[i+1:], "version": r.Version},
		"namespace": namespace,
		"values":    values,
	}
	if r.PlainHTTP {
		forProvider["plainHTTP"] = true
	}
	// Adopt an agent installed by hand: `helm install` of the same release
	// is found by its name anyway, but `kubectl apply -k
	// deploy/cluster-agent/` leaves objects without Helm's ownership, which
	// Helm would refuse to install over. provider-helm takes ownership once,
	// at the first install, and records it.
	forProvider["takeOwnership"] = true
	return map[string]map[string]any{
		KeyAgentReleaseProviderConfig: {
			"apiVersion": HelmAPIVersion, "kind": ProviderConfigKind,
			"metadata": map[string]any{"name": pc},
			"spec":     pcSpec,
		},
		KeyAgentRelease: {
			"apiVersion": HelmAPIVersion, "kind": KindRelease,
			"metadata": map[string]any{
				"namespace":   ns,
				"annotations": map[string]any{annotationExternalName: AgentReleaseName},
			},
			"spec": map[string]any{
				"providerConfigRef": map[string]any{"kind": ProviderConfigKind, "name": pc},
				"forProvider":       forProvider,
			},
		},
	}, ""
}

// validAgentRelease checks what the API server does not: a Composition's
// step input is not validated against the Input's schema.
func validAgentRelease(r *v1beta1.AgentRelease) error {
	if !chartReference.MatchString(r.Chart) {
		return fmt.Errorf("input agentRelease.chart %q must be the chart's OCI reference without its version, as oci://REGISTRY/charts/cluster-agent", r.Chart)
	}
	if strings.ContainsAny(r.Chart[strings.LastIndex(r.Chart, "/"):], ":@") {
		return fmt.Errorf("input agentRelease.chart %q must not carry a version: set agentRelease.version", r.Chart)
	}
	if r.Version == "" || strings.ContainsFunc(r.Version, unicode.IsSpace) {
		return fmt.Errorf("input agentRelease.version %q must be the chart's version, for example 0.1.0", r.Version)
	}
	if r.Namespace != nil && *r.Namespace != "" && !namespaceName.MatchString(*r.Namespace) {
		return fmt.Errorf("input agentRelease.namespace %q must be a namespace's name: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit", *r.Namespace)
	}
	if r.Values != nil && len(r.Values.Raw) > 0 {
		var values map[string]any
		if err := json.Unmarshal(r.Values.Raw, &values); err != nil {
			return fmt.Errorf("input agentRelease.values must be an object of the chart's values: %w", err)
		}
		if create, _ := mapAt(values, "namespace")["create"].(bool); create {
			return errors.New("input agentRelease.values.namespace.create must not be true: the Release makes the namespace, and Helm would refuse the chart's own")
		}
	}
	return nil
}

// chartValues are the Release's values: the input's, with namespace.create
// false unless they set it, since the Release makes the namespace.
func chartValues(r *v1beta1.AgentRelease) map[string]any {
	var values map[string]any
	if r.Values != nil && len(r.Values.Raw) > 0 {
		// validAgentRelease decoded it once already; null decodes to nil.
		_ = json.Unmarshal(r.Values.Raw, &values)
	}
	if values == nil {
		values = map[string]any{}
	}
	if _, set := values["namespace"]; !set {
		values["namespace"] = map[string]any{"create": false}
	}
	return values
}

// kubernetesProviderConfig is provider-kubernetes' ClusterProviderConfig
// named pc among what the earlier steps desire, or else among the composed
// resources; nil when neither has it.
func kubernetesProviderConfig(pc string, desired, composed map[string]map[string]any) map[string]any {
	for _, resources := range []map[string]map[string]any{desired, composed} {
		for _, key := range slices.Sorted(maps.Keys(resources)) {
			o := resources[key]
			// provider-kubernetes' group and version are its Object's.
			if o["apiVersion"] == ObjectAPIVersion && o["kind"] == ProviderConfigKind && stringAt(o, "metadata", "name") == pc {
				return o
			}
		}
	}
	return nil
}

// asComposed is an observed composed resource as the relay desired it:
// its kind, name, namespace, Helm release name and spec, without what the
// API server, Crossplane and the provider wrote to its metadata.
func asComposed(o map[string]any) map[string]any {
	meta := map[string]any{}
	for _, f := range []string{"name", "namespace"} {
		if v, ok := mapAt(o, "metadata")[f]; ok {
			meta[f] = v
		}
	}
	if v, ok := mapAt(o, "metadata", "annotations")[annotationExternalName]; ok {
		meta["annotations"] = map[string]any{annotationExternalName: v}
	}
	out := map[string]any{"apiVersion": o["apiVersion"], "kind": o["kind"], "metadata": meta}
	if spec, ok := o["spec"]; ok {
		out["spec"] = spec
	}
	return out
}
