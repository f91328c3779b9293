package image

import (
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Index returns one multi-platform image (an OCI image index) of images of
// distinct architectures, each under the platform its config names.
func Index(imgs ...v1.Image) (v1.ImageIndex, error) {
	if len(imgs) == 0 {
		return nil, fmt.Errorf("cannot build an image index: no image")
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]bool{}
	for i, img := range imgs {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, fmt.Errorf("cannot read the config of image %d: %w", i, err)
		}
		p := v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}
		if p.OS == "" || p.Architecture == "" {
			return nil, fmt.Errorf("cannot build an image index: image %d names no OS and architecture", i)
		}
		if seen[p.String()] {
			return nil, fmt.Errorf("cannot build an image index: two images for %s", p.String())
		}
		seen[p.String()] = true
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return idx, nil
}

// OCI returns the image with OCI media types: its manifest, config and
// layers. An image read back from a tarball (the `docker save` layout) has
// Docker's; the bytes of every blob but the manifest stay the same.
func OCI(img v1.Image) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("cannot read the image config: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("cannot read the image layers: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	adds := make([]mutate.Addendum, 0, len(layers))
	for _, l := range layers {
		adds = append(adds, mutate.Addendum{Layer: l, MediaType: types.OCILayer})
	}
	out, err := mutate.Append(base, adds...)
	if err != nil {
		return nil, fmt.Errorf("cannot append the image layers: %w", err)
	}
	out, err = mutate.ConfigFile(out, cf)
	if err != nil {
		return nil, fmt.Errorf("cannot set the image config: %w", err)
	}
	return out, nil
}

// WriteLayout writes an image index as an OCI image layout directory, which
// registries' clients (crane, skopeo, oras, docker buildx imagetools with
// an oci-layout:// source) push as it is.
func WriteLayout(dir string, idx v1.ImageIndex) error {
	if _, err := layout.Write(dir, idx); err != nil {
		return fmt.Errorf("cannot write the OCI image layout %s: %w", dir, err)
	}
	return nil
}
