package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/supervisor"
)

// loadManifest loads a manifest; its errors are configuration errors (exit 2).
func loadManifest(path string) (*config.Manifest, error) {
	m, err := config.LoadManifest(path)
	if err != nil {
		return nil, usageError{err}
	}
	return m, nil
}

const manifestUsage = "manifest: usage: soniq-sidecar manifest check FILE"

func newManifestCmd(e env) *cobra.Command {
	return newGroup("manifest", "Check a manifest against its handlers", `Commands on a manifest (the YAML file that names the handlers, their jobs and
the settings; see docs/manifest.md).`, manifestUsage, "check FILE", newManifestCheckCmd(e))
}

func newManifestCheckCmd(e env) *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE",
		Short: "Load a manifest, start each handler and compare its hello with the manifest",
		Long: `Load the manifest FILE (an error names its file, line and field), start each
handler once, and check that the jobs its hello announces are the manifest's.
Exit 0 when every handler passes, 2 when the manifest or a handler does not.
No database is opened.`,
		Example: "  soniq-sidecar manifest check manifest.yaml",
		Args:    cobra.ArbitraryArgs,
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return []cobra.Completion{"yaml", "yml"}, cobra.ShellCompDirectiveFilterFileExt
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("%s", manifestUsage)
			}
			return checkManifest(cmd.Context(), e, args[0])
		},
	}
}

// checkManifest is `manifest check FILE`.
func checkManifest(ctx context.Context, e env, path string) error {
	m, err := loadManifest(path)
	if err != nil {
		return err
	}
	log, _ := newLogger(e.stderr, "text")
	failed := 0
	for _, r := range supervisor.CheckHandlers(ctx, m, log) {
		if r.Err != nil {
			failed++
			fmt.Fprintf(e.stderr, "FAIL %v\n", r.Err) // the error names the handler
			continue
		}
		h := handlerByName(m, r.Handler)
		fmt.Fprintf(e.stdout, "ok   handler %s (%s, pid %d): %d jobs, hello matches the manifest\n", r.Handler, r.SDK, r.PID, len(h.Jobs))
	}
	if failed > 0 {
		return exitCodeError{code: exitUsage, msg: fmt.Sprintf("%s: %d of %d handlers failed the check", path, failed, len(m.Handlers))}
	}
	fmt.Fprintf(e.stdout, "%s: ok\n", path)
	return nil
}

func handlerByName(m *config.Manifest, name string) *config.Handler {
	for i := range m.Handlers {
		if m.Handlers[i].Name == name {
			return &m.Handlers[i]
		}
	}
	return &config.Handler{}
}
