package main

import (
	"context"
	"fmt"

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

func cmdManifest(ctx context.Context, e env, args []string) error {
	if len(args) != 2 || args[0] != "check" {
		return usageErrorf("manifest: usage: soniq-sidecar manifest check FILE")
	}
	m, err := loadManifest(args[1])
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
		return exitCodeError{code: exitUsage, msg: fmt.Sprintf("%s: %d of %d handlers failed the check", args[1], failed, len(m.Handlers))}
	}
	fmt.Fprintf(e.stdout, "%s: ok\n", args[1])
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
