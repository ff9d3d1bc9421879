// Package postgres is the Backend over Soniq's own Postgres tables, shared
// with Soniq's Python producers and workers. It uses pgx v5 (pgxpool).
//
// Lock keys are Soniq's: Migrate serialises on advisory_key("soniq.migrations")
// and TryLeader takes advisory_key("soniq.maintenance"), so the sidecar and
// Soniq's own workers and `soniq setup` exclude each other. See
// docs/compatibility.md.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// Soniq derives advisory-lock keys as blake2b-64 (signed, big endian) of
// "soniq.leadership.v1/" + name (soniq/core/leadership.py). The values are
// fixed here rather than recomputed so the sidecar needs no blake2b; the
// interop test checks them against the released package.
const (
	// migrationLockKey = advisory_key("soniq.migrations").
	migrationLockKey int64 = -3170183739012905038
	// maintenanceLockKey = advisory_key("soniq.maintenance").
	maintenanceLockKey int64 = 4325948971829913621
)

// notifyChannel is the LISTEN/NOTIFY channel Soniq producers signal on; the
// payload is the queue name.
const notifyChannel = "soniq_new_job"

// cancelChannel is the sidecar's own channel: RequestCancel signals on it,
// with the running job's id as the payload.
const cancelChannel = "soniq_sidecar_cancel"

//go:embed schema/*.sql
var schemaFS embed.FS

// Options are how the sidecar reaches Postgres. The zero value is a direct
// connection (or a session-mode pool): every feature of a session is used.
type Options struct {
	// TransactionPooling says the URL goes through a pooler in transaction
	// mode (PgBouncer pool_mode=transaction), where consecutive statements
	// of one client may run on different server sessions. Then no state may
	// outlive a transaction: statements run in pgx's exec mode (an unnamed
	// statement per query, no server-side prepared statements), the
	// maintenance leader holds a transaction-scoped advisory lock inside an
	// open transaction, LISTEN uses ListenURL or is off, and Migrate refuses.
	TransactionPooling bool
	// ListenURL, when set, is where the one LISTEN connection goes instead
	// of the main URL: straight to Postgres or through a session-mode pool.
	ListenURL string
}

// Backend implements backends.Backend on Postgres.
type Backend struct {
	pool     *pgxpool.Pool
	password string // only to scrub it from error messages
	target   string // host:port/dbname, safe to show
	opts     Options
	// listenCfg is the LISTEN connection's config; nil when wake-ups are
	// off (transaction pooling without a ListenURL).
	listenCfg *pgx.ConnConfig
	waits     *poolWaits // for PoolStats
	// cursors: where each keyed limit's walk of its keys goes on from
	// (limits.go).
	cursors keyCursors
	// walks: the walks claims read for the next claim (limitwalk.go).
	walks walkCache

	// Subscribe goroutines are stopped and awaited by Close.
	stop     chan struct{}
	stopOnce sync.Once
	subs     sync.WaitGroup
}

var _ backends.Backend = (*Backend)(nil)

// ErrMigrateThroughPooler is returned by Migrate in transaction-pooling mode.
var ErrMigrateThroughPooler = errors.New("migrations need a direct connection to Postgres (or a session-mode pool), " +
	"not one through a transaction-mode pooler: run migrate with --database-url pointing at Postgres itself " +
	"and without SONIQ_DATABASE_POOLER=transaction")

// ErrBadURL is returned (wrapped) when a database URL cannot be parsed.
var ErrBadURL = errors.New("parse postgres database URL")

// Open connects to the database at rawURL and checks it is reachable. Errors
// name host:port/database and never the password.
func Open(ctx context.Context, rawURL string) (*Backend, error) {
	return OpenWith(ctx, rawURL, Options{})
}

// OpenWith is Open with explicit connection options.
func OpenWith(ctx context.Context, rawURL string, opts Options) (*Backend, error) {
	password := urlPassword(rawURL)
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadURL, redactedError{err: err, password: password})
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "soniq-sidecar"
	}
	target := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	if cfg.ConnConfig.Password != "" {
		password = cfg.ConnConfig.Password
	}
	listenCfg := cfg.ConnConfig.Copy()
	if opts.TransactionPooling {
		// Exec mode sends each query as an unnamed statement in one round
		// trip (parse, bind, execute, sync), so nothing is left on a server
		// session the pooler may hand to another client, and arguments keep
		// their binary encoding (unlike the simple protocol, which quotes
		// them into the text).
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		listenCfg = nil
	}
	if opts.ListenURL != "" {
		lc, err := pgx.ParseConfig(opts.ListenURL)
		if err != nil {
			lp := urlPassword(opts.ListenURL)
			return nil, fmt.Errorf("%w (listen URL): %w", ErrBadURL, redactedError{err: err, password: lp})
		}
		if _, ok := lc.RuntimeParams["application_name"]; !ok {
			lc.RuntimeParams["application_name"] = "soniq-sidecar"
		}
		listenCfg = lc
	}
	if !choosesSessionAttrs(rawURL) {
		requireWritable(&cfg.ConnConfig.Config)
		cfg.AfterRelease = keepWritable
	}
	cfg.ShouldPing = shouldPing
	setDialer(&cfg.ConnConfig.Config)
	if opts.TransactionPooling {
		refuseCancels(&cfg.ConnConfig.Config)
	}
	if listenCfg != nil {
		setDialer(&listenCfg.Config)
	}
	waits := &poolWaits{}
	cfg.ConnConfig.Tracer = waits
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool for %s: %w", target, redactedError{err: err, password: password})
	}
	b := &Backend{pool: pool, password: password, target: target, opts: opts, listenCfg: listenCfg, waits: waits, stop: make(chan struct{})}
	if err := b.Ping(ctx); err != nil {
		pool.Close()
		if transient(err) {
			return nil, fmt.Errorf("%w: %w", backends.ErrUnreachable, err)
		}
		return nil, err
	}
	return b, nil
}

// transient reports whether a failed connection may succeed later: the
// server did not answer (not listening, no route, timeout), or answered
// that it cannot take connections yet (starting up, shutting down, too many
// clients). A refused login or a missing database is not transient.
func transient(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return true
	}
	switch pe.Code[:2] {
	case "08", "57": // connection exception, operator intervention (57P03 cannot_connect_now)
		return true
	}
	return pe.Code == "53300" || pe.Code == sqlstateReadOnly // too_many_connections, a read-only server
}

// Ping checks that the database is reachable.
func (b *Backend) Ping(ctx context.Context) error {
	if err := b.pool.Ping(ctx); err != nil {
		return b.wrap(err, "reach postgres at %s", b.target)
	}
	return nil
}

// Close stops subscriptions and releases every connection.
func (b *Backend) Close() error {
	b.stopOnce.Do(func() { close(b.stop) })
	b.subs.Wait()
	// Closing a connection writes a goodbye to the server. Close writes it
	// on every idle connection (no reply is awaited), within closeWait:
	// behind a partition a write may hang. It does not wait for the
	// others, which the pool finishes closing on its own: a connection
	// whose statement was cancelled (a service stopped mid-statement)
	// closes with a cancel request and a goodbye whose answers it awaits,
	// two round trips that over a slow link would delay the exit, and the
	// server ends its session once the socket closes anyway.
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	for _, c := range b.pool.AcquireAllIdle(ctx) {
		_ = c.Conn().Close(ctx)
		c.Release()
	}
	go b.pool.Close()
	return nil
}

// noPing marks the context of a shutdown's last write: the connection it
// takes from the pool is not pinged first.
type noPing struct{}

// withoutPing is ctx for a shutdown's last write. The pool pings a
// connection idle for over a second before handing it out: over a slow
// link, a round trip more before the exit. A dead connection fails the
// write instead, which the caller retries within the shutdown's write
// deadline on another.
func withoutPing(ctx context.Context) context.Context {
	return context.WithValue(ctx, noPing{}, true)
}

// shouldPing is pgxpool's default (a connection idle for over a second is
// pinged when acquired), except for a shutdown's last write (withoutPing).
func shouldPing(ctx context.Context, p pgxpool.ShouldPingParams) bool {
	return p.IdleDuration > time.Second && ctx.Value(noPing{}) == nil
}

// closeWait bounds how long Close waits for the idle connections to say
// goodbye to the server.
const closeWait = 250 * time.Millisecond

// Migrate creates Soniq's core and dead-letter tables if they do not exist,
// then the sidecar's own cancel-request table (schema/9000_*.sql, after
// Soniq's files; no Soniq table is altered), holding Soniq's migration
// advisory lock so it never races `soniq setup` or
// another sidecar. It deliberately writes nothing to soniq_migrations: Soniq's
// runner then still applies (idempotently) its own files on its next setup,
// which keeps Soniq the only author of its bookkeeping and correct even if a
// later release changes a migration's contents.
func (b *Backend) Migrate(ctx context.Context) error {
	if b.opts.TransactionPooling {
		// Soniq's migration lock is a session lock held across every file,
		// and the claim index is built outside any transaction: neither
		// survives a pooler that moves statements between sessions.
		return fmt.Errorf("migrate %s: %w", b.target, ErrMigrateThroughPooler)
	}
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return b.wrap(err, "acquire connection to migrate %s", b.target)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrationLockKey); err != nil {
		// Cancelled while waiting: the lock may have been granted just as
		// the cancel arrived, so drop the session rather than pool it.
		_ = conn.Conn().Close(context.WithoutCancel(ctx))
		return b.wrap(err, "take migration lock")
	}
	defer func() {
		// A failed unlock leaves the lock on this session; drop the
		// session so it cannot outlive the call.
		unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(unlockCtx, "SELECT pg_advisory_unlock($1)", migrationLockKey); err != nil {
			_ = conn.Conn().Close(unlockCtx)
		}
	}()
	// Applied in file-name order, each in its own transaction, as Soniq's
	// runner does.
	files, err := fs.Glob(schemaFS, "schema/*.sql")
	if err != nil {
		return fmt.Errorf("list embedded migrations: %w", err)
	}
	for _, name := range files {
		sql, err := schemaFS.ReadFile(name)
		if err != nil {
			return fmt.Errorf("read embedded migration %s: %w", name, err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return b.wrap(err, "begin migration %s", name)
		}
		// No arguments: pgx sends this with the simple protocol, which
		// accepts the file's several statements at once.
		if _, err := tx.Exec(ctx, string(sql)); err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return b.wrap(err, "apply migration %s", name)
		}
		if err := tx.Commit(ctx); err != nil {
			return b.wrap(err, "commit migration %s", name)
		}
	}
	return nil
}

// claimIndexName is the sidecar's own index on Soniq's jobs table.
const claimIndexName = "soniq_sidecar_claim_order"

// claimIndex matches the claim's ORDER BY over queued rows, so a claim reads
// only the rows it takes (Soniq's own claim uses it too). CONCURRENTLY keeps
// enqueues and claims running while it builds on a busy table; it cannot run
// inside a transaction block, and pgx sends an argument-less Exec outside one.
const claimIndex = `CREATE INDEX CONCURRENTLY IF NOT EXISTS ` + claimIndexName + `
	ON soniq_jobs (priority, scheduled_at NULLS FIRST, created_at) WHERE status = 'queued'`

// claimIndexState reads whether the index exists and whether it is valid
// (to_regclass follows the search_path, as the statements do).
const claimIndexState = `SELECT i.indisvalid,
	EXISTS (SELECT 1 FROM pg_stat_progress_create_index p WHERE p.index_relid = i.indexrelid)
FROM pg_index i WHERE i.indexrelid = to_regclass('` + claimIndexName + `')`

// HasClaimIndex reports whether a valid claim-order index exists (see
// backends.ClaimIndexer).
func (b *Backend) HasClaimIndex(ctx context.Context) (bool, error) {
	var valid, building bool
	err := b.pool.QueryRow(ctx, claimIndexState).Scan(&valid, &building)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, b.wrap(err, "look up the claim-order index")
	}
	return valid, nil
}

// CreateClaimIndex adds the claim-order index (see backends.ClaimIndexer).
// It holds Soniq's migration lock, so two migrates never build it at once.
// An interrupted concurrent build leaves an INVALID index that IF NOT EXISTS
// would keep for good: it is dropped and built again, unless another
// session is still building it (then it says so rather than drop that work).
func (b *Backend) CreateClaimIndex(ctx context.Context) error {
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return b.wrap(err, "acquire connection to create the claim-order index")
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrationLockKey); err != nil {
		_ = conn.Conn().Close(context.WithoutCancel(ctx))
		return b.wrap(err, "take migration lock")
	}
	defer func() {
		unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(unlockCtx, "SELECT pg_advisory_unlock($1)", migrationLockKey); err != nil {
			_ = conn.Conn().Close(unlockCtx)
		}
	}()
	var valid, building bool
	err = conn.QueryRow(ctx, claimIndexState).Scan(&valid, &building)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return b.wrap(err, "look up the claim-order index")
	case valid:
		return nil
	case building:
		return fmt.Errorf("create the claim-order index: another session is building %s right now; run migrate again once it has finished", claimIndexName)
	default:
		if _, err := conn.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+claimIndexName); err != nil {
			return b.wrap(err, "drop the invalid claim-order index left by an interrupted build")
		}
	}
	if _, err := conn.Exec(ctx, claimIndex); err != nil {
		return b.wrap(err, "create the claim-order index")
	}
	return nil
}

// wrap adds what was being done to err and scrubs the password from it.
func (b *Backend) wrap(err error, format string, args ...any) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" && strings.Contains(pe.Message, cancelTable) {
		return fmt.Errorf(format+": %w (%w)", append(args, backends.ErrNoCancelTable, redactedError{err: err, password: b.password})...)
	}
	if errors.As(err, &pe) && pe.Code == "42P01" && strings.Contains(pe.Message, "soniq_") {
		// undefined_table on one of Soniq's: say how to fix it.
		return fmt.Errorf(format+": %w (%w)", append(args, backends.ErrNoSchema, redactedError{err: err, password: b.password})...)
	}
	if unreachable(err) {
		// The caller may wait it out (a restart, a failover) rather than
		// give up.
		return fmt.Errorf(format+": %w: %w", append(args, backends.ErrUnreachable, redactedError{err: err, password: b.password})...)
	}
	return fmt.Errorf(format+": %w", append(args, redactedError{err: err, password: b.password})...)
}

// unreachable reports whether err says the server could not be reached or
// could not serve a connection (as opposed to refusing a statement): no
// connection, a connection that broke, or a server starting, stopping or
// full. A server that refuses writes because it is read-only (25006: a
// standby, a primary demoted or switched read-only in a failover) is one
// the sidecar cannot use yet either: its session is dropped (writable.go)
// and the caller waits for a writable one as for any outage.
func unreachable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P") || pe.Code == "53300" || pe.Code == sqlstateReadOnly
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// redactedError hides a password that an underlying error message (for
// example a connection string echoed by a parse error) may contain, while
// keeping the chain for errors.Is/As.
type redactedError struct {
	err      error
	password string
}

func (e redactedError) Error() string { return redact(e.err.Error(), e.password) }
func (e redactedError) Unwrap() error { return e.err }

func redact(s, password string) string {
	if password == "" {
		return s
	}
	s = strings.ReplaceAll(s, password, "xxxxx")
	if esc := url.QueryEscape(password); esc != password {
		s = strings.ReplaceAll(s, esc, "xxxxx")
	}
	if esc := url.PathEscape(password); esc != password {
		s = strings.ReplaceAll(s, esc, "xxxxx")
	}
	return s
}

// urlPassword finds the password of a URL or key=value connection string on
// a best-effort basis, before pgx has parsed it, so a parse error can still
// be scrubbed.
func urlPassword(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok {
			return p
		}
	}
	for _, field := range strings.Fields(raw) {
		if v, ok := strings.CutPrefix(field, "password="); ok {
			return strings.Trim(v, "'")
		}
	}
	if u, err := url.Parse(raw); err == nil {
		if p := u.Query().Get("password"); p != "" {
			return p
		}
	}
	return ""
}

// notFound returns the contract's not-found error.
func notFound(what, id string) error {
	return fmt.Errorf("%s %s: %w", what, id, backends.ErrNotFound)
}
