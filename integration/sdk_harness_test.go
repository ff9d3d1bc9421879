package integration

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// The SDK harness drives each SDK's example handler process (examples/*/manifest.yaml)
// over the stdio protocol with the Go codec, one fresh process per scenario. Every SDK
// must behave the same; what differs between them is in this table only.
var sdkCases = []struct {
	name     string
	manifest string
	// strayOutput is text the examples.print job writes to stdout from user code; the SDK
	// must route it to stderr.
	strayOutput string
}{
	{name: "python", manifest: "../examples/python/manifest.yaml", strayOutput: "this is not a protocol frame"},
	{name: "node", manifest: "../examples/node/manifest.yaml", strayOutput: "junk from console.log"},
	// The same over the unix transport (gRPC; see sdkharness_unix_test.go).
	{name: "python-unix", manifest: "../examples/python/manifest-unix.yaml", strayOutput: "this is not a protocol frame"},
	{name: "node-unix", manifest: "../examples/node/manifest-unix.yaml", strayOutput: "junk from console.log"},
}

// The examples every SDK serves (docs/protocol.md, examples/*/manifest.yaml).
const (
	jobAdd        = "examples.add"
	jobSleepAsync = "examples.sleep_async"
	jobSleepSync  = "examples.sleep_sync"
	jobFail       = "examples.fail"
	jobPrint      = "examples.print"
)

func TestSDKHarness(t *testing.T) {
	t.Parallel()
	scenarios := []struct {
		name string
		run  func(t *testing.T, p *handlerProc, strayOutput string)
	}{
		{"hello lists the manifest's jobs", testHello},
		{"arithmetic job is done with its result", testAdd},
		{"failing job is failed with type, message and traceback", testFail},
		{"cancel stops an async job within 1s", testCancelAsync},
		{"cancel does not touch a sync job", testCancelSync},
		{"async jobs run concurrently", testConcurrency},
		{"pong while a sync job runs", testPingDuringSync},
		{"stray print does not corrupt stdout", testStrayPrint},
		{"shutdown finishes in-flight jobs then exits 0", func(t *testing.T, p *handlerProc, _ string) {
			testDrain(t, p, func() { p.send(&protocol.Shutdown{}) })
		}},
		{"stdin EOF finishes in-flight jobs then exits 0", func(t *testing.T, p *handlerProc, _ string) {
			testDrain(t, p, func() { require.NoError(t, p.stdin.Close()) })
		}},
	}
	for _, sdk := range sdkCases {
		t.Run(sdk.name, func(t *testing.T) {
			t.Parallel()
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					sc.run(t, startHandler(t, sdk.manifest), sdk.strayOutput)
				})
			}
		})
	}
}

func testHello(t *testing.T, p *handlerProc, _ string) {
	h := p.hello
	require.Equal(t, protocol.Version, h.Protocol)
	require.NotEmpty(t, h.SDK)
	require.Equal(t, p.cmd.Process.Pid, h.PID, "hello.pid is the process's pid")
	require.GreaterOrEqual(t, h.Concurrency, 1)
	declared := map[string]bool{}
	for _, j := range p.handler.Jobs {
		declared[j.Name] = j.Cancellable
	}
	served := map[string]bool{}
	for _, j := range h.Jobs {
		served[j.Name] = j.Cancellable
	}
	require.Equal(t, declared, served, "hello jobs (name → cancellable) must equal the manifest's")
	for _, name := range []string{jobAdd, jobSleepAsync, jobSleepSync, jobFail, jobPrint} {
		require.Contains(t, served, name)
	}
	require.True(t, served[jobSleepAsync], "%s is cancellable", jobSleepAsync)
	require.False(t, served[jobSleepSync], "%s is not cancellable", jobSleepSync)
}

func testAdd(t *testing.T, p *handlerProc, _ string) {
	id := p.job(jobAdd, `{"a":2,"b":40}`)
	r := p.result(10*time.Second, id)
	require.Equal(t, protocol.StatusDone, r.Status, "%+v", r.Error)
	require.JSONEq(t, `{"sum":42}`, string(r.Result))
}

func testFail(t *testing.T, p *handlerProc, _ string) {
	id := p.job(jobFail, `{}`)
	r := p.result(10*time.Second, id)
	require.Equal(t, protocol.StatusFailed, r.Status)
	require.NotNil(t, r.Error)
	require.NotEmpty(t, r.Error.Type)
	require.Contains(t, r.Error.Message, "boom")
	require.NotNil(t, r.Error.Traceback, "traceback")
	require.Contains(t, *r.Error.Traceback, "boom")
	require.True(t, r.Error.Retryable, "an ordinary exception is retryable")
}

func testCancelAsync(t *testing.T, p *handlerProc, _ string) {
	id := p.job(jobSleepAsync, `{"seconds":30}`)
	p.waitHeld(id)
	sent := time.Now()
	p.send(&protocol.Cancel{ID: id, Reason: protocol.ReasonJobTimeout})
	rs, at := p.results(5*time.Second, id)
	require.Equal(t, protocol.StatusCancelled, rs[id].Status)
	require.Less(t, at[id].Sub(sent), time.Second, "cancelled result within 1s of the cancel")
}

func testCancelSync(t *testing.T, p *handlerProc, _ string) {
	started := time.Now()
	id := p.job(jobSleepSync, `{"seconds":1}`)
	p.waitHeld(id)
	p.send(&protocol.Cancel{ID: id, Reason: protocol.ReasonJobTimeout})
	// The SDK saw the cancel while it held the job, and ignored it.
	p.waitStderr(regexp.MustCompile(`cancel \(job_timeout\) for .*`+regexp.QuoteMeta(id)+` .*ignored`), "the cancel of a sync job")
	rs, at := p.results(10*time.Second, id)
	require.Equal(t, protocol.StatusDone, rs[id].Status, "a sync job ignores cancel: %+v", rs[id].Error)
	require.JSONEq(t, `{"slept":1}`, string(rs[id].Result))
	require.GreaterOrEqual(t, at[id].Sub(started), 900*time.Millisecond, "the job ran to its end")
}

func testConcurrency(t *testing.T, p *handlerProc, _ string) {
	n := min(p.hello.Concurrency, 4)
	require.GreaterOrEqual(t, n, 2, "examples declare concurrency ≥ 2")
	started := time.Now()
	var ids []string
	for range n {
		ids = append(ids, p.job(jobSleepAsync, `{"seconds":1}`))
	}
	rs, _ := p.results(time.Duration(n+5)*time.Second, ids...)
	elapsed := time.Since(started)
	for _, id := range ids {
		require.Equal(t, protocol.StatusDone, rs[id].Status)
	}
	require.Less(t, elapsed, time.Duration(float64(n)-0.5)*time.Second, "%d one-second jobs at once", n)
}

func testPingDuringSync(t *testing.T, p *handlerProc, _ string) {
	id := p.job(jobSleepSync, `{"seconds":2}`)
	p.waitHeld(id)
	p.send(&protocol.Ping{Seq: 42})
	msg := p.next(1500*time.Millisecond, "pong while the sync job runs")
	pong, ok := msg.(*protocol.Pong)
	require.True(t, ok, "got %s before the pong", msg.Type())
	require.EqualValues(t, 42, pong.Seq)
	r := p.result(10*time.Second, id)
	require.Equal(t, protocol.StatusDone, r.Status)
}

func testStrayPrint(t *testing.T, p *handlerProc, strayOutput string) {
	id := p.job(jobPrint, `{}`)
	r := p.result(10*time.Second, id)
	require.Equal(t, protocol.StatusDone, r.Status, "%+v", r.Error)
	// The stream is still in sync: the next job is answered normally.
	id = p.job(jobAdd, `{"a":1,"b":1}`)
	r = p.result(10*time.Second, id)
	require.Equal(t, protocol.StatusDone, r.Status)
	require.JSONEq(t, `{"sum":2}`, string(r.Result))
	require.Eventually(t, func() bool { return strings.Contains(p.stderr.String(), strayOutput) },
		5*time.Second, 50*time.Millisecond, "stray output goes to stderr")
}

// testDrain starts an async and a sync job, tells the handler to stop, and expects both
// real results, then stdout EOF and exit status 0.
func testDrain(t *testing.T, p *handlerProc, stop func()) {
	async := p.job(jobSleepAsync, `{"seconds":1}`)
	sync := p.job(jobSleepSync, `{"seconds":1}`)
	p.waitHeld(async, sync)
	stop()
	rs, _ := p.results(10*time.Second, async, sync)
	for _, id := range []string{async, sync} {
		require.Equal(t, protocol.StatusDone, rs[id].Status, "%s: %+v", id, rs[id].Error)
		var v map[string]any
		require.NoError(t, json.Unmarshal(rs[id].Result, &v))
		require.EqualValues(t, 1, v["slept"])
	}
	p.expectExit(10 * time.Second)
}
