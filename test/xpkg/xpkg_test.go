// Package xpkg tests a release end to end: ./hack/release.sh builds every
// artefact (no Docker) and pushes it to a registry served in-process on
// loopback; the test pulls each back with go-containerregistry and checks
// what Crossplane's package manager and its function runtime, the kubelet
// and Helm will read from it.
package xpkg

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"go.yaml.in/yaml/v3"

	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
)

// Crossplane marks the layer that holds the package YAML stream: the config
// label io.crossplane.xpkg:<layer digest> and, once pushed, the manifest's
// layer annotation io.crossplane.xpkg are "base".
const (
	xpkgAnnotation = "io.crossplane.xpkg"
	xpkgBase       = "base"
	packageFile    = "package.yaml"
)

var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// releaseInput is the function's input TestRelease builds into the rebuilt
// Configuration: not the defaults.
const releaseInput = `# The fleet's own.
apiVersion: scheduler.fn.modelplane.ai/v1beta1
kind: Input
assumedBinding: LeastFree
replaceUnscheduledAfter: 1m
observationMaxAge: 4m
agentRelease: {chart: "oci://registry.example.com/acme/charts/cluster-agent", version: 0.1.0}
`

// TestRelease runs ./hack/release.sh, the one command that builds and
// pushes every artefact of a release, against a registry on loopback, and
// pulls each back as Crossplane, the kubelet and Helm would.
func TestRelease(t *testing.T) {
	cli := testenv.CrossplaneCLI(t)
	root := testenv.RepoRoot(t)
	out := t.TempDir()
	registry := strings.SplitN(testenv.ServeRegistry(t), "/", 2)[0] + "/acme"
	input := filepath.Join(t.TempDir(), "input.yaml")
	if err := os.WriteFile(input, []byte(releaseInput), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"OUTPUT_DIR=" + out, "CROSSPLANE=" + cli, "INPUT=" + input,
		"MODELPLANE_APIS=" + filepath.Join(testenv.ModelplaneStandIn(t), "apis"),
		// No credentials of this machine's leak in.
		"DOCKER_CONFIG=" + t.TempDir(), "HELM_REGISTRY_CONFIG=" + filepath.Join(t.TempDir(), "config.json"),
	}
	log, err := testenv.Run(t.Context(), root, env, "./hack/release.sh", registry, "v0.1.0")
	t.Logf("./hack/release.sh:\n%s", log)
	if err != nil {
		t.Fatalf("./hack/release.sh: %v", err)
	}

	t.Run("fleet-scheduler", func(t *testing.T) {
		checkFunctionPackage(t, registry+"/fleet-scheduler:v0.1.0", "fleet-scheduler", filepath.Join(out, "bin"), "function",
			readYAML(t, filepath.Join(root, "package", "input", "scheduler.fn.modelplane.ai_inputs.yaml")))
	})
	t.Run("fleet-scheduler-relay", func(t *testing.T) {
		// Its step input is fleet-scheduler's Input, whose CRD the
		// function's package installs.
		checkFunctionPackage(t, registry+"/fleet-scheduler-relay:v0.1.0", "fleet-scheduler-relay", filepath.Join(out, "bin"), "relay")
	})
	t.Run("cluster-agent", func(t *testing.T) {
		for arch, img := range multiArch(t, registry+"/cluster-agent:v0.1.0") {
			t.Run("linux/"+arch, func(t *testing.T) {
				layers, err := img.Layers()
				if err != nil {
					t.Fatal(err)
				}
				bin, err := os.ReadFile(filepath.Join(out, "bin", "linux_"+arch, "cluster-agent"))
				if err != nil {
					t.Fatal(err)
				}
				checkRuntime(t, img, layers, arch, bin, runtimeWant{Entrypoint: "/cluster-agent", Ports: []string{"8080/tcp", "8081/tcp"}})
			})
		}
	})
	t.Run("charts/cluster-agent", func(t *testing.T) {
		checkChart(t, registry+"/charts/cluster-agent:0.1.0", registry+"/cluster-agent", "v0.1.0")
	})
	t.Run("modelplane", func(t *testing.T) {
		checkConfiguration(t, registry+"/modelplane:v0.3.1-fleet-scheduler-v0.1.0", registry)
	})
}

// multiArch pulls an image index and returns its images by architecture,
// failing unless it holds exactly linux/amd64 and linux/arm64.
func multiArch(t *testing.T, ref string) map[string]v1.Image {
	t.Helper()
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(tag)
	if err != nil {
		t.Fatalf("cannot pull the index %s: %v", ref, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, 0, len(im.Manifests))
	images := map[string]v1.Image{}
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("index entry %s has no platform", d.Digest)
		}
		got = append(got, d.Platform.OS+"/"+d.Platform.Architecture)
		img, err := remote.Image(tag.Context().Digest(d.Digest.String()))
		if err != nil {
			t.Fatalf("cannot pull %s: %v", d.Digest, err)
		}
		images[d.Platform.Architecture] = img
	}
	if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64"}, got); diff != "" {
		t.Fatalf("platforms of %s: -want, +got:\n%s", ref, diff)
	}
	return images
}

// checkFunctionPackage checks a function's multi-platform package: for each
// platform, its package stream (the meta named name and wantCRDs) and its
// runtime, whose binary is bin/linux_<arch>/<binary>.
func checkFunctionPackage(t *testing.T, ref, name, bin, binary string, wantCRDs ...map[string]any) {
	t.Helper()
	for arch, img := range multiArch(t, ref) {
		t.Run("linux/"+arch, func(t *testing.T) {
			pkg, rt := splitLayers(t, img)
			checkPackageStream(t, pkg, name, wantCRDs...)
			b, err := os.ReadFile(filepath.Join(bin, "linux_"+arch, binary))
			if err != nil {
				t.Fatal(err)
			}
			checkRuntime(t, img, rt, arch, b, runtimeWant{Entrypoint: "/function", Ports: []string{"9443/tcp"}})
		})
	}
}

// splitLayers returns the package YAML stream from the layer annotated as the
// package's base, and every other layer (the runtime image's).
func splitLayers(t *testing.T, img v1.Image) ([]byte, []v1.Layer) {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var (
		pkg  []byte
		rest []v1.Layer
	)
	for i, l := range layers {
		if m.Layers[i].Annotations[xpkgAnnotation] != xpkgBase {
			rest = append(rest, l)
			continue
		}
		if pkg != nil {
			t.Fatal("more than one layer is annotated as the package base")
		}
		files := untar(t, l)
		b, ok := files[packageFile]
		if !ok {
			t.Fatalf("package layer has no %s (has %v)", packageFile, keys(files))
		}
		pkg = b
	}
	if pkg == nil {
		t.Fatalf("no layer is annotated %s: %s; Crossplane would not find the package", xpkgAnnotation, xpkgBase)
	}
	return pkg, rest
}

// checkPackageStream checks the package YAML stream holds exactly the
// Function meta named name and the CRDs wantCRDs.
func checkPackageStream(t *testing.T, stream []byte, name string, wantCRDs ...map[string]any) {
	t.Helper()
	var (
		metas int
		crds  []map[string]any
	)
	for _, obj := range decodeYAML(t, "package stream", stream) {
		switch gvk := fmt.Sprintf("%v, Kind=%v", obj["apiVersion"], obj["kind"]); gvk {
		case "meta.pkg.crossplane.io/v1, Kind=Function":
			metas++
			want := map[string]any{"name": name, "crossplane": ">=v2.0.0-0", "capabilities": []any{"composition"}}
			got := map[string]any{
				"name":         dig(obj, "metadata", "name"),
				"crossplane":   dig(obj, "spec", "crossplane", "version"),
				"capabilities": dig(obj, "spec", "capabilities"),
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Function meta: -want, +got:\n%s", diff)
			}
		case "apiextensions.k8s.io/v1, Kind=CustomResourceDefinition":
			// The CLI re-encodes the typed CRD, which adds an empty status.
			delete(obj, "status")
			crds = append(crds, obj)
		default:
			t.Errorf("unexpected object in the package stream: %s", gvk)
		}
	}
	if metas != 1 {
		t.Errorf("package stream has %d Function metas, want 1:\n%s", metas, stream)
	}
	if diff := cmp.Diff(wantCRDs, crds, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("CRDs in the package: -want, +got:\n%s", diff)
	}
}

// runtimeWant is what an image's config must say: its entrypoint (the
// binary's path in the image) and the ports it exposes.
type runtimeWant struct {
	Entrypoint string
	Ports      []string
}

// checkRuntime checks what a runtime runs (Crossplane's function runtime,
// or the kubelet for the agent): the image config's entrypoint is the
// binary, which is in a layer, built for this platform, static, and byte for
// byte the one the build wrote.
func checkRuntime(t *testing.T, img v1.Image, layers []v1.Layer, arch string, wantBin []byte, w runtimeWant) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	type runtimeConfig struct {
		OS, Arch, User, WorkingDir string
		Entrypoint                 []string
		Ports                      []string
		TLSEnv                     bool
	}
	got := runtimeConfig{OS: cf.OS, Arch: cf.Architecture, User: cf.Config.User, WorkingDir: cf.Config.WorkingDir, Entrypoint: cf.Config.Entrypoint}
	got.Ports = keys(cf.Config.ExposedPorts)
	for _, e := range cf.Config.Env {
		if strings.HasPrefix(e, "TLS_SERVER_CERTS_DIR=") {
			got.TLSEnv = true
		}
	}
	// Literal values, not tools/image's constants: this is the contract with
	// the runtime (the function template's distroless nonroot image).
	want := runtimeConfig{OS: "linux", Arch: arch, User: "65532:65532", WorkingDir: "/", Entrypoint: []string{w.Entrypoint}, Ports: w.Ports}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("runtime image config: -want, +got:\n%s", diff)
	}

	fs := map[string][]byte{}
	for _, l := range layers {
		maps.Copy(fs, untar(t, l))
	}
	entrypoint := w.Entrypoint
	bin, ok := fs[strings.TrimPrefix(entrypoint, "/")]
	if !ok {
		t.Fatalf("the entrypoint %s is in no runtime layer (files: %v)", entrypoint, keys(fs))
	}
	if sha256.Sum256(bin) != sha256.Sum256(wantBin) {
		t.Errorf("%s in the image is not the binary built for %s", entrypoint, arch)
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("%s is not an ELF binary: %v", entrypoint, err)
	}
	if f.Machine != elfMachines[arch] {
		t.Errorf("%s is built for %s, want %s", entrypoint, f.Machine, elfMachines[arch])
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked; the image has no libc", entrypoint)
		}
	}
	if !strings.Contains(string(fs["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("etc/passwd has no nonroot user 65532:\n%s", fs["etc/passwd"])
	}
}

// untar returns the regular files of a layer by path.
func untar(t *testing.T, l v1.Layer) map[string][]byte {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("cannot read layer: %v", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[path.Clean(strings.TrimPrefix(h.Name, "/"))] = b
	}
}

func readYAML(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeYAML(t, file, b)
	if len(objs) != 1 {
		t.Fatalf("%s holds %d objects, want 1", file, len(objs))
	}
	return objs[0]
}

// decodeYAML returns the objects of a YAML stream, skipping empty documents.
func decodeYAML(t *testing.T, what string, b []byte) []map[string]any {
	t.Helper()
	var objs []map[string]any
	d := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var obj map[string]any
		err := d.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if obj != nil {
			objs = append(objs, obj)
		}
	}
}

func dig(obj map[string]any, fields ...string) any {
	var v any = obj
	for _, f := range fields {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[f]
	}
	return v
}

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// pullImage pulls the image (not an index) ref names.
func pullImage(t *testing.T, ref string) v1.Image {
	t.Helper()
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(tag)
	if err != nil {
		t.Fatalf("cannot pull %s: %v", ref, err)
	}
	return img
}

// checkChart checks the chart pushed as an OCI artifact, as Helm's registry
// client reads it: the config and the chart's media types, its version,
// and its default image the release's.
func checkChart(t *testing.T, ref, image, version string) {
	t.Helper()
	img := pullImage(t, ref)
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(m.Config.MediaType), "application/vnd.cncf.helm.config.v1+json"; got != want {
		t.Errorf("config media type %s, want %s", got, want)
	}
	if len(m.Layers) != 1 || string(m.Layers[0].MediaType) != "application/vnd.cncf.helm.chart.content.v1.tar+gzip" {
		t.Fatalf("layers %v, want one of media type application/vnd.cncf.helm.chart.content.v1.tar+gzip", m.Layers)
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var meta map[string]any
	if err := yaml.Unmarshal(raw, &meta); err != nil {
		t.Fatalf("the chart's config: %v", err)
	}
	wantMeta := map[string]any{"name": "cluster-agent", "version": strings.TrimPrefix(version, "v"), "appVersion": version}
	gotMeta := map[string]any{"name": meta["name"], "version": meta["version"], "appVersion": meta["appVersion"]}
	if diff := cmp.Diff(wantMeta, gotMeta); diff != "" {
		t.Errorf("the chart's metadata: -want, +got:\n%s", diff)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := untar(t, layers[0])
	values, ok := files["cluster-agent/values.yaml"]
	if !ok {
		t.Fatalf("the chart has no cluster-agent/values.yaml (has %v)", keys(files))
	}
	var v map[string]any
	if err := yaml.Unmarshal(values, &v); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]any{"repository": image, "tag": version}, map[string]any{"repository": dig(v, "image", "repository"), "tag": dig(v, "image", "tag")}); diff != "" {
		t.Errorf("the chart's default image: -want, +got:\n%s", diff)
	}
}

// checkConfiguration checks the rebuilt Modelplane Configuration: it depends
// on the two Functions the release pushed under registry and on
// provider-kubernetes as Modelplane does, carries the extended
// InferenceCluster XRD, and its ModelDeployment Composition calls
// fleet-scheduler by the name the package manager gives that dependency.
func checkConfiguration(t *testing.T, ref, registry string) {
	t.Helper()
	img := pullImage(t, ref)
	stream, _ := splitLayers(t, img)
	var (
		deps, xrdFields, calls []string
		inputs                 = map[string]any{}
	)
	for _, obj := range decodeYAML(t, "package stream", stream) {
		switch fmt.Sprintf("%v/%v", obj["kind"], dig(obj, "metadata", "name")) {
		case "Configuration/modelplane":
			list, _ := dig(obj, "spec", "dependsOn").([]any)
			for _, d := range list {
				m, _ := d.(map[string]any)
				deps = append(deps, fmt.Sprintf("%v %v", m["package"], m["version"]))
			}
		case "CompositeResourceDefinition/inferenceclusters.modelplane.ai":
			b, err := yaml.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"observedAt", "observedNodes", "nodesByFreeDevices", "binding"} {
				if strings.Contains(string(b), f+":") {
					xrdFields = append(xrdFields, f)
				}
			}
		case "Composition/modeldeployments.modelplane.ai":
			steps, _ := dig(obj, "spec", "pipeline").([]any)
			for _, s := range steps {
				m, _ := s.(map[string]any)
				calls = append(calls, fmt.Sprint(dig(m, "functionRef", "name")))
				inputs["ModelDeployment"] = m["input"]
			}
		case "Composition/modelreplicas.modelplane.ai", "Composition/inferenceclusters.modelplane.ai":
			steps, _ := dig(obj, "spec", "pipeline").([]any)
			for _, s := range steps {
				m, _ := s.(map[string]any)
				if dig(m, "functionRef", "name") == "acme-fleet-scheduler-relay" {
					inputs[fmt.Sprint(dig(obj, "spec", "compositeTypeRef", "kind"))] = m["input"]
				}
			}
		}
	}
	// INPUT, in the three Compositions' steps of this project.
	var input map[string]any
	if err := yaml.Unmarshal([]byte(releaseInput), &input); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]any{"ModelDeployment": input, "ModelReplica": input, "InferenceCluster": input}, inputs); diff != "" {
		t.Errorf("the rebuilt Compositions' inputs: -want, +got:\n%s", diff)
	}
	want := map[string][]string{
		"dependsOn": {registry + "/fleet-scheduler v0.1.0", registry + "/fleet-scheduler-relay v0.1.0", "xpkg.upbound.io/upbound/provider-kubernetes v1.3.0"},
		"the InferenceCluster XRD's report fields":   {"observedAt", "observedNodes", "nodesByFreeDevices", "binding"},
		"what the ModelDeployment Composition calls": {"acme-fleet-scheduler"},
	}
	got := map[string][]string{"dependsOn": deps, "the InferenceCluster XRD's report fields": xrdFields, "what the ModelDeployment Composition calls": calls}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the rebuilt Configuration: -want, +got:\n%s", diff)
	}
}
