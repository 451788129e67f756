package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog/internal/offerserver"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog/snapshot"
)

const recordings = "../../../test/fixtures/scaleway/baremetal-api-recordings.json"

func TestRecordingsModeWritesTheEmbeddedSnapshot(t *testing.T) {
	out := filepath.Join(t.TempDir(), "offers.json")
	if err := run([]string{"-recordings", recordings, "-out", out}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, snapshot.EmbeddedBytes()) {
		t.Fatal("gen-snapshot output differs from the committed snapshot: run go generate ./catalog/")
	}
}

func TestLiveMode(t *testing.T) {
	srv := offerserver.New()
	defer srv.Close()
	rec, err := os.ReadFile(recordings)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.LoadRecordings(rec); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SCW_API_URL", srv.URL)
	t.Setenv("SCW_ACCESS_KEY", "SCWXXXXXXXXXXXXXXXXX")
	t.Setenv("SCW_SECRET_KEY", "11111111-1111-1111-1111-111111111111")
	out := filepath.Join(t.TempDir(), "offers.json")

	// Only fr-par-2 exists on this server: the other zones fail unless derived.
	if err := run([]string{"-live", "-out", out}); err == nil || !strings.Contains(err.Error(), "nl-ams-1") {
		t.Fatalf("live with missing zones: err = %v", err)
	}
	if err := run([]string{"-live", "-derive-missing", "-out", out}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s, err := snapshot.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if s.Metadata.Zones["fr-par-2"].Origin != snapshot.OriginLive || s.Metadata.Zones["pl-waw-2"].Origin != snapshot.OriginDerived {
		t.Fatalf("origins %+v", s.Metadata.Zones)
	}
	if s.Metadata.GeneratedAt == "" {
		t.Error("live snapshot without generated_at")
	}
	if bytes.Contains(b, []byte("11111111-1111-1111-1111-111111111111")) {
		t.Fatal("secret key written to the snapshot")
	}

	srv.FailWith(func(*http.Request) int { return http.StatusUnauthorized })
	if err := run([]string{"-live", "-zones", "fr-par-2", "-out", out}); err == nil {
		t.Fatal("401 from the API did not fail the generator")
	} else if strings.Contains(err.Error(), "11111111-1111-1111-1111-111111111111") {
		t.Fatalf("secret in error: %v", err)
	}
}

func TestFlagErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"bad zone":        {[]string{"-live", "-zones", "fr-par-2,moon"}, "flag -zones"},
		"bad derive-from": {[]string{"-derive-from", "x"}, "flag -derive-from"},
		"missing file":    {[]string{"-recordings", "/nonexistent.json"}, "flag -recordings"},
		"unwritable out":  {[]string{"-recordings", recordings, "-out", "/nonexistent/dir/offers.json"}, "flag -out"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := run(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
