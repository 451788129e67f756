package docs

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// block is one fenced code block of a Markdown file.
type block struct {
	File    string // relative to the module root
	Line    int    // of the opening fence
	Lang    string // the fence's info string: sh, yaml, console, "" ...
	Heading string // the nearest heading above it
	Text    string
}

// where names a block in failures: file:line.
func (b block) where() string { return b.File + ":" + strconv.Itoa(b.Line) }

// root is the module root, found from this file's path.
func root(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// blocks returns the fenced blocks of file (relative to the module root).
func blocks(t testing.TB, file string) []block {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root(t), file))
	if err != nil {
		t.Fatal(err)
	}
	var (
		out     []block
		cur     *block
		heading string
		lines   []string
	)
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &block{File: file, Line: i + 1, Lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), Heading: heading}
			lines = nil
		case cur != nil && trimmed == "```":
			cur.Text = strings.Join(lines, "\n") + "\n"
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			lines = append(lines, line)
		case strings.HasPrefix(line, "#"):
			heading = strings.TrimSpace(strings.TrimLeft(line, "#"))
		}
	}
	if cur != nil {
		t.Fatalf("%s: the fence opened at line %d is never closed", file, cur.Line)
	}
	return out
}

// isShell says whether a block is a shell script to run (sh, bash, shell);
// console blocks and unlabelled ones are transcripts (a command and its
// output), read but never run.
func isShell(b block) bool { return b.Lang == "sh" || b.Lang == "bash" || b.Lang == "shell" }

// isYAML says whether a block is a YAML example.
func isYAML(b block) bool { return b.Lang == "yaml" || b.Lang == "yml" }
