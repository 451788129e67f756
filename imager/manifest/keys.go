package manifest

import (
	"fmt"
	"path"
	"strings"
)

// Layout names the objects of one image in a bucket:
//
//	<prefix>/<schematic-id>/<talos-version>/metal-<arch>.raw.zst
//	<prefix>/<schematic-id>/<talos-version>/metal-<arch>.raw.xz
//	<prefix>/<schematic-id>/<talos-version>/manifest.json
//
// One directory holds one architecture (Scaleway Elastic Metal is amd64); an
// image for another architecture goes under another prefix.
type Layout struct {
	Prefix       string
	SchematicID  string
	TalosVersion string
	Arch         string
}

// Validate checks the parts that become key segments, so a key never gains
// extra path segments or escapes the prefix.
func (l Layout) Validate() error {
	if err := ValidatePrefix(l.Prefix); err != nil {
		return err
	}
	if err := ValidateSchematicID(l.SchematicID); err != nil {
		return err
	}
	if err := ValidateTalosVersion(l.TalosVersion); err != nil {
		return err
	}
	return ValidateArch(l.Arch)
}

// Dir is the key prefix shared by the manifest and the images, without a
// trailing slash.
func (l Layout) Dir() string {
	p := strings.Trim(l.Prefix, "/")
	if p == "" {
		return l.SchematicID + "/" + l.TalosVersion
	}
	return p + "/" + l.SchematicID + "/" + l.TalosVersion
}

// ManifestKey is the key of manifest.json.
func (l Layout) ManifestKey() string { return l.Dir() + "/" + ManifestName }

// ImageKey is the key of the image compressed in format (xz or zstd).
func (l Layout) ImageKey(format string) (string, error) {
	name, err := ImageName(l.Arch, format)
	if err != nil {
		return "", err
	}
	return l.Dir() + "/" + name, nil
}

// FileKey is the key of a file listed in a manifest that lives at
// manifestKey: the file's name resolved against the manifest's directory.
func FileKey(manifestKey, name string) string {
	return path.Join(path.Dir(manifestKey), name)
}

// ValidatePrefix accepts "" or slash-separated segments of letters, digits,
// '.', '_' and '-', without "." or ".." segments.
func ValidatePrefix(p string) error {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("prefix: %q: empty, '.' or '..' segment", p)
		}
		if r, bad := firstBadPrefixRune(seg); bad {
			return fmt.Errorf("prefix: %q: character %q not allowed (letters, digits, '.', '_', '-' and '/')", p, r)
		}
	}
	return nil
}

// firstBadPrefixRune returns the first rune of seg outside the prefix alphabet, so the loop over
// segments reads as the rules it enforces rather than as a character class.
func firstBadPrefixRune(seg string) (rune, bool) {
	for _, r := range seg {
		if !prefixRune(r) {
			return r, true
		}
	}
	return 0, false
}

// prefixRune reports whether r may appear in a prefix segment: ASCII letters, digits, '.', '_' and '-'.
func prefixRune(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return r == '.' || r == '_' || r == '-'
}
