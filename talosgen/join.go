package talosgen

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	sideroX509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"go.yaml.in/yaml/v4"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
)

// Keys of the join Secret. They are part of the contract with operators:
// see README.md for which combination makes which form.
const (
	// KeySecretsBundle holds `talosctl gen secrets` output (form "secrets").
	// With KeyKubernetesCA it only supplies the Talos-side secrets (OS CA,
	// trustd token, cluster id/secret) for a non-Talos control plane.
	KeySecretsBundle = "secrets.yaml"
	// KeyWorkerConfig holds a complete worker machine config (form "config").
	KeyWorkerConfig = "worker.yaml"
	// KeyCAPIValue is the key CABPT (Cluster API bootstrap provider Talos)
	// uses for a rendered machine config; accepted when KeyCAPIFormat is
	// "talosconfig".
	KeyCAPIValue  = "value"
	KeyCAPIFormat = "format"
	// KeyKubernetesCA is the Kubernetes cluster CA certificate (PEM) of a
	// control plane that is not Talos (form "kubernetes", e.g. Kamaji).
	KeyKubernetesCA = "ca.crt"
	// KeyToken is a kubeadm-style bootstrap token "abcdef.0123456789abcdef".
	KeyToken = "token"
	// KeyEndpoint is the control-plane endpoint URL, https://host:port.
	KeyEndpoint = "endpoint"
	// Optional cluster parameters; they override what the bundle or the
	// defaults would give.
	KeyClusterName       = "cluster-name"
	KeyKubernetesVersion = "kubernetes-version"
	KeyClusterDNS        = "cluster-dns"  // comma-separated IPs
	KeyServiceCIDR       = "service-cidr" // comma-separated CIDRs
	KeyPodCIDR           = "pod-cidr"     // comma-separated CIDRs
	KeyDNSDomain         = "dns-domain"
)

// JoinForm says which kind of join material a Secret carried.
type JoinForm string

const (
	// FormSecretsBundle: a Talos secrets bundle + endpoint + cluster name.
	FormSecretsBundle JoinForm = "secrets"
	// FormWorkerConfig: a complete base worker machine config.
	FormWorkerConfig JoinForm = "config"
	// FormKubernetes: Kubernetes CA + bootstrap token + endpoint, for control
	// planes that are not Talos (Kamaji and other hosted control planes).
	FormKubernetes JoinForm = "kubernetes"
)

// JoinMaterial is the parsed join Secret. It holds secrets, so its fields are
// unexported and it prints as a redacted summary (fmt %v, %+v, %#v).
type JoinMaterial struct {
	secretName string
	form       JoinForm

	// forms secrets and kubernetes
	bundle            *secrets.Bundle
	talosSideProvided bool // kubernetes form: Talos-side secrets came from the Secret, not generated
	endpoint          *url.URL
	clusterName       string
	kubernetesVersion string

	// overrides (all forms)
	clusterDNS  []string
	serviceCIDR []string
	podCIDR     []string
	dnsDomain   string

	// form config
	base      coreconfig.Provider
	baseBytes []byte

	// fingerprint of the drift-relevant, non-generated join inputs
	fingerprint string
}

// Form returns which form of join material was found.
func (j *JoinMaterial) Form() JoinForm { return j.form }

// SecretName returns the "namespace/name" given to ParseJoinSecret.
func (j *JoinMaterial) SecretName() string { return j.secretName }

// Endpoint returns the control-plane endpoint URL (not secret).
func (j *JoinMaterial) Endpoint() string {
	if j.endpoint == nil {
		return ""
	}

	return j.endpoint.String()
}

// ClusterName returns the cluster name, if known.
func (j *JoinMaterial) ClusterName() string { return j.clusterName }

// KubernetesVersion is the kubelet version nodes get: the Secret's
// kubernetes-version, else the one DefaultKubernetesVersion set, else Talos
// machinery's default (which may be newer than the cluster). "" for the
// config form, whose kubelet image decides.
func (j *JoinMaterial) KubernetesVersion() string {
	switch {
	case j.form == FormWorkerConfig:
		return ""
	case j.kubernetesVersion != "":
		return j.kubernetesVersion
	}
	return constants.DefaultKubernetesVersion
}

// DefaultKubernetesVersion sets the kubelet version for a Secret that names
// none: the control plane's, so that nodes never run a kubelet newer than
// their API server. It leaves the drift fingerprint alone: upgrading the
// control plane gives new nodes the new kubelet without replacing the others.
func (j *JoinMaterial) DefaultKubernetesVersion(v string) {
	if j.form != FormWorkerConfig && j.kubernetesVersion == "" {
		j.kubernetesVersion = strings.TrimPrefix(v, "v")
	}
}

// HasTalosSecrets reports whether the join material carries the cluster's
// Talos-side secrets (OS CA, cluster id/secret), which talosctl access and
// cluster discovery need. False only for the kubernetes form without
// secrets.yaml: talosgen then generates throw-away Talos-side secrets.
func (j *JoinMaterial) HasTalosSecrets() bool {
	return j.form != FormKubernetes || j.talosSideProvided
}

// String never includes secret values.
func (j *JoinMaterial) String() string {
	if j == nil {
		return "JoinMaterial<nil>"
	}

	return fmt.Sprintf("JoinMaterial{secret=%q form=%s endpoint=%q cluster=%q}", j.secretName, j.form, j.Endpoint(), j.clusterName)
}

// GoString keeps %#v from dumping the fields.
func (j *JoinMaterial) GoString() string { return j.String() }

// Format routes every verb to String so no formatting path reaches the fields.
func (j *JoinMaterial) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(j.String())) }

// secretValues lists the strings that must never appear in an error.
func (j *JoinMaterial) secretValues() []string {
	var out []string

	if b := j.bundle; b != nil {
		if b.Secrets != nil {
			out = append(out, b.Secrets.BootstrapToken, b.Secrets.AESCBCEncryptionSecret, b.Secrets.SecretboxEncryptionSecret)
		}

		if b.TrustdInfo != nil {
			out = append(out, b.TrustdInfo.Token)
		}

		if b.Cluster != nil {
			out = append(out, b.Cluster.Secret)
		}

		if b.Certs != nil {
			for _, ck := range []*sideroX509.PEMEncodedCertificateAndKey{b.Certs.Etcd, b.Certs.K8s, b.Certs.K8sAggregator, b.Certs.OS} {
				if ck != nil && len(ck.Key) > 0 {
					out = append(out, string(ck.Key))
				}
			}

			if b.Certs.K8sServiceAccount != nil {
				out = append(out, string(b.Certs.K8sServiceAccount.Key))
			}
		}
	}

	if j.base != nil {
		out = append(out, secretsOfConfig(j.base)...)
	}

	return out
}

// JoinError is returned for a bad join Secret. Its message names the secret,
// the key and the reason, never a value.
type JoinError struct {
	Secret string
	Key    string
	Reason string
}

func (e *JoinError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("join secret %q: %s", e.Secret, e.Reason)
	}

	return fmt.Sprintf("join secret %q: key %s: %s", e.Secret, e.Key, e.Reason)
}

func joinErr(secret, key, format string, args ...any) error {
	return &JoinError{Secret: secret, Key: key, Reason: fmt.Sprintf(format, args...)}
}

func missingKey(secret, key string) error {
	return &JoinError{Secret: secret, Reason: "missing key " + key}
}

var (
	bootstrapTokenRE = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)
	k8sVersionRE     = regexp.MustCompile(`^v?\d+\.\d+\.\d+$`)
	dnsDomainRE      = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)
)

// validBootstrapToken checks the kubeadm token format without echoing it.
func validBootstrapToken(tok string) bool { return bootstrapTokenRE.MatchString(tok) }

// ParseJoinSecret reads the join material from the data of the Kubernetes
// Secret the NodeClass names. name ("namespace/name") is only used in errors.
//
// Which form is used depends on the keys present:
//   - worker.yaml (or CABPT's value + format=talosconfig): a complete worker config;
//   - ca.crt (+ endpoint, token): a non-Talos control plane; an optional
//     secrets.yaml supplies the Talos-side secrets;
//   - secrets.yaml (+ endpoint, cluster-name): a Talos secrets bundle.
func ParseJoinSecret(name string, data map[string][]byte) (*JoinMaterial, error) {
	j := &JoinMaterial{secretName: name}

	if err := j.parseForm(readJoinKeys(data), data); err != nil {
		return nil, err
	}

	if err := j.parseOverrides(data); err != nil {
		return nil, err
	}

	j.fingerprint = j.computeFingerprint()

	return j, nil
}

// joinKeys records which join keys a secret sets to something other than
// whitespace; the form is chosen from these alone.
type joinKeys struct {
	worker, capiValue, capiTalos, bundle, ca, token, endpoint bool
}

func readJoinKeys(data map[string][]byte) joinKeys {
	has := func(key string) bool { return len(bytes.TrimSpace(data[key])) > 0 }

	return joinKeys{
		worker:    has(KeyWorkerConfig),
		capiValue: has(KeyCAPIValue),
		capiTalos: strings.TrimSpace(string(data[KeyCAPIFormat])) == "talosconfig",
		bundle:    has(KeySecretsBundle),
		ca:        has(KeyKubernetesCA),
		token:     has(KeyToken),
		endpoint:  has(KeyEndpoint),
	}
}

// parseForm parses the one form the keys name: a worker config (directly or as
// CAPI bootstrap data), Kubernetes material, or a bare secrets bundle.
func (j *JoinMaterial) parseForm(k joinKeys, data map[string][]byte) error {
	switch {
	case k.worker || (k.capiValue && k.capiTalos):
		if k.bundle || k.ca {
			return joinErr(j.secretName, "", "ambiguous join material: %s cannot be combined with %s or %s", KeyWorkerConfig, KeySecretsBundle, KeyKubernetesCA)
		}

		key := KeyWorkerConfig
		if !k.worker {
			key = KeyCAPIValue
		}

		return j.parseWorkerConfig(key, data[key])
	case k.ca:
		return j.parseKubernetes(data, k.bundle)
	case k.bundle:
		return j.parseBundleForm(data)
	default:
		return noJoinMaterial(j.secretName, k)
	}
}

// noJoinMaterial names what is missing when no form matched, pointing at the
// CA when the secret looks like a half-written Kubernetes form.
func noJoinMaterial(name string, k joinKeys) error {
	if k.capiValue && !k.capiTalos {
		return joinErr(name, KeyCAPIFormat, "bootstrap data format is not talosconfig")
	}

	if k.token || k.endpoint {
		return missingKey(name, KeyKubernetesCA)
	}

	return joinErr(name, "", "no join material: need %s, %s (+ %s, %s) or %s + %s + %s",
		KeyWorkerConfig, KeySecretsBundle, KeyEndpoint, KeyClusterName, KeyKubernetesCA, KeyToken, KeyEndpoint)
}

func (j *JoinMaterial) parseWorkerConfig(key string, raw []byte) error {
	cfg, err := configloader.NewFromBytes(raw)
	if err != nil {
		return joinErr(j.secretName, key, "not a valid Talos machine config (%s)", safeYAMLError(err))
	}

	if cfg.RawV1Alpha1() == nil || cfg.Machine() == nil {
		return joinErr(j.secretName, key, "has no v1alpha1 machine config document")
	}

	if t := cfg.Machine().Type(); t != machine.TypeWorker {
		return joinErr(j.secretName, key, "machine type is %q, need worker (a control-plane config carries CA keys a worker must not have)", t.String())
	}

	if cfg.Cluster() == nil || cfg.Cluster().Endpoint() == nil {
		return joinErr(j.secretName, key, "cluster.controlPlane.endpoint is missing")
	}

	if ca := cfg.Cluster().IssuingCA(); ca == nil || len(ca.Crt) == 0 {
		return joinErr(j.secretName, key, "cluster.ca.crt is missing")
	}

	if len(cfg.Cluster().IssuingCA().Key) > 0 {
		return joinErr(j.secretName, key, "cluster.ca.key is set; a worker must not carry the Kubernetes CA key")
	}

	j.form = FormWorkerConfig
	j.base = cfg
	j.baseBytes = raw
	j.endpoint = cfg.Cluster().Endpoint()
	j.clusterName = cfg.Cluster().Name()

	return nil
}

func (j *JoinMaterial) parseBundleForm(data map[string][]byte) error {
	b, err := loadBundle(j.secretName, data[KeySecretsBundle])
	if err != nil {
		return err
	}

	if err := b.Validate(); err != nil {
		return joinErr(j.secretName, KeySecretsBundle, "incomplete secrets bundle: %s", scrub(err.Error(), bundleSecrets(b)))
	}

	if !validBootstrapToken(b.Secrets.BootstrapToken) {
		return joinErr(j.secretName, KeySecretsBundle, "secrets.bootstraptoken is not of the form [a-z0-9]{6}.[a-z0-9]{16}")
	}

	ep, err := parseEndpointKey(j.secretName, data)
	if err != nil {
		return err
	}

	name := strings.TrimSpace(string(data[KeyClusterName]))
	if name == "" {
		return missingKey(j.secretName, KeyClusterName)
	}

	// A worker must not receive CA keys: keep only what a worker config needs.
	j.form = FormSecretsBundle
	j.bundle = workerBundle(b, b.Certs.K8s.Crt, b.Secrets.BootstrapToken)
	j.endpoint = ep
	j.clusterName = name

	return nil
}

func (j *JoinMaterial) parseKubernetes(data map[string][]byte, hasBundle bool) error {
	caPEM := append(bytes.TrimSpace(data[KeyKubernetesCA]), '\n')
	if err := checkCACert(caPEM); err != nil {
		return joinErr(j.secretName, KeyKubernetesCA, "%s", err)
	}

	ep, err := parseEndpointKey(j.secretName, data)
	if err != nil {
		return err
	}

	token := strings.TrimSpace(string(data[KeyToken]))
	if token != "" && !validBootstrapToken(token) {
		return joinErr(j.secretName, KeyToken, "not a bootstrap token of the form [a-z0-9]{6}.[a-z0-9]{16}")
	}

	talosSide, err := j.talosSide(data, hasBundle)
	if err != nil {
		return err
	}

	j.form = FormKubernetes
	j.bundle = workerBundle(talosSide, caPEM, token)
	j.endpoint = ep
	j.clusterName = strings.TrimSpace(string(data[KeyClusterName]))

	return nil
}

// talosSide is the Talos-side half of a Kubernetes-form join: the secret's own
// bundle when it carries one, else throwaway secrets (the node then trusts
// nothing Talos-side beyond itself).
func (j *JoinMaterial) talosSide(data map[string][]byte, hasBundle bool) (*secrets.Bundle, error) {
	if !hasBundle {
		b, err := throwawayTalosSecrets()
		if err != nil {
			return nil, joinErr(j.secretName, "", "generating Talos-side secrets: %s", err)
		}

		return b, nil
	}

	b, err := loadBundle(j.secretName, data[KeySecretsBundle])
	if err != nil {
		return nil, err
	}

	if !completeTalosSide(b) {
		return nil, joinErr(j.secretName, KeySecretsBundle, "needs certs.os, trustdinfo.token and cluster id/secret")
	}

	j.talosSideProvided = true

	return b, nil
}

// completeTalosSide reports whether a bundle has every Talos-side secret a
// worker config needs: the OS CA certificate, the trustd token and the cluster
// id and secret.
func completeTalosSide(b *secrets.Bundle) bool {
	return b.Certs != nil && b.Certs.OS != nil && len(b.Certs.OS.Crt) > 0 &&
		b.TrustdInfo != nil && b.TrustdInfo.Token != "" &&
		b.Cluster != nil && b.Cluster.ID != "" && b.Cluster.Secret != ""
}

// workerBundle copies the parts of a bundle that a worker config uses, with
// the Kubernetes CA certificate (no key) and bootstrap token given.
func workerBundle(talosSide *secrets.Bundle, k8sCA []byte, token string) *secrets.Bundle {
	return &secrets.Bundle{
		Clock:      secrets.NewFixedClock(time.Unix(0, 0)),
		Cluster:    &secrets.Cluster{ID: talosSide.Cluster.ID, Secret: talosSide.Cluster.Secret},
		Secrets:    &secrets.Secrets{BootstrapToken: token},
		TrustdInfo: &secrets.TrustdInfo{Token: talosSide.TrustdInfo.Token},
		Certs: &secrets.Certs{
			K8s: &sideroX509.PEMEncodedCertificateAndKey{Crt: k8sCA},
			OS:  &sideroX509.PEMEncodedCertificateAndKey{Crt: talosSide.Certs.OS.Crt},
		},
	}
}

// throwawayTalosSecrets makes the Talos-side secrets a worker needs when the
// control plane is not Talos and the Secret gives none: nobody keeps the OS CA
// key, so talosctl cannot reach such nodes (documented trade-off).
func throwawayTalosSecrets() (*secrets.Bundle, error) {
	ca, err := secrets.NewTalosCA(time.Now())
	if err != nil {
		return nil, err
	}

	trustd, err := randomToken()
	if err != nil {
		return nil, err
	}

	id := make([]byte, 32)
	secret := make([]byte, 32)

	if _, err := rand.Read(id); err != nil {
		return nil, err
	}

	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}

	return &secrets.Bundle{
		Cluster:    &secrets.Cluster{ID: base64.URLEncoding.EncodeToString(id), Secret: base64.StdEncoding.EncodeToString(secret)},
		TrustdInfo: &secrets.TrustdInfo{Token: trustd},
		Certs:      &secrets.Certs{OS: &sideroX509.PEMEncodedCertificateAndKey{Crt: ca.CrtPEM}},
	}, nil
}

func randomToken() (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

	buf := make([]byte, 22)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}

	out := make([]byte, 0, 23)

	for i, c := range buf {
		if i == 6 {
			out = append(out, '.')
		}

		out = append(out, alphabet[int(c)%len(alphabet)])
	}

	return string(out), nil
}

func loadBundle(secret string, raw []byte) (*secrets.Bundle, error) {
	var b secrets.Bundle

	if err := yaml.Unmarshal(raw, &b); err != nil {
		return nil, joinErr(secret, KeySecretsBundle, "not a Talos secrets bundle (%s)", safeYAMLError(err))
	}

	if b.Cluster == nil && b.Secrets == nil && b.Certs == nil && b.TrustdInfo == nil {
		return nil, joinErr(secret, KeySecretsBundle, "not a Talos secrets bundle (no cluster, secrets, trustdinfo or certs section)")
	}

	b.Clock = secrets.NewFixedClock(time.Unix(0, 0))

	if b.Certs != nil && b.Certs.K8s != nil {
		if err := checkCACert(b.Certs.K8s.Crt); err != nil {
			return nil, joinErr(secret, KeySecretsBundle, "certs.k8s.crt: %s", err)
		}
	}

	return &b, nil
}

func bundleSecrets(b *secrets.Bundle) []string {
	return (&JoinMaterial{bundle: b}).secretValues()
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// safeYAMLError reduces a YAML decoding error to its line number: decoder
// messages quote the offending value, which may be a secret.
func safeYAMLError(err error) string {
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		return "YAML error at line " + m[1]
	}

	if errors.Is(err, configloader.ErrNoConfig) {
		return "no config document found"
	}

	return "cannot decode YAML"
}

// checkCACert accepts exactly PEM certificates, the first of which is a CA.
func checkCACert(pemBytes []byte) error {
	if len(bytes.TrimSpace(pemBytes)) == 0 {
		return errors.New("empty")
	}

	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return errors.New("not PEM encoded")
	}

	if block.Type != "CERTIFICATE" {
		return fmt.Errorf("PEM block is %q, want CERTIFICATE", block.Type)
	}

	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return errors.New("not a valid X.509 certificate")
	}

	if !cert.IsCA {
		return errors.New("certificate is not a CA")
	}

	return nil
}

func parseEndpointKey(secret string, data map[string][]byte) (*url.URL, error) {
	raw := strings.TrimSpace(string(data[KeyEndpoint]))
	if raw == "" {
		return nil, missingKey(secret, KeyEndpoint)
	}

	u, err := parseEndpoint(raw)
	if err != nil {
		return nil, joinErr(secret, KeyEndpoint, "%s", err)
	}

	return u, nil
}

// parseEndpoint wants https://host[:port] with nothing else, as kubelet's
// kubeconfig and Talos's validation do.
func parseEndpoint(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("not a URL")
	}

	if err := checkEndpointShape(u); err != nil {
		return nil, err
	}

	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("port %q is not in 1-65535", p)
		}
	}

	u.Path = ""

	return u, nil
}

// checkEndpointShape refuses every part of a URL but https, host and port.
func checkEndpointShape(u *url.URL) error {
	switch {
	case u.Scheme != "https":
		return fmt.Errorf("must be an https:// URL, got scheme %q", u.Scheme)
	case u.Hostname() == "":
		return errors.New("has no host")
	case u.User != nil:
		return errors.New("must not carry user info")
	case u.RawQuery != "" || u.Fragment != "":
		return errors.New("must not carry a query or fragment")
	case u.Path != "" && u.Path != "/":
		return errors.New("must not carry a path")
	}

	return nil
}

func (j *JoinMaterial) parseOverrides(data map[string][]byte) error {
	list := func(key string) []string { return splitList(data[key]) }

	if err := j.checkOverrideLists(list); err != nil {
		return err
	}

	j.clusterDNS = list(KeyClusterDNS)
	j.serviceCIDR = list(KeyServiceCIDR)
	j.podCIDR = list(KeyPodCIDR)
	j.dnsDomain = strings.TrimSpace(string(data[KeyDNSDomain]))

	if v := strings.TrimSpace(string(data[KeyKubernetesVersion])); v != "" {
		if j.form == FormWorkerConfig {
			return joinErr(j.secretName, KeyKubernetesVersion, "not used with %s: set the kubelet image in the config", KeyWorkerConfig)
		}

		if !k8sVersionRE.MatchString(v) {
			return joinErr(j.secretName, KeyKubernetesVersion, "%q is not a version like 1.35.1", v)
		}

		j.kubernetesVersion = strings.TrimPrefix(v, "v")
	}

	if j.dnsDomain != "" && !dnsDomainRE.MatchString(j.dnsDomain) {
		return joinErr(j.secretName, KeyDNSDomain, "%q is not a DNS domain", j.dnsDomain)
	}

	return nil
}

// splitList reads a comma-separated list, blanks dropped.
func splitList(raw []byte) []string {
	var out []string

	for _, s := range strings.Split(string(raw), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}

	return out
}

// checkOverrideLists wants IP addresses in the cluster DNS list and CIDRs
// in the service and pod lists.
func (j *JoinMaterial) checkOverrideLists(list func(key string) []string) error {
	for _, ip := range list(KeyClusterDNS) {
		if _, err := netip.ParseAddr(ip); err != nil {
			return joinErr(j.secretName, KeyClusterDNS, "%q is not an IP address", ip)
		}
	}

	for _, key := range []string{KeyServiceCIDR, KeyPodCIDR} {
		for _, c := range list(key) {
			if _, err := netip.ParsePrefix(c); err != nil {
				return joinErr(j.secretName, key, "%q is not a CIDR", c)
			}
		}
	}

	return nil
}

// computeFingerprint hashes what decides the cluster a node joins and how:
// public parts and, for a base config, the whole config (its secrets are
// high-entropy, so a SHA-256 reveals nothing). Generated material and
// bootstrap tokens are left out: rotating a token must not drift nodes.
func (j *JoinMaterial) computeFingerprint() string {
	h := sha256.New()
	w := func(parts ...string) {
		for _, p := range parts {
			fmt.Fprintf(h, "%d:%s;", len(p), p)
		}
	}

	w("form", string(j.form), "endpoint", j.Endpoint(), "cluster", j.clusterName, "k8s", j.kubernetesVersion, "dnsDomain", j.dnsDomain)
	w("clusterDNS", strings.Join(j.clusterDNS, ","), "service", strings.Join(j.serviceCIDR, ","), "pod", strings.Join(j.podCIDR, ","))

	if j.bundle != nil {
		w("k8sCA", string(j.bundle.Certs.K8s.Crt))

		if j.HasTalosSecrets() {
			w("osCA", string(j.bundle.Certs.OS.Crt), "clusterID", j.bundle.Cluster.ID)
		}
	}

	if j.baseBytes != nil {
		sum := sha256.Sum256(j.baseBytes)
		w("base", hex.EncodeToString(sum[:]))
	}

	return hex.EncodeToString(h.Sum(nil))
}

// NewClusterJoinMaterial is the join material of a new cluster (a fresh
// Talos secrets bundle) at endpoint: for tests and demos that need a config
// that validates, not a cluster to join.
func NewClusterJoinMaterial(endpoint, clusterName string) (*JoinMaterial, error) {
	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), coreconfig.TalosVersion1_12)
	if err != nil {
		return nil, err
	}

	raw, err := yaml.Marshal(bundle)
	if err != nil {
		return nil, err
	}

	return ParseJoinSecret("generated", map[string][]byte{
		KeySecretsBundle: raw, KeyEndpoint: []byte(endpoint), KeyClusterName: []byte(clusterName),
	})
}
