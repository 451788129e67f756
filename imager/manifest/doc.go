// Package manifest is the contract between `em-imager publish`, which uploads
// Talos images to an S3 bucket (Garage), and the controller's image source,
// which reads them back.
//
// Objects of one image (see Layout):
//
//	<prefix>/<schematic-id>/<talos-version>/metal-amd64.raw.zst
//	<prefix>/<schematic-id>/<talos-version>/metal-amd64.raw.xz
//	<prefix>/<schematic-id>/<talos-version>/manifest.json
//
// Every image object carries its sha256 in the user metadata key MetaSHA256
// (x-amz-meta-sha256). The manifest is uploaded last, so a reader that finds a
// manifest finds complete files.
//
// Example manifest.json:
//
//	{
//	  "schemaVersion": 1,
//	  "schematicID": "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba",
//	  "talosVersion": "v1.12.0",
//	  "arch": "amd64",
//	  "sectorSize": 512,
//	  "raw": {"size": 1306525696, "sha256": "9f86d0…"},
//	  "files": [
//	    {"name": "metal-amd64.raw.zst", "format": "zstd", "size": 93112301, "sha256": "2c26b4…",
//	     "blockSize": 4194304, "encoder": "klauspost/compress zstd"},
//	    {"name": "metal-amd64.raw.xz", "format": "xz", "size": 80211345, "sha256": "fcde2b…",
//	     "blockSize": 4194304, "encoder": "xz (XZ Utils) 5.4.1"}
//	  ],
//	  "boot": {"kernelArgs": "talos.platform=metal console=tty0 … talos.config=metal-iso",
//	           "source": "image:EFI/Linux/Talos-v1.12.0.efi", "metalISO": true},
//	  "tool": {"name": "em-imager publish", "version": "v0.1.0"},
//	  "created": "2026-11-22T12:00:00Z"
//	}
//
// Use:
//
//	m, err := manifest.Parse(data)          // decode + Validate; errors wrap ErrInvalid
//	l := manifest.Layout{Prefix: "talos", SchematicID: id, TalosVersion: "v1.12.0", Arch: "amd64"}
//	key, _ := l.ImageKey(manifest.FormatZstd)
//
// Reading one over the network (em-imager --manifest; the controller's
// image source can use the same rules):
//
//	f, err := manifest.Fetch(ctx, url, manifest.FetchOptions{SHA256: pin})
//	// https, or plain http only with the manifest's own sha256 pinned;
//	// at most MaxSize bytes, DefaultFetchTimeout, redirects only to the
//	// same host and never from https to http. Errors wrap ErrInsecure,
//	// ErrPinMismatch, ErrRedirect, ErrRejected, ErrUnreachable or ErrInvalid.
//	file, _ := f.Pick(manifest.PreferredFormats) // zstd, else xz
//	imageURL := f.FileURL(file.Name)               // beside the manifest, no query
//
// Tests: go test -count=1 ./imager/manifest/...
package manifest
