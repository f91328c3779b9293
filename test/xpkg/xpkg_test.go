// Package xpkg tests the function's Crossplane package end to end: it builds
// the .xpkg files with ./hack/build-xpkg.sh (no Docker), pushes them with
// `crossplane xpkg push` to a registry served in-process on loopback, pulls
// the result back with go-containerregistry and checks what Crossplane's
// package manager and its function runtime will read from it.
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

var archs = []string{"amd64", "arm64"}

var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

func TestPushAndPullMultiArchPackage(t *testing.T) {
	cli := testenv.CrossplaneCLI(t)
	root := testenv.RepoRoot(t)
	out := t.TempDir()

	// The one command the README documents, on a clean output directory.
	buildLog, err := testenv.Run(t.Context(), root, []string{"OUTPUT_DIR=" + out, "CROSSPLANE=" + cli}, "./hack/build-xpkg.sh")
	t.Logf("./hack/build-xpkg.sh:\n%s", buildLog)
	if err != nil {
		t.Fatalf("./hack/build-xpkg.sh: %v", err)
	}

	ref := testenv.ServeRegistry(t)
	files := make([]string, 0, len(archs))
	for _, a := range archs {
		files = append(files, filepath.Join(out, "xpkg", "fleet-scheduler-"+a+".xpkg"))
	}
	testenv.PushPackage(t, cli, ref, files...)

	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(tag)
	if err != nil {
		t.Fatalf("cannot pull the package index %s: %v", ref, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}

	got := make([]string, 0, len(im.Manifests))
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("index entry %s has no platform", d.Digest)
		}
		got = append(got, d.Platform.OS+"/"+d.Platform.Architecture)
	}
	if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64"}, got); diff != "" {
		t.Fatalf("platforms of the pushed index: -want, +got:\n%s", diff)
	}

	wantCRD := readYAML(t, filepath.Join(root, "package", "input", "scheduler.fn.modelplane.ai_inputs.yaml"))
	for _, d := range im.Manifests {
		arch := d.Platform.Architecture
		t.Run("linux/"+arch, func(t *testing.T) {
			img, err := remote.Image(tag.Context().Digest(d.Digest.String()))
			if err != nil {
				t.Fatalf("cannot pull %s: %v", d.Digest, err)
			}
			pkg, rt := splitLayers(t, img)

			checkPackageStream(t, pkg, wantCRD)

			bin, err := os.ReadFile(filepath.Join(out, "bin", "linux_"+arch, "function"))
			if err != nil {
				t.Fatal(err)
			}
			checkRuntime(t, img, rt, arch, bin)
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
// Function meta and the Input CRD that package/input/ holds.
func checkPackageStream(t *testing.T, stream []byte, wantCRD map[string]any) {
	t.Helper()
	var (
		metas int
		crds  int
	)
	for _, obj := range decodeYAML(t, "package stream", stream) {
		switch gvk := fmt.Sprintf("%v, Kind=%v", obj["apiVersion"], obj["kind"]); gvk {
		case "meta.pkg.crossplane.io/v1, Kind=Function":
			metas++
			want := map[string]any{"name": "fleet-scheduler", "crossplane": ">=v2.0.0-0", "capabilities": []any{"composition"}}
			got := map[string]any{
				"name":         dig(obj, "metadata", "name"),
				"crossplane":   dig(obj, "spec", "crossplane", "version"),
				"capabilities": dig(obj, "spec", "capabilities"),
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Function meta: -want, +got:\n%s", diff)
			}
		case "apiextensions.k8s.io/v1, Kind=CustomResourceDefinition":
			crds++
			// The CLI re-encodes the typed CRD, which adds an empty status.
			delete(obj, "status")
			if diff := cmp.Diff(wantCRD, obj); diff != "" {
				t.Errorf("CRD in the package differs from package/input: -want, +got:\n%s", diff)
			}
		default:
			t.Errorf("unexpected object in the package stream: %s", gvk)
		}
	}
	if metas != 1 || crds != 1 {
		t.Errorf("package stream has %d Function metas and %d CRDs, want 1 and 1:\n%s", metas, crds, stream)
	}
}

// checkRuntime checks what Crossplane's function runtime runs: the image
// config's entrypoint is the function binary, the binary is in a layer, built
// for this platform, static, and byte for byte the one built for the package.
func checkRuntime(t *testing.T, img v1.Image, layers []v1.Layer, arch string, wantBin []byte) {
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
	// Crossplane's function runtime (the template's distroless nonroot image).
	want := runtimeConfig{OS: "linux", Arch: arch, User: "65532:65532", WorkingDir: "/", Entrypoint: []string{"/function"}, Ports: []string{"9443/tcp"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("runtime image config: -want, +got:\n%s", diff)
	}

	fs := map[string][]byte{}
	for _, l := range layers {
		maps.Copy(fs, untar(t, l))
	}
	entrypoint := "/function"
	bin, ok := fs[strings.TrimPrefix(entrypoint, "/")]
	if !ok {
		t.Fatalf("the entrypoint %s is in no runtime layer (files: %v)", entrypoint, keys(fs))
	}
	if sha256.Sum256(bin) != sha256.Sum256(wantBin) {
		t.Errorf("%s in the image is not the binary ./hack/build-xpkg.sh built for %s", entrypoint, arch)
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
