package postgres

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Client-side TCP liveness on every connection. A peer that vanishes
// without a FIN or RST (a partition, a host that lost power) otherwise
// leaves a statement waiting on a socket that the kernel keeps for hours.
// Keepalive probes find an idle connection dead within
// keepaliveIdle+keepaliveCount*keepaliveInterval, and the user timeout ends
// a connection whose sent data stays unacknowledged for tcpUserTimeout.
// Neither helps when a proxy between sidecar and database keeps TCP alive
// (it acknowledges for the database): the bounds that hold there are the
// database's own (see leader.go) and the callers' contexts.
const (
	keepaliveIdle     = 15 * time.Second
	keepaliveInterval = 5 * time.Second
	keepaliveCount    = 3
	tcpUserTimeout    = 30 * time.Second
	dialTimeout       = 10 * time.Second
)

// setDialer makes cfg dial with the liveness settings above, keeping its
// own connect timeout when the URL set one.
func setDialer(cfg *pgconn.Config) {
	timeout := cfg.ConnectTimeout
	if timeout == 0 {
		timeout = dialTimeout
	}
	d := &net.Dialer{
		Timeout: timeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: keepaliveIdle, Interval: keepaliveInterval, Count: keepaliveCount,
		},
		Control: setUserTimeout,
	}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}
}

// pooledNetwork names, through a transaction-mode pooler, the network of
// each connection's remote address, so that the one dial made to that
// address afterwards, a cancel request's, is told apart and refused.
const pooledNetwork = "soniq-pooled"

// errNoCancel is why a cancel request is not sent through the pooler.
var errNoCancel = errors.New("no cancel requests through a transaction-mode pooler")

// refuseCancels makes cfg's connections send no cancel request: a
// statement given up on (its context ended) is cut by closing its
// connection instead, which the pooler answers by closing the server
// session (Postgres then ends the statement). PgBouncer 1.18, Debian 12's,
// exits on cancel requests met at the wrong moment (upstream issues 801
// and 822), taking every client it serves down with it; make test lost
// the PgBouncer every test shared that way.
func refuseCancels(cfg *pgconn.Config) {
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if network == pooledNetwork {
			return nil, errNoCancel
		}
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return pooledConn{Conn: c, remote: pooledAddr{c.RemoteAddr()}}, nil
	}
}

// pooledConn is a connection to the pooler whose remote address says so.
type pooledConn struct {
	net.Conn
	remote net.Addr
}

func (c pooledConn) RemoteAddr() net.Addr { return c.remote }

// pooledAddr is the pooler's address under pooledNetwork.
type pooledAddr struct{ net.Addr }

func (pooledAddr) Network() string { return pooledNetwork }
