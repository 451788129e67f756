// Package licenses audits what the project ships under its Apache-2.0
// licence: the licence of every Go module it builds with (Modules,
// Identify), read from the module cache and recognised by
// github.com/google/licenseclassifier/v2, and the repository's own files
// (ForeignNotices), which must not carry another author's copyright header
// nor a licence file other than the root LICENSE.
//
//	make licenses                       # the table, exit 1 if a module has no licence
//	go test ./test/licenses/            # the same audit, run by make test
package licenses

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	classifier "github.com/google/licenseclassifier/v2"
	"github.com/google/licenseclassifier/v2/assets"
)

// Module is a dependency and what its licence files say.
type Module struct {
	Path     string
	Version  string
	Dir      string   // in the module cache (or a replace directory)
	Licenses []string // SPDX-style names found, sorted
	Files    []string // the licence files they were found in
}

// Modules lists the modules whose packages the module in dir builds or
// tests with (go list -deps -test ./...), the main module excluded.
func Modules(ctx context.Context, dir string) ([]Module, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-test", "-json=Module", "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list in %s: %w: %s", dir, err, stderr.String())
	}
	type listed struct {
		Module *struct {
			Path, Version, Dir string
			Main               bool
			Replace            *struct{ Path, Version, Dir string }
		}
	}
	seen := map[string]Module{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		m := p.Module
		if m == nil || m.Main {
			continue // the standard library, or the project itself
		}
		mod := Module{Path: m.Path, Version: m.Version, Dir: m.Dir}
		if m.Replace != nil {
			mod.Version, mod.Dir = m.Replace.Version, m.Replace.Dir
		}
		seen[m.Path] = mod
	}
	mods := make([]Module, 0, len(seen))
	for _, m := range seen {
		mods = append(mods, m)
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Path < mods[j].Path })
	return mods, nil
}

// licenseFile matches the names licence texts go by at a module's root.
var licenseFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying|unlicense)([.-].*)?$`)

// Classifier is licenseclassifier's default set of licence texts.
func Classifier() (*classifier.Classifier, error) { return assets.DefaultClassifier() }

// Identify fills m.Licenses and m.Files from the licence files at the
// module's root; it fails when there is none or none is a known licence.
func Identify(c *classifier.Classifier, m *Module) error {
	if m.Dir == "" {
		return fmt.Errorf("%s@%s: not in the module cache (go mod download)", m.Path, m.Version)
	}
	entries, err := os.ReadDir(m.Dir)
	if err != nil {
		return fmt.Errorf("%s@%s: %w", m.Path, m.Version, err)
	}
	names := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() || !licenseFile.MatchString(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.Dir, e.Name()))
		if err != nil {
			return err
		}
		m.Files = append(m.Files, e.Name())
		for _, match := range c.Match(b).Matches {
			if match.MatchType == "License" {
				names[match.Name] = true
			}
		}
	}
	for n := range names {
		m.Licenses = append(m.Licenses, n)
	}
	sort.Strings(m.Licenses)
	switch {
	case len(m.Files) == 0:
		return fmt.Errorf("%s@%s: no licence file at the module root", m.Path, m.Version)
	case len(m.Licenses) == 0:
		return fmt.Errorf("%s@%s: %s holds no licence the classifier knows", m.Path, m.Version, strings.Join(m.Files, ", "))
	}
	return nil
}

// Notice is a file of the repository that carries someone else's licence
// or copyright.
type Notice struct {
	Path   string // relative to the repository root
	Line   int    // 0 for a licence file
	Reason string
}

func (n Notice) String() string {
	if n.Line == 0 {
		return fmt.Sprintf("%s: %s", n.Path, n.Reason)
	}
	return fmt.Sprintf("%s:%d: %s", n.Path, n.Line, n.Reason)
}

var (
	// A copyright line: the word followed by a year, "(c)" or the sign,
	// or an SPDX file copyright tag.
	copyrightLine = regexp.MustCompile(`(?i)(copyright\s*(\(c\)|©)|copyright\s+(\(c\)\s*)?\d{4}|spdx-file(copyright)text)`)
	// The project's own notices name it.
	ownNotice = regexp.MustCompile(`(?i)karpenter-scaleway-em`)
)

// ForeignNotices walks the repository at root (the files git tracks or
// would track; every file when root is not a git work tree) and reports
// licence, copying and notice files other than the root LICENSE, and
// copyright lines that do not name the project.
func ForeignNotices(root string) ([]Notice, error) {
	files, err := repoFiles(root)
	if err != nil {
		return nil, err
	}
	var found []Notice
	for _, rel := range files {
		base := filepath.Base(rel)
		if rel == "LICENSE" {
			continue
		}
		if licenseFile.MatchString(base) || strings.HasPrefix(strings.ToLower(base), "notice") {
			found = append(found, Notice{Path: rel, Reason: "a licence or notice file: only the root LICENSE may exist"})
			continue
		}
		n, err := copyrightLines(filepath.Join(root, rel))
		if err != nil {
			return nil, err
		}
		for _, line := range n {
			found = append(found, Notice{Path: rel, Line: line.no, Reason: "copyright of another author: " + line.text})
		}
	}
	return found, nil
}

type textLine struct {
	no   int
	text string
}

func copyrightLines(path string) ([]textLine, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil // listed by git but deleted in the work tree
		}
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	if head, _ := br.Peek(8000); bytes.IndexByte(head, 0) >= 0 {
		return nil, nil // binary
	}
	var out []textLine
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for no := 1; sc.Scan(); no++ {
		line := sc.Text()
		if copyrightLine.MatchString(line) && !ownNotice.MatchString(line) {
			out = append(out, textLine{no, strings.TrimSpace(line)})
		}
	}
	return out, sc.Err()
}

// repoFiles lists tracked and untracked-but-not-ignored files, so a copied
// file is caught before it is committed.
func repoFiles(root string) ([]string, error) {
	if _, err := os.Stat(filepath.Join(root, ".git")); err == nil {
		cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("git ls-files in %s: %w", root, err)
		}
		var files []string
		for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
			if f != "" {
				files = append(files, f)
			}
		}
		return files, nil
	}
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		files = append(files, rel)
		return nil
	})
	return files, err
}
