package imagesource

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestNormalizeFormats pins the format preference: the default when empty,
// each format once in the order given, "raw" kept (it matches nothing).
func TestNormalizeFormats(t *testing.T) {
	got, err := normalizeFormats(nil)
	if err != nil || !slices.Equal(got, DefaultFormatPreference) {
		t.Fatalf("default: %v %v", got, err)
	}
	got, err = normalizeFormats([]string{"xz", " RAW ", "xz"})
	if err != nil || !slices.Equal(got, []string{"xz", "raw"}) {
		t.Fatalf("dedup and raw: %v %v", got, err)
	}
	if _, err := normalizeFormats([]string{"gzip"}); !errors.Is(err, ErrInvalidSettings) || !strings.Contains(err.Error(), "formatPreference") {
		t.Fatalf("gzip: %v", err)
	}
}

// TestLocateManifest pins where the manifest is looked for, and what each
// way of naming it needs from the controller.
func TestLocateManifest(t *testing.T) {
	pin := strings.Repeat("a", 64)
	n := &normalized{Settings: Settings{ManifestURL: "s3://images/talos/manifest.json"}}
	if err := n.locateByURL(true); err != nil || n.bucket != "images" || n.key != "talos/manifest.json" || n.httpURL != nil {
		t.Fatalf("s3 URL: %+v %v", n, err)
	}
	n = &normalized{Settings: Settings{ManifestURL: "s3://images/talos/manifest.json"}}
	if err := n.locateByURL(false); err == nil || !strings.Contains(err.Error(), "needs the controller's S3 endpoint") {
		t.Fatalf("s3 URL without S3: %v", err)
	}
	n = &normalized{Settings: Settings{ManifestURL: "http://h/m.json", ManifestSHA256: pin}}
	if err := n.locateByURL(false); err != nil || n.httpURL == nil || n.httpURL.Host != "h" {
		t.Fatalf("pinned plain http needs no S3: %+v %v", n, err)
	}
	n = &normalized{Settings: Settings{ManifestURL: "https:///m.json"}}
	if err := n.locateByURL(true); err == nil || !strings.Contains(err.Error(), "has no host") {
		t.Fatalf("no host: %v", err)
	}

	n = &normalized{Settings: Settings{SchematicID: schematic, TalosVersion: "v1.12.0", Arch: "amd64"}}
	if err := n.locateInBucket("fallback", true); err != nil || n.bucket != "fallback" || !strings.HasSuffix(n.key, "manifest.json") {
		t.Fatalf("default bucket: %+v %v", n, err)
	}
	n = &normalized{Settings: Settings{SchematicID: schematic, TalosVersion: "v1.12.0", Arch: "amd64", Bucket: "mine"}}
	if err := n.locateInBucket("fallback", false); !errors.Is(err, ErrInvalidSettings) || !strings.Contains(err.Error(), `bucket "mine"`) {
		t.Fatalf("bucket without S3: %v", err)
	}
	n = &normalized{Settings: Settings{SchematicID: schematic, TalosVersion: "v1.12.0", Arch: "amd64"}}
	if err := n.locateInBucket("", true); err == nil || !strings.Contains(err.Error(), "bucket: not set") {
		t.Fatalf("no bucket: %v", err)
	}
}
