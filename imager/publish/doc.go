// Package publish is `em-imager publish`: it puts a Talos metal image into an
// S3 bucket (Garage) with the manifest the controller reads (imager/manifest).
//
//	export S3_ENDPOINT=http://garage.example:3900 S3_BUCKET=talos-images S3_REGION=garage
//	export AWS_ACCESS_KEY_ID=GK... AWS_SECRET_ACCESS_KEY=...
//	em-imager publish \
//	  --input https://factory.talos.dev/image/<schematic>/v1.12.0/metal-amd64.raw.zst \
//	  --schematic <schematic> --talos-version v1.12.0 --prefix talos --formats zst,xz
//
// What it does, in order:
//
//  1. Reads manifest.json at the target keys first, so bad credentials or a
//     missing bucket fail before minutes of work.
//  2. Streams the input (local file or URL, via imager/source) once: detects
//     raw/xz/zstd/gzip from the magic bytes, decompresses it with
//     imager/decompress (which refuses corrupt, truncated and trailing data),
//     hashes the compressed and the raw bytes, checks the MBR/GPT boot
//     signature and whole sectors, and feeds the encoders of the formats the
//     input is not already in (all of them with --reencode). Encoded files are
//     decoded again and compared with the raw digest (--verify-output).
//  3. Uploads each file unless the object already has the same size and
//     x-amz-meta-sha256 (multipart in 16 MiB parts for large files), then
//     uploads manifest.json last, unless the one there already describes the
//     same files. Publishing the same image twice uploads nothing. A manifest
//     describing a different raw image is not replaced without --force.
//
// It also uploads em-imager itself, one static build per architecture, for
// operators who run it by hand in a rescue shell (tools.go):
// <prefix>/tools/em-imager-linux-<arch> and a sha256sum file beside it. By
// default the running binary goes up for its own architecture;
// --imager-binary FILE (repeatable; `make imager-binaries` builds both) names
// the builds instead, --no-imager uploads none. Each file must be a Linux
// em-imager main package built without cgo (read from its Go build info and
// ELF headers) before anything is uploaded. The summary's tools[] and
// manifestSha256 give the digests an operator checks the downloads against.
//
// Re-encoding (see encode.go): zstd as independent frames of --block-size raw
// bytes, encoded in parallel with klauspost/compress; xz with Debian's
// `xz -T<n> --block-size` when an xz binary is on PATH (block headers carry
// sizes, so imager/decompress decodes blocks in parallel), else the pure-Go
// ulikunitz/xz writer (independent blocks, decoded sequentially).
//
// --public only records in the manifest that the objects are anonymously
// readable: Garage has no bucket policies (public reads go through its web
// endpoint), so publish changes no permissions. The controller decides
// between plain and presigned URLs from its own configuration.
//
// stdout carries one JSON Summary (also on failure); logs go to stderr. Exit
// codes: see ExitCode. Credentials come only from the environment.
//
// Tests (real S3: bin/versitygw, built by `make tools`; xz and zstd from
// Debian, `make deps`):
//
//	go test -count=1 ./imager/publish/...
package publish
