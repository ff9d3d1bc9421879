package supervisor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/protocol"
	"github.com/soniq-dev/soniq-sidecar/protocol/session"
)

// checkAttachHandler is checkHandler for an attach handler: it opens a
// session with each endpoint (the literal paths and what the globs match
// now), compares the hello with the declaration and ends the session,
// which leaves the handler running and waiting for the sidecar.
func checkAttachHandler(ctx context.Context, h *config.Handler) CheckReport {
	rep := CheckReport{Handler: h.Name}
	var endpoints []string
	for _, p := range h.Attach {
		if !config.IsGlob(p) {
			endpoints = append(endpoints, p)
			continue
		}
		m, _ := filepath.Glob(p) // checked at load
		endpoints = append(endpoints, m...)
	}
	if len(endpoints) == 0 {
		rep.Err = fmt.Errorf("handler %s: no endpoint matches %v", h.Name, h.Attach)
		return rep
	}
	var errs []error
	for _, ep := range endpoints {
		s, err := session.Open(ctx, ep, session.Options{HelloTimeout: h.StartupTimeout, MaxFrameBytes: protocol.DefaultMaxFrameBytes})
		if err != nil {
			errs = append(errs, fmt.Errorf("handler %s: attaching to %s: %w", h.Name, ep, err))
			continue
		}
		hello := s.Hello()
		_ = s.Close()
		if err := checkHello(h, &hello.Hello); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ep, err))
			continue
		}
		rep.SDK, rep.PID = hello.SDK, hello.PID
	}
	rep.Err = errors.Join(errs...)
	return rep
}
