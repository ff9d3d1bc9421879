package integration

// A real Prometheus server scrapes a running sidecar (the real binary, real
// Postgres, the Python SDK's handler) and evaluates deploy/prometheus's
// rules: the counters move as jobs run, a forced async shutdown's NACK is
// scraped before the process exits (--metrics-final-scrape-wait) and fires
// SoniqShutdownNacks, the live /metrics body passes `promtool check metrics`,
// and every metric name the rules and the Grafana dashboard use is one the
// binary exported during the run.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// toolPath finds one of Debian's prometheus package binaries: $envVar,
// else on PATH. Missing is a failure, never a skip (.ci/run installs it).
func toolPath(t *testing.T, envVar, name string) string {
	t.Helper()
	if p := os.Getenv(envVar); p != "" {
		return p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (apt-get install prometheus, or set %s): %v", name, envVar, err)
	}
	return p
}

// promServer is a Prometheus server on loopback, in a temporary directory,
// stopped when the test ends.
type promServer struct {
	base string // http://127.0.0.1:PORT
	log  *syncBuffer
}

// promJob is the scrape job the sidecar is scraped under.
const promJob = "soniq"

// startPrometheus scrapes target every second and evaluates rules every
// second. The port is picked free and handed over; if another process takes
// it first, the start is tried again.
func startPrometheus(t *testing.T, target, rules string) *promServer {
	t.Helper()
	bin := toolPath(t, "PROMETHEUS", "prometheus")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: %s
    static_configs:
      - targets: [%q]
`, rules, promJob, target)), 0o644))
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		require.NoError(t, l.Close())
		out := &syncBuffer{}
		cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, fmt.Sprintf("data%d", attempt)),
			"--web.listen-address="+addr, "--storage.tsdb.retention.time=1h", "--log.level=info")
		cmd.Stdout, cmd.Stderr = out, out
		require.NoError(t, cmd.Start())
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
			if t.Failed() {
				t.Logf("prometheus log:\n%s", out.String())
			}
		})
		p := &promServer{base: "http://" + addr, log: out}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-exited:
				lastErr = fmt.Errorf("prometheus exited at start:\n%s", out.String())
			default:
				code, _, err := p.get("/-/ready")
				if err == nil && code == http.StatusOK {
					return p
				}
				time.Sleep(100 * time.Millisecond)
				continue
			}
			break
		}
		if lastErr == nil {
			lastErr = fmt.Errorf("prometheus not ready within 30 s:\n%s", out.String())
		}
		if !strings.Contains(lastErr.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("starting prometheus: %v", lastErr)
	return nil
}

func (p *promServer) get(path string) (int, []byte, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(p.base + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// promSeries is one series of a query's answer: an instant vector's sample
// (Value) or a range query's samples (Values).
type promSeries struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
	Values [][]any           `json:"values"`
}

func (s promSeries) float() float64 {
	if len(s.Value) != 2 {
		return 0
	}
	str, _ := s.Value[1].(string)
	v, _ := strconv.ParseFloat(str, 64)
	return v
}

// api calls one of the HTTP API's JSON endpoints and decodes its data.
func (p *promServer) api(path string, params url.Values, data any) error {
	code, body, err := p.get(path + "?" + params.Encode())
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("%s: HTTP %d, %w: %s", path, code, err, body)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s %v: %s", path, params, env.Error)
	}
	return json.Unmarshal(env.Data, data)
}

// query runs an instant query now.
func (p *promServer) query(q string) ([]promSeries, error) {
	var d struct {
		ResultType string       `json:"resultType"`
		Result     []promSeries `json:"result"`
	}
	if err := p.api("/api/v1/query", url.Values{"query": {q}}, &d); err != nil {
		return nil, err
	}
	if d.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: result type %s, want vector", q, d.ResultType)
	}
	return d.Result, nil
}

// queryRange runs a range query with a step of step.
func (p *promServer) queryRange(q string, from, to time.Time, step time.Duration) ([]promSeries, error) {
	var d struct {
		Result []promSeries `json:"result"`
	}
	err := p.api("/api/v1/query_range", url.Values{"query": {q},
		"start": {strconv.FormatInt(from.Unix(), 10)}, "end": {strconv.FormatInt(to.Unix()+1, 10)}, "step": {step.String()}}, &d)
	return d.Result, err
}

// waitValue waits until q answers a single series whose value satisfies ok.
func (p *promServer) waitValue(t *testing.T, timeout time.Duration, q string, ok func(float64) bool) float64 {
	t.Helper()
	var last []promSeries
	var lastErr error
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		last, lastErr = p.query(q)
		if lastErr == nil && len(last) == 1 && ok(last[0].float()) {
			return last[0].float()
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("prometheus: %s did not reach the expected value within %s; last answer %v (err %v)", q, timeout, last, lastErr)
	return 0
}

// metricNames are the sidecar's metric names Prometheus stored for the job.
func (p *promServer) metricNames(t *testing.T) map[string]bool {
	t.Helper()
	var names []string
	require.NoError(t, p.api("/api/v1/label/__name__/values", url.Values{"match[]": {fmt.Sprintf(`{job=%q}`, promJob)}}, &names))
	out := map[string]bool{}
	for _, n := range names {
		// Not Prometheus's own series of the job (up, scrape_*, ALERTS).
		if soniqName.FindString(n) == n {
			out[n] = true
		}
	}
	return out
}

// soniqName is a metric name in a PromQL expression: the sidecar's series
// all start with soniq_ (target_info is the resource).
var soniqName = regexp.MustCompile(`\b(soniq_[a-z0-9_]+|target_info)\b`)

// exprNames returns the metric names an expression uses.
func exprNames(expr string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range soniqName.FindAllString(expr, -1) {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

// ruleExprs reads every alert's expression from a Prometheus rules file.
func ruleExprs(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(b, &f), path)
	out := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out[r.Alert+r.Record] = r.Expr
		}
	}
	require.NotEmpty(t, out, "no rules in %s", path)
	return out
}

// dashboardTarget is one PromQL query of the Grafana dashboard.
type dashboardTarget struct {
	Panel  string `json:"panel"`
	Legend string `json:"legend"`
	Expr   string `json:"expr"`
}

// dashboardQueries returns every panel target's query and every query
// variable's query of a Grafana dashboard JSON.
func dashboardQueries(t *testing.T, path string) (targets []dashboardTarget, variables map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr         string `json:"expr"`
				LegendFormat string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(b, &d), path)
	for _, p := range d.Panels {
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q has a target without expr", p.Title)
			targets = append(targets, dashboardTarget{Panel: p.Title, Legend: tg.LegendFormat, Expr: tg.Expr})
		}
	}
	variables = map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		switch q := v.Query.(type) {
		case string:
			variables[v.Name] = q
		case map[string]any:
			s, _ := q["query"].(string)
			variables[v.Name] = s
		}
	}
	return targets, variables
}

// labelValuesQuery turns Grafana's label_values(selector, label) into the
// selector Prometheus can answer.
var labelValuesQuery = regexp.MustCompile(`^label_values\((.+),\s*[a-z_]+\)$`)

// grafanaExpr substitutes the dashboard's variables as Grafana would with
// "All" selected and a 1 s scrape interval.
func grafanaExpr(expr string) string {
	return strings.NewReplacer("$__rate_interval", "10s", "$job", ".+", "$instance", ".+").Replace(expr)
}

func TestPrometheusScrapesTheSidecar(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	rulesFile := filepath.Join(root, "deploy", "prometheus", "soniq-sidecar-rules.yaml")
	dashboardFile := filepath.Join(root, "deploy", "grafana", "soniq-sidecar-dashboard.json")
	promtool := toolPath(t, "PROMTOOL", "promtool")
	began := time.Now()

	// t.noop is limited (a cap it never reaches) for the limits' panel.
	w := newWorld(t, sdks[0], manifestOpts{concurrency: 4, syncConcurrency: 2, limits: map[string]string{"t.noop": "{concurrency: 50}"}})
	sc := w.startSidecar(map[string]string{
		"SONIQ_SHUTDOWN_TIMEOUT": "1.5",
		// Hold the exit after the NACK until Prometheus (1 s interval) has scraped once more.
		"SONIQ_METRICS_FINAL_SCRAPE_WAIT": "5",
	}, "--metrics-addr", "127.0.0.1:0")
	addr := sc.httpAddr(t)
	waitReadyz(t, addr, 30*time.Second)
	prom := startPrometheus(t, addr, rulesFile)
	handler := w.sdk.name + "-tests"

	prom.waitValue(t, 20*time.Second, fmt.Sprintf(`soniq_ready{job=%q}`, promJob), func(v float64) bool { return v == 1 })
	done := fmt.Sprintf(`sum(soniq_jobs_completed_total{job=%q,status="done"}) or vector(0)`, promJob)
	v, err := prom.query(done)
	require.NoError(t, err)
	require.Len(t, v, 1)
	assert.Zero(t, v[0].float(), "no job done yet")

	// Jobs: done, failed for good, and one that kills its handler process.
	for range 5 {
		w.enqueue("t.noop", `{}`, 0)
	}
	w.enqueue("t.fail", `{}`, 1)
	prom.waitValue(t, 30*time.Second, done, func(v float64) bool { return v == 5 })
	prom.waitValue(t, 30*time.Second, fmt.Sprintf(`sum(soniq_jobs_completed_total{job=%q,job_name="t.fail",status="failed"})`, promJob), func(v float64) bool { return v == 1 })
	// Then, alone (so that no other job is its process's suspect), the crash.
	w.enqueue("t.crash", `{}`, 1)
	if secs, _ := strconv.Atoi(os.Getenv("SONIQ_DASHBOARD_LOAD_SECONDS")); secs > 0 {
		dashboardLoad(t, w, time.Duration(secs)*time.Second)
	}
	prom.waitValue(t, 30*time.Second, fmt.Sprintf(`sum(soniq_handler_restarts_total{job=%q,handler=%q})`, promJob, handler), func(v float64) bool { return v >= 1 })
	prom.waitValue(t, 30*time.Second, fmt.Sprintf(`sum(soniq_job_pickup_delay_seconds_count{job=%q})`, promJob), func(v float64) bool { return v >= 7 })
	waitReadyz(t, addr, 30*time.Second) // the crashed process replaced

	// The live body passes promtool's own checks (parse and lint).
	code, body, err := obsGet(addr, "/metrics")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = strings.NewReader(body)
	out, err := check.CombinedOutput()
	require.NoError(t, err, "promtool check metrics on the live /metrics body:\n%s\n--- body:\n%s", out, body)

	// A forced async shutdown: the cancellable job still runs when
	// shutdown_timeout ends, is NACKed, and the exit waits for one more scrape.
	id := w.enqueue("t.sleep_async", `{"seconds":60}`, 0)
	w.waitStarted(t, id)
	sent := sc.signal(syscall.SIGTERM)
	exit, at := sc.wait(30 * time.Second)
	require.Equal(t, 0, exit)
	elapsed := at.Sub(sent)
	t.Logf("SIGTERM → exit %s (shutdown_timeout 1.5 s, scrape interval 1 s)", elapsed)
	assert.GreaterOrEqual(t, elapsed, 1500*time.Millisecond)
	assert.Less(t, elapsed, 1500*time.Millisecond+exitTolerance+1500*time.Millisecond, "held for one scrape interval at most")
	assert.Equal(t, backends.StatusQueued, w.job(id).Status, "NACKed back to queued")
	sc.waitLog(time.Second, "shutdown_nack", map[string]any{"job_id": id})
	sc.waitLog(time.Second, "final /metrics scrape served after the shutdown NACKs", nil)

	nacks := fmt.Sprintf(`max_over_time(soniq_shutdown_nack_total{job=%q,job_name="t.sleep_async",queue="default",reason="shutdown_timeout"}[5m])`, promJob)
	prom.waitValue(t, 10*time.Second, nacks, func(v float64) bool { return v == 1 })
	prom.waitValue(t, 15*time.Second, `count(ALERTS{alertname="SoniqShutdownNacks",alertstate="firing",job_name="t.sleep_async"})`, func(v float64) bool { return v == 1 })
	end := time.Now()

	// Every metric name of the rules and the dashboard was exported by the
	// binary during this run (Prometheus stored it from a scrape).
	exported := prom.metricNames(t)
	t.Logf("metric names scraped: %d", len(exported))
	for name, expr := range ruleExprs(t, rulesFile) {
		names := exprNames(expr)
		assert.NotEmpty(t, names, "rule %s names no sidecar metric: %s", name, expr)
		for _, n := range names {
			assert.True(t, exported[n], "rule %s uses %s, which the sidecar did not export (exported: %v)", name, n, sortedKeys(exported))
		}
	}
	targets, variables := dashboardQueries(t, dashboardFile)
	require.NotEmpty(t, targets)
	for name, q := range variables {
		m := labelValuesQuery.FindStringSubmatch(q)
		require.NotNil(t, m, "variable %s: %q is not label_values(selector, label)", name, q)
		for _, n := range exprNames(q) {
			assert.True(t, exported[n], "variable %s uses %s, which the sidecar did not export", name, n)
		}
		var series []map[string]string
		require.NoError(t, prom.api("/api/v1/series", url.Values{"match[]": {grafanaExpr(m[1])},
			"start": {strconv.FormatInt(began.Unix(), 10)}, "end": {strconv.FormatInt(end.Unix()+1, 10)}}, &series), "variable %s", name)
		assert.NotEmpty(t, series, "variable %s: %s matches no series", name, q)
	}
	type renderedTarget struct {
		dashboardTarget
		Series []promSeries `json:"series"`
	}
	var rendered []renderedTarget
	for _, tg := range targets {
		names := exprNames(tg.Expr)
		assert.NotEmpty(t, names, "panel %q: %s names no sidecar metric", tg.Panel, tg.Expr)
		for _, n := range names {
			assert.True(t, exported[n], "panel %q uses %s, which the sidecar did not export (exported: %v)", tg.Panel, n, sortedKeys(exported))
		}
		// Valid PromQL, with data from this run.
		series, err := prom.queryRange(grafanaExpr(tg.Expr), began, end, time.Second)
		if assert.NoError(t, err, "panel %q", tg.Panel) {
			assert.NotEmpty(t, series, "panel %q: %s returned no data over the run", tg.Panel, tg.Expr)
		}
		rendered = append(rendered, renderedTarget{tg, series})
	}
	// SONIQ_DASHBOARD_DATA: keep what each panel showed, for scripts/render-dashboard.py.
	if path := os.Getenv("SONIQ_DASHBOARD_DATA"); path != "" {
		b, err := json.MarshalIndent(map[string]any{"from": began.Unix(), "to": end.Unix(), "targets": rendered}, "", " ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, b, 0o644))
	}
}

// dashboardLoad enqueues a mixed load for d (only when recording the
// dashboard's data for its picture): quick jobs in a slow wave, slower async
// ones, some failures and a crash; then waits for the backlog to drain.
func dashboardLoad(t *testing.T, w *world, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ctx.Err() == nil; i++ {
		select {
		case <-ctx.Done():
		case <-tick.C:
			phase := float64(i%600) / 600 // one wave a minute
			for range 1 + int(4*phase) {
				w.enqueue("t.noop", `{}`, 0)
			}
			if i%3 == 0 {
				w.enqueue("t.sleep_async", fmt.Sprintf(`{"seconds":%.2f}`, 0.1+phase), 0)
			}
			if i%25 == 0 {
				w.enqueue("t.fail", `{}`, 1)
			}
			if i%700 == 350 {
				w.enqueue("t.crash", `{}`, 1)
			}
		}
	}
	eventually(t, 2*time.Minute, "the load's backlog drained", func() bool {
		st := w.stats()
		return st.Queued == 0 && st.Processing == 0
	})
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
