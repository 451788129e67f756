// Package terminal is what em-imager does differently for a person at a
// terminal: detection and width (golang.org/x/term), a status line redrawn in
// place, and a yes/no question. Nothing here runs when the controller drives
// em-imager over SSH without a terminal.
package terminal

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/term"
)

// DefaultWidth is used when the terminal does not say its width.
const DefaultWidth = 80

// Is reports whether f is an *os.File open on a terminal.
func Is(f any) bool {
	file, ok := f.(*os.File)
	return ok && file != nil && term.IsTerminal(int(file.Fd()))
}

// Width is the terminal's width in columns, DefaultWidth when unknown.
func Width(f any) int {
	if file, ok := f.(*os.File); ok && file != nil {
		if w, _, err := term.GetSize(int(file.Fd())); err == nil && w > 0 {
			return w
		}
	}
	return DefaultWidth
}

// Fit cuts s to at most width-1 columns (a line filling the last column
// makes some terminals wrap), marking the cut with "…".
func Fit(s string, width int) string {
	if width < 2 || utf8.RuneCountInString(s) <= width-1 {
		return s
	}
	r := []rune(s)
	return string(r[:width-2]) + "…"
}

const (
	carriageReturn = "\r"
	clearToEnd     = "\x1b[K"
)

// StatusLine is one line redrawn in place; lines printed through it scroll
// above it. Safe for concurrent use.
type StatusLine struct {
	mu    sync.Mutex
	w     io.Writer
	last  string
	shown bool
}

// NewStatusLine draws on w (a terminal: Width asks it its width).
func NewStatusLine(w io.Writer) *StatusLine { return &StatusLine{w: w} }

func (s *StatusLine) draw() {
	fmt.Fprint(s.w, carriageReturn+Fit(s.last, Width(s.w))+clearToEnd)
	s.shown = true
}

// Update replaces the status line's text.
func (s *StatusLine) Update(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = text
	s.draw()
}

// Println prints a line of its own above the status line.
func (s *StatusLine) Println(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shown {
		fmt.Fprint(s.w, carriageReturn+clearToEnd)
	}
	fmt.Fprintln(s.w, text)
	if s.shown {
		s.draw()
	}
}

// Finish draws text as the status line's last state and ends the line.
func (s *StatusLine) Finish(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = text
	s.draw()
	fmt.Fprintln(s.w)
	s.shown = false
}

// Confirm prints question and reads one line from in: true for y or yes
// (any case), false for anything else, an empty line or the end of input.
// It returns ctx's error if ctx ends first (Ctrl-C). When in is a
// terminal, what was typed before the question is discarded.
func Confirm(ctx context.Context, in io.Reader, out io.Writer, question string) (bool, error) {
	if f, ok := in.(*os.File); ok && Is(f) {
		discardTypeahead(f)
	}
	fmt.Fprint(out, question)
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(in).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if !strings.HasSuffix(s, "\n") {
			fmt.Fprintln(out) // end of input: end the question's line
		}
		a := strings.ToLower(strings.TrimSpace(s))
		return a == "y" || a == "yes", nil
	case <-ctx.Done():
		fmt.Fprintln(out)
		return false, ctx.Err()
	}
}
