"""The stdio transport: NDJSON frames on the process's stdin and stdout
(docs/protocol.md), the default when the sidecar spawns the handler. The jobs
themselves run in the Runtime; this module moves the protocol off fds 0 and 1,
reads and splits frames, acts on them and writes the results."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

from . import protocol
from ._log import log, quote
from ._results import shutting_down
from ._runtime import Runtime
from ._types import EXIT_PROTOCOL_ERROR, EXIT_SIDECAR_GONE


@dataclass
class _Channel:
    """The private protocol file descriptors (see _protect_stdio)."""

    rfd: int
    wfd: int
    write_lock: threading.Lock = field(default_factory=threading.Lock)


async def serve(rt: Runtime, version: int) -> None:
    """Serves the protocol on stdin/stdout until the sidecar shuts the process
    down (or closes stdin) and every job held has reported its result and its
    hooks have returned; raises the Runtime's ServeError when it cannot go on."""
    await _Stdio(rt, _protect_stdio()).serve(version)


class _Stdio:
    def __init__(self, rt: Runtime, chan: _Channel) -> None:
        self.rt = rt
        self.chan = chan
        self.draining = False
        self.woken = False  # a "wake" is in the inbox
        self.inbox: asyncio.Queue[Tuple[str, Any]] = asyncio.Queue()
        # Frames to write, written together once the event loop has run what
        # is ready (one write for the results of one turn, not one each).
        self.out: List[bytes] = []

    async def serve(self, version: int) -> None:
        rt = self.rt
        rt.on_change = self._wake  # a job ended, hooks ended, serving failed
        loop = asyncio.get_running_loop()
        reader: Optional[_LoopReader] = None
        if _pollable(self.chan.rfd):
            # A pipe (what the sidecar gives) is read by the event loop
            # itself when it is readable, and its frames acted on there and
            # then: no thread handing each read over.
            reader = _LoopReader(self.chan.rfd, rt.max_frame_bytes, loop, self)
            reader.start()
        else:
            # A file or a terminal cannot be polled: a thread reads it.
            thread = threading.Thread(
                target=_read_frames,
                args=(self.chan.rfd, rt.max_frame_bytes, loop, self.inbox),
                name="soniq-stdin",
                daemon=True,
            )
            thread.start()
        try:
            await self._loop(version)
        finally:
            if reader is not None:
                reader.stop()

    async def _loop(self, version: int) -> None:
        rt = self.rt
        self._send(protocol.encode(rt.hello(version)))
        # ctx.enqueue sends its frames with the results (_children.py).
        rt.children.connect(lambda frame, data: self._send(data), asyncio.get_running_loop())
        while True:
            if rt.failure is not None:
                self._flush()
                raise rt.failure
            if self.draining and rt.idle:
                self._flush()
                return
            kind, data = await self.inbox.get()
            self.woken = False
            if kind == "eof":
                # Same as shutdown: nothing more can arrive; the loop ends
                # once the jobs in flight have written their results.
                self.draining = True
            elif kind == "error":
                self._flush()  # the results before it go out first (rt.fail may exit at once)
                rt.fail(EXIT_PROTOCOL_ERROR, f"protocol error: {data}")
            elif kind == "lines":
                self.lines(data)
            elif kind == "raise":
                raise data
            # "wake" only makes the loop check its conditions again.

    def lines(self, lines: List[bytes]) -> None:
        """Acts on the frames of one read, in order."""
        for line in lines:
            self._dispatch(line)

    def wake(self) -> None:
        self._wake()

    def _wake(self) -> None:
        # The loop has something to check only once it drains or serving
        # failed: a job that ends meanwhile needs no turn of it.
        if (self.draining or self.rt.failure is not None) and not self.woken:
            self.woken = True
            self.inbox.put_nowait(("wake", None))

    def _dispatch(self, line: bytes) -> None:
        """Acts on one frame from the sidecar; a malformed one ends serving
        with status 4 (under run() the process exits at once, from inside
        the loop, so no running sync thread can delay the exit)."""
        rt = self.rt
        try:
            msg = protocol.decode(line, rt.max_frame_bytes)
        except protocol.ProtocolError as e:
            self._flush()  # the results before it go out first (rt.fail may exit at once)
            rt.fail(EXIT_PROTOCOL_ERROR, f"protocol error: {e} in frame {quote(line)}")
            return
        if msg["type"] == "job":
            if rt.duplicate(msg["id"]):
                return
            if self.draining:
                # The sidecar does not send jobs after shutdown; if one slips
                # through, hand it back for a retry rather than dropping it.
                self._send(protocol.encode(shutting_down(msg["id"])))
                return
            rt.start(msg, self._report)
        elif msg["type"] == "cancel":
            rt.cancel(msg["id"], msg["reason"])
        elif msg["type"] == "ping":
            self._send(protocol.encode({"type": "pong", "seq": msg["seq"]}))
        elif msg["type"] == "shutdown":
            self.draining = True
        elif msg["type"] == "enqueued":
            rt.children.answered(msg)
        else:
            self._flush()
            rt.fail(EXIT_PROTOCOL_ERROR, f"protocol error: unexpected {msg['type']!r} frame from the sidecar")

    def _report(self, frame: protocol.ResultFrame, data: bytes) -> None:
        self._send(data)

    def _send(self, data: bytes) -> None:
        if self.rt.failure is not None:
            return  # serving is giving up: nothing more goes out
        if not self.out:
            asyncio.get_running_loop().call_soon(self._flush)
        self.out.append(data)

    def _flush(self) -> None:
        if not self.out:
            return
        data = b"\n".join(self.out)
        self.out.clear()
        buf = memoryview(data + b"\n")
        # Whole frames per locked section: frames never interleave, and
        # os.write on the raw fd has no user-space buffer, so they are out.
        with self.chan.write_lock:
            try:
                while buf:
                    n = os.write(self.chan.wfd, buf)
                    buf = buf[n:]
            except BrokenPipeError:
                # Nobody reads our frames any more: the sidecar is gone.
                self.rt.fail(EXIT_SIDECAR_GONE, "stdout closed by the sidecar; exiting")
            except OSError as e:
                # Frames that cannot be written leave their jobs unanswered:
                # exiting hands them to the sidecar's crash handling.
                self.rt.fail(EXIT_SIDECAR_GONE, f"writing to the sidecar failed: {e}; exiting")


def _protect_stdio() -> _Channel:
    """Moves the protocol off fds 0 and 1 so user code cannot disturb it.

    stdout: the pipe to the sidecar is duplicated to a private fd that only the
    SDK writes to; fd 1 then becomes a copy of stderr and sys.stdout is rebound
    to sys.stderr. A stray print(), os.write(1, ...) or a child process writing
    to its stdout now lands in the log instead of corrupting the frame stream.

    stdin: likewise duplicated to a private fd, and fd 0 replaced by /dev/null,
    so neither input() nor a subprocess that inherits stdin can swallow frames.

    os.dup() returns non-inheritable fds, so subprocesses never see the
    private ones.
    """
    for stream in (sys.stdout, sys.__stdout__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    wfd = os.dup(1)
    rfd = os.dup(0)
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout = sys.stderr
    sys.stdin = open(os.devnull)  # noqa: SIM115 - lives as long as the process
    return _Channel(rfd=rfd, wfd=wfd)


def _pollable(fd: int) -> bool:
    """Whether the event loop can watch ``fd``: a pipe or a socket."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class _Splitter:
    """Splits what is read into frames: the lines of a read (empty ones
    ignored), and whether the line being read is over the frame limit."""

    def __init__(self, max_frame_bytes: int) -> None:
        self.buf = bytearray()
        # A line may carry one "\r" before its "\n" that does not count.
        self.limit = max_frame_bytes + 1

    def feed(self, chunk: bytes) -> List[bytes]:
        buf = self.buf
        if buf:
            # The end of the frame begun in an earlier read.
            nl = chunk.find(b"\n")
            if nl < 0:
                buf += chunk
                return []
            buf += chunk[:nl]
            head = [bytes(buf)]
            buf.clear()
            chunk = chunk[nl + 1 :]
        else:
            head = []
        # The frames of this read go to the loop together; one split in C
        # rather than a search and a copy per frame.
        parts = chunk.split(b"\n")
        buf += parts.pop()  # the start of a frame the next read ends
        if head:
            parts[:0] = head
        # Empty lines are ignored.
        return [line for line in parts if line and line != b"\r"]

    @property
    def oversize(self) -> bool:
        return len(self.buf) > self.limit

    def eof(self) -> None:
        if self.buf:
            # Every frame ends with "\n": bytes after the last one are a
            # truncated frame, not something to run.
            log(f"partial last line before EOF ignored: {quote(bytes(self.buf))}")


class _LoopReader:
    """Reads the private stdin from the event loop (add_reader): each read's
    frames are acted on at once, in the loop; EOF, a read error and an
    oversize frame go to the serving loop's inbox as the reader thread puts
    them. The fd stays blocking: it is read only once it is readable, and
    one read then never blocks."""

    def __init__(self, fd: int, max_frame_bytes: int, loop: asyncio.AbstractEventLoop, stdio: _Stdio) -> None:
        self.fd = fd
        self.max_frame_bytes = max_frame_bytes
        self.loop = loop
        self.stdio = stdio
        self.split = _Splitter(max_frame_bytes)
        self.reading = False

    def start(self) -> None:
        self.loop.add_reader(self.fd, self._readable)
        self.reading = True

    def stop(self) -> None:
        if self.reading:
            self.reading = False
            self.loop.remove_reader(self.fd)

    def _readable(self) -> None:
        stdio = self.stdio
        if stdio.rt.failure is not None:
            self.stop()  # serving is over: what comes now is never acted on
            return
        try:
            chunk = os.read(self.fd, 1 << 16)
        except (InterruptedError, BlockingIOError):
            return  # called again while it is readable
        except OSError as e:
            self.stop()
            stdio.inbox.put_nowait(("error", f"reading stdin: {e}"))
            return
        if not chunk:
            self.stop()
            self.split.eof()
            stdio.inbox.put_nowait(("eof", None))
            return
        lines = self.split.feed(chunk)
        if lines:
            try:
                stdio.lines(lines)
            except Exception as e:
                # Raised out of serve(), as when the serving loop acted on them.
                self.stop()
                stdio.inbox.put_nowait(("raise", e))
                return
            stdio.wake()
        if self.split.oversize:
            self.stop()
            stdio.inbox.put_nowait(("error", f"oversize: a frame exceeds {self.max_frame_bytes} bytes"))


def _read_frames(
    fd: int, max_frame_bytes: int, loop: asyncio.AbstractEventLoop, inbox: asyncio.Queue[Tuple[str, Any]]
) -> None:
    """Reader thread: splits the private stdin into lines for the event loop.

    It uses os.read on the raw fd rather than a buffered file: this thread is
    a daemon still blocked in read when the process exits, and a daemon thread
    holding a BufferedReader's lock at interpreter shutdown is a fatal error.
    """

    def put(item: Tuple[str, Any]) -> None:
        try:
            loop.call_soon_threadsafe(inbox.put_nowait, item)
        except RuntimeError:
            pass  # the loop is closed: the process is exiting

    split = _Splitter(max_frame_bytes)
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except InterruptedError:
            continue
        except OSError as e:
            put(("error", f"reading stdin: {e}"))
            return
        if not chunk:
            split.eof()
            put(("eof", None))
            return
        lines = split.feed(chunk)
        if lines:
            put(("lines", lines))
        if split.oversize:
            put(("error", f"oversize: a frame exceeds {max_frame_bytes} bytes"))
            return
