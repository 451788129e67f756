package main

import (
	"bytes"
	"encoding/base64"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
)

var update = flag.Bool("update", false, "rewrite testdata/expected.yaml")

func noEnv(string) string { return "" }

func baseArgs() []string {
	return []string{
		"--secret", "testdata/join-secret",
		"--nodeclaim", "testdata/nodeclaim.yaml",
		"--settings", "testdata/settings.yaml",
		"--report", "testdata/report.json",
		"--network", "testdata/network.yaml",
	}
}

func TestRenderFromFiles(t *testing.T) {
	var stdout, stderr bytes.Buffer

	if err := run(append(baseArgs(), "--hash"), &stdout, &stderr, noEnv); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}

	if *update {
		if err := os.WriteFile("testdata/expected.yaml", stdout.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	want, err := os.ReadFile("testdata/expected.yaml")
	if err != nil {
		t.Fatal(err)
	}

	if !bytes.Equal(want, stdout.Bytes()) {
		t.Errorf("output differs from testdata/expected.yaml (run with -update if intended):\n%s", stdout.String())
	}

	if !strings.HasPrefix(stderr.String(), "inputs hash: ") {
		t.Errorf("stderr = %q, want the inputs hash", stderr.String())
	}

	cfg, err := configloader.NewFromBytes(stdout.Bytes())
	if err != nil {
		t.Fatal(err)
	}

	f, err := talosgen.ReadFacts(cfg)
	if err != nil {
		t.Fatal(err)
	}

	if f.Hostname != "gpu-pool-7xk2p" || f.ProviderID != "scaleway-em://fr-par-2/0b3e5d6c-58a1-4c0f-9d7e-4c7a7a1c2f10" || len(f.RegisterWithTaints) != 3 {
		t.Errorf("facts = %+v", f)
	}
}

// The same Secret as a manifest, with the per-NodeClaim token from the
// environment and the output in a file.
func TestRenderFromSecretManifest(t *testing.T) {
	dir := t.TempDir()

	bundle, err := os.ReadFile("testdata/join-secret/secrets.yaml")
	if err != nil {
		t.Fatal(err)
	}

	manifest := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: join\n  namespace: karpenter\n" +
		"data:\n  secrets.yaml: " + base64.StdEncoding.EncodeToString(bundle) + "\n" +
		"stringData:\n  endpoint: https://k8s.example.test:6443\n  cluster-name: prod-eu\n"

	secretPath := filepath.Join(dir, "secret.yaml")
	if err := os.WriteFile(secretPath, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}

	args := baseArgs()
	args[1] = secretPath
	outPath := filepath.Join(dir, "out.yaml")

	const token = "p3rn0d.e0000000t0ken001"

	env := func(k string) string {
		if k == tokenEnv {
			return token
		}

		return ""
	}

	var stdout, stderr bytes.Buffer
	if err := run(append(args, "-o", outPath), &stdout, &stderr, env); err != nil {
		t.Fatal(err)
	}

	if stdout.Len() != 0 {
		t.Error("with -o, stdout must stay empty")
	}

	out, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := configloader.NewFromBytes(out)
	if err != nil {
		t.Fatal(err)
	}

	f, err := talosgen.ReadFacts(cfg)
	if err != nil {
		t.Fatal(err)
	}

	if f.BootstrapToken != token {
		t.Error("the bootstrap token from the environment was not used")
	}
}

func TestRenderCLIErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}

		return p
	}

	replace := func(flagName, value string) []string {
		args := baseArgs()
		for i := range args {
			if args[i] == flagName {
				args[i+1] = value
			}
		}

		return args
	}

	cases := map[string]struct {
		args []string
		want string
	}{
		"no flags":          {nil, "--"},
		"missing report":    {replace("--report", filepath.Join(dir, "nope.json")), "no such file"},
		"corrupt report":    {replace("--report", write("r.json", `{"version": 1, "ok": fal`)), "em-imager report"},
		"unknown setting":   {replace("--settings", write("s.yaml", "maxpods: 3\n")), "unknown field"},
		"restricted label":  {replace("--settings", write("s2.yaml", "labels:\n  node-role.kubernetes.io/x: \"\"\n")), "node-role.kubernetes.io/x"},
		"not a secret":      {replace("--secret", write("cm.yaml", "kind: ConfigMap\n")), `kind is "ConfigMap"`},
		"bad secret base64": {replace("--secret", write("sec.yaml", "kind: Secret\ndata:\n  token: '!!'\n")), "data.token is not base64"},
		"empty secret dir":  {replace("--secret", t.TempDir()), "no join material"},
		"unknown MAC":       {replace("--network", write("n.yaml", "uplinkMac: 02:00:00:00:00:01\n")), "not a NIC in the hardware report"},
	}

	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer

			err := run(tc.args, &stdout, &stderr, noEnv)
			if err == nil {
				t.Fatal("no error")
			}

			if !strings.Contains(err.Error()+stderr.String(), tc.want) {
				t.Errorf("error %q (stderr %q) does not contain %q", err, stderr.String(), tc.want)
			}

			if stdout.Len() != 0 {
				t.Error("nothing may be printed on failure")
			}
		})
	}
}

// TestRenderKubernetesVersionFlag: --kubernetes-version gives the kubelet
// the API server's version when the Secret names none (an operator
// rendering by hand, imager/README.md), as the controller does; without
// it the kubelet is Talos machinery's default, which may be newer than
// the cluster.
func TestRenderKubernetesVersionFlag(t *testing.T) {
	args := []string{"--secret", "testdata/join-secret", "--nodeclaim", "testdata/nodeclaim.yaml", "--report", "testdata/report.json"}
	var stdout, stderr bytes.Buffer
	if err := run(append(args, "--kubernetes-version", "v1.33.2"), &stdout, &stderr, noEnv); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	cfg, err := configloader.NewFromBytes(stdout.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if img := cfg.Machine().Kubelet().Image(); !strings.HasSuffix(img, ":v1.33.2") {
		t.Errorf("kubelet image %q, want the version given", img)
	}
}
