// Package imagesource is the controller side of the Talos images kept in an
// S3 bucket (Garage) by `em-imager publish` (see imager/manifest for the
// layout and the manifest). From a NodeClass's image Settings it reads and
// validates the manifest (cached for Config.CacheTTL), picks a format by
// preference, checks the chosen object against the manifest (size and
// x-amz-meta-sha256), and returns an Image: the URL em-imager downloads
// (public, or presigned with Config.URLExpiry so bucket credentials never
// leave the controller), the format, and the raw sha256 em-imager verifies and
// drift compares.
//
//	cfg, err := imagesource.ConfigFromEnv(os.Getenv) // S3_ENDPOINT, AWS_ACCESS_KEY_ID, ...
//	src, err := imagesource.New(cfg)
//	img, err := src.Resolve(ctx, imagesource.Settings{
//		Bucket: "talos-images", Prefix: "talos",
//		SchematicID: id, TalosVersion: "v1.12.0", // Arch defaults to amd64
//	})
//	if err != nil {
//		// NodeClass not Ready: reason imagesource.ReasonOf(err), message err.Error();
//		// imagesource.Retryable(err) for network trouble.
//	}
//	// em-imager write --image img.URL --sha256 img.RawSHA256 --format img.Format
//	log.Info("imaging", "image", img) // Image redacts its URL; use Redact(u) for raw URLs
//
// Environment (ConfigFromEnv): S3_ENDPOINT, S3_REGION (default garage),
// S3_BUCKET (default bucket), AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN, S3_PUBLIC (true: plain URLs), S3_PUBLIC_URL (base of
// plain URLs, "{bucket}" replaced, e.g. Garage's web endpoint),
// S3_PRESIGN_ENDPOINT (endpoint the rescue system can reach, when the
// controller uses a cluster-internal one), IMAGE_URL_EXPIRY (default 1h: it
// must cover the download, resumes included), IMAGE_MANIFEST_TTL (default 5m),
// IMAGE_CA_BUNDLE (a PEM file of CAs trusted besides the system's, for a
// self-signed S3 endpoint or manifest URL).
//
// Trust: the manifest carries the raw image digest em-imager verifies, so it
// is the image's trust root. A manifest URL must be https (or s3:// through
// the configured endpoint) unless Settings.ManifestSHA256 pins the manifest's
// bytes; the pin, when set, is checked wherever the manifest comes from.
// Manifest reads are bounded (DefaultConnectTimeout, DefaultFetchTimeout,
// manifest.MaxSize) and follow at most a few redirects on the same host,
// never from https to http.
//
// Garage serves anonymous reads only on its web endpoint, not on the S3 API:
// for a public Garage bucket set S3_PUBLIC=true and S3_PUBLIC_URL to the web
// endpoint (the controller still reads manifests through the S3 API with its
// key), or point the NodeClass at the manifest's web URL (ManifestURL).
//
// Tests run against a real S3 server (bin/versitygw):
//
//	go test -count=1 ./controller/imagesource/...
package imagesource
