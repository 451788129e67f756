package publish

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Environment variables publish reads. Credentials come only from the
// environment, never from flags, so they stay out of shell history and ps.
const (
	EnvEndpoint     = "S3_ENDPOINT" // http://garage.example:3900 or https://s3.example (no scheme: https)
	EnvBucket       = "S3_BUCKET"
	EnvRegion       = "S3_REGION" // default DefaultRegion
	EnvAccessKey    = "AWS_ACCESS_KEY_ID"
	EnvSecretKey    = "AWS_SECRET_ACCESS_KEY"
	EnvSessionToken = "AWS_SESSION_TOKEN" // optional
)

// DefaultRegion is Garage's default s3_region.
const DefaultRegion = "garage"

// S3Config is where and as whom publish uploads.
type S3Config struct {
	Endpoint     string
	Bucket       string
	Region       string
	AccessKey    string
	SecretKey    string
	SessionToken string
}

// S3ConfigFromEnv reads the S3 settings through getenv (os.Getenv in Main).
func S3ConfigFromEnv(getenv func(string) string) S3Config {
	c := S3Config{
		Endpoint:     strings.TrimSpace(getenv(EnvEndpoint)),
		Bucket:       strings.TrimSpace(getenv(EnvBucket)),
		Region:       strings.TrimSpace(getenv(EnvRegion)),
		AccessKey:    getenv(EnvAccessKey),
		SecretKey:    getenv(EnvSecretKey),
		SessionToken: getenv(EnvSessionToken),
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	return c
}

// String never shows the secret.
func (c S3Config) String() string {
	return fmt.Sprintf("endpoint=%s bucket=%s region=%s access-key-set=%v", c.Endpoint, c.Bucket, c.Region, c.AccessKey != "")
}

func (c S3Config) validate() error {
	if c.Endpoint == "" {
		return fmt.Errorf("%s is not set: want the S3 endpoint, e.g. http://garage.example:3900", EnvEndpoint)
	}
	if _, _, err := parseEndpoint(c.Endpoint); err != nil {
		return err
	}
	if c.Bucket == "" {
		return fmt.Errorf("bucket: neither --bucket nor %s is set", EnvBucket)
	}
	if c.AccessKey == "" || c.SecretKey == "" {
		return fmt.Errorf("credentials: %s and %s must both be set", EnvAccessKey, EnvSecretKey)
	}
	return nil
}

// parseEndpoint turns "http://host:port" into minio-go's host + secure flag.
func parseEndpoint(s string) (host string, secure bool, err error) {
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", false, fmt.Errorf("%s: %q is not a URL: %w", EnvEndpoint, s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", false, fmt.Errorf("%s: scheme %q: want http or https", EnvEndpoint, u.Scheme)
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", false, fmt.Errorf("%s: %q: want scheme://host[:port] only", EnvEndpoint, u.Redacted())
	}
	return u.Host, u.Scheme == "https", nil
}

// newClient builds a path-style client (Garage serves buckets on the path,
// not as virtual hosts unless configured to).
func (c S3Config) newClient() (*minio.Client, error) {
	host, secure, err := parseEndpoint(c.Endpoint)
	if err != nil {
		return nil, err
	}
	return minio.New(host, &minio.Options{
		Creds:        credentials.NewStaticV4(c.AccessKey, c.SecretKey, c.SessionToken),
		Secure:       secure,
		Region:       c.Region,
		BucketLookup: minio.BucketLookupPath,
	})
}
