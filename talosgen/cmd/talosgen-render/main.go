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

func run(args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("talosgen-render", flag.ContinueOnError)
	fs.SetOutput(stderr)

	var (
		secretPath   = fs.String("secret", "", "join Secret: a Kubernetes Secret manifest (YAML) or a directory with one file per key (required)")
		secretName   = fs.String("secret-name", "", "namespace/name used in messages (default: from the manifest, or the directory name)")
		nodeclaim    = fs.String("nodeclaim", "", "NodeClaim YAML with metadata.name, labels, spec.taints and status.providerID (required)")
		settingsPath = fs.String("settings", "", "NodeSettings YAML (see talosgen.NodeSettings; optional)")
		reportPath   = fs.String("report", "", "em-imager JSON report (required)")
		networkPath  = fs.String("network", "", "Network YAML (see talosgen.Network; optional)")
		out          = fs.String("o", "", "write the config to this file instead of stdout")
		showHash     = fs.Bool("hash", false, "print the inputs hash to stderr")
		kubeVersion  = fs.String("kubernetes-version", "", "kubelet version when the Secret names none: the API server's (kubectl version), as the controller does; without either, Talos machinery's default, which may be newer than the cluster")
	)

	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: talosgen-render --secret PATH --nodeclaim FILE --report FILE [--settings FILE] [--network FILE] [--kubernetes-version V] [-o FILE]\n")
		fs.PrintDefaults()
	}

	if err := fs.Parse(args); err != nil {
		return err
	}

	for flagName, v := range map[string]string{"--secret": *secretPath, "--nodeclaim": *nodeclaim, "--report": *reportPath} {
		if v == "" {
			fs.Usage()

			return fmt.Errorf("%s is required", flagName)
		}
	}

	name, data, err := readSecret(*secretPath)
	if err != nil {
		return err
	}

	if *secretName != "" {
		name = *secretName
	}

	join, err := talosgen.ParseJoinSecret(name, data)
	if err != nil {
		return err
	}

	if *kubeVersion != "" {
		// The Secret's kubernetes-version still wins, as in the controller.
		join.DefaultKubernetesVersion(*kubeVersion)
	}

	var nc karpv1.NodeClaim
	if err := readYAML(*nodeclaim, &nc); err != nil {
		return err
	}

	var settings talosgen.NodeSettings
	if *settingsPath != "" {
		if err := readYAML(*settingsPath, &settings); err != nil {
			return err
		}
	}

	settings.BootstrapToken = strings.TrimSpace(getenv(tokenEnv))

	rawReport, err := os.ReadFile(*reportPath)
	if err != nil {
		return err
	}

	hw, err := report.Parse(rawReport)
	if err != nil {
		return fmt.Errorf("%s: %w", *reportPath, err)
	}

	var netw talosgen.Network
	if *networkPath != "" {
		if err := readYAML(*networkPath, &netw); err != nil {
			return err
		}
	}

	res, err := talosgen.Render(join, &nc, settings, hw, netw)
	if err != nil {
		return err
	}

	for _, w := range res.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}

	if *showHash {
		fmt.Fprintln(stderr, "inputs hash:", res.Hash)
	}

	if *out != "" {
		return os.WriteFile(*out, res.Config, 0o600)
	}

	_, err = stdout.Write(res.Config)

	return err
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

	data := map[string][]byte{}

	if st.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return "", nil, err
		}

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
