package integration

// The Node SDK as people install it: the tarball `npm pack` makes of
// sdk/node, installed into a fresh project beside a handler, run by the
// real binary with the manifest shape sdk/node/README.md shows
// (`command: [node, handler.js]` in the project, nothing inherited in the
// child's environment), over both transports.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// npmIn runs npm in dir with this process's environment minus npm's own
// variables (set when the tests run under an npm script).
func npmIn(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("npm", args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(strings.ToLower(kv), "npm_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "npm %s in %s:\n%s", strings.Join(args, " "), dir, stderr.String())
	return out
}

// nodePackageProject packs sdk/node and installs the tarball, with the
// gRPC packages at the versions sdk/node locks, into a new project
// holding sdk/node/test/support/consumer/handler.js. It returns the project.
func nodePackageProject(t *testing.T, root string) string {
	t.Helper()
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatalf("npm is required for the Node package test (not skipped: install it): %v", err)
	}
	sdkDir := filepath.Join(root, "sdk", "node")
	dir := t.TempDir()
	var packed []struct {
		Filename string `json:"filename"`
	}
	require.NoError(t, json.Unmarshal(npmIn(t, sdkDir, "pack", "--json", "--pack-destination", dir), &packed))
	require.Len(t, packed, 1)

	project := filepath.Join(dir, "billing-handlers")
	require.NoError(t, os.Mkdir(project, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(project, "package.json"), []byte(`{"name": "billing-handlers", "version": "1.0.0", "private": true}`+"\n"), 0o644))
	handler, err := os.ReadFile(filepath.Join(sdkDir, "test", "support", "consumer", "handler.js"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(project, "handler.js"), handler, 0o644))

	var lock struct {
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	b, err := os.ReadFile(filepath.Join(sdkDir, "package-lock.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &lock))
	args := []string{"install", "--no-audit", "--no-fund", "--prefer-offline", filepath.Join(dir, packed[0].Filename)}
	for _, p := range []string{"@grpc/grpc-js", "@grpc/proto-loader"} {
		v := lock.Packages["node_modules/"+p].Version
		require.NotEmpty(t, v, "%s in sdk/node/package-lock.json", p)
		args = append(args, p+"@"+v)
	}
	npmIn(t, project, args...)
	// The project runs the installed copy: not a link back into the repository.
	fi, err := os.Lstat(filepath.Join(project, "node_modules", "soniq-handler"))
	require.NoError(t, err)
	require.True(t, fi.IsDir() && fi.Mode()&os.ModeSymlink == 0, "soniq-handler is installed, not linked")
	return project
}

func TestNodePackageUnderSidecar(t *testing.T) {
	t.Parallel()
	project := nodePackageProject(t, repoRoot(t))
	for _, transport := range []string{"stdio", "unix"} {
		t.Run(transport, func(t *testing.T) {
			w := newWorld(t, sdk{name: "node", transport: transport, command: nodeCommand, env: nodeEnv}, manifestOpts{})
			// The README's manifest, beside the project's package.json: the
			// command and its node_modules resolve from there.
			w.manifest = filepath.Join(project, "manifest-"+transport+".yaml")
			manifest := fmt.Sprintf(`version: 1
handlers:
  - name: billing-node
    command: [node, handler.js]
    transport: %s
    processes: 1
    concurrency: 4
    jobs:
      - {name: pkg.add, cancellable: true}
      - {name: pkg.ctx, cancellable: true}
      - {name: pkg.wait, cancellable: true, timeout: 1s}
      - {name: pkg.sync, cancellable: false}
      - {name: pkg.snooze, cancellable: true}
      - {name: pkg.permanent, cancellable: true}
`, transport)
			require.NoError(t, os.WriteFile(w.manifest, []byte(manifest), 0o644))

			sc := w.startSidecar(nil)
			sc.waitReady(t, "billing-node", 1)
			add := w.enqueue("pkg.add", `{"a": 2, "b": 40}`, 0)
			ctx := w.enqueue("pkg.ctx", `{}`, 0)
			sync := w.enqueue("pkg.sync", `{"ms": 50}`, 0)
			perm := w.enqueue("pkg.permanent", `{}`, 3)
			wait := w.enqueue("pkg.wait", `{}`, 1)

			w.waitDone(t, sc, 30*time.Second, add, ctx, sync)
			assert.JSONEq(t, `{"sum": 42}`, string(w.job(add).Result))
			assert.JSONEq(t, `{"slept": 50}`, string(w.job(sync).Result))
			var got struct {
				SDKFile string `json:"sdkFile"`
				Attempt int    `json:"attempt"`
			}
			require.NoError(t, json.Unmarshal(w.job(ctx).Result, &got))
			assert.Equal(t, filepath.Join(project, "node_modules", "soniq-handler", "index.js"), got.SDKFile)
			assert.Equal(t, 1, got.Attempt)

			dl := w.waitDeadLetter(t, sc, 30*time.Second, perm)
			assert.Equal(t, backends.ReasonPermanentFailure, dl.Reason)
			assert.Equal(t, 1, dl.Attempts, "a PermanentError is not retried")

			// The job timeout reaches ctx.signal with its reason through the
			// installed package (the handler says so on stderr, which the
			// sidecar logs).
			sc.waitLog(30*time.Second, fmt.Sprintf("pkg.wait %s aborted: job_timeout", wait), map[string]any{"handler": "billing-node"})
			w.waitDeadLetter(t, sc, 30*time.Second, wait)

			sc.stop(t)
			assert.Empty(t, sc.logs("protocol error"))
			assert.NotRegexp(t, regexp.MustCompile(`(?i)cannot find module|ENOENT`), sc.rawLog())
		})
	}
}
