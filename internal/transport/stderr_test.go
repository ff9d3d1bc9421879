package transport

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A handler that prints megabytes to stderr (12 jobs of 10 MB each made a
// 139 MB log) is logged up to its budget; the rest is counted, and the
// count is logged when logging resumes. Nothing is lost from the tail that
// last_error reads.
func TestStderrIsRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		tail := &stderrTail{}
		s := &stderrLines{log: slog.New(slog.NewJSONHandler(&out, nil)), handler: "h", pid: func() int { return 42 }, tail: tail}
		line := strings.Repeat("x", 99) + "\n"
		const perJob = 10 << 20
		for job := range 12 {
			for range perJob / len(line) {
				_, err := s.Write([]byte(line))
				require.NoError(t, err)
			}
			_, err := s.Write([]byte("job " + string(rune('a'+job)) + " done\n"))
			require.NoError(t, err)
			time.Sleep(100 * time.Millisecond) // 12 jobs in 1.2 s
		}
		assert.Less(t, out.Len(), 2*stderrBurst, "the log holds about the burst, not 120 MB")
		assert.Contains(t, tail.String(), "job l done", "the tail keeps the last lines whatever was logged")

		// Quiet for a while: the next line is logged, after the count.
		time.Sleep(10 * time.Second)
		_, err := s.Write([]byte("back to normal\n"))
		require.NoError(t, err)
		s.flush()

		var logged, dropped, warned int
		var last map[string]any
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(l), &m))
			switch {
			case m["stream"] == "stderr":
				logged++
			case m["msg"] == "handler stderr: lines dropped over the rate limit":
				dropped += int(m["dropped_lines"].(float64))
				assert.Equal(t, float64(42), m["pid"])
			case strings.HasPrefix(m["msg"].(string), "handler stderr over its rate limit"):
				warned++
			}
			last = m
		}
		assert.Equal(t, 12*(perJob/len(line)+1)+1, logged+dropped, "every line is either logged or counted")
		assert.Greater(t, dropped, logged, "most of it was dropped")
		assert.Equal(t, "back to normal", last["msg"], "logging resumed")
		assert.GreaterOrEqual(t, warned, 1)
	})
}

// A handler that prints at a modest rate is never limited.
func TestStderrUnderTheRateIsAllLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		s := &stderrLines{log: slog.New(slog.NewJSONHandler(&out, nil)), handler: "h", pid: func() int { return 1 }, tail: &stderrTail{}}
		for range 2000 {
			_, _ = s.Write([]byte(strings.Repeat("y", 4000) + "\n")) // 40 KB/s for 200 s
			time.Sleep(100 * time.Millisecond)
		}
		s.flush()
		assert.Equal(t, 2000, strings.Count(out.String(), `"stream":"stderr"`))
		assert.NotContains(t, out.String(), "rate limit")
	})
}
