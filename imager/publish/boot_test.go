package publish

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/manifest"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

// What the Image Factory puts in the UKI for a schematic with
// customization.extraKernelArgs: [talos.config=metal-iso].
const metalISOCmdline = "talos.platform=metal console=tty0 init_on_alloc=1 slab_nomerge pti=on consoleblank=0 nvme_core.io_timeout=4294967295 printk.devkmsg=on talos.config=metal-iso"

func talosImage(t *testing.T, sectorSize int, cmdline string) []byte {
	t.Helper()
	b, err := testimage.Bytes(testimage.Spec{Size: 24 << 20, DataBytes: 2 << 20, SectorSize: sectorSize, Seed: 11, UKICmdline: cmdline})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func publishedManifest(t *testing.T, c *minio.Client) *manifest.Manifest {
	t.Helper()
	b, _ := fetch(t, c, dir()+"manifest.json")
	m, err := manifest.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// publish reads the kernel arguments from the image itself (the UKI in its
// EFI partition), through the compressed stream, and records them.
func TestPublishRecordsKernelArgs(t *testing.T) {
	s3 := startS3(t)
	s3.MustCreateBucket(t, bucket)
	c := s3.MustClient(t)
	raw := talosImage(t, 512, metalISOCmdline)
	in := writeFile(t, "metal-amd64.raw.xz", compress(t, "xz", raw, "-0", "-T2"))

	r := publish(t, s3.env(nil), baseArgs(in)...)
	if r.code != 0 {
		t.Fatalf("publish: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	want := manifest.Boot{KernelArgs: metalISOCmdline, Source: "image:EFI/Linux/Talos-v1.12.0.efi", MetalISO: true}
	if m := publishedManifest(t, c); m.Boot == nil || *m.Boot != want {
		t.Fatalf("boot %+v, want %+v", m.Boot, want)
	}
	if strings.Contains(r.stderr, "lack") {
		t.Fatalf("warning for an image that has the argument:\n%s", r.stderr)
	}

	// --kernel-args is checked against the image: the same ones pass...
	r = publish(t, s3.env(nil), baseArgs(in, "--kernel-args", " "+metalISOCmdline+" ")...)
	if r.code != 0 || r.sum.ManifestAction != "skipped" {
		t.Fatalf("same --kernel-args: exit %d %s\n%s", r.code, r.sum.ManifestAction, r.stderr)
	}
	// ...others are refused before anything is uploaded.
	keys := listKeys(t, c)
	r = publish(t, s3.env(nil), baseArgs(in, "--kernel-args", "talos.platform=metal talos.config=metal-iso")...)
	if r.code != ExitCode(CodeInvalidArgument) || r.sum.Error == nil || !strings.Contains(r.sum.Error.Message, "differ from the image") {
		t.Fatalf("other --kernel-args: exit %d %+v", r.code, r.sum.Error)
	}
	if got := listKeys(t, c); len(got) != len(keys) {
		t.Fatalf("bucket changed: %v", got)
	}
}

func TestPublishKernelArgsCases(t *testing.T) {
	s3 := startS3(t)
	s3.MustCreateBucket(t, bucket)
	c := s3.MustClient(t)
	for _, tc := range []struct {
		name    string
		raw     []byte
		args    []string
		want    manifest.Boot
		warning string
	}{
		{"4Kn image", talosImage(t, 4096, metalISOCmdline), []string{"--sector-size", "4096"},
			manifest.Boot{KernelArgs: metalISOCmdline, Source: "image:EFI/Linux/Talos-v1.12.0.efi", MetalISO: true}, ""},
		{"image without the argument is flagged", talosImage(t, 512, "talos.platform=metal console=tty0"), nil,
			manifest.Boot{KernelArgs: "talos.platform=metal console=tty0", Source: "image:EFI/Linux/Talos-v1.12.0.efi"}, "lack talos.config=metal-iso"},
		{"unreadable: unknown", makeRaw(4<<20, 3), nil,
			manifest.Boot{Source: manifest.BootSourceUnknown}, "pass --kernel-args"},
		{"unreadable: the flag", makeRaw(4<<20, 4), []string{"--kernel-args", "talos.platform=metal talos.config=metal-iso"},
			manifest.Boot{KernelArgs: "talos.platform=metal talos.config=metal-iso", Source: manifest.BootSourceFlag, MetalISO: true}, "recording --kernel-args"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := writeFile(t, "metal-amd64.raw", tc.raw)
			r := publish(t, s3.env(nil), baseArgs(in, append(tc.args, "--force")...)...)
			if r.code != 0 {
				t.Fatalf("publish: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
			}
			if m := publishedManifest(t, c); m.Boot == nil || *m.Boot != tc.want {
				t.Fatalf("boot %+v, want %+v", m.Boot, tc.want)
			}
			if tc.warning != "" && !strings.Contains(r.stderr, tc.warning) {
				t.Fatalf("no warning %q:\n%s", tc.warning, r.stderr)
			}
		})
	}
}

// A manifest an older publish wrote (no boot) gains it on republish; the
// image files are not uploaded again.
func TestRepublishAddsBoot(t *testing.T) {
	s3 := startS3(t)
	s3.MustCreateBucket(t, bucket)
	c := s3.MustClient(t)
	in := writeFile(t, "metal-amd64.raw", talosImage(t, 512, metalISOCmdline))
	if r := publish(t, s3.env(nil), baseArgs(in)...); r.code != 0 {
		t.Fatalf("publish: %s", r.stderr)
	}
	m := publishedManifest(t, c)
	m.Boot = nil
	old, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutObject(context.Background(), bucket, dir()+"manifest.json", bytes.NewReader(old), int64(len(old)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	r := publish(t, s3.env(nil), baseArgs(in)...)
	if r.code != 0 || r.sum.ManifestAction != "uploaded" {
		t.Fatalf("republish: exit %d manifest %s", r.code, r.sum.ManifestAction)
	}
	for _, o := range r.sum.Objects {
		if o.Action != "skipped" {
			t.Errorf("%s uploaded again", o.Key)
		}
	}
	if m := publishedManifest(t, c); m.Boot == nil || !m.Boot.MetalISO {
		t.Fatalf("boot after republish: %+v", m.Boot)
	}
}

// Without --maintenance-api, an image that does not read its config from the
// disk (or whose kernel arguments cannot be read) is refused before anything
// is uploaded: under the default configDelivery: Disk its NodeClass would
// never be Ready.
func TestPublishRefusesAnImageWithoutMetalISO(t *testing.T) {
	s3 := startS3(t)
	s3.MustCreateBucket(t, bucket)
	c := s3.MustClient(t)
	for _, tc := range []struct {
		name string
		raw  []byte
		want string
	}{
		{"lacks the argument", talosImage(t, 512, "talos.platform=metal console=tty0"), "em-imager schematic"},
		{"unknown arguments", makeRaw(4<<20, 5), "--maintenance-api"},
	} {
		in := writeFile(t, "metal-amd64.raw", tc.raw)
		args := []string{"--input", in, "--schematic", schematic, "--talos-version", "v1.12.0", "--prefix", "images", "--block-size", "1MiB"}
		r := publish(t, s3.env(nil), args...)
		if r.code != ExitCode(CodeInvalidArgument) || r.sum.Error == nil || !strings.Contains(r.sum.Error.Message, tc.want) {
			t.Errorf("%s: exit %d %+v, want invalid_argument naming %q", tc.name, r.code, r.sum.Error, tc.want)
		}
		if keys := listKeys(t, c); len(keys) != 0 {
			t.Errorf("%s: uploaded %v", tc.name, keys)
		}
	}
}
