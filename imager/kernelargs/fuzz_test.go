package kernelargs

import (
	"bytes"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

// publish reads the kernel command line from the UKI of an image downloaded
// from anywhere: the PE reader must refuse, never crash on, any file, and
// the command line it returns is bounded.
func FuzzPECmdline(f *testing.F) {
	f.Add(testimage.UKI("talos.platform=metal talos.config=metal-iso", "v1.12.4", []byte("kernel")))
	f.Add(testimage.UKI("", "v1.12.4", nil))
	f.Add([]byte("MZ"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cmdline, err := peCmdline(bytes.NewReader(b))
		if err == nil && len(cmdline) > maxCmdline {
			t.Fatalf("a command line of %d bytes, more than %d", len(cmdline), maxCmdline)
		}
		_ = Parse(cmdline)
	})
}

// Parse and Get split command lines from images and the manifest.
func FuzzParse(f *testing.F) {
	f.Add(`talos.platform=metal console=tty0 "quoted arg=x y" talos.config=metal-iso`)
	f.Add(`a="unterminated`)
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range Parse(s) {
			if _, ok := Get(s, p.Key); !ok && p.Key != "" {
				t.Fatalf("Parse found %q in %q, Get does not", p.Key, s)
			}
		}
	})
}
