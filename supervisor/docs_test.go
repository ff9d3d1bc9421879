package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docDuration writes d as the docs do: "100 ms", "30 s".
func docDuration(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%g s", d.Seconds())
}

// Every statement of the restart backoff in the docs gives the code's
// numbers (one page said "1 s doubling" while the code waited 100 ms).
func TestDocsStateTheRestartBackoffAndCrashLoop(t *testing.T) {
	backoff := regexp.MustCompile(`(?s)(?:restart|reconnect)[^()]{0,80}\((\d+ m?s) doubling to (\d+ m?s)`)
	crashLoop := regexp.MustCompile(`(\d+) failures in a row`)
	// The pages about handler processes (the database's reconnects have
	// backoffs of their own, stated in compatibility.md and operations.md).
	var pages []string
	for _, p := range []string{"architecture", "protocol", "reliability", "shutdown", "manifest"} {
		pages = append(pages, filepath.Join("..", "docs", p+".md"))
	}
	pages = append(pages, "../README.md")
	found := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		for _, m := range backoff.FindAllStringSubmatch(string(b), -1) {
			found++
			assert.Equal(t, []string{docDuration(restartBackoffMin), docDuration(restartBackoffMax)}, m[1:],
				"%s: %q", page, m[0])
		}
		for _, m := range crashLoop.FindAllStringSubmatch(string(b), -1) {
			assert.Equal(t, fmt.Sprint(crashLoopThreshold), m[1], "%s: %q", page, m[0])
		}
	}
	assert.GreaterOrEqual(t, found, 4, "the backoff is stated in the architecture, protocol, reliability and shutdown pages")
	assert.Equal(t, 100*time.Millisecond, restartDelay(1))
	assert.Equal(t, restartBackoffMax, restartDelay(100))
}
