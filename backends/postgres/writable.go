package postgres

import (
	"context"
	"errors"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A failover behind a VIP, a DNS name or a pooler can leave the sidecar
// connected to a server that cannot write: a standby, or an old primary
// demoted or switched read-only. pgx keeps such a session for as long as it
// answers, and every write on it fails with SQLSTATE 25006, so the sidecar
// could neither write results nor beat while the real primary was fine.
// So, unless the URL chooses otherwise with target_session_attrs, a new
// session must be writable (libpq's target_session_attrs=read-write), and a
// session that has shown it reached a read-only server is dropped when it is
// released rather than pooled again.

// readOnlyKey marks, in a connection's custom data, that it answered as a
// read-only server does.
const readOnlyKey = "soniq.read_only"

// sqlstateReadOnly is read_only_sql_transaction: a write refused because
// the transaction, the session or the whole server is read-only.
const sqlstateReadOnly = "25006"

// choosesSessionAttrs reports whether the connection string, or libpq's
// environment, says which servers to accept: then that choice stands.
func choosesSessionAttrs(raw string) bool {
	return strings.Contains(raw, "target_session_attrs") || os.Getenv("PGTARGETSESSIONATTRS") != ""
}

// requireWritable makes cfg refuse sessions that cannot write and drop
// sessions found read-only.
func requireWritable(cfg *pgconn.Config) {
	// pgx validates every host of a multi-host URL with this one function.
	if cfg.ValidateConnect == nil {
		cfg.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsReadWrite
	}
}

// markReadOnly records on conn that err says it reached a read-only server.
func markReadOnly(conn *pgx.Conn, err error) {
	if conn == nil || err == nil {
		return
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == sqlstateReadOnly {
		conn.PgConn().CustomData()[readOnlyKey] = true
	}
}

// readOnly reports whether conn has shown it cannot write: it answered
// 25006, or the server reports (in the parameters Postgres 14 and later
// send on every change) that it is a standby or read-only by default.
// Through a pooler the parameters are the pooler's, and 25006 alone tells.
func readOnly(conn *pgx.Conn) bool {
	if marked, _ := conn.PgConn().CustomData()[readOnlyKey].(bool); marked {
		return true
	}
	pc := conn.PgConn()
	return pc.ParameterStatus("in_hot_standby") == "on" || pc.ParameterStatus("default_transaction_read_only") == "on"
}

// keepWritable is the pool's AfterRelease: false destroys the connection.
func keepWritable(conn *pgx.Conn) bool { return !readOnly(conn) }

// The tracer's hooks see every statement's outcome.

func (*poolWaits) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (*poolWaits) TraceQueryEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	markReadOnly(conn, data.Err)
}

func (*poolWaits) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (*poolWaits) TraceBatchQuery(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	markReadOnly(conn, data.Err)
}

func (*poolWaits) TraceBatchEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	markReadOnly(conn, data.Err)
}
