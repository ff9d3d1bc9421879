// Package logtest records log lines, for tests that assert on what was
// logged and when.
package logtest

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Record is one captured log line, stamped with the clock's now (the fake
// clock inside a synctest bubble).
type Record struct {
	At    time.Time
	Msg   string
	Attrs map[string]any
}

// Handler appends every record, with the attributes of its logger, to
// *Records under Mu. Mu is the test's own lock, so a test can guard its
// other state with it too.
type Handler struct {
	Mu      *sync.Mutex
	Records *[]Record
	attrs   []slog.Attr
}

func (h Handler) Enabled(context.Context, slog.Level) bool { return true }

func (h Handler) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(append([]slog.Attr{}, h.attrs...), as...)
	return h
}

func (h Handler) WithGroup(string) slog.Handler { return h }

func (h Handler) Handle(_ context.Context, r slog.Record) error {
	rec := Record{At: time.Now(), Msg: r.Message, Attrs: map[string]any{}}
	for _, a := range h.attrs {
		rec.Attrs[a.Key] = a.Value.Any()
	}
	r.Attrs(func(a slog.Attr) bool { rec.Attrs[a.Key] = a.Value.Any(); return true })
	h.Mu.Lock()
	*h.Records = append(*h.Records, rec)
	h.Mu.Unlock()
	return nil
}
