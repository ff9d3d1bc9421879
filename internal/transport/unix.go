package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/soniq-dev/soniq-sidecar/internal/session"
	"github.com/soniq-dev/soniq-sidecar/protocol"
	"github.com/soniq-dev/soniq-sidecar/protocol/handlerpb"
)

// The unix transport: the handler is a go-plugin gRPC plugin serving
// soniq.handler.v1.Handler (protocol/handler.proto) on a Unix socket in a
// private directory. After go-plugin's handshake and health check the
// sidecar opens one Session stream (internal/session) that carries the v1
// messages for the process's whole life, exactly as stdio's pipes do (see
// docs/protocol.md): hello, job, cancel, ping/pong, result; `shutdown`
// ends the session, and a spawned handler exits when its session ends.
// go-plugin's Kill (GRPCController.Shutdown, 2 s to exit, then SIGKILL)
// is only the last resort once the session is over.

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
// returns once the child is forked; the handshake, the health check and
// Describe follow in the process's goroutine, which reports the hello (or a
// protocol error).
func startUnix(l *link) (Conn, error) {
	te, h := l.env, l.h
	cmd, err := handlerCommand(h, te.MaxFrameBytes)
	if err != nil {
		return nil, err
	}
	// Private, per process: go-plugin creates the socket's own directory
	// (0700 too) inside it and removes that at Kill; this one goes at exit.
	dir, err := os.MkdirTemp("", "soniq-"+shortName(h.Name)+"-")
	if err != nil {
		return nil, fmt.Errorf("handler %s: socket directory: %w", h.Name, err)
	}
	u := &unixProc{l: l, dir: dir, deadline: time.Now().Add(h.StartupTimeout),
		started: make(chan struct{}), recvDone: make(chan struct{})}
	u.ctx, u.stop = context.WithCancel(context.Background())
	r := &childRunner{sp: te.Spawner, wg: te.WG, cmd: cmd, started: make(chan struct{}), exited: make(chan struct{}), drained: make(chan struct{})}
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
		Stderr:           &stderrLines{log: te.Log, handler: h.Name, pid: func() int { return r.pid }, tail: l.stderr},
		// go-plugin's own logger would repeat every stderr line; the
		// transport reports what matters itself.
		Logger: hclog.New(&hclog.LoggerOptions{Name: "go-plugin", Level: hclog.Off, Output: io.Discard}),
		// Not managed: plugin.CleanupClients is never called and nothing
		// but this transport kills the process (only after its calls ended).
		Managed: false,
	})
	te.WG.Add(1)
	go u.run()
	<-r.started
	if r.startErr != nil {
		return nil, fmt.Errorf("handler %s: starting %s: %w", h.Name, strings.Join(h.Command, " "), r.startErr)
	}
	l.pid = r.pid
	te.WG.Add(1)
	go u.watchExit()
	return spawnedConn{groupPID: l.pid, stderr: l.stderr}, nil
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
	l        *link
	r        *childRunner
	client   *plugin.Client
	dir      string
	deadline time.Time // for the handshake, health check and hello

	ctx  context.Context // ends when the process has exited
	stop context.CancelFunc

	sess *session.Session

	broken atomic.Bool
	// started is closed once go-plugin's Start has returned and its failure,
	// if any, was reported: the exit is reported after it, so a handler that
	// printed a wrong handshake line is reported by that, not by the kill
	// that followed.
	started chan struct{}
	// recvDone is closed once nothing more can come from the handler: the
	// session's receiver ended, or no session was opened.
	recvDone chan struct{}
}

// run connects, then carries l.out over the Session stream until it is
// closed and the handler has ended the session; then it lets go-plugin
// stop the process (it normally exits by itself at the session's end).
func (u *unixProc) run() {
	defer u.l.env.WG.Done()
	defer os.RemoveAll(u.dir)
	ready := u.connect()
	if !u.r.forked() {
		close(u.recvDone)
		return // startUnix reports the error; the caller never saw the process
	}
	if !ready {
		close(u.recvDone)
		for range u.l.out {
			// broken or gone: its exit is reported by watchExit
		}
		return
	}
	sc := &streamConn{l: u.l, s: u.sess, recvDone: u.recvDone,
		ended: u.streamEnded, protocolError: u.protocolError}
	sc.run()
	_ = u.sess.Close()
	// l.out is closed only for a process that holds no job (or is being
	// killed as broken): go-plugin's graceful stop is safe now. It returns
	// once the process exited (or was killed 2 s later).
	u.client.Kill()
}

// connect runs go-plugin's handshake and the health check, opens the
// Session stream and emits its hello. It reports false when the process is
// unusable (a protocol error was emitted, or it exited).
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
	health := healthpb.NewHealthClient(rpc.(*plugin.GRPCClient).Conn)
	ctx, cancel := context.WithDeadline(u.ctx, u.deadline)
	defer cancel()
	hr, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: healthService})
	if err != nil {
		u.brokenRPC(fmt.Errorf("health check: %w", err))
		return false
	}
	if hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		u.protocolError(fmt.Errorf("health check: service %q is %s, not SERVING", healthService, hr.GetStatus()))
		return false
	}
	// The stream gets a connection of its own, sized to the frame limit;
	// go-plugin's serves its handshake, health check and graceful stop.
	rc := u.client.ReattachConfig()
	if rc == nil || rc.Addr == nil {
		u.protocolError(errors.New("go-plugin gave no socket address"))
		return false
	}
	s, err := session.Open(u.ctx, rc.Addr.String(), session.Options{
		HelloTimeout: max(time.Until(u.deadline), time.Millisecond), MaxFrameBytes: u.l.env.MaxFrameBytes,
		Features: Features()})
	switch {
	case errors.Is(err, session.ErrProtocol):
		u.protocolError(err)
		return false
	case err != nil:
		u.brokenRPC(err)
		return false
	}
	u.sess = s
	hello := s.Hello().Hello
	u.l.ev.Frame(&hello)
	return true
}

// protocolError reports the first protocol error of the process.
func (u *unixProc) protocolError(err error) {
	if u.broken.CompareAndSwap(false, true) {
		u.l.ev.ProtocolError(err)
	}
}

// streamEnded: a spawned handler ends the session only on its way out, so
// a clean end needs no report (its exit follows); a broken stream is
// reported unless the process is exiting.
func (u *unixProc) streamEnded(err error) {
	if err != nil && u.ctx.Err() == nil {
		u.brokenRPC(fmt.Errorf("the Session stream: %w", err))
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

// watchExit reports the exit once what the handler sent before it has been
// delivered (a result that arrived before the exit is reported before it,
// as on stdio) and the stderr written before it has been read.
func (u *unixProc) watchExit() {
	defer u.l.env.WG.Done()
	<-u.r.exited
	<-u.started // Start returns once the process has exited, at the latest
	select {
	case <-u.recvDone:
	case <-time.After(exitSettle):
		u.stop() // ends the stream
		<-u.recvDone
	}
	u.stop()
	<-u.r.drained
	u.l.ev.Exited(u.r.waitErr)
}

// ---- the child ----
