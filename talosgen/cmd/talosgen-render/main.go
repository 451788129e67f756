// Command talosgen-render prints the Talos machine config a node would
// receive, from the same inputs the controller uses, so an operator can
// inspect (and diff) it before any server is ordered.
//
//	talosgen-render --secret join-secret.yaml --nodeclaim nodeclaim.yaml \
//	  --settings settings.yaml --report report.json --network network.yaml
//
// A per-NodeClaim bootstrap token can be given in TALOSGEN_BOOTSTRAP_TOKEN
// (never as a flag: flags end up in shell history and process lists).
package main

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
)

const tokenEnv = "TALOSGEN_BOOTSTRAP_TOKEN"

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "talosgen-render:", err)
		os.Exit(1)
	}
}

// run parses the flags, reads every input, renders, and writes the config:
// each step is one function below.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	f, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}

	in, err := readInputs(f, getenv)
	if err != nil {
		return err
	}

	res, err := talosgen.Render(in.join, &in.nodeClaim, in.settings, in.hw, in.network)
	if err != nil {
		return err
	}

	for _, w := range res.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}

	if f.showHash {
		fmt.Fprintln(stderr, "inputs hash:", res.Hash)
	}

	if f.out != "" {
		return os.WriteFile(f.out, res.Config, 0o600)
	}

	_, err = stdout.Write(res.Config)

	return err
}

// flags are the command line's values.
type flags struct {
	secretPath, secretName, nodeClaim, settings, report, network, out, kubeVersion string
	showHash                                                                       bool
}

func parseFlags(args []string, stderr io.Writer) (flags, error) {
	fs := flag.NewFlagSet("talosgen-render", flag.ContinueOnError)
	fs.SetOutput(stderr)

	var f flags

	fs.StringVar(&f.secretPath, "secret", "", "join Secret: a Kubernetes Secret manifest (YAML) or a directory with one file per key (required)")
	fs.StringVar(&f.secretName, "secret-name", "", "namespace/name used in messages (default: from the manifest, or the directory name)")
	fs.StringVar(&f.nodeClaim, "nodeclaim", "", "NodeClaim YAML with metadata.name, labels, spec.taints and status.providerID (required)")
	fs.StringVar(&f.settings, "settings", "", "NodeSettings YAML (see talosgen.NodeSettings; optional)")
	fs.StringVar(&f.report, "report", "", "em-imager JSON report (required)")
	fs.StringVar(&f.network, "network", "", "Network YAML (see talosgen.Network; optional)")
	fs.StringVar(&f.out, "o", "", "write the config to this file instead of stdout")
	fs.BoolVar(&f.showHash, "hash", false, "print the inputs hash to stderr")
	fs.StringVar(&f.kubeVersion, "kubernetes-version", "", "kubelet version when the Secret names none: the API server's (kubectl version), as the controller does; without either, Talos machinery's default, which may be newer than the cluster")

	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: talosgen-render --secret PATH --nodeclaim FILE --report FILE [--settings FILE] [--network FILE] [--kubernetes-version V] [-o FILE]\n")
		fs.PrintDefaults()
	}

	if err := fs.Parse(args); err != nil {
		return flags{}, err
	}

	for flagName, v := range map[string]string{"--secret": f.secretPath, "--nodeclaim": f.nodeClaim, "--report": f.report} {
		if v == "" {
			fs.Usage()

			return flags{}, fmt.Errorf("%s is required", flagName)
		}
	}

	return f, nil
}

// inputs are what Render takes, read from the files the flags name.
type inputs struct {
	join      *talosgen.JoinMaterial
	nodeClaim karpv1.NodeClaim
	settings  talosgen.NodeSettings
	hw        *report.Report
	network   talosgen.Network
}

func readInputs(f flags, getenv func(string) string) (*inputs, error) {
	join, err := readJoin(f)
	if err != nil {
		return nil, err
	}

	in := &inputs{join: join}
	if err := readYAML(f.nodeClaim, &in.nodeClaim); err != nil {
		return nil, err
	}

	if err := readOptionalYAML(f.settings, &in.settings); err != nil {
		return nil, err
	}

	in.settings.BootstrapToken = strings.TrimSpace(getenv(tokenEnv))

	rawReport, err := os.ReadFile(f.report)
	if err != nil {
		return nil, err
	}

	if in.hw, err = report.Parse(rawReport); err != nil {
		return nil, fmt.Errorf("%s: %w", f.report, err)
	}

	if err := readOptionalYAML(f.network, &in.network); err != nil {
		return nil, err
	}

	return in, nil
}

// readJoin reads and parses the join Secret, named in messages as the flags
// say, with the kubelet version the flags give as a default.
func readJoin(f flags) (*talosgen.JoinMaterial, error) {
	name, data, err := readSecret(f.secretPath)
	if err != nil {
		return nil, err
	}

	if f.secretName != "" {
		name = f.secretName
	}

	join, err := talosgen.ParseJoinSecret(name, data)
	if err != nil {
		return nil, err
	}

	if f.kubeVersion != "" {
		// The Secret's kubernetes-version still wins, as in the controller.
		join.DefaultKubernetesVersion(f.kubeVersion)
	}

	return join, nil
}

// readOptionalYAML reads path into into, when path is set.
func readOptionalYAML(path string, into any) error {
	if path == "" {
		return nil
	}

	return readYAML(path, into)
}

func readYAML(path string, into any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}

	if err := yaml.UnmarshalStrict(b, into); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}

	return nil
}

// secretManifest is the part of a v1 Secret this tool reads.
type secretManifest struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Data       map[string]string `json:"data"`
	StringData map[string]string `json:"stringData"`
}

// readSecret loads the join Secret's data from a manifest or a directory.
// Errors name keys, never values.
func readSecret(path string) (string, map[string][]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", nil, err
	}

	if st.IsDir() {
		return readSecretDir(path)
	}

	return readSecretManifest(path)
}

// readSecretDir reads a Secret laid out as a directory, one file per key
// (as a mounted Secret is), skipping hidden entries and subdirectories. The
// directory's name is the Secret's.
func readSecretDir(path string) (string, map[string][]byte, error) {
	entries, err := os.ReadDir(path)
	if err != nil {
		return "", nil, err
	}

	data := map[string][]byte{}

	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}

		b, err := os.ReadFile(filepath.Join(path, e.Name()))
		if err != nil {
			return "", nil, err
		}

		data[e.Name()] = b
	}

	return filepath.Base(filepath.Clean(path)), data, nil
}

// readSecretManifest reads a Secret manifest: data (base64) and
// stringData, the latter winning as the API server does. The Secret is
// named namespace/name.
func readSecretManifest(path string) (string, map[string][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}

	var m secretManifest
	if err := yaml.Unmarshal(b, &m); err != nil {
		return "", nil, fmt.Errorf("%s: not a Secret manifest", path)
	}

	if m.Kind != "Secret" {
		return "", nil, fmt.Errorf("%s: kind is %q, want Secret", path, m.Kind)
	}

	data := map[string][]byte{}

	for k, v := range m.Data {
		dec, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return "", nil, fmt.Errorf("%s: data.%s is not base64", path, k)
		}

		data[k] = dec
	}

	for k, v := range m.StringData {
		data[k] = []byte(v)
	}

	if len(data) == 0 {
		return "", nil, errors.New(path + ": Secret has no data")
	}

	name := m.Metadata.Name
	if m.Metadata.Namespace != "" {
		name = m.Metadata.Namespace + "/" + name
	}

	return name, data, nil
}
