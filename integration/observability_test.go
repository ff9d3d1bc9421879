package integration

// Black-box checks of docs/operations.md: the real binary serves /metrics, /healthz
// and /readyz on --metrics-addr; the series carry the Prometheus-visible
// names and label sets docs/operations.md lists, through real jobs, a handler
// crash and a forced shutdown (NACK + WAIT_FOR_THREAD).

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// httpAddr is the address the sidecar's HTTP server bound, from its log:
// tests pass --metrics-addr 127.0.0.1:0, so no port is picked, released
// and then raced for.
func (s *sidecar) httpAddr(t *testing.T) string {
	t.Helper()
	m := s.waitLog(20*time.Second, "serving /metrics, /healthz and /readyz", nil)
	addr, _ := m["addr"].(string)
	require.NotEmpty(t, addr, "log line without addr: %v", m)
	return addr
}

// obsGet fetches http://addr+path and returns the status and body.
func obsGet(addr, path string) (int, string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// promScrape is one parsed /metrics answer.
type promScrape map[string]*dto.MetricFamily

func obsScrape(t *testing.T, addr string) promScrape {
	t.Helper()
	code, body, err := obsGet(addr, "/metrics")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, body)
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err, "parsing /metrics:\n%s", body)
	return fams
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// find returns the samples of a family whose labels include want.
func (s promScrape) find(name string, want map[string]string) []*dto.Metric {
	f := s[name]
	if f == nil {
		return nil
	}
	var out []*dto.Metric
	for _, m := range f.Metric {
		got := labelsOf(m)
		ok := true
		for k, v := range want {
			if got[k] != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

// value is the sum of the matching samples' values (counter, gauge, or a
// histogram's count), and whether any matched.
func (s promScrape) value(name string, want map[string]string) (float64, bool) {
	ms := s.find(name, want)
	var sum float64
	for _, m := range ms {
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum, len(ms) > 0
}

// assertFamily checks a family's Prometheus type and that every one of its
// series has exactly the label names of docs/operations.md.
func (s promScrape) assertFamily(t *testing.T, name string, typ dto.MetricType, labels ...string) bool {
	t.Helper()
	f := s[name]
	if !assert.NotNil(t, f, "no family %s in /metrics; families: %v", name, s.names()) {
		return false
	}
	assert.Equal(t, typ, f.GetType(), "%s type", name)
	sort.Strings(labels)
	for _, m := range f.Metric {
		var got []string
		for k := range labelsOf(m) {
			got = append(got, k)
		}
		sort.Strings(got)
		if len(got) == 0 {
			got = nil
		}
		if len(labels) == 0 {
			labels = nil
		}
		assert.Equal(t, labels, got, "%s label names", name)
	}
	return true
}

func (s promScrape) names() []string {
	var out []string
	for k := range s {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (s promScrape) String() string {
	var b strings.Builder
	for _, n := range s.names() {
		for _, m := range s[n].Metric {
			v, _ := promScrape{n: &dto.MetricFamily{Metric: []*dto.Metric{m}}}.value(n, nil)
			fmt.Fprintf(&b, "%s%v %v\n", n, labelsOf(m), v)
		}
	}
	return b.String()
}

// waitScrape scrapes until cond holds, returning that scrape.
func waitScrape(t *testing.T, addr string, timeout time.Duration, what string, cond func(promScrape) bool) promScrape {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last promScrape
	for time.Now().Before(deadline) {
		last = obsScrape(t, addr)
		if cond(last) {
			return last
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s; last scrape:\n%s", timeout, what, last)
	return nil
}

// waitReadyz polls /readyz until it answers 200.
func waitReadyz(t *testing.T, addr string, timeout time.Duration) {
	t.Helper()
	var code int
	var body string
	eventually(t, timeout, "/readyz 200", func() bool {
		var err error
		code, body, err = obsGet(addr, "/readyz")
		return err == nil && code == http.StatusOK
	})
	assert.Equal(t, "ready\n", body)
}

// The documented series through a whole life: jobs done and failed, a handler
// killed and restarted, SIGTERM with an async job NACKed at
// shutdown_timeout while a sync job keeps the process in WAIT_FOR_THREAD.
func TestObservabilityMetrics(t *testing.T) {
	t.Parallel()
	s := sdks[0] // Python; the series come from the sidecar, not the SDK
	handler := s.name + "-tests"
	w := newWorld(t, s, manifestOpts{})
	sc := w.startSidecar(map[string]string{
		"SONIQ_SHUTDOWN_TIMEOUT":           "2",
		"SONIQ_SYNC_HANDLER_GRACE_SECONDS": "1",
	}, "--metrics-addr", "127.0.0.1:0")
	addr := sc.httpAddr(t)

	// The server is up before the database is reached (/healthz says
	// STARTING then); once ready, the supervisor runs.
	waitReadyz(t, addr, 30*time.Second)
	code, body, err := obsGet(addr, "/healthz")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok RUNNING\n", body)

	m := obsScrape(t, addr)
	if m.assertFamily(t, "soniq_handler_processes", dto.MetricType_GAUGE, "handler", "state") {
		v, _ := m.value("soniq_handler_processes", map[string]string{"handler": handler, "state": "ready"})
		assert.Equal(t, 1.0, v, "one ready process (processes: 1)")
	}
	if m.assertFamily(t, "soniq_shutdown_state", dto.MetricType_GAUGE) {
		v, _ := m.value("soniq_shutdown_state", nil)
		assert.Equal(t, 0.0, v, "RUNNING")
	}

	// Jobs: two done, one failed for good (max_attempts 1).
	w.enqueue("t.noop", `{}`, 0)
	w.enqueue("t.noop", `{}`, 0)
	w.enqueue("t.fail", `{}`, 1)
	job := func(name string) map[string]string { return map[string]string{"queue": "default", "job_name": name} }
	m = waitScrape(t, addr, 30*time.Second, "three jobs completed", func(m promScrape) bool {
		done, _ := m.value("soniq_jobs_completed_total", job("t.noop"))
		failed, _ := m.value("soniq_jobs_completed_total", job("t.fail"))
		return done == 2 && failed == 1
	})
	m.assertFamily(t, "soniq_jobs_started_total", dto.MetricType_COUNTER, "queue", "job_name")
	m.assertFamily(t, "soniq_jobs_completed_total", dto.MetricType_COUNTER, "queue", "job_name", "status")
	m.assertFamily(t, "soniq_job_duration_seconds", dto.MetricType_HISTOGRAM, "queue", "job_name", "status")
	m.assertFamily(t, "soniq_jobs_in_progress", dto.MetricType_GAUGE, "queue", "job_name")
	v, _ := m.value("soniq_jobs_started_total", job("t.noop"))
	assert.Equal(t, 2.0, v)
	v, _ = m.value("soniq_jobs_completed_total", map[string]string{"queue": "default", "job_name": "t.noop", "status": "done"})
	assert.Equal(t, 2.0, v)
	v, _ = m.value("soniq_job_duration_seconds", map[string]string{"queue": "default", "job_name": "t.noop", "status": "done"})
	assert.Equal(t, 2.0, v, "two observations")
	failStatus := ""
	for _, s := range m.find("soniq_jobs_completed_total", job("t.fail")) {
		failStatus = labelsOf(s)["status"]
	}
	assert.Contains(t, []string{"failed", "dead_letter"}, failStatus, "status of a job that failed its last attempt")
	t.Logf("status label of a job failing its last attempt: %q", failStatus)
	v, ok := m.value("soniq_jobs_in_progress", job("t.noop"))
	assert.True(t, ok)
	assert.Equal(t, 0.0, v, "nothing running")

	// A handler process killed from outside is restarted and counted.
	rec := w.enqueue("t.record", `{}`, 0)
	var pid int
	eventually(t, 20*time.Second, "t.record ran", func() bool {
		for _, r := range w.recorded() {
			if r[0] == "run" && r[1] == rec {
				pid, _ = strconv.Atoi(r[2])
				return true
			}
		}
		return false
	})
	require.NotZero(t, pid)
	// Let its result be written first, so the kill fails no job.
	waitScrape(t, addr, 20*time.Second, "t.record completed", func(m promScrape) bool {
		v, _ := m.value("soniq_jobs_completed_total", job("t.record"))
		return v == 1
	})
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	m = waitScrape(t, addr, 30*time.Second, "a restart counted", func(m promScrape) bool {
		v, _ := m.value("soniq_handler_restarts_total", map[string]string{"handler": handler})
		return v >= 1
	})
	m.assertFamily(t, "soniq_handler_restarts_total", dto.MetricType_COUNTER, "handler", "reason")
	for _, s := range m.find("soniq_handler_restarts_total", map[string]string{"handler": handler}) {
		t.Logf("restart after SIGKILL of a ready, idle process: reason %q", labelsOf(s)["reason"])
	}
	waitReadyz(t, addr, 30*time.Second)
	m = waitScrape(t, addr, 10*time.Second, "the replacement ready", func(m promScrape) bool {
		v, _ := m.value("soniq_handler_processes", map[string]string{"handler": handler, "state": "ready"})
		return v == 1
	})
	for _, s := range m.find("soniq_handler_processes", map[string]string{"handler": handler}) {
		if labelsOf(s)["state"] != "ready" {
			assert.Zero(t, s.Gauge.GetValue(), "no process left in state %s", labelsOf(s)["state"])
		}
	}

	// Shutdown: an async job to be NACKed at shutdown_timeout (2 s), a sync
	// one that outlives shutdown_timeout + grace (3 s) and keeps the process
	// (and /metrics) up in WAIT_FOR_THREAD.
	async := w.enqueue("t.sleep_async", `{"seconds":60}`, 0)
	sync := w.enqueue("t.sleep_sync", `{"seconds":9}`, 0)
	w.waitStarted(t, async, sync)
	m = obsScrape(t, addr)
	v, _ = m.value("soniq_jobs_in_progress", nil)
	assert.Equal(t, 2.0, v, "two jobs running")

	sc.signal(syscall.SIGTERM)
	eventually(t, 2*time.Second, "/readyz 503 DRAINING", func() bool {
		code, body, err = obsGet(addr, "/readyz")
		return err == nil && code == http.StatusServiceUnavailable && strings.Contains(body, "DRAINING")
	})
	assert.Equal(t, "not ready: state DRAINING\n", body)
	code, body, err = obsGet(addr, "/healthz")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code, "alive while draining")
	assert.Equal(t, "ok DRAINING\n", body)

	sc.waitLog(10*time.Second, "state transition", map[string]any{"state": "WAIT_FOR_THREAD"})
	require.False(t, sc.exited(), "the sync job keeps the sidecar alive")
	m = obsScrape(t, addr)
	if m.assertFamily(t, "soniq_shutdown_nack_total", dto.MetricType_COUNTER, "job_name", "queue", "reason") {
		v, _ := m.value("soniq_shutdown_nack_total", map[string]string{"job_name": "t.sleep_async", "queue": "default", "reason": "shutdown_timeout"})
		assert.Equal(t, 1.0, v)
	}
	if m.assertFamily(t, "soniq_shutdown_state", dto.MetricType_GAUGE) {
		v, _ := m.value("soniq_shutdown_state", nil)
		assert.Equal(t, 3.0, v, "WAIT_FOR_THREAD")
	}
	v, _ = m.value("soniq_jobs_in_progress", job("t.sleep_sync"))
	assert.Equal(t, 1.0, v, "the sync job still runs")
	v, _ = m.value("soniq_jobs_in_progress", job("t.sleep_async"))
	assert.Equal(t, 0.0, v, "the async job was NACKed")
	var asyncStatuses []string
	for _, s := range m.find("soniq_jobs_completed_total", job("t.sleep_async")) {
		asyncStatuses = append(asyncStatuses, labelsOf(s)["status"])
	}
	t.Logf("soniq_jobs_completed_total status of a shutdown NACK: %v", asyncStatuses)
	assert.False(t, slices.Contains(asyncStatuses, "done") || slices.Contains(asyncStatuses, "failed"),
		"a NACK is neither done nor failed: %v", asyncStatuses)
	code, body, err = obsGet(addr, "/readyz")
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "not ready: state WAIT_FOR_THREAD\n", body)

	exit, _ := sc.wait(30 * time.Second)
	assert.Equal(t, 0, exit)
	_, _, err = obsGet(addr, "/healthz")
	assert.Error(t, err, "the HTTP server is gone after STOPPED")
}

// soniq_queue_jobs{status} reports the stats function's counts (docs/operations.md).
func TestObservabilityQueueJobs(t *testing.T) {
	t.Parallel()
	w := newWorld(t, sdks[0], manifestOpts{})
	// Jobs of a name no handler serves stay queued.
	for range 3 {
		w.enqueue("t.nobody_serves_this", `{}`, 0)
	}
	sc := w.startSidecar(nil, "--metrics-addr", "127.0.0.1:0")
	addr := sc.httpAddr(t)
	waitReadyz(t, addr, 30*time.Second)
	m := waitScrape(t, addr, 30*time.Second, "soniq_queue_jobs{status=\"queued\"} 3", func(m promScrape) bool {
		v, _ := m.value("soniq_queue_jobs", map[string]string{"status": "queued"})
		return v == 3
	})
	m.assertFamily(t, "soniq_queue_jobs", dto.MetricType_GAUGE, "status")
	// The database pool: its maximum (pool_max_conns, here pgx's default
	// of at least 4), connections in use, and acquires that waited.
	maxConns, ok := m.value("soniq_db_pool_connections", map[string]string{"state": "max"})
	assert.True(t, ok && maxConns >= 4, "soniq_db_pool_connections{state=max} = %v", maxConns)
	m.assertFamily(t, "soniq_db_pool_connections", dto.MetricType_GAUGE, "state")
	_, ok = m.value("soniq_db_pool_waits_total", nil)
	assert.True(t, ok, "soniq_db_pool_waits_total exported")
	_, ok = m.value("soniq_db_pool_wait_seconds_total", nil)
	assert.True(t, ok, "soniq_db_pool_wait_seconds_total exported")
	sc.signal(syscall.SIGTERM)
	exit, _ := sc.wait(20 * time.Second)
	assert.Equal(t, 0, exit)
}
