package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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

// docs/architecture.md's table of the engine's files names every file of
// this package, and no file that is not here.
func TestArchitectureNamesEveryEngineFile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "architecture.md"))
	require.NoError(t, err)
	doc := string(b)
	start := strings.Index(doc, "| `supervisor.go` |")
	require.Positive(t, start, "the engine's file table starts with supervisor.go")
	end := strings.Index(doc[start:], "\n\n")
	require.Positive(t, end)
	table := doc[start : start+end]
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z_]+\\.go)`").FindAllStringSubmatch(table, -1) {
		named[m[1]] = true
	}
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	here := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		here[f] = true
		assert.True(t, named[f], "docs/architecture.md's engine file table does not name %s", f)
	}
	for f := range named {
		assert.True(t, here[f], "docs/architecture.md's engine file table names %s, which is not in supervisor/", f)
	}
}
