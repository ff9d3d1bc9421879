package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/connect"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
)

// databaseURL is the database the options name, or the default one.
func databaseURL(o config.Options) string { return cmp.Or(o.DatabaseURL, connect.DefaultURL) }

// connectOptions are how the options say Postgres is reached: through a
// transaction-mode pooler or not, and where LISTEN goes.
func connectOptions(o config.Options) connect.Options {
	return connect.Options{Pooler: o.DatabasePooler, ListenURL: o.ListenURL}
}

// openBackend opens the configured database. Errors never carry the password.
func openBackend(ctx context.Context, o config.Options) (backends.Backend, error) {
	// connect's errors already name the database (password redacted).
	b, err := connect.OpenWith(ctx, databaseURL(o), connectOptions(o))
	if errors.Is(err, connect.ErrBadURL) {
		return nil, usageError{err}
	}
	return b, err
}

// openForCommand opens the database for a command. On an embedded database
// (SQLite) it creates Soniq's tables if needed, so a first `enqueue` on a
// fresh file just works; a Postgres schema is left alone (see
// connect.Embedded), and a missing one fails with backends.ErrNoSchema.
func openForCommand(ctx context.Context, e env, o config.Options) (backends.Backend, error) {
	url := databaseURL(o)
	path, isFile := connect.SQLitePath(url)
	existed := true
	if isFile {
		_, err := os.Stat(path)
		existed = err == nil
	}
	b, err := openBackend(ctx, o)
	if err != nil {
		return nil, err
	}
	if isFile && !existed {
		// A command run in the wrong directory would otherwise read an
		// empty queue without a word.
		abs, _ := filepath.Abs(path)
		fmt.Fprintf(e.stderr, "soniq-sidecar: created %s (%s): no database file was there, so its queue starts empty "+
			"(run from the directory that holds yours, or set --database-url / SONIQ_DATABASE_URL)\n", url, abs)
	}
	if connect.Embedded(url) {
		if err := b.Migrate(ctx); err != nil {
			b.Close()
			return nil, fmt.Errorf("creating Soniq's tables: %w", err)
		}
	}
	return b, nil
}

// minPoolConns is the smallest connection pool `run` works with: the
// maintenance pass holds its leader lock on one connection while it works
// on another, so with one it waits for its own lock's connection, and every
// claim and heartbeat queues behind it until the write timeout.
const minPoolConns = 2

// checkPoolSize refuses a pool too small to run on, before anything is
// claimed. The one-shot commands (status, enqueue…) need only one.
func checkPoolSize(b backends.Backend) error {
	ps, ok := b.(backends.PoolStater)
	if !ok {
		return nil
	}
	if n := ps.PoolStats().Max; n < minPoolConns {
		return usageErrorf("database URL: pool_max_conns=%d is too small for run: the sidecar needs at least %d connections "+
			"(its maintenance pass holds one while it uses another); set pool_max_conns=%d or more (4 is plenty)", n, minPoolConns, minPoolConns)
	}
	return nil
}

// errStoppedWaiting: a shutdown signal arrived before the database did.
var errStoppedWaiting = errors.New("stopped while waiting for the database")

// openWaiting opens the database, retrying with backoff (250 ms doubling
// to 5 s) while it is unreachable, for at most o.DatabaseWait. Cancelling ctx (a
// shutdown request) ends the wait: nothing was claimed, so there is nothing
// to drain. Other errors (a bad URL, a refused login, missing tables) fail
// at once.
func openWaiting(ctx context.Context, e env, o config.Options, log *slog.Logger, hs *health) (backends.Backend, error) {
	wait := o.DatabaseWait
	sigCtx := ctx
	deadline := time.Now().Add(wait)
	delay := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		b, err := openForCommand(sigCtx, e, o)
		if err == nil {
			if attempt > 1 {
				log.Info("database reachable", "attempts", attempt)
			}
			return b, nil
		}
		if sigCtx.Err() != nil {
			log.Info("stopped while waiting for the database", "attempts", attempt)
			return nil, errStoppedWaiting
		}
		if !errors.Is(err, backends.ErrUnreachable) {
			return nil, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("the database stayed unreachable for %s (--database-wait, SONIQ_DATABASE_WAIT): %w", wait, err)
		}
		hs.setWaiting("database unreachable: " + redactLine(connect.Redact(err.Error())))
		d := min(delay, left)
		log.Warn("database unreachable; retrying", "attempt", attempt, "retry_in", d, "gives_up_in", left.Round(time.Second), "err", err)
		select {
		case <-time.After(d):
		case <-sigCtx.Done():
			log.Info("stopped while waiting for the database", "attempts", attempt)
			return nil, errStoppedWaiting
		}
		delay = min(2*delay, 5*time.Second)
	}
}
