package manifest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// The rules every reader of a manifest over the network follows (em-imager
// --manifest; the controller's image source may reuse them): https, or plain
// http only with the manifest's own sha256 pinned (the manifest carries the
// digests that authenticate the image, so it must not be alterable on the
// way); a bounded time and size; redirects only to the same host and never
// from https to http.

// Errors Fetch wraps, so callers can map them to their own codes.
var (
	// ErrInsecure: plain http without a pinned sha256, or a scheme other
	// than https/http (and file, with FetchOptions.AllowLocal).
	ErrInsecure = errors.New("manifest transport refused")
	// ErrPinMismatch: the manifest's bytes do not have the pinned sha256.
	ErrPinMismatch = errors.New("manifest digest mismatch")
	// ErrRedirect: a redirect to another host or from https to http.
	ErrRedirect = errors.New("manifest redirect refused")
	// ErrRejected: a final HTTP answer (4xx) or a missing local file.
	ErrRejected = errors.New("manifest request rejected")
	// ErrUnreachable: network trouble, 5xx or the time limit.
	ErrUnreachable = errors.New("manifest unreachable")
)

// DefaultFetchTimeout bounds one Fetch: a manifest is a few KiB.
const DefaultFetchTimeout = 30 * time.Second

// MaxRedirects a manifest URL may go through, far below net/http's 10: a
// bucket endpoint redirects at most once or twice (region, trailing slash).
const MaxRedirects = 3

// FetchOptions tune Fetch. The zero value fetches https only.
type FetchOptions struct {
	// SHA256 pins the manifest's own bytes (64 hex digits, any case):
	// required for plain http, checked whenever given.
	SHA256 string
	// Client does the request (nil: a client with Timeout and the redirect
	// rule). A given client's CheckRedirect is replaced by the rule for
	// this request; its Transport is used as is.
	Client *http.Client
	// Timeout bounds the whole request, body included (0: DefaultFetchTimeout).
	Timeout time.Duration
	// AllowLocal accepts file:// URLs and plain paths (an operator's own
	// files; never for the controller, which reads what a NodeClass names).
	AllowLocal bool
}

// Fetched is a manifest read by Fetch.
type Fetched struct {
	*Manifest
	// Location is where it was read from: the URL as given (redirects
	// only served it), or the cleaned local path.
	Location string
	// SHA256 is the digest of the bytes read (lowercase hex).
	SHA256 string
	local  bool
}

// Fetch reads, checks and parses the manifest at rawURL under the rules
// above. Every error wraps one of the Err* above or ErrInvalid, and names
// the manifest without its query string (a presigned URL's signature).
func Fetch(ctx context.Context, rawURL string, o FetchOptions) (*Fetched, error) {
	pin := strings.ToLower(strings.TrimSpace(o.SHA256))
	if pin != "" && !hexSHA256.MatchString(pin) {
		return nil, fmt.Errorf("%w: the pinned sha256 %q is not 64 hex digits", ErrInsecure, o.SHA256)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: not a URL", ErrRejected)
	}
	where, local, err := location(u, rawURL, pin, o)
	if err != nil {
		return nil, err
	}
	var data []byte
	if local {
		data, err = readLocal(where)
	} else {
		data, err = get(ctx, u, o)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	sum := sha256.Sum256(data)
	got := hex.EncodeToString(sum[:])
	if pin != "" && got != pin {
		return nil, fmt.Errorf("%w: %s has sha256 %s, the pinned one is %s", ErrPinMismatch, where, got, pin)
	}
	m, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return &Fetched{Manifest: m, Location: where, SHA256: got, local: local}, nil
}

func readLocal(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRejected, err)
	}
	defer f.Close()
	return readCapped(f)
}

// readCapped reads at most MaxSize bytes and refuses more.
func readCapped(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%w: more than the %d bytes a manifest may have", ErrInvalid, MaxSize)
	}
	return data, nil
}

// location applies the scheme policy: https, http only with a pinned
// digest, a local path only when allowed. It returns where the manifest is
// (redacted, or the cleaned local path) and whether it is local.
func location(u *url.URL, rawURL, pin string, o FetchOptions) (string, bool, error) {
	where := Redact(rawURL)
	switch u.Scheme {
	case "https":
		return where, false, nil
	case "http":
		if pin == "" {
			return "", false, fmt.Errorf("%w: %s is plain http, which anyone on the way can alter; use https or pin the manifest's sha256", ErrInsecure, where)
		}
		return where, false, nil
	case "", "file":
		if !o.AllowLocal {
			return "", false, fmt.Errorf("%w: %s: want an https URL", ErrInsecure, where)
		}
		p := rawURL
		if u.Scheme == "file" {
			p = u.Path
		}
		return filepath.Clean(p), true, nil
	}
	return "", false, fmt.Errorf("%w: %s: scheme %q, want https (or http with a pinned sha256)", ErrInsecure, where, u.Scheme)
}

func get(ctx context.Context, u *url.URL, o FetchOptions) ([]byte, error) {
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultFetchTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := redirectChecked(o.Client)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRejected, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		if errors.Is(err, ErrRedirect) {
			return nil, unwrapURLError(err)
		}
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, unwrapURLError(err))
	}
	defer resp.Body.Close()
	if err := statusError(resp); err != nil {
		return nil, err
	}
	data, err := readCapped(resp.Body)
	if err != nil && !errors.Is(err, ErrInvalid) {
		return nil, fmt.Errorf("%w: reading the body: %v", ErrUnreachable, unwrapURLError(err))
	}
	return data, err
}

// redirectChecked is a copy of client (a plain client when nil) that
// follows redirects only as CheckRedirect allows.
func redirectChecked(client *http.Client) *http.Client {
	c := &http.Client{}
	if client != nil {
		cc := *client
		c = &cc
	}
	c.CheckRedirect = CheckRedirect
	return c
}

// statusError is nil for a 2xx answer, ErrRejected for a 4xx that asking
// again will not change, ErrUnreachable for the rest.
func statusError(resp *http.Response) error {
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout:
		return fmt.Errorf("%w: HTTP %s", ErrRejected, resp.Status)
	default:
		return fmt.Errorf("%w: HTTP %s", ErrUnreachable, resp.Status)
	}
}

// CheckRedirect (an http.Client's) follows up to MaxRedirects redirects,
// only to the same host (and port), never from https to http: a bucket
// endpoint has no reason to send a reader elsewhere, and a pinned digest is
// no reason to trust another server. The controller's manifest reads use it
// too.
func CheckRedirect(req *http.Request, via []*http.Request) error {
	first := via[0].URL
	switch {
	case len(via) > MaxRedirects:
		return fmt.Errorf("%w: more than %d redirects", ErrRedirect, MaxRedirects)
	case !strings.EqualFold(hostPort(req.URL), hostPort(first)):
		return fmt.Errorf("%w: to another host (%s)", ErrRedirect, req.URL.Host)
	case first.Scheme == "https" && req.URL.Scheme != "https":
		return fmt.Errorf("%w: from https to %s", ErrRedirect, req.URL.Scheme)
	}
	return nil
}

func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// unwrapURLError drops the URL (which may carry a signature) from an
// *url.Error, keeping the cause.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Redact returns u without its query string, fragment and user info, so a
// presigned URL can be shown.
func Redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		if i := strings.IndexAny(u, "?#@"); i >= 0 {
			return u[:i]
		}
		return u
	}
	p.User, p.RawQuery, p.ForceQuery, p.Fragment, p.RawFragment = nil, "", false, "", ""
	return p.String()
}

// FileURL is where the file name of a manifest's Files entry lives: beside
// the manifest, on the same server, without the manifest's query (a
// presigned signature is for the manifest object only).
func (f *Fetched) FileURL(name string) string {
	if f.local {
		return filepath.Join(filepath.Dir(f.Location), name)
	}
	u, err := url.Parse(f.Location)
	if err != nil {
		return ""
	}
	u.Path = path.Join(path.Dir(u.Path), name)
	u.RawPath = ""
	return u.String()
}

// PreferredFormats is the order a reader picks a file in when the operator
// names none: zstd decodes several times faster than xz and is usually only
// slightly larger.
var PreferredFormats = []string{FormatZstd, FormatXZ}

// Pick returns the first file, in prefs order, that m lists.
func (m *Manifest) Pick(prefs []string) (File, error) {
	for _, p := range prefs {
		if f, ok := m.File(p); ok {
			return f, nil
		}
	}
	var have []string
	for _, f := range m.Files {
		have = append(have, f.Format)
	}
	return File{}, fmt.Errorf("the manifest lists %s, not %s", strings.Join(have, ", "), strings.Join(prefs, " or "))
}
