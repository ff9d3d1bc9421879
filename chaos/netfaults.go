package main

import (
	"context"
	"fmt"
	"math/rand"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/soniq-dev/soniq-sidecar/internal/netfault"
)

// Network faults: every sidecar reaches its database (Postgres, or PgBouncer
// for the node sidecar) through a fault proxy of its own on loopback, and
// the nemesis black-holes it (a partition shorter or longer than the
// heartbeat timeout: sockets stay open, nothing moves), slows it, or resets
// its connections again and again. The read-only window switches the whole
// server read-only and ends its sessions, as a failover onto a standby
// does, then switches it back.
//
// These are drawn apart from the other kinds, from their own random stream
// (as the CPU contention is), so adding them left every seed's schedule of
// the other faults as it was.
const (
	faultNetPartition = "net-partition" // black-hole one sidecar's database connections
	faultNetLatency   = "net-latency"   // delay one sidecar's database traffic each way
	faultNetResets    = "net-resets"    // reset one sidecar's database connections, repeatedly
	faultDBReadOnly   = "db-read-only"  // the server read-only, its sessions ended, then writable again
)

// netKinds are the network fault kinds, in the order of the summary.
func netKinds() []string {
	return []string{faultNetPartition, faultNetLatency, faultNetResets, faultDBReadOnly}
}

// NetParams shape the network fault schedule; Off turns it off.
type NetParams struct {
	Off              bool
	GapMin, GapMax   time.Duration // between two network faults
	PartMin, PartMax time.Duration // partition lengths (around the heartbeat timeout)
	ReadOnlyMax      time.Duration // longest read-only window
}

// netTarget is the nemesis queue of a sidecar's network faults: apart from
// its process faults, so that a partition and a SIGSTOP may overlap.
func netTarget(sidecar string) string { return "net-" + sidecar }

// PlanNet draws the network fault steps of a run of length from the seed.
func PlanNet(seed int64, length time.Duration, p NetParams) []Step {
	if p.Off {
		return nil
	}
	rnd := rand.New(rand.NewSource(seed ^ 0x6e7_fa17))
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rnd.Int63n(int64(hi-lo)))
	}
	var steps []Step
	at := time.Duration(0)
	for {
		at += between(p.GapMin, p.GapMax)
		if at >= length {
			return steps
		}
		// Every draw for every step, whatever its kind (see Plan).
		kind := netKinds()[rnd.Intn(len(netKinds()))]
		target := sidecarNames()[rnd.Intn(3)]
		part := between(p.PartMin, p.PartMax)
		slow := between(5*time.Second, 20*time.Second)
		latencyMS := 20 + rnd.Intn(130)
		storm := between(2*time.Second, 8*time.Second)
		everyMS := 200 + rnd.Intn(800)
		ro := between(time.Second, p.ReadOnlyMax)
		s := Step{At: at, Kind: kind, Target: netTarget(target)}
		switch kind {
		case faultNetPartition:
			s.Dur = part
		case faultNetLatency:
			s.Dur, s.Pick = slow, latencyMS
		case faultNetResets:
			s.Dur, s.Pick = storm, everyMS
		case faultDBReadOnly:
			s.Target, s.Dur = "postgres", ro
		}
		steps = append(steps, s)
	}
}

// proxyURL starts the sidecar's fault proxy in front of s.url and returns
// the URL the sidecar connects with.
func (s *sidecar) proxyURL() (string, error) {
	u, err := url.Parse(s.url)
	if err != nil {
		return "", fmt.Errorf("sidecar %s: database URL: %w", s.name, err)
	}
	p, err := netfault.Start(u.Host)
	if err != nil {
		return "", err
	}
	s.proxy = p
	u.Host = p.Addr()
	return u.String(), nil
}

// applyNet plays one network fault on its sidecar's proxy, and heals it.
// Not cut short by the end of the run: a fault is healed in full.
func (s *sidecar) applyNet(st Step) {
	rec, p := s.c.rec, s.proxy
	pid := s.current().PID
	at := time.Now()
	switch st.Kind {
	case faultNetPartition:
		rec.logf("partition sidecar %s pid %d from its database for %s", s.name, pid, st.Dur.Round(time.Millisecond))
		p.Partition()
		time.Sleep(st.Dur)
		p.Heal()
		rec.fault(Fault{At: at, Kind: st.Kind, Target: s.name, PID: pid, Dur: time.Since(at)})
	case faultNetLatency:
		d := time.Duration(st.Pick) * time.Millisecond
		p.SetLatency(d)
		time.Sleep(st.Dur)
		p.SetLatency(0)
		rec.fault(Fault{At: at, Kind: st.Kind, Target: s.name, PID: pid, Dur: time.Since(at), Detail: fmt.Sprintf("%s each way", d)})
	case faultNetResets:
		every := time.Duration(st.Pick) * time.Millisecond
		n := 0
		for time.Since(at) < st.Dur {
			n += p.Reset()
			time.Sleep(every)
		}
		rec.fault(Fault{At: at, Kind: st.Kind, Target: s.name, PID: pid, Dur: time.Since(at), Detail: fmt.Sprintf("%d connections reset, every %s", n, every)})
	}
}

// readOnlyWindow switches the server read-only, ends every session but the
// harness's (as a failover onto a standby does), and after st.Dur switches
// it back. Reloaded, the setting reaches the sessions opened meanwhile too,
// so a sidecar that kept one would find it writable again; a sidecar that
// kept none must open new ones.
func (c *cluster) readOnlyWindow(ctx context.Context, st Step) {
	rec := c.rec
	ctx = context.WithoutCancel(ctx)
	conn, err := c.adminConn(ctx)
	if err != nil {
		rec.problem("read-only window: %v", err)
		return
	}
	defer conn.Close(ctx)
	at := time.Now()
	exec := func(sql string) {
		if _, err := conn.Exec(ctx, sql); err != nil {
			rec.problem("read-only window: %s: %v", sql, err)
		}
	}
	rec.logf("postgres read-only for %s", st.Dur.Round(time.Millisecond))
	exec("ALTER SYSTEM SET default_transaction_read_only = on")
	exec("SELECT pg_reload_conf()")
	// Sessions that asked for read-write at their start (the harness's)
	// are spared: they are not the sidecars'.
	exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND application_name <> 'chaos-harness'`)
	time.Sleep(st.Dur)
	exec("ALTER SYSTEM RESET default_transaction_read_only")
	exec("SELECT pg_reload_conf()")
	rec.fault(Fault{At: at, Kind: faultDBReadOnly, Target: "postgres", Dur: time.Since(at)})
}

// adminConn is a session of the harness that stays writable in a
// read-only window.
func (c *cluster) adminConn(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(c.dbURL)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	harnessParams(cfg.RuntimeParams)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return conn, nil
}

// harnessParams mark the harness's own sessions: spared by the read-only
// window, and writable through it (a session's startup setting outranks
// the server's default).
func harnessParams(p map[string]string) {
	p["application_name"] = "chaos-harness"
	p["default_transaction_read_only"] = "off"
}
