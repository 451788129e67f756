package imagesource

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/manifest"
)

// Settings say which image a NodeClass wants.
type Settings struct {
	// Bucket holding the image; "" = Config.DefaultBucket.
	Bucket string
	Prefix string
	// SchematicID and TalosVersion select the directory; with ManifestURL
	// they are optional and, when set, must match the manifest.
	SchematicID  string
	TalosVersion string
	// Arch defaults to amd64.
	Arch string
	// FormatPreference lists formats best first ("zstd"/"zst", "xz";
	// "raw" is accepted and matches nothing, as manifests list only
	// compressed files); default DefaultFormatPreference.
	FormatPreference []string
	// ManifestURL names the manifest explicitly instead of by layout:
	// s3://bucket/key (read with the controller's credentials) or an
	// https URL of a publicly readable manifest, whose images are then
	// fetched from beside it without presigning. Plain http needs
	// ManifestSHA256: the manifest carries the digests em-imager verifies,
	// so without a pin an on-path attacker could swap image and digests.
	ManifestURL string
	// ManifestSHA256 pins the manifest's bytes (hex sha256), wherever it is
	// read from: a manifest with another digest is refused.
	ManifestSHA256 string
}

// DefaultFormatPreference puts zstd first: it decodes several times faster
// than xz and is usually only slightly larger.
var DefaultFormatPreference = []string{manifest.FormatZstd, manifest.FormatXZ}

// Image is what em-imager needs to write a node's disk.
type Image struct {
	// URL em-imager downloads: a public URL or a presigned GET. It carries a
	// signature: log Redact(URL) or the Image itself (String redacts).
	URL            string
	Expires        time.Time // zero for a public URL
	Format         string    // xz or zstd (em-imager --format)
	RawSHA256      string    // em-imager --sha256; drift compares it
	RawSize        int64
	CompressedSize int64
	CompressedSHA  string
	SchematicID    string
	TalosVersion   string
	Arch           string
	SectorSize     int
	Bucket         string // "" for an http(s) manifest URL
	Key            string // object key, or the redacted URL of the file
	// KernelArgs and MetalISO are the manifest's boot record: the image's
	// kernel command line, and whether it makes Talos read its config from
	// the metal-iso partition (see DiskConfigDelivery).
	KernelArgs string
	MetalISO   bool
	Manifest   *manifest.Manifest
}

// DiskConfigDelivery returns nil when nodes booted from the image read
// their machine config from the metal-iso partition em-imager writes, else
// an ErrNoMetalISO error saying why and what to do, for the NodeClass status.
func (i *Image) DiskConfigDelivery() error {
	var why string
	var b *manifest.Boot
	if i.Manifest != nil {
		b = i.Manifest.Boot
	}
	switch {
	case b == nil:
		why = "its manifest does not record the image's kernel arguments (published by an older em-imager publish): publish it again"
	case b.Source == manifest.BootSourceUnknown:
		why = "em-imager publish could not read the image's kernel arguments: publish it again with --kernel-args"
	case !b.MetalISO:
		why = fmt.Sprintf("its kernel arguments (%s) lack talos.config=metal-iso: build the schematic with customization.extraKernelArgs [talos.config=metal-iso] (docs/install.md), or set configDelivery: MaintenanceAPI", b.KernelArgs)
	default:
		return nil
	}
	return &Error{Reason: ReasonNoMetalISO, Key: i.SchematicID + "/" + i.TalosVersion, Err: fmt.Errorf("the image cannot take its machine config from the disk: %s", why)}
}

// String redacts the URL, so printing an Image never leaks a signature.
func (i *Image) String() string {
	if i == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%s %s/%s %s raw sha256 %s (%d bytes) from %s", i.Arch, i.SchematicID, i.TalosVersion, i.Format, i.RawSHA256, i.RawSize, Redact(i.URL))
}

// LogValue makes slog print the redacted form.
func (i *Image) LogValue() slog.Value {
	if i == nil {
		return slog.StringValue("<nil>")
	}
	return slog.GroupValue(
		slog.String("url", Redact(i.URL)),
		slog.String("format", i.Format),
		slog.String("rawSHA256", i.RawSHA256),
		slog.Int64("rawSize", i.RawSize),
		slog.String("schematicID", i.SchematicID),
		slog.String("talosVersion", i.TalosVersion),
	)
}

// Redact returns u without its query string, fragment and user info, so a
// presigned URL can be logged: "https://s3.example/b/k?REDACTED".
func Redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		// Do not echo something unparseable that may still hold a secret.
		if i := strings.IndexAny(u, "?#@"); i >= 0 {
			return u[:i] + "?REDACTED"
		}
		return u
	}
	hadQuery := p.RawQuery != "" || p.ForceQuery
	p.User, p.RawQuery, p.Fragment, p.RawFragment, p.ForceQuery = nil, "", "", "", false
	if hadQuery {
		return p.String() + "?REDACTED"
	}
	return p.String()
}

// Source resolves Settings to Images. It is safe for concurrent use.
type Source struct {
	cfg     Config
	client  *minio.Client // reads (nil when no endpoint is configured)
	presign *minio.Client // signs URLs for the rescue system

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	at    time.Time
	m     *manifest.Manifest
	file  manifest.File
	bkt   string
	key   string // object key, or file URL for http(s) manifests
	plain bool   // key is a URL to hand out as is
}

// New checks cfg and builds the S3 clients. It makes no network call.
func New(cfg Config) (*Source, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.HTTPClient == nil {
		var roots *x509.CertPool // nil: the system's
		if len(cfg.CABundle) > 0 {
			var err error
			if roots, err = certPool(cfg.CABundle); err != nil {
				return nil, fmt.Errorf("%s: %w", EnvCABundle, err)
			}
		}
		cfg.HTTPClient = newHTTPClient(roots, cfg.ConnectTimeout, cfg.FetchTimeout)
	}
	s := &Source{cfg: cfg, cache: map[string]cached{}}
	if cfg.Endpoint != "" {
		var err error
		if s.client, err = newClient(cfg, cfg.Endpoint); err != nil {
			return nil, err
		}
		if s.presign, err = newClient(cfg, cfg.PresignEndpoint); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func newClient(cfg Config, endpoint string) (*minio.Client, error) {
	host, secure, err := parseEndpoint(EnvEndpoint, endpoint)
	if err != nil {
		return nil, err
	}
	opts := &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken),
		Secure:       secure,
		Region:       cfg.Region, // known region: presigning needs no network call
		BucketLookup: minio.BucketLookupPath,
	}
	if cfg.HTTPClient != nil && cfg.HTTPClient.Transport != nil {
		opts.Transport = cfg.HTTPClient.Transport
	}
	return minio.New(host, opts)
}

// Invalidate drops every cached manifest, e.g. after em-imager reported a
// digest mismatch, so the next Resolve reads the bucket again.
func (s *Source) Invalidate() {
	s.mu.Lock()
	s.cache = map[string]cached{}
	s.mu.Unlock()
}

type normalized struct {
	Settings
	prefs []string
	// manifest location
	bucket, key string // s3
	httpURL     *url.URL
}

// normalize checks a NodeClass's image settings and works out where the
// manifest is: at manifestURL when set, else at the layout's key in the
// bucket. Every refusal is a ReasonInvalidSettings Error.
func (s *Source) normalize(in Settings) (*normalized, error) {
	n := &normalized{Settings: in}
	if n.Arch == "" {
		n.Arch = "amd64"
	}
	if err := manifest.ValidateArch(n.Arch); err != nil {
		return nil, invalidSettings("%v", err)
	}
	prefs, err := normalizeFormats(in.FormatPreference)
	if err != nil {
		return nil, err
	}
	n.prefs = prefs
	if err := checkPins(in); err != nil {
		return nil, err
	}
	if n.ManifestURL != "" {
		err = n.locateByURL(s.client != nil)
	} else {
		err = n.locateInBucket(s.cfg.DefaultBucket, s.client != nil)
	}
	if err != nil {
		return nil, err
	}
	return n, nil
}

// invalidSettings is the error of a NodeClass whose image settings cannot
// work as written.
func invalidSettings(format string, args ...any) error {
	return &Error{Reason: ReasonInvalidSettings, Err: fmt.Errorf(format, args...)}
}

// normalizeFormats reads the format preference (the default when empty),
// once each, in order.
func normalizeFormats(prefs []string) ([]string, error) {
	if len(prefs) == 0 {
		prefs = DefaultFormatPreference
	}
	var out []string
	for _, p := range prefs {
		f, err := manifest.NormalizeFormat(p)
		if strings.EqualFold(strings.TrimSpace(p), "raw") {
			// The NodeClass API allows "raw"; publish never uploads an
			// uncompressed image, so it only matches nothing.
			f, err = "raw", nil
		}
		if err != nil {
			return nil, invalidSettings("formatPreference: %v", err)
		}
		if !contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// checkPins checks the values that pin an image, when set: schematic, Talos
// version and the manifest's digest.
func checkPins(in Settings) error {
	if in.SchematicID != "" {
		if err := manifest.ValidateSchematicID(in.SchematicID); err != nil {
			return invalidSettings("%v", err)
		}
	}
	if in.TalosVersion != "" {
		if err := manifest.ValidateTalosVersion(in.TalosVersion); err != nil {
			return invalidSettings("%v", err)
		}
	}
	if in.ManifestSHA256 != "" && !isSHA256Hex(in.ManifestSHA256) {
		return invalidSettings("manifestSHA256: %q is not 64 lowercase hex digits", in.ManifestSHA256)
	}
	return nil
}

// locateByURL reads manifestURL: an s3:// object (which needs the
// controller's S3 endpoint, hasS3) or an http(s) URL, plain http only when
// the manifest is pinned by its digest.
func (n *normalized) locateByURL(hasS3 bool) error {
	u, err := url.Parse(n.ManifestURL)
	if err != nil {
		return invalidSettings("manifestURL: %q is not a URL", Redact(n.ManifestURL))
	}
	switch u.Scheme {
	case "s3":
		n.bucket, n.key = u.Host, strings.TrimPrefix(u.Path, "/")
		if n.bucket == "" || n.key == "" || strings.HasSuffix(n.key, "/") {
			return invalidSettings("manifestURL: %q: want s3://bucket/path/manifest.json", n.ManifestURL)
		}
		if !hasS3 {
			return invalidSettings("manifestURL: %s needs the controller's S3 endpoint (%s)", n.ManifestURL, EnvEndpoint)
		}
	case "http", "https":
		if u.Host == "" {
			return invalidSettings("manifestURL: %q has no host", Redact(n.ManifestURL))
		}
		if u.Scheme == "http" && n.ManifestSHA256 == "" {
			return invalidSettings("manifestURL: %s is plain http: use https, or pin the manifest with manifestSHA256", Redact(n.ManifestURL))
		}
		n.httpURL = u
	default:
		return invalidSettings("manifestURL: scheme %q: want s3, http or https", u.Scheme)
	}
	return nil
}

// locateInBucket works out the manifest's key from the layout, in the
// NodeClass's bucket or else defaultBucket, which needs the controller's S3
// endpoint (hasS3).
func (n *normalized) locateInBucket(defaultBucket string, hasS3 bool) error {
	if n.SchematicID == "" || n.TalosVersion == "" {
		return invalidSettings("schematicID and talosVersion are required unless manifestURL is set")
	}
	n.bucket = n.Bucket
	if n.bucket == "" {
		n.bucket = defaultBucket
	}
	if n.bucket == "" {
		return invalidSettings("bucket: not set in the NodeClass and %s is empty", EnvBucket)
	}
	if !hasS3 {
		return invalidSettings("bucket %q: the controller has no S3 endpoint (%s)", n.bucket, EnvEndpoint)
	}
	l := manifest.Layout{Prefix: n.Prefix, SchematicID: n.SchematicID, TalosVersion: n.TalosVersion, Arch: n.Arch}
	if err := l.Validate(); err != nil {
		return invalidSettings("%v", err)
	}
	n.key = l.ManifestKey()
	return nil
}

func (n *normalized) cacheKey() string {
	return strings.Join([]string{n.bucket, n.key, Redact(n.ManifestURL), n.ManifestSHA256, n.SchematicID, n.TalosVersion, n.Arch, strings.Join(n.prefs, ",")}, "\x00")
}

// Resolve reads (or reuses, within the cache TTL) the manifest the settings
// name, checks it and the chosen object, and returns a fresh URL for it.
func (s *Source) Resolve(ctx context.Context, in Settings) (*Image, error) {
	n, err := s.normalize(in)
	if err != nil {
		return nil, err
	}
	ck := n.cacheKey()
	now := s.cfg.Now()
	s.mu.Lock()
	c, ok := s.cache[ck]
	s.mu.Unlock()
	if !ok || now.Sub(c.at) >= s.cfg.CacheTTL {
		c, err = s.load(ctx, n)
		if err != nil {
			return nil, err
		}
		c.at = now
		s.mu.Lock()
		s.cache[ck] = c
		s.mu.Unlock()
	}
	return s.image(ctx, c)
}

func (s *Source) load(ctx context.Context, n *normalized) (cached, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.FetchTimeout)
	defer cancel()
	data, where, err := s.fetchManifest(ctx, n)
	if err != nil {
		return cached{}, withKey(err, where)
	}
	if err := checkPin(data, n.ManifestSHA256, where); err != nil {
		return cached{}, err
	}
	m, err := manifest.Parse(data)
	if err != nil {
		return cached{}, &Error{Reason: ReasonManifestInvalid, Key: where, Err: err}
	}
	if err := checkManifest(m, n, where); err != nil {
		return cached{}, err
	}
	file, err := pickFile(m, n.prefs, where)
	if err != nil {
		return cached{}, err
	}
	return s.locate(ctx, n, m, file)
}

// fetchManifest reads the manifest from its URL or bucket; where names it
// in errors (a URL without its credentials).
func (s *Source) fetchManifest(ctx context.Context, n *normalized) (data []byte, where string, err error) {
	if n.httpURL != nil {
		where = Redact(n.httpURL.String())
		data, err = s.httpGet(ctx, n.httpURL)
		return data, where, err
	}
	where = n.bucket + "/" + n.key
	data, err = s.s3Get(ctx, n.bucket, n.key)
	return data, where, err
}

// checkPin refuses a manifest whose sha256 is not pin (an empty pin pins
// nothing).
func checkPin(data []byte, pin, where string) error {
	if pin == "" {
		return nil
	}
	got := sha256.Sum256(data)
	if hex.EncodeToString(got[:]) != pin {
		return &Error{Reason: ReasonManifestPinMismatch, Key: where,
			Err: fmt.Errorf("manifest has sha256 %s, manifestSHA256 pins %s", hex.EncodeToString(got[:]), pin)}
	}
	return nil
}

// checkManifest refuses a manifest for another architecture, schematic or
// Talos version than the NodeClass asks for (empty: any).
func checkManifest(m *manifest.Manifest, n *normalized, where string) error {
	if m.Arch != n.Arch {
		return &Error{Reason: ReasonWrongArchitecture, Key: where, Err: fmt.Errorf("manifest is for %s, the NodeClass wants %s", m.Arch, n.Arch)}
	}
	if n.SchematicID != "" && m.SchematicID != n.SchematicID {
		return &Error{Reason: ReasonManifestInvalid, Key: where, Err: fmt.Errorf("manifest is for schematic %s, the NodeClass wants %s", m.SchematicID, n.SchematicID)}
	}
	if n.TalosVersion != "" && m.TalosVersion != n.TalosVersion {
		return &Error{Reason: ReasonManifestInvalid, Key: where, Err: fmt.Errorf("manifest is for Talos %s, the NodeClass wants %s", m.TalosVersion, n.TalosVersion)}
	}
	return nil
}

// pickFile is the manifest's file in the first of the preferred formats it
// lists.
func pickFile(m *manifest.Manifest, prefs []string, where string) (manifest.File, error) {
	file, err := m.Pick(prefs)
	if err != nil {
		return manifest.File{}, &Error{Reason: ReasonFormatUnavailable, Key: where, Err: fmt.Errorf("%w: the NodeClass's image.formats", err)}
	}
	return file, nil
}

// locate says where file is, next to its manifest, and checks that it is
// there.
func (s *Source) locate(ctx context.Context, n *normalized, m *manifest.Manifest, file manifest.File) (cached, error) {
	c := cached{m: m, file: file}
	if n.httpURL != nil {
		fu := *n.httpURL
		fu.Path = path.Join(path.Dir(fu.Path), file.Name)
		fu.RawPath, fu.RawQuery, fu.Fragment = "", "", ""
		c.key, c.plain = fu.String(), true
		if err := s.httpCheck(ctx, fu.String(), file); err != nil {
			return cached{}, err
		}
		return c, nil
	}
	c.bkt, c.key = n.bucket, manifest.FileKey(n.key, file.Name)
	if err := s.s3Check(ctx, c.bkt, c.key, file); err != nil {
		return cached{}, err
	}
	return c, nil
}

// image builds the Image with a URL valid from now.
func (s *Source) image(ctx context.Context, c cached) (*Image, error) {
	img := &Image{
		Format:         c.file.Format,
		RawSHA256:      c.m.Raw.SHA256,
		RawSize:        c.m.Raw.Size,
		CompressedSize: c.file.Size,
		CompressedSHA:  c.file.SHA256,
		SchematicID:    c.m.SchematicID,
		TalosVersion:   c.m.TalosVersion,
		Arch:           c.m.Arch,
		SectorSize:     c.m.SectorSize,
		Bucket:         c.bkt,
		Key:            c.key,
		Manifest:       c.m,
	}
	if b := c.m.Boot; b != nil {
		img.KernelArgs, img.MetalISO = b.KernelArgs, b.MetalISO
	}
	switch {
	case c.plain:
		img.URL = c.key
		img.Key = Redact(c.key)
	case s.cfg.Public:
		img.URL = s.publicURL(c.bkt, c.key)
	default:
		u, err := s.presign.PresignedGetObject(ctx, c.bkt, c.key, s.cfg.URLExpiry, nil)
		if err != nil {
			return nil, &Error{Reason: ReasonUnreachable, Key: c.bkt + "/" + c.key, Err: fmt.Errorf("presigning: %w", err)}
		}
		img.URL = u.String()
		img.Expires = time.Now().Add(s.cfg.URLExpiry)
	}
	return img, nil
}

func (s *Source) publicURL(bucket, key string) string {
	base := s.cfg.PublicBaseURL
	if base == "" {
		host, secure, _ := parseEndpoint(EnvEndpoint, s.cfg.PresignEndpoint)
		scheme := "http"
		if secure {
			scheme = "https"
		}
		base = scheme + "://" + host + "/" + url.PathEscape(bucket)
	} else {
		base = strings.ReplaceAll(base, "{bucket}", bucket)
	}
	segs := strings.Split(key, "/")
	for i := range segs {
		segs[i] = url.PathEscape(segs[i])
	}
	return strings.TrimRight(base, "/") + "/" + strings.Join(segs, "/")
}

func (s *Source) s3Get(ctx context.Context, bucket, key string) ([]byte, error) {
	obj, err := s.client.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, classifyS3(err, ReasonManifestMissing)
	}
	defer obj.Close()
	data, err := io.ReadAll(io.LimitReader(obj, manifest.MaxSize+1))
	if err != nil {
		return nil, classifyS3(err, ReasonManifestMissing)
	}
	return data, nil
}

func (s *Source) s3Check(ctx context.Context, bucket, key string, f manifest.File) error {
	st, err := s.client.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return withKey(classifyS3(err, ReasonObjectMissing), bucket+"/"+key)
	}
	return checkObject(bucket+"/"+key, f, st.Size, metaSHA256(st.UserMetadata))
}

// checkObject compares what the store says about an object with the
// manifest: a different size or sha256 metadata means the object was
// replaced after the manifest was written (or the manifest is stale).
func checkObject(where string, f manifest.File, size int64, sha string) error {
	if size != f.Size {
		return &Error{Reason: ReasonDigestMismatch, Key: where, Err: fmt.Errorf("object is %d bytes, the manifest says %d", size, f.Size)}
	}
	if sha != "" && !strings.EqualFold(sha, f.SHA256) {
		return &Error{Reason: ReasonDigestMismatch, Key: where, Err: fmt.Errorf("object's sha256 metadata is %s, the manifest says %s", sha, f.SHA256)}
	}
	return nil
}

func (s *Source) httpGet(ctx context.Context, u *url.URL) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, &Error{Reason: ReasonInvalidSettings, Err: fmt.Errorf("manifestURL: %w", err)}
	}
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, httpError(err)
	}
	defer resp.Body.Close()
	if err := httpStatus(resp, ReasonManifestMissing); err != nil {
		return nil, err
	}
	if resp.ContentLength > manifest.MaxSize {
		return nil, &Error{Reason: ReasonManifestInvalid, Err: fmt.Errorf("manifest is %d bytes, more than the %d a manifest may have", resp.ContentLength, manifest.MaxSize)}
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, manifest.MaxSize+1))
	if err != nil {
		return nil, httpError(err)
	}
	return data, nil
}

// httpError classifies a failed manifest URL request: a refused redirect is
// the URL's fault, the rest is the endpoint's reachability (TLS errors say
// what to configure).
func httpError(err error) error {
	if errors.Is(err, manifest.ErrRedirect) {
		return &Error{Reason: ReasonInvalidSettings, Err: fmt.Errorf("manifestURL: %w; point it at the final location", unwrapURLError(err))}
	}
	return &Error{Reason: ReasonUnreachable, Err: fmt.Errorf("%w%s", unwrapURLError(err), tlsHint(err))}
}

func (s *Source) httpCheck(ctx context.Context, fileURL string, f manifest.File) error {
	where := Redact(fileURL)
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, fileURL, nil)
	if err != nil {
		return &Error{Reason: ReasonInvalidSettings, Key: where, Err: err}
	}
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		return withKey(httpError(err), where)
	}
	resp.Body.Close()
	if err := httpStatus(resp, ReasonObjectMissing); err != nil {
		return withKey(err, where)
	}
	return checkObject(where, f, resp.ContentLength, resp.Header.Get("X-Amz-Meta-"+manifest.MetaSHA256))
}

func httpStatus(resp *http.Response, missing Reason) error {
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusNotFound:
		return &Error{Reason: missing, Err: fmt.Errorf("HTTP %s", resp.Status)}
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return &Error{Reason: ReasonAccessDenied, Err: fmt.Errorf("HTTP %s", resp.Status)}
	}
	return &Error{Reason: ReasonUnreachable, Err: fmt.Errorf("HTTP %s", resp.Status)}
}

// classifyS3 maps a minio-go error; missing is the reason for NoSuchKey.
func classifyS3(err error, missing Reason) error {
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case "NoSuchKey":
		return &Error{Reason: missing, Err: errors.New("no such object")}
	case "NoSuchBucket":
		return &Error{Reason: ReasonBucketMissing, Err: errors.New("no such bucket")}
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "AuthorizationHeaderMalformed",
		// versitygw answers an unknown access key with 404 XAdminUserNotFound.
		"XAdminUserNotFound":
		return &Error{Reason: ReasonAccessDenied, Err: fmt.Errorf("the S3 server refused the controller's credentials (%s)", resp.Code)}
	}
	switch resp.StatusCode {
	case http.StatusNotFound:
		return &Error{Reason: missing, Err: fmt.Errorf("not found (%s)", resp.Code)}
	case http.StatusUnauthorized, http.StatusForbidden:
		return &Error{Reason: ReasonAccessDenied, Err: fmt.Errorf("access denied (HTTP %d %s)", resp.StatusCode, resp.Code)}
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return &Error{Reason: ReasonUnreachable, Err: fmt.Errorf("S3 endpoint unreachable: %w%s", unwrapURLError(err), tlsHint(err))}
	}
	return &Error{Reason: ReasonUnreachable, Err: fmt.Errorf("S3: %w", unwrapURLError(err))}
}

// withKey fills in the object an *Error is about.
func withKey(err error, key string) error {
	var e *Error
	if errors.As(err, &e) && e.Key == "" {
		c := *e
		c.Key = key
		return &c
	}
	return err
}

// unwrapURLError drops the URL (which may carry a signature) from an
// *url.Error, keeping the cause.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s %s: %w", ue.Op, Redact(ue.URL), ue.Err)
	}
	return err
}

func metaSHA256(meta map[string]string) string {
	for k, v := range meta {
		if strings.EqualFold(k, manifest.MetaSHA256) {
			return v
		}
	}
	return ""
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
