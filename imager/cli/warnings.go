package cli

import (
	"log/slog"
	"strings"
)

// lineLogger is the logger of the subcommands that report JSON: each record
// from imager/source, diskwrite, erase and configpart becomes one line of
// slog's text format without the time (level=WARN msg="..." key=value),
// handed to emit, which appends it to the report's Warnings or prints it as
// a progress message. slog's TextHandler writes each record in one call
// under its lock, so the libraries' goroutines may log at once.
func lineLogger(emit func(line string)) *slog.Logger {
	return slog.New(slog.NewTextHandler(lineWriter(emit), &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// lineWriter hands each record the handler writes to emit, without its
// newline.
type lineWriter func(line string)

func (w lineWriter) Write(p []byte) (int, error) {
	w(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
