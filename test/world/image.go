package world

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/publish"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/diskimage"
)

// Image is a Talos-like image published to the world's bucket.
type Image struct {
	TalosVersion string
	// RawSHA256 is what em-imager verifies and what the drift tag carries a prefix of.
	RawSHA256 string
	RawSize   int64
	// ManifestKey is the manifest's key in the bucket.
	ManifestKey string
}

// PublishImage builds a Talos-like image of the given version with
// Options.ImageKernelArgs (see test/sim/diskimage) and publishes it, zstd and xz, with the publish
// library `em-imager publish` runs. Publishing the same version twice is a
// no-op.
func (w *World) PublishImage(ctx context.Context, version string) (Image, error) {
	return w.PublishImageWith(ctx, version, w.Opts.ImageKernelArgs)
}

// PublishImageWith is PublishImage with the image's kernel arguments, e.g.
// diskimage.DefaultKernelArgs for an image that ignores the metal-iso
// partition. A version keeps the arguments it was first published with.
func (w *World) PublishImageWith(ctx context.Context, version, kernelArgs string) (Image, error) {
	w.mu.Lock()
	img, ok := w.Images[version]
	w.mu.Unlock()
	if ok {
		return img, nil
	}
	dir := filepath.Join(w.Dir, "images", version)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Image{}, err
	}
	raw := filepath.Join(dir, "metal-amd64.raw")
	if err := diskimage.BuildTalosLikeImage(raw, w.Opts.ImageSize, diskimage.WithTalosVersion(version), diskimage.WithKernelArgs(kernelArgs)); err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", version, err)
	}
	o := &publish.Options{
		Input: raw, SchematicID: w.Opts.SchematicID, TalosVersion: version, Arch: "amd64", Prefix: w.Prefix,
		Formats: w.Opts.ImageFormats, BlockSize: 1 << 20, SectorSize: 512, VerifyOutput: true,
		XZEncoder: "auto", WorkDir: dir,
		// Worlds publish images for both deliveries; the NodeClass reads
		// the manifest's metalISO and says which it can use.
		MaintenanceAPI: true,
		S3: publish.S3Config{Endpoint: w.S3.Endpoint, Bucket: w.Bucket, Region: w.S3.Region,
			AccessKey: w.S3.AccessKey, SecretKey: w.S3.SecretKey},
	}
	sum, err := publish.Run(ctx, o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return Image{}, fmt.Errorf("publish image %s: %w", version, err)
	}
	if sum.Manifest == nil {
		return Image{}, fmt.Errorf("publish image %s: no manifest in the summary", version)
	}
	img = Image{TalosVersion: version, RawSHA256: sum.Manifest.Raw.SHA256, RawSize: sum.Manifest.Raw.Size, ManifestKey: sum.ManifestKey}
	// The raw file is only needed for publishing; the bucket holds the image.
	_ = os.Remove(raw)
	w.mu.Lock()
	w.Images[version] = img
	w.mu.Unlock()
	return img, nil
}

// CorruptImages flips a byte in the middle of every compressed image in the
// bucket, keeping its metadata: em-imager's digest check must catch it.
func (w *World) CorruptImages(ctx context.Context) error {
	mc, err := w.S3.Client()
	if err != nil {
		return err
	}
	n := 0
	for obj := range mc.ListObjects(ctx, w.Bucket, minio.ListObjectsOptions{Recursive: true, WithMetadata: true}) {
		if obj.Err != nil {
			return obj.Err
		}
		if !strings.Contains(obj.Key, ".raw.") {
			continue
		}
		r, err := mc.GetObject(ctx, w.Bucket, obj.Key, minio.GetObjectOptions{})
		if err != nil {
			return err
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return err
		}
		st, err := mc.StatObject(ctx, w.Bucket, obj.Key, minio.StatObjectOptions{})
		if err != nil {
			return err
		}
		data[len(data)/2] ^= 0x5a
		if _, err := mc.PutObject(ctx, w.Bucket, obj.Key, bytes.NewReader(data), int64(len(data)),
			minio.PutObjectOptions{UserMetadata: st.UserMetadata}); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return errors.New("no published image to corrupt")
	}
	return nil
}
