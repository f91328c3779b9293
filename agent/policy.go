package agent

import (
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
)

// SteeringAgent is the agent's own Pod, as the steering policy's binding
// must select it for its param: the Pod's namespace and labels.
type SteeringAgent struct {
	Namespace string
	// Labels are the Pod's labels; nil when they are not known, and then
	// the binding's selector is only required to be there.
	Labels map[string]string
}

// CheckSteeringPolicy returns nil when the MutatingAdmissionPolicy and its
// binding, both named agentv1alpha1.SteeringPolicy, are as shipped in the
// fields steering's promises rest on (docs/spec.md#steering), and
// otherwise an error naming the object and the first field that is not:
//
//   - the policy's param is the agent's own Pod (paramKind v1 Pod);
//   - it fails open (failurePolicy Ignore) and mutates once
//     (reinvocationPolicy Never);
//   - it matches the creation of pods (a resource rule of pods and CREATE);
//   - a mutation (or a variable) names the scheduling gate
//     agentv1alpha1.SchedulingGate;
//   - its expressions read the steered pools from the param's
//     agentv1alpha1.AnnotationSteeredPools, and a match condition or
//     variable reads the param's Ready condition;
//   - the binding binds this policy, and its paramRef selects the agent's
//     Pods by label in the agent's namespace (a selector matching
//     agent.Labels, no name) with parameterNotFoundAction Allow.
//
// Either object nil is an error too. The cluster agent reports a pool
// Steered only while this holds for what its informers hold; the shipped
// YAML is tested with it.
func CheckSteeringPolicy(policy *admissionregistrationv1.MutatingAdmissionPolicy, binding *admissionregistrationv1.MutatingAdmissionPolicyBinding, agent SteeringAgent) error {
	if err := checkPolicy(policy); err != nil {
		return err
	}
	return checkBinding(binding, agent)
}

func checkPolicy(p *admissionregistrationv1.MutatingAdmissionPolicy) error {
	name := "MutatingAdmissionPolicy " + agentv1alpha1.SteeringPolicy
	if p == nil {
		return fmt.Errorf("%s: not found", name)
	}
	if p.Name != agentv1alpha1.SteeringPolicy {
		return fmt.Errorf("%s: metadata.name: %q", name, p.Name)
	}
	s := p.Spec
	switch {
	case s.ParamKind == nil || s.ParamKind.APIVersion != "v1" || s.ParamKind.Kind != "Pod":
		return fmt.Errorf("%s: spec.paramKind: want apiVersion v1, kind Pod: the agent's own Pod is the param, so that no param matches once no agent runs", name)
	case s.FailurePolicy == nil || *s.FailurePolicy != admissionregistrationv1.Ignore:
		return fmt.Errorf("%s: spec.failurePolicy: want %s: a policy that cannot be evaluated must not refuse pods", name, admissionregistrationv1.Ignore)
	case s.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy:
		return fmt.Errorf("%s: spec.reinvocationPolicy: %q, want %s", name, s.ReinvocationPolicy, admissionregistrationv1.NeverReinvocationPolicy)
	case !matchesPodCreate(s.MatchConstraints):
		return fmt.Errorf("%s: spec.matchConstraints.resourceRules: none matches the CREATE of pods", name)
	}
	// Expressions may name things through variables: a variable counts
	// with the mutations and with the match conditions.
	var mutations, conditions, variables []string
	for _, m := range s.Mutations {
		if m.ApplyConfiguration != nil {
			mutations = append(mutations, m.ApplyConfiguration.Expression)
		}
		if m.JSONPatch != nil {
			mutations = append(mutations, m.JSONPatch.Expression)
		}
	}
	for _, c := range s.MatchConditions {
		conditions = append(conditions, c.Expression)
	}
	for _, v := range s.Variables {
		variables = append(variables, v.Expression)
	}
	mutations = append(mutations, variables...)
	conditions = append(conditions, variables...)
	all := append(slices.Clone(mutations), conditions...)
	switch {
	case !anyContains(mutations, agentv1alpha1.SchedulingGate):
		return fmt.Errorf("%s: spec.mutations: none adds the scheduling gate %s", name, agentv1alpha1.SchedulingGate)
	case !anyContains(all, agentv1alpha1.AnnotationSteeredPools):
		return fmt.Errorf("%s: spec: no expression reads the steered pools from the param's annotation %s", name, agentv1alpha1.AnnotationSteeredPools)
	case !anyContains(conditions, "Ready"):
		return fmt.Errorf("%s: spec.matchConditions: none reads the param Pod's Ready condition: an unready agent would hold pods", name)
	}
	return nil
}

func checkBinding(b *admissionregistrationv1.MutatingAdmissionPolicyBinding, agent SteeringAgent) error {
	name := "MutatingAdmissionPolicyBinding " + agentv1alpha1.SteeringPolicy
	if b == nil {
		return fmt.Errorf("%s: not found", name)
	}
	if b.Name != agentv1alpha1.SteeringPolicy {
		return fmt.Errorf("%s: metadata.name: %q", name, b.Name)
	}
	if b.Spec.PolicyName != agentv1alpha1.SteeringPolicy {
		return fmt.Errorf("%s: spec.policyName: %q, want %s", name, b.Spec.PolicyName, agentv1alpha1.SteeringPolicy)
	}
	r := b.Spec.ParamRef
	switch {
	case r == nil:
		return fmt.Errorf("%s: spec.paramRef: none; it must select the agent's Pods", name)
	case r.Name != "" || r.Selector == nil:
		return fmt.Errorf("%s: spec.paramRef: want a selector of the agent's Pods and no name", name)
	case r.Namespace != agent.Namespace:
		return fmt.Errorf("%s: spec.paramRef.namespace: %q, want the agent's namespace %q", name, r.Namespace, agent.Namespace)
	case r.ParameterNotFoundAction == nil || *r.ParameterNotFoundAction != admissionregistrationv1.AllowAction:
		return fmt.Errorf("%s: spec.paramRef.parameterNotFoundAction: want %s: with no agent Pod, no pod may be held", name, admissionregistrationv1.AllowAction)
	}
	sel, err := metav1.LabelSelectorAsSelector(r.Selector)
	if err != nil {
		return fmt.Errorf("%s: spec.paramRef.selector: %w", name, err)
	}
	if agent.Labels != nil && !sel.Matches(labels.Set(agent.Labels)) {
		return fmt.Errorf("%s: spec.paramRef.selector: %s does not select the agent's Pod", name, sel)
	}
	return nil
}

// matchesPodCreate is whether the constraints match the CREATE of core
// pods.
func matchesPodCreate(m *admissionregistrationv1.MatchResources) bool {
	if m == nil {
		return false
	}
	for _, r := range m.ResourceRules {
		if (slices.Contains(r.APIGroups, "") || slices.Contains(r.APIGroups, "*")) &&
			(slices.Contains(r.Resources, "pods") || slices.Contains(r.Resources, "*")) &&
			(slices.Contains(r.Operations, admissionregistrationv1.Create) || slices.Contains(r.Operations, admissionregistrationv1.OperationAll)) {
			return true
		}
	}
	return false
}

func anyContains(exprs []string, s string) bool {
	return slices.ContainsFunc(exprs, func(e string) bool { return strings.Contains(e, s) })
}
