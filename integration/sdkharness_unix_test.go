package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/internal/session"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// startUnixHandler is startHandler for a `transport: unix` manifest: it starts the process
// as go-plugin does (docs/protocol.md, "The unix transport (gRPC)"), reads the handshake
// line, connects, and bridges the frames the scenarios write to the Session stream and the
// handler's messages back to frames, so every SDK harness scenario runs unchanged over both
// transports.
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
	ctx, cancel := context.WithTimeout(context.Background(), h.StartupTimeout)
	defer cancel()
	hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "plugin"})
	require.NoError(t, err, "health check")
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, hr.GetStatus())
	sess, err := session.Open(context.Background(), parts[3], session.Options{HelloTimeout: h.StartupTimeout})
	require.NoError(t, err, "Session hello")
	t.Cleanup(func() { _ = sess.Close() })
	hello := sess.Hello().Hello
	p.hello = &hello
	b := &unixBridge{p: p, conn: conn, s: sess}
	go b.run(pr)
	return p
}

// unixBridge carries the frames written to a handlerProc's stdin over the Session stream
// and the handler's messages back as the frames the scenarios read, the way the sidecar's
// unix transport does.
type unixBridge struct {
	p    *handlerProc
	conn *grpc.ClientConn
	s    *session.Session
}

func (b *unixBridge) frame(m protocol.Message, err error) {
	b.p.frames <- frameOrErr{msg: m, err: err, at: time.Now()}
}

func (b *unixBridge) run(stdin io.Reader) {
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			m, err := b.s.Recv()
			switch {
			case err == io.EOF:
				return
			case err != nil:
				b.frame(nil, fmt.Errorf("Session: %w", err))
				return
			}
			if _, ok := m.(*session.Draining); ok {
				continue
			}
			b.frame(m, nil)
		}
	}()
	dec := protocol.NewDecoder(stdin)
	for {
		m, err := dec.Decode()
		if err != nil || m.Type() == protocol.TypeShutdown {
			break // EOF or shutdown: the same
		}
		if err := b.s.Send(m); err != nil {
			b.frame(nil, fmt.Errorf("sending %s: %w", m.Type(), err))
		}
	}
	// The end of the session: the handler ends it once it holds no job, then exits.
	_ = b.s.Send(&protocol.Shutdown{})
	<-recvDone
	select {
	case <-b.p.exited:
	case <-time.After(5 * time.Second):
		// go-plugin's last resort, as the sidecar's.
		_ = b.conn.Invoke(context.Background(), "/plugin.GRPCController/Shutdown", &emptypb.Empty{}, &emptypb.Empty{})
		<-b.p.exited
	}
	close(b.p.frames)
}
