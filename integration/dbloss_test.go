package integration

import (
	"io"
	"net"
	"net/url"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// cutProxy forwards TCP to Postgres and can drop every connection and
// refuse new ones for a while: a database that disappears mid-run, for real
// as far as the sidecar can tell (its connections die, reconnects fail).
type cutProxy struct {
	t      *testing.T
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
	wg     sync.WaitGroup
	// latency delays everything sent to the database: a slow database,
	// for real as far as the client can tell (newSlowProxy).
	latency time.Duration
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	return newSlowProxy(t, target, 0)
}

// newSlowProxy is a cutProxy that delays what it sends to the database by
// latency.
func newSlowProxy(t *testing.T, target string, latency time.Duration) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{t: t, ln: ln, target: target, latency: latency}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = p.copyUp(up, c); _ = up.Close() }()
		go func() { defer p.wg.Done(); _, _ = io.Copy(c, up); _ = c.Close() }()
	}
}

// copyUp forwards the client's bytes to the database, each read after the
// proxy's latency.
func (p *cutProxy) copyUp(up io.Writer, c io.Reader) (int64, error) {
	if p.latency == 0 {
		return io.Copy(up, c)
	}
	buf := make([]byte, 32<<10)
	var n int64
	for {
		k, err := c.Read(buf)
		if k > 0 {
			time.Sleep(p.latency)
			if _, werr := up.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
		}
		if err != nil {
			return n, err
		}
	}
}

// cut drops every connection and refuses new ones until restore.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *cutProxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// The database disappears while jobs run: the sidecar keeps its processes
// and its results, logs what fails, and once the database is back every job
// is done exactly once; nothing is lost, nothing crashes.
func TestDatabaseDisappearsMidRun(t *testing.T) {
	t.Parallel()
	s := sdks[0] // the path under test is the sidecar's, not the SDK's
	w := newWorld(t, s, manifestOpts{})
	u, err := url.Parse(w.dbURL)
	require.NoError(t, err)
	proxy := newCutProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()

	var ids []string
	for range 20 {
		ids = append(ids, w.enqueue("t.sleep_async", `{"seconds":2}`, 0))
	}
	sc := w.startSidecar(map[string]string{"SONIQ_DATABASE_URL": u.String(), "SONIQ_SHUTDOWN_TIMEOUT": "30"})
	eventually(t, 20*time.Second, "the first jobs started", func() bool { return len(w.recorded()) >= 8 })

	proxy.cut()
	var running []string
	for _, r := range w.recorded() {
		if r[0] == "start" {
			running = append(running, r[1])
		}
	}
	// The jobs running at the cut finish while the database is gone, and
	// the sidecar fails to write their results.
	eventually(t, 20*time.Second, "the running jobs ended and their result write failed", func() bool {
		for _, id := range running {
			if countEvents(w.recorded(), "end", id) == 0 {
				return false
			}
		}
		return len(sc.logs("writing results failed; retrying")) > 0
	})
	require.False(t, sc.exited(), "the sidecar survives a database outage")
	proxy.restore()

	eventually(t, 60*time.Second, "all jobs done after the outage", func() bool { return w.stats().Done == 20 })
	runs := map[string]int{}
	for _, r := range w.recorded() {
		if r[0] == "end" {
			runs[r[1]]++
		}
	}
	for _, id := range ids {
		j := w.job(id)
		assert.Equal(t, backends.StatusDone, j.Status)
		assert.Equal(t, 1, j.Attempts, "no retry was needed: results held through the outage were written after it")
		assert.Equal(t, 1, runs[id], "job %s ran exactly once", id)
	}
	assert.NotEmpty(t, sc.logs("writing results failed; retrying"), "the outage is visible in the log")

	sc.signal(syscall.SIGTERM)
	code, _ := sc.wait(30 * time.Second)
	assert.Equal(t, 0, code)
}

// While the database is away every poll and every beat fails; the log says
// so once per kind of failure and counts the repeats, instead of one line
// per attempt (116 "claiming jobs failed" lines in one outage before).
func TestDatabaseOutageLogsEachFailureOnceWithACount(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[0], manifestOpts{})
	u, err := url.Parse(w.dbURL)
	require.NoError(t, err)
	proxy := newCutProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	sc := w.startSidecar(map[string]string{"SONIQ_DATABASE_URL": u.String(), "SONIQ_POLL_INTERVAL": "0.1",
		"SONIQ_HEARTBEAT_INTERVAL": "0.2", "SONIQ_CLEANUP_INTERVAL": "0.2"})
	sc.waitReady(t, w.handlerName(), 1)
	first := w.enqueue("t.noop", `{}`, 0)
	w.waitDone(t, sc, 20*time.Second, first)

	proxy.cut()
	// 8 s of outage: 40 beats, 40 maintenance ticks, up to 80 polls.
	time.Sleep(8 * time.Second)
	proxy.restore()
	id := w.enqueue("t.noop", `{}`, 0)
	w.waitDone(t, sc, 20*time.Second, id)
	sc.signal(syscall.SIGTERM)
	code, _ := sc.wait(30 * time.Second)
	assert.Equal(t, 0, code)

	var warnings, counted int
	for _, l := range sc.logs("") {
		if l["level"] != "WARN" && l["level"] != "ERROR" {
			continue
		}
		warnings++
		if n, ok := l["repeated"].(float64); ok {
			counted += int(n)
		}
	}
	t.Logf("%d WARN/ERROR lines written, %d repeats counted", warnings, counted)
	assert.NotEmpty(t, sc.logs("heartbeat failed"), "the outage is visible in the log")
	assert.LessOrEqual(t, warnings, 16, "each kind of failure is written about once, not once per attempt")
	assert.GreaterOrEqual(t, counted, 30, "the repeats are counted")
}
