package ociimage

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// ReadLayout opens the multi-arch index Build wrote to dir and returns it
// with its tag (the ref.name annotation).
func ReadLayout(dir string) (v1.ImageIndex, string, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, "", fmt.Errorf("%w: run make image first", err)
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, "", err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, "", err
	}
	if len(m.Manifests) != 1 {
		return nil, "", fmt.Errorf("%s holds %d entries, want the one index Build writes", dir, len(m.Manifests))
	}
	d := m.Manifests[0]
	tag := d.Annotations[AnnotationRefName]
	if tag == "" {
		return nil, "", fmt.Errorf("%s: index has no %s annotation", dir, AnnotationRefName)
	}
	idx, err := top.ImageIndex(d.Digest)
	if err != nil {
		return nil, "", err
	}
	return idx, tag, nil
}

// Push uploads the layout Build wrote for img under out to registry (e.g.
// ghcr.io/me), tagged with the layout's version, and returns the reference
// pushed and the index's digest. Credentials are the ones `docker login`, `podman login` or
// `crane auth login` saved, unless opts say otherwise.
func Push(ctx context.Context, out string, img Image, registry string, opts ...remote.Option) (name.Tag, v1.Hash, error) {
	idx, tag, err := ReadLayout(filepath.Join(out, img.Name))
	if err != nil {
		return name.Tag{}, v1.Hash{}, err
	}
	ref, err := img.Reference(registry, tag)
	if err != nil {
		return name.Tag{}, v1.Hash{}, err
	}
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	if err := remote.WriteIndex(ref, idx, opts...); err != nil {
		var terr *transport.Error
		if errors.As(err, &terr) && (terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden) {
			return name.Tag{}, v1.Hash{}, fmt.Errorf("push %s: %w (log in to %s first: docker login, podman login or crane auth login)", ref, err, ref.RegistryStr())
		}
		return name.Tag{}, v1.Hash{}, fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := idx.Digest()
	return ref, d, err
}
