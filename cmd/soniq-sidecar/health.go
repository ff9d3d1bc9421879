package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/connect"
	"github.com/soniq-dev/soniq-sidecar/supervisor"
)

// listenHTTP binds addr and returns the HTTP server as an actor: serve
// runs it until stop. It logs the address it bound, so that port 0 (any
// free port) can be found. A server that fails ends the run (its error is
// returned): probes that cannot reach the sidecar would restart it anyway.
func listenHTTP(addr string, h http.Handler, log *slog.Logger) (serve func() error, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, usageErrorf("--metrics-addr %s: %v", addr, err)
	}
	log.Info("serving /metrics, /healthz and /readyz", "addr", ln.Addr().String())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	serve = func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving HTTP on %s: %w", addr, err)
		}
		return nil
	}
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
	return serve, stop, nil
}

// pinger is the part of a backend /readyz uses.
type pinger interface{ Ping(context.Context) error }

// health is what /healthz and /readyz report. Until the database is
// reachable there is no supervisor yet, and readiness says why.
type health struct {
	metrics http.Handler
	mu      sync.Mutex
	sup     *supervisor.Supervisor
	db      pinger
	waiting string
	// lastWaited and lastWaitedFor are the pool's wait count and summed
	// wait time at the previous /readyz.
	lastWaited    int64
	lastWaitedFor time.Duration
}

// poolWaitWarnAfter is how long acquires must have waited for a pooled
// connection, summed since the previous probe, before /readyz warns. A few
// milliseconds of waiting while a burst of statements starts together is
// normal on a small pool; a pool too small for the load waits far longer.
const poolWaitWarnAfter = 250 * time.Millisecond

// poolWarning says, for /readyz, whether the database pool was exhausted
// since the previous probe: acquires that waited for a free connection,
// for poolWaitWarnAfter or more in total. It is a warning, not
// unreadiness: the sidecar still works, only slower, and flipping
// readiness under load would stall a rolling deploy.
func (h *health) poolWarning(db pinger) string {
	ps, ok := db.(backends.PoolStater)
	if !ok {
		return ""
	}
	st := ps.PoolStats()
	h.mu.Lock()
	waited, waitedFor := st.Waited-h.lastWaited, st.WaitedFor-h.lastWaitedFor
	h.lastWaited, h.lastWaitedFor = st.Waited, st.WaitedFor
	h.mu.Unlock()
	if waited <= 0 || waitedFor < poolWaitWarnAfter {
		return ""
	}
	return fmt.Sprintf("database pool exhausted since the last probe: %d acquires waited %s in total for a free connection (pool of %d, %d in use now; "+
		"raise pool_max_conns in the database URL, or the pooler's pool size)", waited, waitedFor.Round(time.Millisecond), st.Max, st.InUse)
}

func (h *health) setWaiting(why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waiting = why
}

func (h *health) setRunning(sup *supervisor.Supervisor, db pinger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sup, h.db, h.waiting = sup, db, ""
}

func (h *health) get() (*supervisor.Supervisor, pinger, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sup, h.db, h.waiting
}

// httpHandler serves the health endpoints of a running supervisor (and
// /metrics when configured).
func httpHandler(sup *supervisor.Supervisor, b pinger, metrics http.Handler) http.Handler {
	h := &health{metrics: metrics}
	h.setRunning(sup, b)
	return healthHandler(h)
}

func healthHandler(h *health) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		sup, _, _ := h.get()
		if sup == nil {
			// Alive: restarting the container would not bring the database.
			fmt.Fprintln(w, "ok STARTING")
			return
		}
		fmt.Fprintf(w, "ok %s\n", sup.State())
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if ok, why := h.readiness(r.Context()); !ok {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		sup, b, _ := h.get()
		// Advisories (an exhausted pool, a missing claim-order index) stay
		// 200: the pod works, and restarting or unrouting it would fix nothing.
		if warn := h.poolWarning(b); warn != "" {
			fmt.Fprintln(w, "ready; "+warn)
		} else {
			fmt.Fprintln(w, "ready")
		}
		for _, a := range sup.Advisories() {
			fmt.Fprintln(w, a)
		}
	})
	if h.metrics != nil {
		mux.Handle("/metrics", h.metrics)
	}
	return mux
}

// readiness is /readyz's verdict, without its advisories: ready, or why not.
func (h *health) readiness(ctx context.Context) (bool, string) {
	sup, b, waiting := h.get()
	if sup == nil {
		return false, waiting
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := b.Ping(ctx); err != nil {
		return false, "database unreachable: " + redactLine(connect.Redact(err.Error()))
	}
	return sup.Ready()
}

// ready is readiness without the reason: the soniq_ready gauge.
func (h *health) ready(ctx context.Context) bool {
	ok, _ := h.readiness(ctx)
	return ok
}

// redactLine keeps error text on one line for HTTP bodies.
func redactLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
