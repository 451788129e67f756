package kernelargs

import (
	"errors"
	"testing"
	"testing/fstest"
)

// TestOnlyUKI: one .efi file in EFI/Linux is the UKI; none or several is
// an error, none of them wrapping ErrNotFound only when there is none.
func TestOnlyUKI(t *testing.T) {
	read := func(files ...string) fstest.MapFS {
		m := fstest.MapFS{}
		for _, f := range files {
			m[f] = &fstest.MapFile{}
		}
		return m
	}
	entries, _ := read("Talos-v1.12.0.EFI", "notes.txt").ReadDir(".")
	if got, err := onlyUKI(entries); err != nil || got != "EFI/Linux/Talos-v1.12.0.EFI" {
		t.Fatalf("one: %q, %v", got, err)
	}
	entries, _ = read("notes.txt").ReadDir(".")
	if _, err := onlyUKI(entries); !errors.Is(err, ErrNotFound) {
		t.Fatalf("none: %v", err)
	}
	entries, _ = read("a.efi", "b.efi").ReadDir(".")
	if _, err := onlyUKI(entries); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("several: %v", err)
	}
}
