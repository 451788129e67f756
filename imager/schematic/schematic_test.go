package schematic

import (
	"strings"
	"testing"
)

// IDs that Image Factory publishes (its pkg/schematic tests and docs): the
// encoding here must give the same ones, else every ID we print is wrong.
func TestIDsMatchImageFactory(t *testing.T) {
	for _, tc := range []struct {
		name       string
		kernelArgs []string
		extensions []string
		want       string
	}{
		{"empty", nil, nil, "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"},
		{"kernel args", []string{"noapic", "nolapic"}, nil, "9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c"},
	} {
		s, err := New(tc.kernelArgs, tc.extensions)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.ID()
		if err != nil || got != tc.want {
			t.Errorf("%s: ID = %s, %v; want %s", tc.name, got, err, tc.want)
		}
	}
}

func TestYAMLIsTheFactorysLayout(t *testing.T) {
	s, err := New([]string{MetalISOArg}, []string{"siderolabs/amd-ucode"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.YAML()
	if err != nil {
		t.Fatal(err)
	}
	want := "customization:\n    extraKernelArgs:\n        - talos.config=metal-iso\n    systemExtensions:\n        officialExtensions:\n            - siderolabs/amd-ucode\n"
	if string(b) != want {
		t.Errorf("YAML:\n%s\nwant:\n%s", b, want)
	}
	other, _ := New([]string{MetalISOArg}, []string{"siderolabs/intel-ucode"})
	a, _ := s.ID()
	c, _ := other.ID()
	if a == c {
		t.Error("two schematics with different extensions have the same ID")
	}
}

func TestBadInputIsRefused(t *testing.T) {
	for _, tc := range []struct {
		args, exts []string
		want       string
	}{
		{[]string{"a b"}, nil, "no spaces"},
		{[]string{""}, nil, "no spaces"},
		{nil, []string{"amd-ucode"}, "full name"},
	} {
		if _, err := New(tc.args, tc.exts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q, %q) = %v, want an error saying %q", tc.args, tc.exts, err, tc.want)
		}
	}
}
