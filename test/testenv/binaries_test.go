package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindBinaryMissingNamesMakeTarget(t *testing.T) {
	t.Setenv("TEST_ASSET_VERSITYGW", filepath.Join(t.TempDir(), "nope"))
	_, err := FindBinary(BinVersityGW)
	if err == nil || !strings.Contains(err.Error(), `bin/versitygw missing: run "make tools"`) || !strings.Contains(err.Error(), "TEST_ASSET_VERSITYGW") {
		t.Fatalf("err = %v", err)
	}
}

func TestFindBinaryOrder(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "etcd")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEST_ASSET_ETCD", "")
	t.Setenv("KUBEBUILDER_ASSETS", dir)
	if got, err := FindBinary(BinEtcd); err != nil || got != exe {
		t.Fatalf("via KUBEBUILDER_ASSETS: %q, %v", got, err)
	}
	other := filepath.Join(t.TempDir(), "my-etcd")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEST_ASSET_ETCD", other)
	if got, err := FindBinary(BinEtcd); err != nil || got != other {
		t.Fatalf("TEST_ASSET_ETCD must win: %q, %v", got, err)
	}
	// Not executable: refused with the make target named.
	if err := os.Chmod(other, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FindBinary(BinEtcd); err == nil || !strings.Contains(err.Error(), `run "make tools"`) {
		t.Fatalf("non-executable: err = %v", err)
	}
}

func TestFindBinaryFallsBackToRepoBin(t *testing.T) {
	t.Setenv("TEST_ASSET_KUBE_SCHEDULER", "")
	t.Setenv("KUBEBUILDER_ASSETS", "")
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "test", "testenv", "binaries.go")); err != nil {
		t.Fatalf("repoRoot() = %s is not the repository root: %v", root, err)
	}
	got, err := FindBinary(BinKubeScheduler)
	want := filepath.Join(root, "bin", "kube-scheduler")
	if err == nil && got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if err != nil && !strings.Contains(err.Error(), want) {
		t.Fatalf("error does not name the path looked at: %v", err)
	}
}
