package postgres

import (
	"context"
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
