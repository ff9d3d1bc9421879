package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/soniq-dev/soniq-sidecar/protocol"
	"github.com/soniq-dev/soniq-sidecar/protocol/handlerpb"
)

// The unix transport: the handler is a go-plugin gRPC plugin serving
// soniq.handler.v1.Handler (protocol/handler.proto) on a Unix socket in a
// private directory. Its messages mirror the stdio frames one for one (see
// docs/protocol.md, "The unix transport (gRPC)"):
//
//	hello     ← Describe, right after go-plugin's handshake and health check
//	job       → an Execute call of its own; its response is the result
//	cancel    → Cancel(id, reason), then the Execute call is cancelled; the
//	            cancelled call stands for the handler's `cancelled` result
//	ping/pong → grpc.health.v1 Check of service "plugin"
//	shutdown  → once in-flight calls have returned, go-plugin's Kill:
//	            GRPCController.Shutdown, 2 s to exit, then SIGKILL
//
// Every message from the handler is put through the stdio decoder's checks
// (converted to its frame and decoded), so both transports accept exactly the
// same hellos and results.

// The go-plugin handshake. The app protocol version is the handler protocol
// version: go-plugin offers it in PLUGIN_PROTOCOL_VERSIONS and the handler
// echoes it in its handshake line.
const (
	pluginCookieKey   = "SONIQ_PLUGIN_MAGIC_COOKIE"
	pluginCookieValue = "soniq-handler-v1"
	pluginName        = "handler"
	// healthService is the service name go-plugin requires a plugin to
	// report SERVING.
	healthService = plugin.GRPCServiceName
	// cancelRPCTimeout bounds the Cancel call that carries a cancel's reason;
	// the Execute call is cancelled after it whatever happens.
	cancelRPCTimeout = 2 * time.Second
	// exitSettle is how long the calls of a process that exited get to fail
	// on their own (the socket closed) before they are cancelled.
	exitSettle = 2 * time.Second
)

func pluginHandshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  uint(protocol.Version),
		MagicCookieKey:   pluginCookieKey,
		MagicCookieValue: pluginCookieValue,
	}
}

// handlerPlugin is the sidecar's (client) side of the Handler service.
type handlerPlugin struct{ plugin.NetRPCUnsupportedPlugin }

func (handlerPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("the sidecar does not serve handlers")
}

func (handlerPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return handlerpb.NewHandlerClient(c), nil
}

// startUnix starts a handler process speaking gRPC over a Unix socket. It
// returns once the child is forked (p.pid is set); the handshake, the health
// check and Describe follow in the process's goroutine, which reports the
// hello (or a protocol error) as an event.
func startUnix(te transportEnv, p *process) error {
	h := p.pool.h
	cmd, err := handlerCommand(h, te.maxFrame)
	if err != nil {
		return err
	}
	// Private, per process: go-plugin creates the socket's own directory
	// (0700 too) inside it and removes that at Kill; this one goes at exit.
	dir, err := os.MkdirTemp("", "soniq-"+shortName(h.Name)+"-")
	if err != nil {
		return fmt.Errorf("handler %s: socket directory: %w", h.Name, err)
	}
	u := &unixProc{te: te, p: p, dir: dir, deadline: time.Now().Add(h.StartupTimeout), started: make(chan struct{})}
	u.ctx, u.stop = context.WithCancel(context.Background())
	u.calls.m = map[string]*unixCall{}
	u.calls.idle = sync.NewCond(&u.calls.mu)
	r := &childRunner{sp: te.sp, wg: te.wg, cmd: cmd, started: make(chan struct{}), exited: make(chan struct{}), drained: make(chan struct{})}
	u.r = r
	u.client = plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  pluginHandshake(),
		Plugins:          plugin.PluginSet{pluginName: handlerPlugin{}},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		RunnerFunc: func(_ hclog.Logger, gp *exec.Cmd, _ string) (runner.Runner, error) {
			// gp carries go-plugin's variables only (SkipHostEnv): the
			// cookie, the protocol versions, PLUGIN_UNIX_SOCKET_DIR.
			return r, r.prepare(gp.Env)
		},
		SkipHostEnv:      true,
		StartTimeout:     h.StartupTimeout,
		UnixSocketConfig: &plugin.UnixSocketConfig{TempDir: dir},
		Stderr:           &stderrLines{log: te.log, handler: h.Name, pid: func() int { return r.pid }, tail: p.stderr},
		// go-plugin's own logger would repeat every stderr line; the
		// transport reports what matters itself.
		Logger: hclog.New(&hclog.LoggerOptions{Name: "go-plugin", Level: hclog.Off, Output: io.Discard}),
		// Not managed: plugin.CleanupClients is never called and nothing
		// but this transport kills the process (only after its calls ended).
		Managed: false,
	})
	te.wg.Add(1)
	go u.run()
	<-r.started
	if r.startErr != nil {
		return fmt.Errorf("handler %s: starting %s: %w", h.Name, strings.Join(h.Command, " "), r.startErr)
	}
	p.pid = r.pid
	p.conn = spawnedConn{groupPID: p.pid}
	te.wg.Add(1)
	go u.watchExit()
	return nil
}

// shortName keeps socket paths well below the 108-byte limit.
func shortName(name string) string {
	var b strings.Builder
	for _, c := range name {
		if b.Len() >= 16 {
			break
		}
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// unixProc is one handler process of the unix transport.
type unixProc struct {
	te       transportEnv
	p        *process
	r        *childRunner
	client   *plugin.Client
	dir      string
	deadline time.Time // for the handshake, health check and Describe

	ctx  context.Context // ends when the process has exited
	stop context.CancelFunc

	hc     handlerpb.HandlerClient
	health healthpb.HealthClient

	broken atomic.Bool
	// started is closed once go-plugin's Start has returned and its failure,
	// if any, was reported: the exit is reported after it, so a handler that
	// printed a wrong handshake line is reported by that, not by the kill
	// that followed.
	started chan struct{}
	calls   struct {
		mu   sync.Mutex
		idle *sync.Cond
		m    map[string]*unixCall
		n    int // goroutines talking to the process (calls, cancels, pings)
	}
}

// unixCall is one job's Execute call.
type unixCall struct {
	cancel    context.CancelFunc
	cancelled bool // the sidecar sent a cancel for it
	sync      bool // a non-cancellable job: a cancel never ends its call
}

// run connects, then turns p.out into calls until it is closed; then it
// waits for the calls in flight and stops the process gracefully.
func (u *unixProc) run() {
	defer u.te.wg.Done()
	defer os.RemoveAll(u.dir)
	ready := u.connect()
	if !u.r.forked() {
		return // startUnix reports the error; the loop never saw the process
	}
	for m := range u.p.out {
		if !ready {
			continue // broken or gone: its exit is reported by watchExit
		}
		switch m := m.(type) {
		case *protocol.Job:
			u.execute(m)
		case *protocol.Cancel:
			u.cancel(m)
		case *protocol.Ping:
			u.ping(m.Seq)
		case *protocol.Shutdown:
			// The work is done when p.out closes, right after.
		}
	}
	u.waitCalls()
	// p.out is closed only for a process that holds no job (or is being
	// killed as broken): go-plugin's graceful stop is safe now. It returns
	// once the process exited (or was killed 2 s later).
	u.client.Kill()
}

// connect runs go-plugin's handshake, the health check and Describe, and
// emits the hello. It reports false when the process is unusable (a
// protocol error was emitted, or it exited).
func (u *unixProc) connect() bool {
	_, err := u.client.Start()
	if err != nil {
		u.r.startedOnce(err) // no-op when the child was forked
		switch {
		case !u.r.forked():
		case u.r.said.Load():
			// It printed something that is not a handshake.
			u.protocolError(fmt.Errorf("go-plugin handshake: %w", err))
		default:
			// It closed its stdout without a word, i.e. it is exiting (or
			// was killed by go-plugin's timeout): report by the exit when it
			// comes, whose status and stderr say more than go-plugin's error.
			u.brokenRPC(fmt.Errorf("go-plugin handshake: %w", err))
		}
		close(u.started)
		return false
	}
	close(u.started)
	rpc, err := u.client.Client()
	if err != nil {
		u.protocolError(fmt.Errorf("connecting to the handler's socket: %w", err))
		return false
	}
	raw, err := rpc.Dispense(pluginName)
	if err != nil {
		u.protocolError(fmt.Errorf("go-plugin dispense: %w", err))
		return false
	}
	u.hc = raw.(handlerpb.HandlerClient)
	u.health = healthpb.NewHealthClient(rpc.(*plugin.GRPCClient).Conn)

	ctx, cancel := context.WithDeadline(u.ctx, u.deadline)
	defer cancel()
	hr, err := u.health.Check(ctx, &healthpb.HealthCheckRequest{Service: healthService})
	if err != nil {
		u.brokenRPC(fmt.Errorf("health check: %w", err))
		return false
	}
	if hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		u.protocolError(fmt.Errorf("health check: service %q is %s, not SERVING", healthService, hr.GetStatus()))
		return false
	}
	d, err := u.hc.Describe(ctx, &handlerpb.DescribeRequest{})
	if err != nil {
		u.brokenRPC(fmt.Errorf("calling Describe: %w", err))
		return false
	}
	hello, err := d.ToProtocol(u.te.maxFrame)
	if err != nil {
		u.protocolError(fmt.Errorf("the Describe answer: %w", err))
		return false
	}
	u.emit(hello)
	return true
}

func (u *unixProc) emit(m protocol.Message) {
	u.te.emit(event{kind: evFrame, proc: u.p, msg: m})
}

// protocolError reports the first protocol error of the process.
func (u *unixProc) protocolError(err error) {
	if u.broken.CompareAndSwap(false, true) {
		u.te.emit(event{kind: evProtocolError, proc: u.p, err: err})
	}
}

// brokenRPC reports a failed call as a protocol error unless the process
// is exiting, whose exit tells the story better (status, stderr).
func (u *unixProc) brokenRPC(err error) {
	select {
	case <-u.r.exited:
		return
	case <-time.After(time.Second):
	}
	u.protocolError(err)
}

func (u *unixProc) track() {
	u.calls.mu.Lock()
	u.calls.n++
	u.calls.mu.Unlock()
}

func (u *unixProc) untrack() {
	u.calls.mu.Lock()
	u.calls.n--
	if u.calls.n == 0 {
		u.calls.idle.Broadcast()
	}
	u.calls.mu.Unlock()
}

func (u *unixProc) waitCalls() {
	u.calls.mu.Lock()
	for u.calls.n > 0 {
		u.calls.idle.Wait()
	}
	u.calls.mu.Unlock()
}

// execute starts the Execute call of one job.
func (u *unixProc) execute(job *protocol.Job) {
	// Args the handler's decoder would refuse (or gRPC could not marshal:
	// not UTF-8) would fail the call, which breaks the whole process: report
	// the one job instead, as the stdio writer does.
	if err := jobUnsendable(job, u.te.maxFrame); err != nil {
		u.te.emit(event{kind: evUnsendable, proc: u.p, msg: job, err: err})
		return
	}
	req := handlerpb.FromJob(job)
	ctx, cancel := context.WithCancel(u.ctx)
	spec := u.p.pool.h.Job(job.Name)
	c := &unixCall{cancel: cancel, sync: spec != nil && !spec.Cancellable}
	u.calls.mu.Lock()
	u.calls.m[job.ID] = c
	u.calls.mu.Unlock()
	u.track()
	go func() {
		defer u.untrack()
		res, err := u.hc.Execute(ctx, req)
		u.calls.mu.Lock()
		delete(u.calls.m, job.ID)
		cancelled := c.cancelled
		u.calls.mu.Unlock()
		cancel()
		switch {
		case err == nil:
			r, perr := res.ToProtocol(job.ID, u.te.maxFrame)
			if perr != nil {
				u.protocolError(fmt.Errorf("the Execute answer for job %s: %w", job.ID, perr))
				return
			}
			u.emit(r)
		case cancelled && status.Code(err) == codes.Canceled:
			// The call's cancellation is the cancel; its end is the
			// handler's `cancelled` answer.
			u.emit(&protocol.Result{ID: job.ID, Status: protocol.StatusCancelled})
		default:
			u.brokenRPC(fmt.Errorf("calling Execute for job %s: %w", job.ID, err))
		}
	}()
}

// cancel tells the handler the reason, then cancels the job's call.
func (u *unixProc) cancel(m *protocol.Cancel) {
	u.calls.mu.Lock()
	c := u.calls.m[m.ID]
	if c != nil && !c.sync {
		c.cancelled = true
	}
	u.calls.mu.Unlock()
	if c == nil {
		return // its result is already on its way, as on stdio
	}
	// The loop never cancels a sync job; should it, the reason still
	// reaches the handler (which ignores it, as on stdio) but the call is
	// not cancelled: the job's real result arrives when it ends.
	u.track()
	go func() {
		defer u.untrack()
		ctx, cancel := context.WithTimeout(u.ctx, cancelRPCTimeout)
		_, err := u.hc.Cancel(ctx, &handlerpb.CancelRequest{Id: m.ID, Reason: string(m.Reason)})
		cancel()
		if err != nil && u.ctx.Err() == nil {
			u.te.log.Warn("Cancel call failed; cancelling the job's call without its reason",
				"handler", u.p.pool.h.Name, "pid", u.r.pid, "job_id", m.ID, "err", err)
		}
		if !c.sync {
			c.cancel()
		}
	}()
}

// ping is a health check; SERVING is the pong.
func (u *unixProc) ping(seq int64) {
	u.track()
	go func() {
		defer u.untrack()
		hr, err := u.health.Check(u.ctx, &healthpb.HealthCheckRequest{Service: healthService})
		switch {
		case err != nil:
			if u.ctx.Err() == nil {
				u.brokenRPC(fmt.Errorf("health check (ping %d): %w", seq, err))
			}
		case hr.GetStatus() != healthpb.HealthCheckResponse_SERVING:
			u.protocolError(fmt.Errorf("health check (ping %d): service %q is %s", seq, healthService, hr.GetStatus()))
		default:
			u.emit(&protocol.Pong{Seq: seq})
		}
	}()
}

// watchExit reports the exit once the calls still in flight have ended (a
// result that arrived before the exit is reported before it, as on stdio)
// and the stderr written before it has been read.
func (u *unixProc) watchExit() {
	defer u.te.wg.Done()
	<-u.r.exited
	<-u.started // Start returns once the process has exited, at the latest
	settled := make(chan struct{})
	go func() { u.waitCalls(); close(settled) }()
	select {
	case <-settled:
	case <-time.After(exitSettle):
		u.stop()
		<-settled
	}
	u.stop()
	<-u.r.drained
	u.te.emit(event{kind: evExit, proc: u.p, err: u.r.waitErr})
}

// ---- the child ----
