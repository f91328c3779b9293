package agent

import (
	"os"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
)

const agentNamespace = "modelplane-cluster-agent"

var agentLabels = map[string]string{"app.kubernetes.io/name": "cluster-agent"}

// steeringPolicy is a policy with every field CheckSteeringPolicy checks
// as shipped: a sketch of deploy/cluster-agent/steering/, which
// TestShippedSteeringPolicyPasses checks itself.
func steeringPolicy() *admissionregistrationv1.MutatingAdmissionPolicy {
	return &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: agentv1alpha1.SteeringPolicy},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			ParamKind: &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "Pod"},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			Variables: []admissionregistrationv1.Variable{{
				Name:       "pools",
				Expression: `params.metadata.annotations[?"agent.modelplane.ai/steered-pools"].orValue("").split(",")`,
			}},
			MatchConditions: []admissionregistrationv1.MatchCondition{
				{Name: "ready", Expression: `params.status.conditions.exists(c, c.type == "Ready" && c.status == "True")`},
				{Name: "pool", Expression: `object.spec.nodeSelector[?"modelplane.ai/pool"].orValue("") in variables.pools`},
			},
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType: admissionregistrationv1.PatchTypeJSONPatch,
				JSONPatch: &admissionregistrationv1.JSONPatch{Expression: `[JSONPatch{op: "add", path: "/spec/schedulingGates/-", value: Object.spec.schedulingGates{name: "agent.modelplane.ai/steering"}}]`},
			}},
			FailurePolicy:      new(admissionregistrationv1.Ignore),
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		},
	}
}

func steeringBinding() *admissionregistrationv1.MutatingAdmissionPolicyBinding {
	return &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: agentv1alpha1.SteeringPolicy},
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName: agentv1alpha1.SteeringPolicy,
			ParamRef: &admissionregistrationv1.ParamRef{
				Namespace:               agentNamespace,
				Selector:                &metav1.LabelSelector{MatchLabels: agentLabels},
				ParameterNotFoundAction: new(admissionregistrationv1.AllowAction),
			},
		},
	}
}

func TestCheckSteeringPolicy(t *testing.T) {
	type args struct {
		policy  func(*admissionregistrationv1.MutatingAdmissionPolicy)
		binding func(*admissionregistrationv1.MutatingAdmissionPolicyBinding)
		none    string
		labels  map[string]string
	}
	cases := map[string]struct {
		reason string
		args   args
		want   string
	}{
		"AsShipped": {
			reason: "The policy and binding as shipped pass.",
		},
		"LabelsUnknown": {
			reason: "Without the agent's labels, any selector passes.",
			args: args{labels: map[string]string{}, binding: func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
				b.Spec.ParamRef.Selector.MatchLabels = map[string]string{"x": "y"}
			}},
		},
		"NoPolicy": {
			reason: "A missing policy is named.",
			args:   args{none: "policy"},
			want:   "MutatingAdmissionPolicy modelplane-cluster-agent-steering: not found",
		},
		"NoBinding": {
			reason: "A missing binding is named.",
			args:   args{none: "binding"},
			want:   "MutatingAdmissionPolicyBinding modelplane-cluster-agent-steering: not found",
		},
		"ParamKind": {
			reason: "The param must be the agent's Pod.",
			args:   args{policy: func(p *admissionregistrationv1.MutatingAdmissionPolicy) { p.Spec.ParamKind.Kind = "ConfigMap" }},
			want:   "spec.paramKind",
		},
		"FailClosed": {
			reason: "A policy that fails closed would refuse pods.",
			args: args{policy: func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
				p.Spec.FailurePolicy = new(admissionregistrationv1.Fail)
			}},
			want: "spec.failurePolicy: want Ignore",
		},
		"DefaultFailurePolicy": {
			reason: "No failurePolicy defaults to Fail.",
			args:   args{policy: func(p *admissionregistrationv1.MutatingAdmissionPolicy) { p.Spec.FailurePolicy = nil }},
			want:   "spec.failurePolicy",
		},
		"Reinvoked": {
			reason: "The mutation runs once.",
			args: args{policy: func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
				p.Spec.ReinvocationPolicy = admissionregistrationv1.IfNeededReinvocationPolicy
			}},
			want: `spec.reinvocationPolicy: "IfNeeded", want Never`,
		},
		"NotPods": {
			reason: "The policy must match the creation of pods.",
			args: args{policy: func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
				p.Spec.MatchConstraints.ResourceRules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Update}
			}},
			want: "spec.matchConstraints.resourceRules: none matches the CREATE of pods",
		},
		"NoGate": {
			reason: "A mutation must add the agent's scheduling gate.",
			args: args{policy: func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
				p.Spec.Mutations[0].JSONPatch.Expression = `[JSONPatch{op: "add", path: "/spec/schedulingGates/-", value: Object.spec.schedulingGates{name: "other"}}]`
			}},
			want: "spec.mutations: none adds the scheduling gate agent.modelplane.ai/steering",
		},
		"ApplyConfiguration": {
			reason: "The gate may be added by an apply configuration.",
			args: args{policy: func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
				p.Spec.Mutations[0] = admissionregistrationv1.Mutation{
					PatchType:          admissionregistrationv1.PatchTypeApplyConfiguration,
					ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: `Object{spec: Object.spec{schedulingGates: [Object.spec.schedulingGates{name: "agent.modelplane.ai/steering"}]}}`},
				}
			}},
		},
		"GateInVariable": {
			reason: "The gate may be named through a variable the mutation reads.",
			args: args{policy: func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
				p.Spec.Variables = append(p.Spec.Variables, admissionregistrationv1.Variable{Name: "gate", Expression: `"agent.modelplane.ai/steering"`})
				p.Spec.Mutations[0].JSONPatch.Expression = `[JSONPatch{op: "add", path: "/spec/schedulingGates/-", value: Object.spec.schedulingGates{name: variables.gate}}]`
			}},
		},
		"AllPools": {
			reason: "The policy must hold only the pools the leader's annotation lists.",
			args: args{policy: func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
				p.Spec.Variables = nil
				p.Spec.MatchConditions = p.Spec.MatchConditions[:1]
			}},
			want: "no expression reads the steered pools from the param's annotation agent.modelplane.ai/steered-pools",
		},
		"Unready": {
			reason: "The policy must hold pods only while the param Pod is Ready.",
			args: args{policy: func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
				p.Spec.MatchConditions = p.Spec.MatchConditions[1:]
			}},
			want: "spec.matchConditions: none reads the param Pod's Ready condition",
		},
		"OtherPolicy": {
			reason: "The binding must bind the steering policy.",
			args:   args{binding: func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) { b.Spec.PolicyName = "other" }},
			want:   `spec.policyName: "other"`,
		},
		"NoParamRef": {
			reason: "Without a paramRef no Pod is the param.",
			args:   args{binding: func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) { b.Spec.ParamRef = nil }},
			want:   "spec.paramRef: none",
		},
		"ByName": {
			reason: "A param named is one Pod, not the agent's replicas.",
			args: args{binding: func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
				b.Spec.ParamRef.Name = "cluster-agent-0"
			}},
			want: "spec.paramRef: want a selector",
		},
		"OtherNamespace": {
			reason: "The param is in the agent's namespace.",
			args:   args{binding: func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) { b.Spec.ParamRef.Namespace = "" }},
			want:   `spec.paramRef.namespace: "", want the agent's namespace "modelplane-cluster-agent"`,
		},
		"Deny": {
			reason: "Without an agent Pod, the binding must let pods through.",
			args: args{binding: func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
				b.Spec.ParamRef.ParameterNotFoundAction = new(admissionregistrationv1.DenyAction)
			}},
			want: "spec.paramRef.parameterNotFoundAction: want Allow",
		},
		"OtherPods": {
			reason: "The selector must select the agent's Pod.",
			args: args{binding: func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
				b.Spec.ParamRef.Selector.MatchLabels = map[string]string{"app.kubernetes.io/name": "other"}
			}},
			want: "spec.paramRef.selector: app.kubernetes.io/name=other does not select the agent's Pod",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, b := steeringPolicy(), steeringBinding()
			if tc.args.policy != nil {
				tc.args.policy(p)
			}
			if tc.args.binding != nil {
				tc.args.binding(b)
			}
			switch tc.args.none {
			case "policy":
				p = nil
			case "binding":
				b = nil
			}
			labels := agentLabels
			if tc.args.labels != nil {
				labels = nil
			}
			err := CheckSteeringPolicy(p, b, SteeringAgent{Namespace: agentNamespace, Labels: labels})
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("\n%s\nCheckSteeringPolicy(...): %v", tc.reason, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("\n%s\nCheckSteeringPolicy(...): want an error containing %q, got %v", tc.reason, tc.want, err)
			}
		})
	}
}

// TestShippedSteeringPolicyPasses runs the agent's check on the policy
// and binding as deploy/cluster-agent/steering/ ships them, with the pod
// labels and namespace of the shipped Deployment: a shipped policy the
// agent would call modified would never let a pool be Steered.
func TestShippedSteeringPolicyPasses(t *testing.T) {
	policyYAML, err := os.ReadFile("../deploy/cluster-agent/steering/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var policy *admissionregistrationv1.MutatingAdmissionPolicy
	var binding *admissionregistrationv1.MutatingAdmissionPolicyBinding
	for doc := range strings.SplitSeq(string(policyYAML), "\n---") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "MutatingAdmissionPolicy":
			policy = &admissionregistrationv1.MutatingAdmissionPolicy{}
			err = yaml.UnmarshalStrict([]byte(doc), policy)
		case "MutatingAdmissionPolicyBinding":
			binding = &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
			err = yaml.UnmarshalStrict([]byte(doc), binding)
		}
		if err != nil {
			t.Fatalf("cannot read the shipped %s: %v", meta.Kind, err)
		}
	}
	deploymentYAML, err := os.ReadFile("../deploy/cluster-agent/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := &appsv1.Deployment{}
	if err := yaml.Unmarshal(deploymentYAML, d); err != nil {
		t.Fatal(err)
	}
	if err := CheckSteeringPolicy(policy, binding, SteeringAgent{Namespace: d.Namespace, Labels: d.Spec.Template.Labels}); err != nil {
		t.Errorf("the shipped steering policy fails the agent's check: %v", err)
	}
}
