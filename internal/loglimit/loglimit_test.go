package loglimit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type line map[string]any

func lines(t *testing.T, buf *bytes.Buffer) []line {
	t.Helper()
	var out []line
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m line
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out
}

func TestRepeatedLines(t *testing.T) {
	cases := []struct {
		name string
		log  func(log *slog.Logger)
		want []string // msg, with "×N" for a summary of N repeats
	}{
		{"a line repeated within the window is written once, then summarised", func(log *slog.Logger) {
			for i := range 116 {
				log.Warn("claiming jobs failed", "err", fmt.Sprintf("dial 127.0.0.1:%d: connection refused", 40000+i))
				// 101 ms, not 100: no line falls on the very instant a
				// window ends, where the order of the two is undefined.
				time.Sleep(101 * time.Millisecond)
			}
		}, []string{
			// 116 lines over 11.7 s: one per 5 s window, each window's
			// repeats summarised when it ends.
			"claiming jobs failed", "claiming jobs failed ×49",
			"claiming jobs failed", "claiming jobs failed ×49",
			"claiming jobs failed", "claiming jobs failed ×15",
		}},
		{"different attributes are different lines", func(log *slog.Logger) {
			log.Warn("result discarded", "job_id", "a")
			log.Warn("result discarded", "job_id", "b")
			log.Warn("result discarded", "job_id", "a")
		}, []string{"result discarded", "result discarded", "result discarded ×1"}},
		{"INFO lines are never limited", func(log *slog.Logger) {
			for range 3 {
				log.Info("maintenance: leader")
			}
		}, []string{"maintenance: leader", "maintenance: leader", "maintenance: leader"}},
		{"attributes added with With are part of the line", func(log *slog.Logger) {
			log.With("handler", "a").Error("crash loop")
			log.With("handler", "b").Error("crash loop")
			log.With("handler", "a").Error("crash loop")
		}, []string{"crash loop", "crash loop", "crash loop ×1"}},
		{"after the window the line is written again", func(log *slog.Logger) {
			log.Warn("heartbeat failed")
			time.Sleep(6 * time.Second)
			log.Warn("heartbeat failed")
		}, []string{"heartbeat failed", "heartbeat failed"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var buf bytes.Buffer
				h := New(slog.NewJSONHandler(&buf, nil), 5*time.Second)
				tc.log(slog.New(h))
				time.Sleep(time.Minute) // every window's summary is written when it ends
				synctest.Wait()
				var got []string
				for _, l := range lines(t, &buf) {
					msg := l["msg"].(string)
					if n, ok := l["repeated"]; ok {
						msg = fmt.Sprintf("%s ×%v", msg, n)
					}
					got = append(got, msg)
				}
				assert.Equal(t, tc.want, got)
			})
		})
	}
}

// Flush writes the pending counts at once (at exit), and the timers that
// would have written them do nothing afterwards.
func TestFlushWritesPendingSummaries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		h := New(slog.NewJSONHandler(&buf, nil), time.Minute)
		log := slog.New(h)
		for range 4 {
			log.Error("database unreachable", "err", "dial tcp: refused")
		}
		require.NoError(t, h.Flush(context.Background()))
		got := lines(t, &buf)
		require.Len(t, got, 2)
		assert.Equal(t, float64(3), got[1]["repeated"])
		assert.Equal(t, "dial tcp: refused", got[1]["err"], "the summary is the repeated line itself")
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		assert.Len(t, lines(t, &buf), 2)
	})
}
