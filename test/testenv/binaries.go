package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Names of the binaries `make tools` builds into bin/.
const (
	BinKubeAPIServer = "kube-apiserver"
	BinEtcd          = "etcd"
	BinKubeScheduler = "kube-scheduler"
	BinVersityGW     = "versitygw"
	// BinKubeControllerManager and BinKWOK make pods run (world.Options.RunPods).
	BinKubeControllerManager = "kube-controller-manager"
	BinKWOK                  = "kwok"
)

// assetEnv is the per-binary override, e.g. TEST_ASSET_KUBE_APISERVER (the
// convention envtest uses too).
func assetEnv(name string) string {
	return "TEST_ASSET_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// FindBinary returns the path of a tool binary: $TEST_ASSET_<NAME>, else
// $KUBEBUILDER_ASSETS/<name>, else <repository root>/bin/<name>. The error
// names the make target that builds it.
func FindBinary(name string) (string, error) { return FindBinaryBuiltBy(name, "make tools") }

// FindBinaryBuiltBy is FindBinary for a binary another make target builds
// (e.g. "make build" for em-imager and the controller).
func FindBinaryBuiltBy(name, target string) (string, error) {
	var path, via string
	if v := os.Getenv(assetEnv(name)); v != "" {
		path, via = v, assetEnv(name)
	} else if v := os.Getenv("KUBEBUILDER_ASSETS"); v != "" {
		path, via = filepath.Join(v, name), "KUBEBUILDER_ASSETS"
	} else {
		root, err := RepoRoot()
		if err != nil {
			return "", fmt.Errorf("bin/%s missing: run \"%s\" (%s, KUBEBUILDER_ASSETS unset and %w)", name, target, assetEnv(name), err)
		}
		path, via = filepath.Join(root, "bin", name), "repository bin/"
	}
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return "", fmt.Errorf("bin/%s missing: run \"%s\" (looked at %s via %s)", name, target, path, via)
	case st.IsDir() || st.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("bin/%s is not an executable file: run \"%s\" (looked at %s via %s)", name, target, path, via)
	}
	return path, nil
}

// RepoRoot walks up from the working directory (a package directory under
// `go test`) to the directory holding the provider module's go.mod. Tool
// modules under test/tools have their own go.mod, hence the module check.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/karpenter-scaleway-em/karpenter-scaleway-em\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module github.com/karpenter-scaleway-em/karpenter-scaleway-em above the working directory")
		}
		dir = parent
	}
}
