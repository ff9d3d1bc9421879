package netfault

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// server is a line server on loopback: it answers each line with "ok
// <line>" and records the lines it received, so a test can tell what
// reached it even when the answer did not come back.
type server struct {
	ln       net.Listener
	mu       sync.Mutex
	received []string
	wg       sync.WaitGroup
}

func startServer(t *testing.T) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &server{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				r := bufio.NewScanner(c)
				for r.Scan() {
					s.mu.Lock()
					s.received = append(s.received, r.Text())
					s.mu.Unlock()
					if _, err := io.WriteString(c, "ok "+r.Text()+"\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); s.wg.Wait() })
	return s
}

func (s *server) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.received...)
}

func startProxy(t *testing.T, s *server) *Proxy {
	t.Helper()
	p, err := Start(s.ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *Proxy) *client {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

// ask sends a line and reads the answer, waiting at most timeout.
func (c *client) ask(line string, timeout time.Duration) (string, error) {
	if err := c.c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c.c, line+"\n"); err != nil {
		return "", err
	}
	return c.r.ReadString('\n')
}

func (c *client) read(timeout time.Duration) (string, error) {
	if err := c.c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	return c.r.ReadString('\n')
}

func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestForwardsBothWays(t *testing.T) {
	p := startProxy(t, startServer(t))
	c := dial(t, p)
	got, err := c.ask("hello", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "ok hello\n", got)
	assert.Equal(t, 1, p.Conns())
	assert.Equal(t, 1, p.Stats().Accepted)
}

func TestPartitionHoldsBytesWithoutClosingAndHealDeliversThem(t *testing.T) {
	s := startServer(t)
	p := startProxy(t, s)
	c := dial(t, p)
	_, err := c.ask("before", 5*time.Second)
	require.NoError(t, err)

	p.Partition()
	assert.True(t, p.Partitioned())
	_, err = c.ask("during", 300*time.Millisecond)
	require.True(t, timedOut(err), "nothing comes back and the socket is not closed or reset: %v", err)
	assert.Equal(t, []string{"before"}, s.got(), "nothing reached the server")

	// A connection opened during the partition reaches the server only
	// after it heals.
	late := dial(t, p)
	_, err = late.ask("new", 200*time.Millisecond)
	require.True(t, timedOut(err), "%v", err)

	p.Heal()
	assert.False(t, p.Partitioned())
	got, err := c.read(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "ok during\n", got, "held bytes are delivered in order at heal")
	got, err = late.read(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "ok new\n", got)
	got, err = c.ask("after", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "ok after\n", got)
}

func TestLatencyEachWay(t *testing.T) {
	p := startProxy(t, startServer(t))
	c := dial(t, p)
	const d = 100 * time.Millisecond
	p.SetLatency(d)
	start := time.Now()
	_, err := c.ask("slow", 5*time.Second)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 2*d, "a round trip pays the latency twice")

	p.SetLatency(0)
	start = time.Now()
	_, err = c.ask("fast", 5*time.Second)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), d, "latency removed")
}

func TestResetSendsRSTAndNewConnectionsWork(t *testing.T) {
	p := startProxy(t, startServer(t))
	a, b := dial(t, p), dial(t, p)
	for _, c := range []*client{a, b} {
		_, err := c.ask("x", 5*time.Second)
		require.NoError(t, err)
	}
	assert.Equal(t, 2, p.Reset())
	for _, c := range []*client{a, b} {
		_, err := c.read(5 * time.Second)
		require.Error(t, err)
		assert.ErrorIs(t, err, syscall.ECONNRESET, "an RST, not a FIN")
	}
	c := dial(t, p)
	got, err := c.ask("again", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "ok again\n", got)
	assert.Equal(t, 2, p.Stats().Resets)
}

func TestLoseReplyDeliversTheStatementAndCutsTheAnswer(t *testing.T) {
	s := startServer(t)
	p := startProxy(t, s)
	c := dial(t, p)
	_, err := c.ask("first", 5*time.Second)
	require.NoError(t, err)

	fired := p.LoseReply("COMMIT")
	_, err = c.ask("SELECT 1", 5*time.Second)
	require.NoError(t, err, "a statement that does not match goes through")
	_, err = c.ask("COMMIT the claim", 5*time.Second)
	require.Error(t, err)
	assert.ErrorIs(t, err, syscall.ECONNRESET)
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("the fault did not report firing")
	}
	assert.Contains(t, s.got(), "COMMIT the claim", "the server got the statement")
	assert.Equal(t, 1, p.Stats().LostReplies)

	// One fault, one connection: the next goes through.
	c2 := dial(t, p)
	got, err := c2.ask("COMMIT again", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "ok COMMIT again\n", got)
}

func TestCloseEndsEverything(t *testing.T) {
	s := startServer(t)
	p, err := Start(s.ln.Addr().String())
	require.NoError(t, err)
	c := dial(t, p)
	p.Partition()
	require.NoError(t, p.Close(), "a partitioned proxy closes at once")
	_, err = c.read(5 * time.Second)
	require.Error(t, err)
	require.False(t, timedOut(err))
	_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
	require.Error(t, err, "no longer listening")
	require.NoError(t, p.Close(), "twice is harmless")
}
