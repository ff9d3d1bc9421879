package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/soniq-dev/soniq-sidecar/internal/loglimit"
)

// newLogger builds the process logger: text on a terminal, JSON otherwise.
func newLogger(w io.Writer, format string) (*slog.Logger, error) {
	switch format {
	case "auto", "":
		format = "json"
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "text"
			}
		}
	case "text", "json":
	default:
		return nil, usageErrorf("--log-format must be auto, text or json, got %q", format)
	}
	opts := &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		// "1.5s", not 1500000000: logs are read by people at 3 a.m.
		if a.Value.Kind() == slog.KindDuration {
			return slog.String(a.Key, a.Value.Duration().String())
		}
		return a
	}}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if format == "text" {
		h = slog.NewTextHandler(w, opts)
	}
	// A failure that repeats on every poll or beat (the database away for
	// minutes) is one line per window and a count, not hundreds of lines.
	return slog.New(loglimit.New(h, repeatWindow)), nil
}

// repeatWindow is how long an identical WARN or ERROR line is written
// only once; its repeats are counted on one line when the window ends.
const repeatWindow = 30 * time.Second

// flushLog writes the counts of repeated lines not yet reported.
func flushLog(log *slog.Logger) {
	if h, ok := log.Handler().(*loglimit.Handler); ok {
		_ = h.Flush(context.Background())
	}
}
