package postgres

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// poolWaits counts acquires that start while every connection the pool may
// have is handed out: they wait for one to be released. pgx's own
// EmptyAcquireCount also counts waits for a connection being made, which
// is the pool growing, not it being exhausted. It also sums how long those
// acquires waited: one short wait while a burst of statements starts is
// normal, a pool too small for the load shows as time.
type poolWaits struct {
	n    atomic.Int64
	nsec atomic.Int64
}

// waitStartKey marks, in an acquire's context, that it started with the
// pool exhausted, and when.
type waitStartKey struct{}

func (w *poolWaits) TraceAcquireStart(ctx context.Context, pool *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	if st := pool.Stat(); st.AcquiredConns() >= st.MaxConns() {
		w.n.Add(1)
		return context.WithValue(ctx, waitStartKey{}, time.Now())
	}
	return ctx
}

func (w *poolWaits) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireEndData) {
	if start, ok := ctx.Value(waitStartKey{}).(time.Time); ok {
		w.nsec.Add(int64(time.Since(start)))
	}
}

// pgx takes an acquire tracer through the connection's query tracer; the
// query hooks (writable.go) watch for read-only servers.

// PoolStats reports the pgx pool's size, use and waits (backends.PoolStater).
func (b *Backend) PoolStats() backends.PoolStats {
	st := b.pool.Stat()
	return backends.PoolStats{
		Max: st.MaxConns(), InUse: st.AcquiredConns(),
		Waited: b.waits.n.Load(), WaitedFor: time.Duration(b.waits.nsec.Load()),
	}
}
