package imagesource

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/manifest"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

func talosImage(t *testing.T, cmdline string) []byte {
	t.Helper()
	b, err := testimage.Bytes(testimage.Spec{Size: 16 << 20, DataBytes: 1 << 20, Seed: 2, UKICmdline: cmdline})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The image's boot record, as publish read it from the image, reaches the
// controller: whether Disk config delivery can work, and why not.
func TestResolveReportsBoot(t *testing.T) {
	e := startS3(t)
	e.MustCreateBucket(t, bucket)
	const metalISO = "talos.platform=metal console=tty0 talos.config=metal-iso"
	publishImage(t, e, "talos", "v1.12.1", "amd64", talosImage(t, metalISO), "zstd")
	publishImage(t, e, "talos", "v1.12.2", "amd64", talosImage(t, "talos.platform=metal console=tty0"), "zstd")
	publishImage(t, e, "talos", "v1.12.3", "amd64", makeRaw(4<<20, 3), "zstd") // no UKI: unknown
	publishImage(t, e, "talos", "v1.12.4", "amd64", talosImage(t, metalISO), "zstd")
	// v1.12.4's manifest as an older publish wrote it: no boot record.
	key := "talos/" + schematic + "/v1.12.4/manifest.json"
	c := e.MustClient(t)
	obj, err := c.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	buf.ReadFrom(obj)
	obj.Close()
	m, err := manifest.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	m.Boot = nil
	old, _ := m.Marshal()
	if _, err := c.PutObject(context.Background(), bucket, key, bytes.NewReader(old), int64(len(old)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}

	s := newSource(t, e.config())
	for _, tc := range []struct {
		version  string
		metalISO bool
		args     string
		why      string
	}{
		{"v1.12.1", true, metalISO, ""},
		{"v1.12.2", false, "talos.platform=metal console=tty0", "lack talos.config=metal-iso"},
		{"v1.12.3", false, "", "with --kernel-args"},
		{"v1.12.4", false, "", "older em-imager publish"},
	} {
		img, err := s.Resolve(context.Background(), settings("talos", tc.version))
		if err != nil {
			t.Fatal(err)
		}
		if img.MetalISO != tc.metalISO || img.KernelArgs != tc.args {
			t.Fatalf("%s: metalISO %v kernelArgs %q", tc.version, img.MetalISO, img.KernelArgs)
		}
		err = img.DiskConfigDelivery()
		if tc.why == "" {
			if err != nil {
				t.Fatalf("%s: %v", tc.version, err)
			}
			continue
		}
		wantReason(t, err, ErrNoMetalISO)
		if !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), tc.version) {
			t.Fatalf("%s: %v", tc.version, err)
		}
	}
}
