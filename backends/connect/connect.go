// Package connect opens the Backend a database URL names. It is the only
// package that knows every backend, so the engine depends on the interface
// alone.
package connect

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres"
	"github.com/soniq-dev/soniq-sidecar/backends/sqlite"
)

// ErrBadURL is returned (wrapped) for a database URL that names no
// backend or cannot be parsed: a configuration error.
var ErrBadURL = errors.New("bad database URL")

// badURL marks an error as ErrBadURL without changing its text.
type badURL struct{ err error }

func (e badURL) Error() string        { return e.err.Error() }
func (e badURL) Unwrap() error        { return e.err }
func (e badURL) Is(target error) bool { return target == ErrBadURL }

// DefaultURL is used when no database URL is configured: a SQLite file in
// the working directory, so the quickstart needs no server.
const DefaultURL = "sqlite:soniq.db"

// acceptedForms is quoted by every "unsupported URL" error.
const acceptedForms = "postgres://…, postgresql://…, sqlite:PATH, sqlite:///PATH, " +
	"or a path ending in .db, .sqlite or .sqlite3"

type kind int

const (
	kindPostgres kind = iota + 1
	kindSQLite
)

// target is what a URL selects: a backend kind and the string its Open takes.
type target struct {
	kind kind
	arg  string
}

// Options describe how a Postgres database is reached; the other backends
// ignore them.
type Options struct {
	// Pooler is "" or "session" for a direct connection or a session-mode
	// pool, "transaction" for a transaction-mode pooler (PgBouncer
	// pool_mode=transaction). See docs/operations.md.
	Pooler string
	// ListenURL is an optional separate URL for the one LISTEN connection.
	ListenURL string
}

// Poolers lists the accepted Options.Pooler values.
var Poolers = []string{"session", "transaction"}

// Open connects to the backend rawURL selects. It does not migrate.
func Open(ctx context.Context, rawURL string) (backends.Backend, error) {
	return OpenWith(ctx, rawURL, Options{})
}

// OpenWith is Open with connection options.
func OpenWith(ctx context.Context, rawURL string, opts Options) (backends.Backend, error) {
	var popts postgres.Options
	switch strings.ToLower(strings.TrimSpace(opts.Pooler)) {
	case "", "session":
	case "transaction":
		popts.TransactionPooling = true
	default:
		return nil, badURL{fmt.Errorf("unknown pooler mode %q: want session (or empty) or transaction", opts.Pooler)}
	}
	if opts.ListenURL != "" {
		if lt, err := parse(opts.ListenURL); err != nil || lt.kind != kindPostgres {
			return nil, badURL{fmt.Errorf("listen URL %q: want a postgres:// URL", Redact(opts.ListenURL))}
		}
		popts.ListenURL = opts.ListenURL
	}
	tg, err := parse(rawURL)
	if err != nil {
		return nil, badURL{err}
	}
	switch tg.kind {
	case kindPostgres:
		b, err := postgres.OpenWith(ctx, tg.arg, popts)
		if errors.Is(err, postgres.ErrBadURL) {
			return nil, badURL{err}
		}
		if err != nil {
			return nil, err // it names the server and database it tried, password redacted
		}
		return b, nil
	default:
		b, err := sqlite.Open(ctx, tg.arg)
		if err != nil {
			return nil, err // it names the file
		}
		return b, nil
	}
}

// SQLitePath returns the file a SQLite URL names, and false for any other URL.
func SQLitePath(rawURL string) (string, bool) {
	tg, err := parse(rawURL)
	return tg.arg, err == nil && tg.kind == kindSQLite
}

// Embedded reports whether rawURL selects a database that lives with the
// process (SQLite): the commands create Soniq's tables there on
// first use, so the quickstart needs no setup. A Postgres schema is changed
// only by an explicit `migrate` (or Soniq's setup), never as a side effect.
func Embedded(rawURL string) bool {
	tg, err := parse(rawURL)
	return err == nil && tg.kind != kindPostgres
}

// parse maps a URL to its backend without opening anything. The sqlite:///
// form follows Soniq's own detection (soniq/app.py): "sqlite:///x.db" is
// the relative x.db and "sqlite:////tmp/x.db" the absolute /tmp/x.db, so one
// SONIQ_DATABASE_URL serves both Soniq and the sidecar.
func parse(rawURL string) (target, error) {
	u := strings.TrimSpace(rawURL)
	lower := strings.ToLower(u)
	switch {
	case u == "":
		return target{}, fmt.Errorf("empty database URL: want %s", acceptedForms)
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		return target{kindPostgres, u}, nil
	case strings.HasPrefix(lower, "sqlite:///"):
		return sqliteTarget(rawURL, u[len("sqlite:///"):])
	case strings.HasPrefix(lower, "sqlite://"):
		// "sqlite://x.db" would put the file name where a host goes.
		return target{}, fmt.Errorf("unsupported database URL %q: write sqlite:PATH or sqlite:///PATH", Redact(rawURL))
	case strings.HasPrefix(lower, "sqlite:"):
		return sqliteTarget(rawURL, u[len("sqlite:"):])
	case !strings.Contains(u, "://") && hasSQLiteSuffix(lower):
		return target{kindSQLite, u}, nil
	}
	return target{}, fmt.Errorf("unsupported database URL %q: want %s", Redact(rawURL), acceptedForms)
}

func sqliteTarget(rawURL, path string) (target, error) {
	if path == "" {
		return target{}, fmt.Errorf("database URL %q names no SQLite file", Redact(rawURL))
	}
	return target{kindSQLite, path}, nil
}

func hasSQLiteSuffix(lower string) bool {
	for _, s := range []string{".db", ".sqlite", ".sqlite3"} {
		if strings.HasSuffix(lower, s) {
			return true
		}
	}
	return false
}

// redactedPassword replaces every password for logs and errors.
const redactedPassword = "xxxxx"

// keywordPassword matches password settings in libpq keyword/value
// strings ("host=h password='s e'"), quoted or not.
var keywordPassword = regexp.MustCompile(`(?i)(\b[a-z_]*password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s'][^\s]*)`)

// Redact returns rawURL with every password replaced by xxxxx: the
// user:password@ part, any query parameter whose name contains "password"
// (password=, sslpassword=), and password= in a keyword/value string. It
// works on the text rather than a parsed URL so that URLs Go's net/url
// rejects (several hosts, stray characters in a password) are still
// redacted; when in doubt it hides too much rather than too little.
func Redact(rawURL string) string {
	scheme := strings.Index(rawURL, "://")
	if scheme < 0 {
		return keywordPassword.ReplaceAllString(rawURL, "${1}"+redactedPassword)
	}
	head, rest := rawURL[:scheme+3], rawURL[scheme+3:]
	userInfo, tail := "", rest
	if at := userInfoEnd(rest); at >= 0 {
		userInfo, tail = rest[:at], rest[at:]
	}
	if colon := strings.IndexByte(userInfo, ':'); colon >= 0 {
		userInfo = userInfo[:colon+1] + redactedPassword
	}
	hostPath, query := tail, ""
	if i := strings.IndexAny(tail, "?#"); i >= 0 {
		hostPath, query = tail[:i], tail[i:]
	}
	return head + userInfo + hostPath + redactQuery(query)
}

// userInfoEnd returns the index of the '@' that ends the user info in what
// follows "scheme://", or -1. It is the last '@', so that an unencoded '@'
// in a password cannot leak the rest of it, unless that '@' comes after a
// '?' or '#' and a '/' precedes it: then it belongs to the query.
func userInfoEnd(rest string) int {
	at := strings.LastIndex(rest, "@")
	q := strings.IndexAny(rest, "?#")
	if at < 0 || q < 0 || q > at || !strings.Contains(rest[:at], "/") {
		return at
	}
	return strings.LastIndex(rest[:q], "@")
}

// redactQuery redacts password parameters in "?a=b&c=d#frag", keeping the
// order and spelling of everything else.
func redactQuery(q string) string {
	if q == "" || q[0] != '?' {
		return q
	}
	frag := ""
	if i := strings.IndexByte(q, '#'); i >= 0 {
		q, frag = q[:i], q[i:]
	}
	params := strings.Split(q[1:], "&")
	for i, p := range params {
		key, _, found := strings.Cut(p, "=")
		if found && strings.Contains(strings.ToLower(key), "password") {
			params[i] = key + "=" + redactedPassword
		}
	}
	return "?" + strings.Join(params, "&") + frag
}
