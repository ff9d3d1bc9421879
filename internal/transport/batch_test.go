package transport

import (
	"io"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

// batchRecorder is a recorder that also takes frames in batches.
type batchRecorder struct {
	recorder
	batches chan int // the size of each batch
}

func (r batchRecorder) Frames(ms []protocol.Message) {
	r.batches <- len(ms)
	for _, m := range ms {
		r.recorder <- frameEvent{msg: m}
	}
}

// Frames a stdio handler wrote in one go reach a FrameBatcher together, in
// order, and before the protocol error of a frame that follows them.
func TestStdioReaderBatchesFramesAlreadyRead(t *testing.T) {
	script := `printf '{"type":"pong","seq":1}\n{"type":"pong","seq":2}\n\n{"type":"pong","seq":3}\n{"type":"shutdown"}\n{"type":"pong","seq":4}\n'; exec sleep 30`
	h := &config.Handler{Name: "raw", Command: []string{"sh", "-c", script}, Transport: config.TransportStdio, Workdir: t.TempDir(),
		StartupTimeout: 20 * time.Second, Concurrency: 1, Processes: 1}
	ev := batchRecorder{recorder: make(recorder, 64), batches: make(chan int, 64)}
	wg := &sync.WaitGroup{}
	sp := StartSpawner()
	q := NewQueue(4)
	c, err := Start(Env{Spawner: sp, MaxFrameBytes: protocol.DefaultMaxFrameBytes, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), WG: wg},
		Spec{Handler: h, Out: q.Out(), Events: ev})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Signal(syscall.SIGKILL)
		q.Close()
		go func() {
			for range ev.recorder {
			}
		}()
		wg.Wait()
		sp.Stop()
	})
	var seqs []int64
	for len(seqs) < 3 {
		select {
		case e := <-ev.recorder:
			f, ok := e.(frameEvent)
			if !ok {
				t.Fatalf("event %T before the three pongs", e)
			}
			seqs = append(seqs, f.msg.(*protocol.Pong).Seq)
		case <-time.After(20 * time.Second):
			t.Fatalf("only %v arrived", seqs)
		}
	}
	if seqs[0] != 1 || seqs[1] != 2 || seqs[2] != 3 {
		t.Fatalf("frames out of order: %v", seqs)
	}
	select {
	case e := <-ev.recorder:
		if _, ok := e.(protocolErrorEvent); !ok {
			t.Fatalf("after the pongs: %T, want the protocol error of the shutdown frame", e)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no protocol error")
	}
	if n := <-ev.batches; n != 3 {
		t.Fatalf("the three pongs written at once came in a batch of %d", n)
	}
	select {
	case e := <-ev.recorder:
		t.Fatalf("a frame after the protocol error was reported: %#v", e)
	case <-time.After(200 * time.Millisecond):
	}
}
