package manifest

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const (
	schematic = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	sumA      = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	sumB      = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
)

func valid() *Manifest {
	return &Manifest{
		SchemaVersion: SchemaVersion,
		SchematicID:   schematic,
		TalosVersion:  "v1.12.0",
		Arch:          "amd64",
		SectorSize:    512,
		Raw:           Digest{Size: 4 << 20, SHA256: sumA},
		Files: []File{
			{Name: "metal-amd64.raw.zst", Format: FormatZstd, Size: 1000, SHA256: sumB, BlockSize: 1 << 20},
			{Name: "metal-amd64.raw.xz", Format: FormatXZ, Size: 900, SHA256: sumB},
		},
		Boot:    &Boot{KernelArgs: "talos.platform=metal console=tty0 talos.config=metal-iso", Source: "image:EFI/Linux/Talos-v1.12.0.efi", MetalISO: true},
		Tool:    Tool{Name: "em-imager publish", Version: "dev"},
		Created: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC),
	}
}

func TestRoundTrip(t *testing.T) {
	m := valid()
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !SameImage(m, got) || !got.Created.Equal(m.Created) || got.Tool != m.Tool {
		t.Fatalf("round trip changed the manifest:\n%+v\n%+v", m, got)
	}
	f, ok := got.File(FormatXZ)
	if !ok || f.Size != 900 {
		t.Fatalf("File(xz) = %+v, %v", f, ok)
	}
	if _, ok := got.File("gzip"); ok {
		t.Fatal("File(gzip) found")
	}
	// Unknown fields are accepted (additive evolution within a schema version).
	withExtra := strings.Replace(string(b), `"arch"`, `"futureField": 1, "arch"`, 1)
	if _, err := Parse([]byte(withExtra)); err != nil {
		t.Fatalf("unknown field refused: %v", err)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(m *Manifest)
		field string
	}{
		{"schema", func(m *Manifest) { m.SchemaVersion = 2 }, "schemaVersion"},
		{"schematic short", func(m *Manifest) { m.SchematicID = "abc" }, "schematicID"},
		{"schematic upper", func(m *Manifest) { m.SchematicID = strings.ToUpper(schematic) }, "schematicID"},
		{"schematic path", func(m *Manifest) { m.SchematicID = "../" + schematic[3:] }, "schematicID"},
		{"version", func(m *Manifest) { m.TalosVersion = "1.12.0" }, "talosVersion"},
		{"version path", func(m *Manifest) { m.TalosVersion = "v1.12.0/x" }, "talosVersion"},
		{"arch", func(m *Manifest) { m.Arch = "riscv64" }, "arch"},
		{"sector", func(m *Manifest) { m.SectorSize = 1024 }, "sectorSize"},
		{"raw size zero", func(m *Manifest) { m.Raw.Size = 0 }, "raw.size"},
		{"raw size unaligned", func(m *Manifest) { m.Raw.Size = 1000 }, "raw.size"},
		{"raw sha", func(m *Manifest) { m.Raw.SHA256 = "xyz" }, "raw.sha256"},
		{"raw sha upper", func(m *Manifest) { m.Raw.SHA256 = strings.ToUpper(sumA) }, "raw.sha256"},
		{"no files", func(m *Manifest) { m.Files = nil }, "files"},
		{"file format", func(m *Manifest) { m.Files[0].Format = "gzip" }, "files[0].format"},
		{"file twice", func(m *Manifest) { m.Files[1] = m.Files[0] }, "files[1].format"},
		{"file name", func(m *Manifest) { m.Files[0].Name = "../../etc/passwd" }, "files[0].name"},
		{"file name other arch", func(m *Manifest) { m.Files[1].Name = "metal-arm64.raw.xz" }, "files[1].name"},
		{"file size", func(m *Manifest) { m.Files[1].Size = -1 }, "files[1].size"},
		{"file sha", func(m *Manifest) { m.Files[1].SHA256 = "" }, "files[1].sha256"},
		{"file block", func(m *Manifest) { m.Files[0].BlockSize = -4 }, "files[0].blockSize"},
		{"boot source", func(m *Manifest) { m.Boot.Source = "grub" }, "boot.source"},
		{"boot source image without file", func(m *Manifest) { m.Boot.Source = "image:" }, "boot.source"},
		{"boot no kernel args", func(m *Manifest) { m.Boot.KernelArgs = " " }, "boot.kernelArgs"},
		{"boot flag says metal-iso, args do not", func(m *Manifest) { m.Boot.KernelArgs = "talos.platform=metal" }, "boot.metalISO"},
		{"boot flag hides metal-iso", func(m *Manifest) { m.Boot.MetalISO = false }, "boot.metalISO"},
		{"boot unknown with args", func(m *Manifest) { m.Boot.Source = BootSourceUnknown }, "boot"},
		{"tool", func(m *Manifest) { m.Tool.Name = " " }, "tool.name"},
		{"created", func(m *Manifest) { m.Created = time.Time{} }, "created"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := valid()
			c.edit(m)
			err := m.Validate()
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), c.field+":") {
				t.Fatalf("error %q does not name field %s", err, c.field)
			}
			if _, err := m.Marshal(); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Marshal of an invalid manifest = %v", err)
			}
		})
	}
}

// Manifests from before the boot field, and images whose kernel arguments
// publish could not read, stay valid.
func TestBootOptional(t *testing.T) {
	for name, b := range map[string]*Boot{
		"absent":  nil,
		"unknown": {Source: BootSourceUnknown},
		"flag":    {KernelArgs: "talos.platform=metal", Source: BootSourceFlag},
	} {
		m := valid()
		m.Boot = b
		data, err := m.Marshal()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := Parse(data)
		if err != nil || !SameImage(m, got) {
			t.Fatalf("%s: %v", name, err)
		}
		if b == nil && strings.Contains(string(data), `"boot"`) {
			t.Fatalf("%s: boot written: %s", name, data)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	good, err := valid().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"not json":         "this is an xz file",
		"no version":       `{"schematicID": "x"}`,
		"future version":   strings.Replace(string(good), `"schemaVersion": 1`, `"schemaVersion": 7`, 1),
		"trailing":         string(good) + `{"again": true}`,
		"wrong type":       strings.Replace(string(good), `"sectorSize": 512`, `"sectorSize": "512"`, 1),
		"too big":          string(good) + strings.Repeat(" ", MaxSize),
		"invalid contents": strings.Replace(string(good), `"arch": "amd64"`, `"arch": "sparc"`, 1),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(in)); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestSameImage(t *testing.T) {
	a, b := valid(), valid()
	b.Created = b.Created.Add(time.Hour)
	b.Tool.Version = "v9"
	b.Files[0], b.Files[1] = b.Files[1], b.Files[0]
	if !SameImage(a, b) {
		t.Fatal("tool, time and file order must not count")
	}
	for name, edit := range map[string]func(m *Manifest){
		"raw":     func(m *Manifest) { m.Raw.SHA256 = sumB },
		"file":    func(m *Manifest) { m.Files[0].SHA256 = sumA },
		"fewer":   func(m *Manifest) { m.Files = m.Files[:1] },
		"public":  func(m *Manifest) { m.Public = true },
		"arch":    func(m *Manifest) { m.Arch = "arm64" },
		"boot":    func(m *Manifest) { m.Boot = &Boot{KernelArgs: "talos.platform=metal", Source: BootSourceFlag} },
		"no boot": func(m *Manifest) { m.Boot = nil },
	} {
		c := valid()
		edit(c)
		if SameImage(a, c) {
			t.Errorf("%s: change not seen", name)
		}
	}
}

func TestLayout(t *testing.T) {
	l := Layout{Prefix: "/talos/images/", SchematicID: schematic, TalosVersion: "v1.12.0", Arch: "amd64"}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	dir := "talos/images/" + schematic + "/v1.12.0"
	if got := l.ManifestKey(); got != dir+"/manifest.json" {
		t.Errorf("ManifestKey = %q", got)
	}
	for format, name := range map[string]string{FormatZstd: "metal-amd64.raw.zst", FormatXZ: "metal-amd64.raw.xz"} {
		got, err := l.ImageKey(format)
		if err != nil || got != dir+"/"+name {
			t.Errorf("ImageKey(%s) = %q, %v", format, got, err)
		}
		if fk := FileKey(l.ManifestKey(), name); fk != got {
			t.Errorf("FileKey = %q, want %q", fk, got)
		}
	}
	if _, err := l.ImageKey("gzip"); err == nil {
		t.Error("ImageKey(gzip) accepted")
	}
	l.Prefix = ""
	if got := l.ManifestKey(); got != schematic+"/v1.12.0/manifest.json" {
		t.Errorf("empty prefix: %q", got)
	}
	for _, p := range []string{"a/../b", "a//b", "a b", "./x", "é"} {
		l.Prefix = p
		if err := l.Validate(); err == nil || !strings.Contains(err.Error(), "prefix") {
			t.Errorf("prefix %q: %v", p, err)
		}
	}
	l.Prefix = "ok"
	l.Arch = "x86"
	if err := l.Validate(); err == nil {
		t.Error("bad arch accepted")
	}
}

func TestNormalizeFormat(t *testing.T) {
	for in, want := range map[string]string{"xz": FormatXZ, "ZST": FormatZstd, " zstd": FormatZstd} {
		if got, err := NormalizeFormat(in); err != nil || got != want {
			t.Errorf("NormalizeFormat(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := NormalizeFormat("gz"); err == nil {
		t.Error("gz accepted")
	}
}

// TestValidateReportsEveryFieldInOrder pins Validate's whole answer for a
// manifest wrong everywhere: every field at once, in the order of the
// document, whichever part of Validate checks it.
func TestValidateReportsEveryFieldInOrder(t *testing.T) {
	m := &Manifest{
		SchemaVersion: 9, SchematicID: "abc", TalosVersion: "1.12", Arch: "riscv64", SectorSize: 1024,
		Raw:   Digest{Size: 0, SHA256: "x"},
		Files: []File{{Format: "gzip", Size: 0, SHA256: "", BlockSize: -1}},
		Boot:  &Boot{Source: "grub"},
	}
	want := []string{"schemaVersion:", "schematicID", "talosVersion", "arch", "sectorSize:", "raw.size:", "raw.sha256:",
		"files[0].format:", "files[0].size:", "files[0].sha256:", "files[0].blockSize:", "boot.source:", "tool.name:", "created:"}
	err := m.Validate()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Validate = %v, want ErrInvalid", err)
	}
	msg, at := err.Error(), 0
	for _, field := range want {
		i := strings.Index(msg[at:], field)
		if i < 0 {
			t.Fatalf("%q missing or out of order in:\n%s", field, msg)
		}
		at += i + len(field)
	}
	if n := strings.Count(msg, "\n") + 1; n != len(want) {
		t.Fatalf("%d problems, want %d:\n%s", n, len(want), msg)
	}
}
