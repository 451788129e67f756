package ociimage_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/build/ociimage"
)

// testPush pushes what Build wrote to go-containerregistry's registry
// (distribution API, in process; tests never push anywhere else) and pulls
// it back: the registry serves the same index, platform by platform.
func testPush(t *testing.T, ctx context.Context, built *ociimage.Result, version string) {
	out := filepath.Dir(built.Images[0].Layout)
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://") + "/team"

	for _, b := range built.Images {
		want, digest, err := ociimage.Push(ctx, out, b.Image, host)
		if err != nil {
			t.Fatalf("push %s: %v", b.Image.Name, err)
		}
		if digest != b.Digest || want.String() != host+"/"+b.Image.Name+":"+version {
			t.Errorf("pushed %s@%s, want %s/%s:%s@%s", want, digest, host, b.Image.Name, version, b.Digest)
		}
		idx, err := remote.Index(want, remote.WithContext(ctx))
		if err != nil {
			t.Fatalf("pull %s: %v", want, err)
		}
		if d, _ := idx.Digest(); d != b.Digest {
			t.Errorf("%s serves %s, built %s", want, d, b.Digest)
		}
		m, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range b.Platforms {
			if i >= len(m.Manifests) || m.Manifests[i].Digest != p.Digest {
				t.Errorf("%s linux/%s: registry index %v, want %s", want, p.Arch, m.Manifests, p.Digest)
				continue
			}
			im, err := remote.Image(want.Context().Digest(p.Digest.String()), remote.WithContext(ctx))
			if err != nil {
				t.Fatal(err)
			}
			// Layers are fetched and verified against their digests.
			if _, err := io.Copy(io.Discard, mutate.Extract(im)); err != nil {
				t.Errorf("pull %s linux/%s layers: %v", want, p.Arch, err)
			}
		}
	}

	t.Run("unauthorized", func(t *testing.T) {
		var hits atomic.Int32
		deny := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
		}))
		defer deny.Close()
		_, _, err := ociimage.Push(ctx, out, ociimage.Imager, strings.TrimPrefix(deny.URL, "http://")+"/team")
		if err == nil || !strings.Contains(err.Error(), "401 Unauthorized") || !strings.Contains(err.Error(), "docker login") || hits.Load() == 0 {
			t.Errorf("push to a registry refusing anonymous pushes: %v (%d requests)", err, hits.Load())
		}
	})
	t.Run("no layout", func(t *testing.T) {
		_, _, err := ociimage.Push(ctx, t.TempDir(), ociimage.Controller, host)
		if err == nil || !strings.Contains(err.Error(), "make image") {
			t.Errorf("push without a built layout: %v, want a hint to run make image", err)
		}
	})
	t.Run("bad registry", func(t *testing.T) {
		// A bare name would mean Docker Hub's library/: refused, say where.
		_, _, err := ociimage.Push(ctx, out, ociimage.Controller, "team")
		if err == nil || !strings.Contains(err.Error(), `registry "team"`) {
			t.Errorf("push to registry \"team\": %v", err)
		}
	})
}
