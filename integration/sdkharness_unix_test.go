package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/protocol"
	"github.com/soniq-dev/soniq-sidecar/protocol/handlerpb"
)

// startUnixHandler is startHandler for a `transport: unix` manifest: it starts the process
// as go-plugin does (docs/protocol.md, "The unix transport (gRPC)"), reads the handshake
// line, connects, and bridges the frames the scenarios write to gRPC calls and the answers
// back to frames, so every SDK harness scenario runs unchanged over both transports.
func startUnixHandler(t *testing.T, h *config.Handler) *handlerProc {
	t.Helper()
	path := h.Command[0]
	if !strings.Contains(path, "/") {
		var err error
		path, err = exec.LookPath(path)
		require.NoError(t, err, "%s is required to run the %s example handlers (not skipped: install it)", h.Command[0], h.Name)
	}
	// Short: a socket path must stay below 108 bytes.
	dir, err := os.MkdirTemp("", "soniq-sdk-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cmd := exec.Command(path, h.Command[1:]...)
	cmd.Dir = h.Workdir
	env := []string{}
	for k, v := range h.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	cmd.Env = append(env,
		"SONIQ_PROTOCOL_VERSIONS="+strconv.Itoa(protocol.Version),
		"SONIQ_TRANSPORT=unix",
		"SONIQ_HANDLER="+h.Name,
		"SONIQ_PLUGIN_MAGIC_COOKIE=soniq-handler-v1",
		"PLUGIN_PROTOCOL_VERSIONS="+strconv.Itoa(protocol.Version),
		"PLUGIN_UNIX_SOCKET_DIR="+dir,
		"HANDLER_TRACE_FRAMES="+filepath.Join(dir, "trace"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	p := &handlerProc{t: t, handler: h, cmd: cmd, frames: make(chan frameOrErr, 64),
		stderr: &syncBuffer{}, exited: make(chan struct{}), stdin: pw, enc: protocol.NewEncoder(pw), trace: filepath.Join(dir, "trace")}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start(), "start %v", h.Command)

	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(p.stderr, stdout) // nothing, once the SDK moved stdout to stderr
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
		_ = pw.Close()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", h.Name, p.stderr.String())
		}
	})

	var line string
	select {
	case l, ok := <-lines:
		require.True(t, ok, "the handler closed stdout without a handshake line; stderr:\n%s", p.stderr.String())
		line = l
	case <-time.After(h.StartupTimeout):
		require.FailNow(t, "timeout", "no handshake line within %s", h.StartupTimeout)
	}
	parts := strings.Split(line, "|")
	require.Len(t, parts, 5, "handshake line %q", line)
	require.Equal(t, []string{"1", strconv.Itoa(protocol.Version), "unix"}, parts[:3], "handshake line %q", line)
	require.Equal(t, "grpc", parts[4], "handshake line %q", line)
	require.True(t, strings.HasPrefix(parts[3], dir+"/"), "the socket %s is in PLUGIN_UNIX_SOCKET_DIR", parts[3])
	st, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm(), "socket directory mode")

	conn, err := grpc.NewClient("unix:"+parts[3], grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	b := &unixBridge{p: p, conn: conn, hc: handlerpb.NewHandlerClient(conn), health: healthpb.NewHealthClient(conn),
		calls: map[string]*bridgeCall{}}
	ctx, cancel := context.WithTimeout(context.Background(), h.StartupTimeout)
	defer cancel()
	hr, err := b.health.Check(ctx, &healthpb.HealthCheckRequest{Service: "plugin"})
	require.NoError(t, err, "health check")
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, hr.GetStatus())
	d, err := b.hc.Describe(ctx, &handlerpb.DescribeRequest{})
	require.NoError(t, err, "Describe")
	hello, err := d.ToProtocol(protocol.DefaultMaxFrameBytes)
	require.NoError(t, err, "Describe answer")
	p.hello = hello
	go b.run(pr)
	return p
}

// unixBridge turns the frames written to a handlerProc's stdin into gRPC calls and their
// answers into the frames the scenarios read, the way the sidecar's unix transport does.
type unixBridge struct {
	p      *handlerProc
	conn   *grpc.ClientConn
	hc     handlerpb.HandlerClient
	health healthpb.HealthClient
	wg     sync.WaitGroup
	mu     sync.Mutex
	calls  map[string]*bridgeCall
}

type bridgeCall struct {
	cancel    context.CancelFunc
	cancelled bool
	sync      bool // a cancel never ends a sync job's call
}

func (b *unixBridge) frame(m protocol.Message, err error) {
	b.p.frames <- frameOrErr{msg: m, err: err, at: time.Now()}
}

func (b *unixBridge) run(stdin io.Reader) {
	dec := protocol.NewDecoder(stdin)
	for {
		m, err := dec.Decode()
		if err != nil || m.Type() == protocol.TypeShutdown {
			break // EOF or shutdown: the same
		}
		switch m := m.(type) {
		case *protocol.Job:
			b.execute(m)
		case *protocol.Cancel:
			b.cancel(m)
		case *protocol.Ping:
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				hr, err := b.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "plugin"})
				if err == nil && hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
					err = fmt.Errorf("health: %s", hr.GetStatus())
				}
				b.frame(&protocol.Pong{Seq: m.Seq}, err)
			}()
		}
	}
	// Graceful stop: the calls in flight return, then go-plugin's controller Shutdown.
	b.wg.Wait()
	_ = b.conn.Invoke(context.Background(), "/plugin.GRPCController/Shutdown", &emptypb.Empty{}, &emptypb.Empty{})
	<-b.p.exited
	close(b.p.frames)
}

func (b *unixBridge) execute(j *protocol.Job) {
	ctx, cancel := context.WithCancel(context.Background())
	spec := b.p.handler.Job(j.Name)
	c := &bridgeCall{cancel: cancel, sync: spec != nil && !spec.Cancellable}
	b.mu.Lock()
	b.calls[j.ID] = c
	b.mu.Unlock()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer cancel()
		res, err := b.hc.Execute(ctx, handlerpb.FromJob(j))
		b.mu.Lock()
		delete(b.calls, j.ID)
		cancelled := c.cancelled
		b.mu.Unlock()
		switch {
		case err == nil:
			r, err := res.ToProtocol(j.ID, protocol.DefaultMaxFrameBytes)
			b.frame(r, err)
		case cancelled && status.Code(err) == codes.Canceled:
			b.frame(&protocol.Result{ID: j.ID, Status: protocol.StatusCancelled}, nil)
		default:
			b.frame(nil, errors.Join(fmt.Errorf("Execute %s", j.ID), err))
		}
	}()
}

func (b *unixBridge) cancel(m *protocol.Cancel) {
	b.mu.Lock()
	c := b.calls[m.ID]
	if c != nil && !c.sync {
		c.cancelled = true
	}
	b.mu.Unlock()
	if c == nil {
		return
	}
	_, err := b.hc.Cancel(context.Background(), &handlerpb.CancelRequest{Id: m.ID, Reason: string(m.Reason)})
	if err != nil {
		b.frame(nil, fmt.Errorf("Cancel %s: %w", m.ID, err))
	}
	if !c.sync {
		c.cancel()
	}
}
