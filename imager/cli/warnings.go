package cli

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
)

// lineHandler is the one slog.Handler of the subcommands that report
// JSON: it turns each record from imager/source, diskwrite, erase and
// configpart into one line of text ("warning: " for Warn and above,
// then the message and its attributes as key=value) and hands it to
// emit, which appends it to the report's Warnings and/or prints it as
// a progress message. emit is called under a lock, so the libraries'
// goroutines may log at once.
type lineHandler struct {
	out    *lineOut
	prefix string // attributes from WithAttrs, already formatted
	group  string // "a.b." from WithGroup
}

type lineOut struct {
	mu   sync.Mutex
	emit func(string)
}

// lineLogger returns a logger whose records reach emit as text lines.
func lineLogger(emit func(line string)) *slog.Logger {
	return slog.New(&lineHandler{out: &lineOut{emit: emit}})
}

func (h *lineHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	if r.Level >= slog.LevelWarn {
		b.WriteString("warning: ")
	}
	b.WriteString(r.Message)
	b.WriteString(h.prefix)
	r.Attrs(func(a slog.Attr) bool {
		appendAttr(&b, h.group, a)
		return true
	})
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	h.out.emit(b.String())
	return nil
}

func (h *lineHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.prefix)
	for _, a := range attrs {
		appendAttr(&b, h.group, a)
	}
	return &lineHandler{out: h.out, prefix: b.String(), group: h.group}
}

func (h *lineHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &lineHandler{out: h.out, prefix: h.prefix, group: h.group + name + "."}
}

// appendAttr writes " key=value", quoting a value that has spaces,
// quotes or '=' so a line splits back into its attributes.
func appendAttr(b *strings.Builder, group string, a slog.Attr) {
	v := a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if v.Kind() == slog.KindGroup {
		g := group
		if a.Key != "" {
			g += a.Key + "."
		}
		for _, ga := range v.Group() {
			appendAttr(b, g, ga)
		}
		return
	}
	s := v.String()
	if s == "" || strings.ContainsAny(s, " \t\n\"=") {
		s = strconv.Quote(s)
	}
	b.WriteString(" ")
	b.WriteString(group)
	b.WriteString(a.Key)
	b.WriteString("=")
	b.WriteString(s)
}
