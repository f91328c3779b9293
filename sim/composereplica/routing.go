package composereplica

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// Images and ports of disaggregated serving (routing.py).
const (
	// SidecarImage is the pd-sidecar v0.3 adds to a decode engine's pods.
	SidecarImage      = "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.9.0"
	decodeEnginePort  = 8001
	nixlSideChannel   = "5557"
	nixlShmVolume     = "nixl-shm"
	labelLLMDRole     = "llm-d.ai/role"
	labelLLMDServing  = "llm-d.ai/inference-serving"
	envNixlHost       = "VLLM_NIXL_SIDE_CHANNEL_HOST"
	envNixlPort       = "VLLM_NIXL_SIDE_CHANNEL_PORT"
	phasePrefill      = "Prefill"
	phaseDecode       = "Decode"
	roleLabelPrefill  = "prefill"
	roleLabelDecode   = "decode"
	sidecarName       = "pd-sidecar"
	engineName        = "engine"
	devShm            = "/dev/shm"
	portFlag          = "--port"
	nixlVolumeMedium  = "Memory"
	servingLabelValue = "true"
)

// disaggregate decorates the prefill and decode engines' workloads of a
// PrefillDecode replica (routing._disaggregated): both engines' serving
// pods get the role labels and NIXL's shared memory and side channel, and
// the decode engine's a pd-sidecar in front of its engine.
func disaggregate(out []Resource, r *v1alpha1.ModelReplica) error {
	prefill, decode := "", ""
	for _, e := range r.Spec.Engines {
		switch {
		case e.Phase == phasePrefill && prefill == "":
			prefill = e.Name
		case e.Phase == phaseDecode && decode == "":
			decode = e.Name
		}
	}
	if prefill == "" || decode == "" {
		return errors.New("serving mode PrefillDecode needs an engine of phase Prefill and one of phase Decode")
	}
	for _, eng := range []struct{ name, role string }{{prefill, roleLabelPrefill}, {decode, roleLabelDecode}} {
		m := workload(out, eng.name)
		if m == nil {
			return fmt.Errorf("engine %s has no workload", eng.name)
		}
		for _, tmpl := range servingTemplates(m) {
			labels := child(child(tmpl, "metadata"), "labels")
			labels[labelLLMDRole] = eng.role
			labels[labelLLMDServing] = servingLabelValue
			labels["app"] = r.Metadata.Name
			spec := child(tmpl, "spec")
			if eng.role == roleLabelDecode {
				addSidecar(spec)
			}
			addNixl(spec)
		}
	}
	return nil
}

// workload is the manifest of an engine's workload among what is composed.
func workload(out []Resource, engine string) map[string]any {
	for _, r := range out {
		if r.Key == WorkloadKey(engine) {
			return r.Manifest
		}
	}
	return nil
}

// servingTemplates are the pod templates of a workload that serve: a
// Deployment's template, a LeaderWorkerSet's leader's.
func servingTemplates(m map[string]any) []map[string]any {
	spec := child(m, "spec")
	if m["kind"] == KindDeployment {
		return []map[string]any{child(spec, "template")}
	}
	return []map[string]any{child(child(spec, "leaderWorkerTemplate"), "leaderTemplate")}
}

// child is m's map at key, created when absent.
func child(m map[string]any, key string) map[string]any {
	c, ok := m[key].(map[string]any)
	if !ok {
		c = map[string]any{}
		m[key] = c
	}
	return c
}

func engineContainer(spec map[string]any) map[string]any {
	ctrs, _ := spec["containers"].([]any)
	for _, c := range ctrs {
		if m, ok := c.(map[string]any); ok && m["name"] == engineName {
			return m
		}
	}
	return nil
}

// addSidecar moves the decode engine to its own port and puts the
// pd-sidecar on EnginePort in front of it.
func addSidecar(spec map[string]any) {
	engine := engineContainer(spec)
	if engine == nil {
		return
	}
	port := decodeEnginePort
	args, _ := engine["args"].([]any)
	if v, ok := flagValue(args, portFlag); ok {
		if p, err := strconv.Atoi(v); err == nil {
			port = p
		}
	}
	engine["ports"] = []any{map[string]any{"containerPort": int64(port)}}
	engine["readinessProbe"] = readinessProbe(port)
	ctrs, _ := spec["containers"].([]any)
	spec["containers"] = append(ctrs, map[string]any{
		"name":           sidecarName,
		"image":          SidecarImage,
		"args":           []any{"--secure-proxy=false", "--kv-connector=nixlv2", fmt.Sprintf("--vllm-port=%d", port)},
		"ports":          []any{map[string]any{"containerPort": int64(EnginePort)}},
		"readinessProbe": readinessProbe(EnginePort),
	})
}

// flagValue is the value of a `--flag value` or `--flag=value` argument.
func flagValue(args []any, flag string) (string, bool) {
	for i, a := range args {
		s, _ := a.(string)
		if s == flag && i+1 < len(args) {
			v, _ := args[i+1].(string)
			return v, true
		}
		if v, ok := strings.CutPrefix(s, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

// addNixl gives an engine NIXL's shared memory volume and side channel.
func addNixl(spec map[string]any) {
	volumes, _ := spec["volumes"].([]any)
	if !hasNamed(volumes, nixlShmVolume) {
		spec["volumes"] = append(volumes, map[string]any{"name": nixlShmVolume, "emptyDir": map[string]any{"medium": nixlVolumeMedium}})
	}
	engine := engineContainer(spec)
	if engine == nil {
		return
	}
	mounts, _ := engine["volumeMounts"].([]any)
	if !hasMountAt(mounts, devShm) {
		engine["volumeMounts"] = append(mounts, map[string]any{"name": nixlShmVolume, "mountPath": devShm})
	}
	env, _ := engine["env"].([]any)
	if !hasNamed(env, envNixlHost) {
		env = append(env, map[string]any{"name": envNixlHost, "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "status.podIP"}}})
	}
	if !hasNamed(env, envNixlPort) {
		env = append(env, map[string]any{"name": envNixlPort, "value": nixlSideChannel})
	}
	engine["env"] = env
}

func hasNamed(list []any, name string) bool {
	for _, e := range list {
		if m, ok := e.(map[string]any); ok && m["name"] == name {
			return true
		}
	}
	return false
}

func hasMountAt(mounts []any, path string) bool {
	for _, e := range mounts {
		if m, ok := e.(map[string]any); ok && m["mountPath"] == path {
			return true
		}
	}
	return false
}
