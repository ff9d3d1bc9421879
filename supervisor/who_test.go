package supervisor

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Log lines name a spawned process by pid and an attached one by its
// endpoint: an attached process lives in another container, and "pid=0"
// sent readers looking for a process that does not exist.
func TestLogLinesNameTheProcessTheWayItCanBeFound(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    process
		want slog.Attr
	}{
		{"spawned", process{pid: 4242}, slog.Int("pid", 4242)},
		{"attached", process{attach: procAttach{endpoint: "/sockets/worker-0.sock"}}, slog.String("endpoint", "/sockets/worker-0.sock")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want.String(), tc.p.who().String())
		})
	}
}
