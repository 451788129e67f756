package terminal

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
)

func TestFit(t *testing.T) {
	if got := Fit("abcdef", 10); got != "abcdef" {
		t.Fatal(got)
	}
	if got := Fit("abcdefghijkl", 10); got != "abcdefgh…" {
		t.Fatal(got)
	}
	if got := Fit("ééééééééééé", 6); got != "éééé…" {
		t.Fatal(got)
	}
}

// Not a terminal: a pipe and a buffer. (The pseudo-terminal side is tried
// for real by imager/cli's tmux tests.)
func TestNotATerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if Is(w) || Is(&bytes.Buffer{}) || Is((*os.File)(nil)) {
		t.Fatal("a pipe or a buffer taken for a terminal")
	}
	if Width(w) != DefaultWidth {
		t.Fatal("width of a pipe")
	}
}

func TestStatusLine(t *testing.T) {
	var b bytes.Buffer
	s := NewStatusLine(&b)
	s.Update("one")
	s.Update("two")
	s.Println("a warning")
	s.Finish("done")
	want := "\rone\x1b[K\rtwo\x1b[K\r\x1b[Ka warning\n\rtwo\x1b[K\rdone\x1b[K\n"
	if b.String() != want {
		t.Fatalf("%q\nwant %q", b.String(), want)
	}
}

func TestConfirm(t *testing.T) {
	for in, want := range map[string]bool{"y\n": true, "YES\n": true, " yes \n": true, "n\n": false, "\n": false, "": false, "yess\n": false} {
		var out bytes.Buffer
		got, err := Confirm(context.Background(), strings.NewReader(in), &out, "Go? [y/N] ")
		if err != nil || got != want || !strings.HasPrefix(out.String(), "Go? [y/N] ") {
			t.Errorf("%q: %v %v %q", in, got, err, out.String())
		}
	}
	r, w := io.Pipe() // nobody answers
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ok, err := Confirm(ctx, r, io.Discard, "? "); ok || err == nil {
		t.Fatalf("cancelled: %v %v", ok, err)
	}
}
