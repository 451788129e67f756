package imagesource

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environment variables of the controller that ConfigFromEnv reads. The S3
// ones have the same names as em-imager publish's.
const (
	EnvEndpoint        = "S3_ENDPOINT"       // http://garage.garage.svc:3900
	EnvRegion          = "S3_REGION"         // default DefaultRegion
	EnvBucket          = "S3_BUCKET"         // bucket when the NodeClass names none
	EnvAccessKey       = "AWS_ACCESS_KEY_ID" // empty: anonymous reads
	EnvSecretKey       = "AWS_SECRET_ACCESS_KEY"
	EnvSessionToken    = "AWS_SESSION_TOKEN"
	EnvPublic          = "S3_PUBLIC"           // true: hand out plain URLs, no presigning
	EnvPublicURL       = "S3_PUBLIC_URL"       // base of plain URLs; "{bucket}" is replaced
	EnvPresignEndpoint = "S3_PRESIGN_ENDPOINT" // endpoint the rescue system can reach, if not S3_ENDPOINT
	EnvURLExpiry       = "IMAGE_URL_EXPIRY"    // Go duration, default DefaultURLExpiry
	EnvCacheTTL        = "IMAGE_MANIFEST_TTL"  // Go duration, default DefaultCacheTTL
	EnvCABundle        = "IMAGE_CA_BUNDLE"     // PEM file of extra CAs for the S3 endpoint and manifest URLs
)

// Defaults.
const (
	DefaultRegion = "garage"
	// DefaultURLExpiry must cover the whole download: a Talos image is a few
	// hundred MB and em-imager resumes with Range requests on the same URL.
	DefaultURLExpiry = time.Hour
	// MaxURLExpiry is SigV4's limit.
	MaxURLExpiry    = 7 * 24 * time.Hour
	DefaultCacheTTL = 5 * time.Minute
)

// Config is the controller-wide S3 access. Credentials stay here: Resolve
// hands out presigned URLs, never keys.
type Config struct {
	Endpoint        string
	Region          string
	DefaultBucket   string
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// Public: the objects are anonymously readable, hand out plain URLs.
	Public bool
	// PublicBaseURL is prefixed to the key for plain URLs ("{bucket}" is
	// replaced by the bucket, e.g. Garage's web endpoint
	// https://{bucket}.web.garage.example). Default: <Endpoint>/<bucket>.
	PublicBaseURL string
	// PresignEndpoint is the endpoint written into presigned URLs when the
	// controller reaches S3 at an address the rescue system cannot
	// (a cluster-internal Service). Default: Endpoint.
	PresignEndpoint string
	URLExpiry       time.Duration
	CacheTTL        time.Duration
	// CABundle holds PEM certificates trusted besides the system's, for a
	// self-signed S3 endpoint or manifest URL (EnvCABundle names its file).
	CABundle []byte
	// ConnectTimeout bounds a connect and TLS handshake, FetchTimeout the
	// reads of one Resolve (defaults DefaultConnectTimeout, DefaultFetchTimeout).
	ConnectTimeout time.Duration
	FetchTimeout   time.Duration
	// HTTPClient fetches manifest URLs and is used for S3. Nil: a client
	// with the timeouts above, CABundle, and same-host redirects only.
	HTTPClient *http.Client
	// Now is the clock of the cache (tests); nil = time.Now.
	Now func() time.Time
}

// String never shows the secret.
func (c Config) String() string {
	return fmt.Sprintf("endpoint=%s region=%s bucket=%s public=%v credentials=%v", c.Endpoint, c.Region, c.DefaultBucket, c.Public, c.AccessKeyID != "")
}

// ConfigFromEnv reads the Env* variables through getenv (os.Getenv).
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Config{
		Endpoint:        strings.TrimSpace(getenv(EnvEndpoint)),
		Region:          strings.TrimSpace(getenv(EnvRegion)),
		DefaultBucket:   strings.TrimSpace(getenv(EnvBucket)),
		AccessKeyID:     getenv(EnvAccessKey),
		SecretAccessKey: getenv(EnvSecretKey),
		SessionToken:    getenv(EnvSessionToken),
		PublicBaseURL:   strings.TrimSpace(getenv(EnvPublicURL)),
		PresignEndpoint: strings.TrimSpace(getenv(EnvPresignEndpoint)),
	}
	if v := strings.TrimSpace(getenv(EnvPublic)); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return c, fmt.Errorf("%s: %q: want true or false", EnvPublic, v)
		}
		c.Public = b
	}
	for _, d := range []struct {
		env string
		dst *time.Duration
	}{{EnvURLExpiry, &c.URLExpiry}, {EnvCacheTTL, &c.CacheTTL}} {
		if v := strings.TrimSpace(getenv(d.env)); v != "" {
			x, err := time.ParseDuration(v)
			if err != nil {
				return c, fmt.Errorf("%s: %q: want a duration such as 1h", d.env, v)
			}
			*d.dst = x
		}
	}
	if path := strings.TrimSpace(getenv(EnvCABundle)); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("%s: %w", EnvCABundle, err)
		}
		c.CABundle = b
	}
	c = c.withDefaults()
	return c, c.validate()
}

func (c Config) withDefaults() Config {
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.URLExpiry == 0 {
		c.URLExpiry = DefaultURLExpiry
	}
	if c.CacheTTL == 0 {
		c.CacheTTL = DefaultCacheTTL
	}
	if c.PresignEndpoint == "" {
		c.PresignEndpoint = c.Endpoint
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.FetchTimeout == 0 {
		c.FetchTimeout = DefaultFetchTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// validate runs the checks below in order and returns the first problem.
func (c Config) validate() error {
	for _, check := range []func() error{c.endpointsError, c.credentialsError, c.timingsError, c.caBundleError, c.publicURLError} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// endpointsError checks the S3 endpoint and the presign endpoint, when set.
func (c Config) endpointsError() error {
	if c.Endpoint != "" {
		if _, _, err := parseEndpoint(EnvEndpoint, c.Endpoint); err != nil {
			return err
		}
	}
	if c.PresignEndpoint != "" {
		if _, _, err := parseEndpoint(EnvPresignEndpoint, c.PresignEndpoint); err != nil {
			return err
		}
	}
	return nil
}

// credentialsError checks that the key pair is whole, and present when the
// bucket is private (URLs are then presigned).
func (c Config) credentialsError() error {
	if (c.AccessKeyID == "") != (c.SecretAccessKey == "") {
		return fmt.Errorf("credentials: %s and %s must be set together", EnvAccessKey, EnvSecretKey)
	}
	if !c.Public && c.Endpoint != "" && c.AccessKeyID == "" {
		return fmt.Errorf("credentials: %s is false, so URLs are presigned, which needs %s and %s", EnvPublic, EnvAccessKey, EnvSecretKey)
	}
	return nil
}

// timingsError checks the presigned URLs' lifetime, the cache's and the
// timeouts.
func (c Config) timingsError() error {
	if c.URLExpiry < time.Second || c.URLExpiry > MaxURLExpiry {
		return fmt.Errorf("%s: %s: want 1s..%s", EnvURLExpiry, c.URLExpiry, MaxURLExpiry)
	}
	if c.CacheTTL < 0 {
		return fmt.Errorf("%s: %s: want >= 0", EnvCacheTTL, c.CacheTTL)
	}
	if c.ConnectTimeout < 0 || c.FetchTimeout < 0 {
		return fmt.Errorf("ConnectTimeout and FetchTimeout must not be negative")
	}
	return nil
}

// caBundleError checks that a CA bundle, when given, holds certificates.
func (c Config) caBundleError() error {
	if len(c.CABundle) == 0 {
		return nil
	}
	if _, err := certPool(c.CABundle); err != nil {
		return fmt.Errorf("%s: %w", EnvCABundle, err)
	}
	return nil
}

// publicURLError checks the public base URL, when set: http(s), with a
// host, without a query ({bucket} stands for the bucket's name).
func (c Config) publicURLError() error {
	if c.PublicBaseURL == "" {
		return nil
	}
	u, err := url.Parse(strings.ReplaceAll(c.PublicBaseURL, "{bucket}", "b"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		return fmt.Errorf("%s: %q: want an http(s) URL without a query", EnvPublicURL, c.PublicBaseURL)
	}
	return nil
}

// parseEndpoint turns "http://host:port" into minio-go's host + secure flag.
func parseEndpoint(name, s string) (host string, secure bool, err error) {
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", false, fmt.Errorf("%s: not a URL: %w", name, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", false, fmt.Errorf("%s: scheme %q: want http or https", name, u.Scheme)
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", false, fmt.Errorf("%s: %q: want scheme://host[:port] only", name, u.Redacted())
	}
	return u.Host, u.Scheme == "https", nil
}
