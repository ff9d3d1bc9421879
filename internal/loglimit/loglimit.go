// Package loglimit keeps a log readable through an outage: a WARN or ERROR
// line repeated with the same message and attributes, whatever its error
// text (a claim failing on every poll while the database is away), is
// written once per window, and the repeats are counted on one summary line
// (the latest of them) instead of flooding the log.
package loglimit

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// maxKeys bounds the lines remembered at once; past it lines pass through
// unlimited rather than be dropped without a count.
const maxKeys = 1024

// Handler wraps a slog.Handler. Records below WARN pass untouched.
type Handler struct {
	inner  slog.Handler
	st     *state
	prefix string // the attributes and groups added by WithAttrs/WithGroup
}

type state struct {
	window time.Duration
	mu     sync.Mutex
	seen   map[string]*entry
}

// entry is one distinct line within its window.
type entry struct {
	start      time.Time
	suppressed int
	last       slog.Record  // the latest repeat, for the summary
	h          slog.Handler // the handler (with its attributes) that saw it
	timer      *time.Timer  // writes the summary when the window ends
}

// New returns a Handler that writes each distinct WARN or ERROR line at
// most once per window, then one summary carrying the count of repeats.
func New(inner slog.Handler, window time.Duration) *Handler {
	return &Handler{inner: inner, st: &state{window: window, seen: map[string]*entry{}}}
}

// Enabled reports whether the wrapped handler handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

// Handle writes r unless it repeats a line written less than a window ago.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.inner.Handle(ctx, r)
	}
	key := h.key(r)
	now := r.Time
	if now.IsZero() {
		now = time.Now()
	}
	st := h.st
	st.mu.Lock()
	due := st.expire(now)
	if e := st.seen[key]; e != nil {
		e.suppressed++
		e.last, e.h = r.Clone(), h.inner
		if e.timer == nil {
			// The summary is due at the window's end even if nothing is
			// logged after the repeats stop (the outage is over).
			e.timer = time.AfterFunc(e.start.Add(st.window).Sub(now), func() { st.summarise(key, e) })
		}
		st.mu.Unlock()
		return emit(ctx, due)
	}
	if len(st.seen) < maxKeys {
		st.seen[key] = &entry{start: now}
	}
	st.mu.Unlock()
	if err := emit(ctx, due); err != nil {
		return err
	}
	return h.inner.Handle(ctx, r)
}

// Flush writes the summaries of every line repeated since it was last
// written; call it before exiting.
func (h *Handler) Flush(ctx context.Context) error {
	st := h.st
	st.mu.Lock()
	var due []*entry
	for k, e := range st.seen {
		if e.suppressed > 0 {
			due = append(due, e)
		}
		if e.timer != nil {
			e.timer.Stop()
		}
		delete(st.seen, k)
	}
	st.mu.Unlock()
	return emit(ctx, due)
}

// summarise writes e's summary when its window ends, unless a Handle or
// Flush already did.
func (st *state) summarise(key string, e *entry) {
	st.mu.Lock()
	if st.seen[key] != e {
		st.mu.Unlock()
		return
	}
	delete(st.seen, key)
	st.mu.Unlock()
	_ = emit(context.Background(), []*entry{e})
}

// expire forgets the lines whose window has passed and returns those with
// repeats to summarise. Called with mu held.
func (st *state) expire(now time.Time) []*entry {
	var due []*entry
	for k, e := range st.seen {
		if now.Sub(e.start) >= st.window {
			if e.suppressed > 0 {
				due = append(due, e)
				e.timer.Stop()
			}
			delete(st.seen, k)
		}
	}
	return due
}

func emit(ctx context.Context, due []*entry) error {
	for _, e := range due {
		r := e.last.Clone()
		r.AddAttrs(slog.Int("repeated", e.suppressed), slog.Duration("repeated_within", e.last.Time.Sub(e.start)))
		if err := e.h.Handle(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// key is what makes two lines the same: level, message and every
// attribute but the error. The error's text changes between attempts of
// one failure (a new client port in each "connection refused"); the
// summary carries the latest.
func (h *Handler) key(r slog.Record) string {
	var b strings.Builder
	b.WriteString(r.Level.String())
	b.WriteByte(0)
	b.WriteString(r.Message)
	b.WriteByte(0)
	b.WriteString(h.prefix)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" || a.Key == "error" {
			return true
		}
		b.WriteString(a.String())
		b.WriteByte(0)
		return true
	})
	return b.String()
}

// WithAttrs returns a Handler whose lines carry attrs; it shares the
// remembered lines with h.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.prefix)
	for _, a := range attrs {
		b.WriteString(a.String())
		b.WriteByte(0)
	}
	return &Handler{inner: h.inner.WithAttrs(attrs), st: h.st, prefix: b.String()}
}

// WithGroup returns a Handler whose later attributes are in group name.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{inner: h.inner.WithGroup(name), st: h.st, prefix: h.prefix + "[" + name + "]"}
}
