// Package netfault is a TCP proxy on loopback that produces, for real, the
// faults a database connection suffers on a network: partitions that keep
// sockets open while nothing moves (no RST, no FIN), latency each way,
// reset storms, and replies lost after the server has done the work. Tests
// put it between a sidecar and Postgres and drive it in-process; the chaos
// harness does the same between each of its sidecars and the database.
//
// The proxy terminates TCP on both sides, like PgBouncer or a cloud SQL
// proxy: during a partition each side's kernel still acknowledges what the
// other sends, so TCP keepalives and user timeouts see a healthy peer. Only
// timeouts kept by the database itself (statement, idle-in-transaction,
// idle-session) or by the client's own clock can end such a partition, which
// is the case a sidecar must survive.
package netfault

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// Proxy forwards connections from its loopback address to a target. Its
// methods are safe for concurrent use. Start it with Start and end it with
// Close.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu sync.Mutex
	// open is closed while bytes move; a partition replaces it with an
	// open channel that Heal closes.
	open    chan struct{}
	latency time.Duration
	links   map[*link]struct{}
	// lose holds the armed lost-reply faults, oldest first.
	lose   []loss
	closed bool
	stats  Stats
}

// Stats counts what the proxy did, for a test or a chaos report.
type Stats struct {
	Accepted    int // client connections accepted
	Resets      int // connections reset by Reset
	LostReplies int // connections whose reply was dropped by LoseReply
}

// loss is one armed lost-reply fault: the next statement whose bytes
// contain match (any statement when match is empty) and none of unless.
type loss struct {
	match  []byte
	unless [][]byte
	fired  chan struct{}
}

// Start listens on a free loopback port and forwards every connection to
// target (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("netfault: listen on loopback for %s: %w", target, err)
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{ln: ln, target: target, open: open, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port, to put in a client's database URL.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, resets every connection and returns once every
// goroutine of the proxy has ended.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	links := p.snapshot()
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range links {
		l.reset()
	}
	p.wg.Wait()
	return err
}

// Partition black-holes the proxy: nothing is delivered either way, no
// connection is closed or reset, and new connections are accepted by the
// kernel but reach the target only after Heal. What was sent meanwhile is
// held and delivered at Heal, as TCP retransmission would deliver it.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already partitioned
	}
}

// Heal ends a partition: held bytes flow again, in order.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// Partitioned reports whether a partition is in force.
func (p *Proxy) Partitioned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		return false
	default:
		return true
	}
}

// SetLatency delays every chunk of bytes by d in each direction (so a
// round trip gains 2d) from the moment the proxy reads it; 0 removes it.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = max(d, 0)
}

// Reset resets every open connection (RST to the client and to the
// target) and returns how many it reset. New connections are accepted as
// before; call it repeatedly for a reset storm.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	links := p.snapshot()
	p.stats.Resets += len(links)
	p.mu.Unlock()
	for _, l := range links {
		l.reset()
	}
	return len(links)
}

// LoseReply arms one lost reply: the next statement a client sends whose
// bytes contain match (any, when match is empty) goes through to the
// target, and when the target's answer begins to come back it is dropped
// and the client's connection is reset. The client cannot know whether the
// statement took effect; the server did it. The returned channel is closed
// when the fault has fired.
func (p *Proxy) LoseReply(match string) <-chan struct{} {
	return p.LoseReplyUnless(match)
}

// LoseReplyUnless is LoseReply for the next statement whose bytes contain
// match and none of unless: a test that must lose one kind of write and
// not another carrying the same arguments (a completion written alone, not
// one riding in a claim) names what only the other carries.
func (p *Proxy) LoseReplyUnless(match string, unless ...string) <-chan struct{} {
	fired := make(chan struct{})
	l := loss{match: []byte(match), fired: fired}
	for _, u := range unless {
		l.unless = append(l.unless, []byte(u))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose = append(p.lose, l)
	return fired
}

// Conns is the number of client connections open now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

func (p *Proxy) snapshot() []*link {
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	return links
}

// gate returns the channel that is closed while bytes may move.
func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

func (p *Proxy) delay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency
}

// takeLoss returns the armed fault that chunk triggers, removing it.
func (p *Proxy) takeLoss(chunk []byte) (chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, l := range p.lose {
		if (len(l.match) == 0 || bytes.Contains(chunk, l.match)) &&
			!slices.ContainsFunc(l.unless, func(u []byte) bool { return bytes.Contains(chunk, u) }) {
			p.lose = append(p.lose[:i:i], p.lose[i+1:]...)
			return l.fired, true
		}
	}
	return nil, false
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		l := &link{p: p, client: c, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.links[l] = struct{}{}
		p.stats.Accepted++
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			l.run()
			p.mu.Lock()
			delete(p.links, l)
			p.mu.Unlock()
		}()
	}
}

// link is one client connection and its connection to the target.
type link struct {
	p      *Proxy
	client net.Conn

	mu       sync.Mutex
	upstream net.Conn      // nil until dialled
	done     chan struct{} // closed by reset or when both directions end
	doneOnce sync.Once
	// losing is closed-over state of a fired lost-reply fault: the
	// target's next bytes are dropped and the client reset.
	losing chan struct{}
}

func (l *link) run() {
	// A partition also holds a new connection's handshake with the target.
	select {
	case <-l.p.gate():
	case <-l.done:
		return
	}
	up, err := net.Dial("tcp", l.p.target)
	if err != nil {
		l.reset()
		return
	}
	l.mu.Lock()
	select {
	case <-l.done:
		l.mu.Unlock()
		_ = up.Close()
		return
	default:
	}
	l.upstream = up
	l.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); l.pump(l.client, up, true) }()
	go func() { defer wg.Done(); l.pump(up, l.client, false) }()
	wg.Wait()
	l.finish(false)
}

// reset ends the link with an RST on both sides.
func (l *link) reset() { l.finish(true) }

func (l *link) finish(rst bool) {
	l.doneOnce.Do(func() {
		close(l.done)
		l.mu.Lock()
		up := l.upstream
		l.mu.Unlock()
		for _, c := range []net.Conn{l.client, up} {
			if c == nil {
				continue
			}
			if tc, ok := c.(*net.TCPConn); ok && rst {
				_ = tc.SetLinger(0) // close sends RST, not FIN
			}
			_ = c.Close()
		}
	})
}

type chunk struct {
	data []byte
	at   time.Time // when the proxy read it
	eof  bool
}

// pump moves src's bytes to dst in order, each chunk no sooner than the
// latency after it was read and only while no partition holds them. up
// says the direction is client to target.
func (l *link) pump(src, dst net.Conn, up bool) {
	chunks := make(chan chunk, 64)
	readerDone := make(chan struct{})
	// The reader ends when src fails or the link is done; pump waits for
	// it, whichever way pump itself ends.
	defer func() { <-readerDone }()
	go func() {
		defer close(readerDone)
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case chunks <- chunk{data: buf[:n], at: time.Now()}:
				case <-l.done:
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					select {
					case chunks <- chunk{eof: true, at: time.Now()}:
					case <-l.done:
					}
				} else {
					l.reset()
				}
				return
			}
		}
	}()
	for c := range chunks {
		if d := l.p.delay(); d > 0 {
			if wait := time.Until(c.at.Add(d)); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-l.done:
					t.Stop()
					return
				}
			}
		}
		select {
		case <-l.p.gate():
		case <-l.done:
			return
		}
		if c.eof {
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			continue
		}
		if !up && l.lost() {
			// The target answered the statement: drop the answer and
			// cut the client, who cannot tell whether it took effect.
			l.p.mu.Lock()
			l.p.stats.LostReplies++
			l.p.mu.Unlock()
			l.reset()
			return
		}
		// The fault is armed on the link before the statement goes out:
		// armed after, the answer could come back and pass before it, and
		// the next statement's answer would be the one lost.
		if up {
			if fired, ok := l.p.takeLoss(c.data); ok {
				l.mu.Lock()
				l.losing = fired
				l.mu.Unlock()
			}
		}
		if _, err := dst.Write(c.data); err != nil {
			l.reset()
			return
		}
	}
	// Drain the reader so it can end.
	for range chunks {
	}
}

// lost reports whether a lost-reply fault fired on this link, marking it
// done.
func (l *link) lost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.losing == nil {
		return false
	}
	close(l.losing)
	l.losing = nil
	return true
}
