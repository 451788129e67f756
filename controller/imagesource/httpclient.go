package imagesource

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/manifest"
)

// Limits of the controller's manifest reads. A manifest is a small JSON file
// (manifest.MaxSize caps it); these keep a slow, hostile or wrong endpoint
// from holding the NodeClass status controller.
const (
	// DefaultConnectTimeout bounds the TCP connect and the TLS handshake.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultFetchTimeout bounds one Resolve's reads (manifest and object
	// check), redirects and body included.
	DefaultFetchTimeout = 30 * time.Second
)

// newHTTPClient is the client of manifest URLs and of the S3 endpoint: it
// trusts the system's CAs plus roots (a self-signed Garage), bounds connect
// and overall time, and follows em-imager's redirect rule (a few, same host
// only, manifest.CheckRedirect), so a manifest URL cannot send the
// controller to an address of its choice.
func newHTTPClient(roots *x509.CertPool, connect, overall time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   connect,
		ResponseHeaderTimeout: overall,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   4,
		ForceAttemptHTTP2:     true,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots},
	}
	return &http.Client{Transport: tr, Timeout: overall, CheckRedirect: manifest.CheckRedirect}
}

// certPool is the system's roots plus the PEM certificates in bundle.
func certPool(bundle []byte) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(bundle) {
		return nil, errors.New("no PEM certificate in it")
	}
	return pool, nil
}

// tlsHint explains a certificate error in terms of the controller's settings.
func tlsHint(err error) string {
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	switch {
	case errors.As(err, &unknown):
		return fmt.Sprintf(" (a private or self-signed CA must be in %s: imageBucket.caBundle in the chart)", EnvCABundle)
	case errors.As(err, &invalid), errors.As(err, &host):
		return " (the endpoint's certificate does not fit it)"
	}
	return ""
}
