package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
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
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "test", "testenv", "binaries.go")); err != nil {
		t.Fatalf("RepoRoot() = %s is not the repository root: %v", root, err)
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

// fatalRecorder stands in for *testing.T to capture how a starter fails.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runStarter runs start like a test body and returns its Fatalf message.
func runStarter(t *testing.T, start func(tb testing.TB)) string {
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		start(r)
	}()
	<-done
	return r.msg
}

func TestStartersFailNamingMakeTarget(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	t.Setenv("TEST_ASSET_KUBE_APISERVER", missing)
	t.Setenv("TEST_ASSET_VERSITYGW", missing)
	if msg := runStarter(t, func(tb testing.TB) { StartKube(tb, KubeOptions{}) }); !strings.Contains(msg, `bin/kube-apiserver missing: run "make tools"`) {
		t.Fatalf("StartKube with no kube-apiserver: %q", msg)
	}
	if msg := runStarter(t, func(tb testing.TB) { StartS3(tb) }); !strings.Contains(msg, `bin/versitygw missing: run "make tools"`) {
		t.Fatalf("StartS3 with no versitygw: %q", msg)
	}
	t.Setenv("TEST_ASSET_KUBE_SCHEDULER", missing)
	if msg := runStarter(t, func(tb testing.TB) { StartScheduler(tb, &Kube{KubeconfigPath: "x"}) }); !strings.Contains(msg, `bin/kube-scheduler missing: run "make tools"`) {
		t.Fatalf("StartScheduler with no kube-scheduler: %q", msg)
	}
}
