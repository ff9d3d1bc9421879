package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"sync"
)

// Decoder reads NDJSON frames from a stream. Empty lines are skipped and one "\r" before
// the "\n" is stripped. A frame over the size limit is discarded up to its "\n" without
// being buffered beyond the limit, and reported as a CodeOversize *FrameError; the next
// call continues with the following line. A Decoder is not safe for concurrent use.
type Decoder struct {
	r    *bufio.Reader
	max  int
	line []byte
}

// NewDecoder returns a Decoder reading from r with the default 16 MiB frame limit.
func NewDecoder(r io.Reader) *Decoder {
	return &Decoder{r: bufio.NewReaderSize(r, 64<<10), max: DefaultMaxFrameBytes}
}

// SetMaxFrameBytes sets the frame size limit (bytes, excluding the line terminator);
// n < 1 restores the default.
func (d *Decoder) SetMaxFrameBytes(n int) {
	switch {
	case n < 1:
		n = DefaultMaxFrameBytes
	case n > math.MaxInt-2:
		n = math.MaxInt - 2
	}
	d.max = n
}

// Decode reads and decodes the next frame. It returns io.EOF at a clean end of input, a
// *FrameError for a bad frame (CodeTruncated when the input ends inside a line), and the
// reader's error otherwise.
func (d *Decoder) Decode() (Message, error) {
	frame, err := d.ReadFrame()
	if err != nil {
		return nil, err
	}
	m, ferr := decode(frame)
	if ferr != nil {
		ferr.Size = len(frame)
		ferr.Quote = quote(frame)
		return nil, ferr
	}
	return m, nil
}

// Buffered reports whether a whole line (a frame or an empty line) is
// already read from the stream and buffered: the next Decode then does not
// wait for the stream.
func (d *Decoder) Buffered() bool {
	b, _ := d.r.Peek(d.r.Buffered())
	return bytes.IndexByte(b, '\n') >= 0
}

// ReadFrame returns the next non-empty line without its terminator, unvalidated. The
// slice is valid until the next call. Errors are as for Decode.
func (d *Decoder) ReadFrame() ([]byte, error) {
	for {
		frame, err := d.readLine()
		if err != nil || len(frame) > 0 {
			return frame, err
		}
	}
}

// readLine reads one line. It keeps at most max+2 bytes of it (the frame plus "\r\n").
func (d *Decoder) readLine() ([]byte, error) {
	if cap(d.line) > 1<<20 {
		d.line = nil // do not pin a large buffer after a large frame
	}
	d.line = d.line[:0]
	size, keep := 0, d.max+2
	for {
		chunk, err := d.r.ReadSlice('\n')
		size += len(chunk)
		if room := keep - len(d.line); room > 0 {
			d.line = append(d.line, chunk[:min(room, len(chunk))]...)
		}
		switch {
		case err == nil:
			n := size - 1 // without the "\n"
			if n > d.max+1 {
				return nil, &FrameError{Code: CodeOversize, Limit: d.max, Size: n, Quote: quote(d.line)}
			}
			line := d.line[:n] // kept whole
			if n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			if len(line) > d.max {
				return nil, &FrameError{Code: CodeOversize, Limit: d.max, Size: len(line), Quote: quote(line)}
			}
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if size == 0 {
				return nil, io.EOF
			}
			line := bytes.TrimSuffix(d.line, []byte{'\r'})
			if size > d.max {
				return nil, &FrameError{Code: CodeOversize, Limit: d.max, Size: size, Quote: quote(line)}
			}
			return nil, &FrameError{Code: CodeTruncated, Size: size, Quote: quote(line),
				Detail: "input ended inside a frame (no terminating \\n)"}
		default:
			return nil, err
		}
	}
}

// Encoder writes frames to a stream, one Write per frame. It is safe for concurrent use.
type Encoder struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewEncoder returns an Encoder writing to w.
func NewEncoder(w io.Writer) *Encoder { return &Encoder{w: w} }

// Encode writes m as one compact frame followed by "\n".
func (e *Encoder) Encode(m Message) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	b, err := Append(e.buf[:0], m)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if cap(b) <= 1<<20 {
		e.buf = b
	}
	_, err = e.w.Write(b)
	return err
}
