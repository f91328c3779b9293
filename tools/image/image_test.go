package image

import (
	"archive/tar"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// files lists the image's only layer: each entry's name and mode.
func files(t *testing.T, img v1.Image) map[string]int64 {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("want one layer, got %d (%v)", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]int64{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h.Mode
	}
}

func TestBuild(t *testing.T) {
	type want struct {
		entrypoint []string
		ports      []string
		binary     string
		err        bool
	}
	cases := map[string]struct {
		reason string
		opts   Options
		want   want
	}{
		"Function": {
			reason: "By default the image is the function's: /function, port 9443.",
			opts:   Options{Arch: "amd64"},
			want:   want{entrypoint: []string{"/function"}, ports: []string{"9443/tcp"}, binary: "function"},
		},
		"Agent": {
			reason: "The cluster agent's image has its own entrypoint and ports.",
			opts:   Options{Arch: "arm64", Entrypoint: "/cluster-agent", Ports: []string{"8080/tcp", "8081/tcp"}},
			want:   want{entrypoint: []string{"/cluster-agent"}, ports: []string{"8080/tcp", "8081/tcp"}, binary: "cluster-agent"},
		},
		"NestedEntrypoint": {
			reason: "The binary lives in the root directory.",
			opts:   Options{Arch: "amd64", Entrypoint: "/usr/bin/agent"},
			want:   want{err: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			img, err := Build([]byte("\x7fELF binary"), tc.opts)
			if tc.want.err {
				if err == nil {
					t.Errorf("\n%s\nBuild(...): want an error", tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("\n%s\nBuild(...): %v", tc.reason, err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			var ports []string
			for p := range cf.Config.ExposedPorts {
				ports = append(ports, p)
			}
			slices.Sort(ports)
			got := want{entrypoint: cf.Config.Entrypoint, ports: ports}
			if mode, ok := files(t, img)[tc.want.binary]; ok && mode == 0o755 {
				got.binary = tc.want.binary
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("\n%s\nBuild(...): -want, +got:\n%s", tc.reason, diff)
			}
			if cf.Config.User != User || cf.Architecture != tc.opts.Arch || cf.OS != "linux" {
				t.Errorf("\n%s\nuser %q, platform %s/%s; want %s, linux/%s", tc.reason, cf.Config.User, cf.OS, cf.Architecture, User, tc.opts.Arch)
			}
		})
	}
}

func TestIndex(t *testing.T) {
	build := func(arch string) v1.Image {
		img, err := Build([]byte("\x7fELF "+arch), Options{Arch: arch, Entrypoint: "/cluster-agent"})
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	idx, err := Index(build("amd64"), build("arm64"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range m.Manifests {
		got = append(got, d.Platform.String())
	}
	if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64"}, got); diff != "" {
		t.Errorf("the index's platforms: -want, +got:\n%s", diff)
	}
	if _, err := Index(build("amd64"), build("amd64")); err == nil {
		t.Error("an index of two amd64 images: want an error")
	}
	dir := t.TempDir()
	if err := WriteLayout(dir, idx); err != nil {
		t.Fatal(err)
	}
}

// TestOCIFromATarball checks that an image read back from its tarball is
// the image Build made once its media types are OCI's again.
func TestOCIFromATarball(t *testing.T) {
	img, err := Build([]byte("\x7fELF"), Options{Arch: "amd64", Entrypoint: "/cluster-agent"})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "img.tar")
	if err := WriteTarball(f, "cluster-agent:amd64", img); err != nil {
		t.Fatal(err)
	}
	back, err := tarball.ImageFromPath(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := back.MediaType(); mt == types.OCIManifestSchema1 {
		t.Fatalf("a tarball's image has media type %s; the test needs Docker's", mt)
	}
	oci, err := OCI(back)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	got, _ := oci.Digest()
	if want != got {
		t.Errorf("the tarball's image made OCI has digest %s, Build's %s", got, want)
	}
}
