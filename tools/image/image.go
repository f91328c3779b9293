// Package image builds fleet-scheduler's runtime images without a Docker
// engine: one layer on an empty base, holding a static binary (the
// function's at /function, by default; the cluster agent's at
// /cluster-agent) and the few files a distroless nonroot image has that the
// binary can notice (a passwd and group entry for nonroot, /home/nonroot,
// /tmp). Index makes one multi-platform image of the images of several
// architectures.
//
// The result matches the Dockerfile's image (gcr.io/distroless/static-debian12:nonroot
// plus /function) in everything the function uses: the entrypoint, the
// exposed port, the user and the working directory. It does not carry
// distroless' CA bundle, tzdata or license files; the function makes no
// outgoing TLS calls and reads no time zones.
package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The runtime contract of the image, shared with the tests that check it.
const (
	// BinaryPath is where the function binary lives, and the entrypoint.
	BinaryPath = "/function"
	// Port is the port the function serves gRPC on by default (--address).
	Port = "9443/tcp"
	// UID and GID are distroless' nonroot user and group.
	UID = 65532
	GID = 65532
	// User is the config's User field: numeric, so that Kubernetes'
	// runAsNonRoot check can verify it without reading /etc/passwd.
	User = "65532:65532"
)

// passwd and group hold root and nonroot, as distroless' nonroot images do.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group  = "root:x:0:\nnonroot:x:65532:\n"
)

// Options of a runtime image build.
type Options struct {
	// Arch is the GOARCH the binary was built for, e.g. amd64 or arm64.
	Arch string
	// Entrypoint is where the binary lives in the image, and the image's
	// entrypoint; empty is BinaryPath, the function's.
	Entrypoint string
	// Ports are the ports the image exposes, as "<port>/tcp"; nil is
	// Port, the function's.
	Ports []string
	// Created is the image's creation time and every file's modification
	// time. Fix it (e.g. from SOURCE_DATE_EPOCH) for reproducible images.
	Created time.Time
	// Labels are added to the image config, e.g. org.opencontainers.image.*.
	Labels map[string]string
}

// Build returns the runtime image for a static linux binary.
func Build(binary []byte, o Options) (v1.Image, error) {
	if o.Arch == "" {
		return nil, fmt.Errorf("cannot build image: no architecture")
	}
	if len(binary) == 0 {
		return nil, fmt.Errorf("cannot build image: empty binary")
	}
	if o.Created.IsZero() {
		o.Created = time.Unix(0, 0).UTC()
	}
	if o.Entrypoint == "" {
		o.Entrypoint = BinaryPath
	}
	if !strings.HasPrefix(o.Entrypoint, "/") || strings.Count(o.Entrypoint, "/") != 1 || len(o.Entrypoint) < 2 {
		return nil, fmt.Errorf("cannot build image: entrypoint %q is not a file of the root directory (/<name>)", o.Entrypoint)
	}
	if o.Ports == nil {
		o.Ports = []string{Port}
	}

	layerTar, err := rootfs(binary, o.Entrypoint[1:], o.Created)
	if err != nil {
		return nil, fmt.Errorf("cannot build root filesystem: %w", err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("cannot make image layer: %w", err)
	}

	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		History:   v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "fleet-scheduler tools/image: COPY " + o.Entrypoint[1:] + " " + o.Entrypoint, Comment: "static binary, passwd and group for nonroot"},
		MediaType: types.OCILayer,
	})
	if err != nil {
		return nil, fmt.Errorf("cannot append image layer: %w", err)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("cannot read image config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = o.Arch
	cf.Created = v1.Time{Time: o.Created}
	cf.Config.Entrypoint = []string{o.Entrypoint}
	cf.Config.Cmd = nil
	cf.Config.User = User
	cf.Config.WorkingDir = "/"
	cf.Config.ExposedPorts = map[string]struct{}{}
	for _, p := range o.Ports {
		cf.Config.ExposedPorts[p] = struct{}{}
	}
	// TLS_SERVER_CERTS_DIR is deliberately unset: Crossplane's function
	// runtime sets it and mounts the certificates it names.
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cf.Config.Labels = o.Labels

	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("cannot set image config: %w", err)
	}
	return img, nil
}

// WriteTarball writes img as an image tarball (the `docker save` layout that
// `crossplane xpkg build --embed-runtime-image-tarball` reads), tagged tag.
func WriteTarball(path, tag string, img v1.Image) error {
	ref, err := nameTag(tag)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(path, ref, img); err != nil {
		return fmt.Errorf("cannot write image tarball %s: %w", path, err)
	}
	return nil
}

func nameTag(tag string) (name.Tag, error) {
	t, err := name.NewTag(tag)
	if err != nil {
		return name.Tag{}, fmt.Errorf("cannot parse image tag %q: %w", tag, err)
	}
	return t, nil
}

type entry struct {
	name string
	mode int64
	uid  int
	gid  int
	body []byte
	dir  bool
}

// rootfs returns the uncompressed tar of the image's only layer, the binary
// at /<name>. Entries and their metadata are fixed, so the same binary and
// time give the same digest.
func rootfs(binary []byte, name string, mtime time.Time) ([]byte, error) {
	entries := []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: name, mode: 0o755, body: binary},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, uid: UID, gid: GID, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("cannot write %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, fmt.Errorf("cannot write %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("cannot close layer tar: %w", err)
	}
	return buf.Bytes(), nil
}
