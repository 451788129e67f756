package chart

import (
	"fmt"
	"os/exec"
	"strings"
)

// moduleDir returns a dependency's directory in the module cache, as `make
// chart-crds` finds it.
func moduleDir(path string) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", path).Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", path, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("go list -m %s: module not in the module cache (go mod download)", path)
	}
	return dir, nil
}
