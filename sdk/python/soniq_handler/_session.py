"""The Session stream: every v1 message of one sidecar session on one
bidirectional gRPC stream (rpc Session of protocol/handler.proto).

Served in both unix modes: next to the per-call RPCs when the sidecar spawns
the process (the end of the session then ends the process, as EOF on stdin
does on stdio), and alone on a socket of the handler's own with ``--listen``
(attach mode: the process outlives its sessions). See docs/protocol.md, "The
Session stream and attach mode".

Each message from the sidecar is turned into the stdio frame it stands for
and put through ``protocol.decode``: both transports accept exactly the same
messages. A message that fails is a protocol error, reported as on stdio.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, Union

import grpc

from . import handler_pb2 as pb
from . import protocol
from ._ledger import Ledger, Sent
from ._log import log, quote
from ._results import draining, shutting_down, unencodable
from ._runtime import Runtime
from ._types import EXIT_PROTOCOL_ERROR

_STATUS = {
    "done": pb.Result.DONE,
    "failed": pb.Result.FAILED,
    "snooze": pb.Result.SNOOZE,
    "cancelled": pb.Result.CANCELLED,
}


def result_message(frame: protocol.ResultFrame, data: Optional[bytes] = None) -> pb.Result:
    """The SDK's result frame as a Result message. ``data``, when given, is
    the frame's stdio encoding (Runtime's report): a done result's value is
    taken from it as written there rather than written a second time."""
    msg = pb.Result(id=frame["id"], status=_STATUS[frame["status"]])
    status = frame["status"]
    if status == "done":
        if frame.get("result") is not None:
            value = _value_text(frame, data) if data is not None else None
            if value is not None:
                msg.result_json = value
                return msg
            try:
                msg.result_json = protocol.encode_value(frame["result"])
            except BaseException as e:  # noqa: B036 - the value's own methods run here
                # The Runtime wrote this value already: it changed since
                # (a dict the handler kept and mutates), or writes differently
                # each time. It fails as a value that cannot be written does.
                return result_message(unencodable(frame, e))
    elif status == "failed":
        err = frame["error"]
        assert err is not None  # a failed result always carries its error
        msg.error.type = err["type"]
        msg.error.message = err["message"]
        if err["traceback"] is not None:
            msg.error.traceback = err["traceback"]
        msg.error.retryable = bool(err.get("retryable", True))
        reason = err.get("reason")
        if reason is not None:
            msg.error.reason = reason
    elif status == "snooze":
        assert frame["seconds"] is not None  # a snooze always says how long
        msg.seconds = float(frame["seconds"])
        if frame["reason"] is not None:
            msg.reason = frame["reason"]
    return msg


def _value_text(frame: protocol.ResultFrame, data: bytes) -> Optional[str]:
    """The text of a done result's value in ``data``, its encoding: what
    ``protocol.encode_value`` writes for it (the same function writes it
    into the frame); None when ``data`` may hold more than that value."""
    if frame.get("error") is not None or frame.get("seconds") is not None or frame.get("reason") is not None:
        return None
    head = b'{"type":"result","id":' + protocol.encode_value(frame["id"]).encode("utf-8") + b',"status":"done","result":'
    if not data.startswith(head) or not data.endswith(b"}"):
        return None
    return data[len(head):-1].decode("utf-8")


_JOB_OPTIONAL = (
    ("deadline_ms", "deadline"),
    ("traceparent", "traceparent"),
    ("worker_id", "worker_id"),
    ("scheduled_at_ms", "scheduled_at"),
    ("created_at_ms", "created_at"),
)


def frame_of(msg: pb.SidecarMessage) -> bytes:
    """The stdio frame a SidecarMessage stands for, as bytes for
    ``protocol.decode``. A job's args_json is put into the frame as it came
    (so the frame's checks apply to it: an object, no 1e400, no lone
    surrogate); an empty args_json is a missing ``args``."""
    kind = msg.WhichOneof("message")
    if kind == "job":
        j = msg.job
        head: Dict[str, Any] = {"type": "job", "id": j.id, "name": j.name}
        tail: Dict[str, Any] = {"attempt": j.attempt, "max_attempts": j.max_attempts, "queue": j.queue}
        for field, key in _JOB_OPTIONAL:
            if j.HasField(field):
                tail[key] = getattr(j, field)
        text = json.dumps(head, ensure_ascii=False, separators=(",", ":"))[:-1]
        if j.args_json != "":
            try:
                json.loads(j.args_json)  # one JSON value, nothing spliced in beside it
            except ValueError as e:
                raise protocol.ProtocolError(protocol.INVALID_JSON, None, f"args_json is not JSON: {e}") from None
            text += ',"args":' + j.args_json
        text += "," + json.dumps(tail, ensure_ascii=False, separators=(",", ":"))[1:]
        return text.encode("utf-8", "surrogatepass")
    frame: Dict[str, Any]
    if kind == "cancel":
        frame = {"type": "cancel", "id": msg.cancel.id, "reason": msg.cancel.reason}
    elif kind == "ping":
        frame = {"type": "ping", "seq": msg.ping.seq}
    elif kind == "shutdown":
        frame = {"type": "shutdown"}
    elif kind == "enqueued":
        answer = msg.enqueued
        frame = {"type": "enqueued", "id": answer.id}
        if answer.HasField("job_id"):
            frame["job_id"] = answer.job_id
        if answer.HasField("error_code") or answer.HasField("error_message"):
            frame["error"] = {"code": answer.error_code, "message": answer.error_message}
    else:
        raise protocol.ProtocolError(protocol.UNKNOWN_TYPE, None, "a SidecarMessage with no message set")
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def enqueue_message(frame: protocol.EnqueueFrame) -> pb.Enqueue:
    """The Enqueue message of an enqueue frame (its args as JSON text)."""
    m = pb.Enqueue(parent=frame["parent"], id=frame["id"], name=frame["name"], args_json=protocol.encode_value(frame["args"]))
    if frame["queue"] is not None:
        m.queue = frame["queue"]
    if frame["priority"] is not None:
        m.priority = frame["priority"]
    if frame["max_attempts"] is not None:
        m.max_attempts = frame["max_attempts"]
    if frame["delay"] is not None:
        m.delay_seconds = float(frame["delay"])
    if frame["dedup_key"] is not None:
        m.dedup_key = frame["dedup_key"]
    if frame["unique"] is not None:
        m.unique = frame["unique"]
    if frame["immediate"] is not None:
        m.immediate = frame["immediate"]
    return m


def job_frame(j: pb.Job, max_frame_bytes: int) -> protocol.Frame:
    """A Job message decoded as its stdio frame would be, without writing
    and parsing that frame's text: its args are parsed with the frame's
    rules and the object gets the frame's checks. A job whose frame could
    come near the frame limit takes the exact way (``frame_of``)."""
    # Each field read once: a read of a protobuf field is a call.
    job_id, name, args_json, queue = j.id, j.name, j.args_json, j.queue
    text_chars = len(args_json) + len(job_id) + len(name) + len(queue) + len(j.traceparent) + len(j.worker_id)
    if 6 * text_chars + 512 > max_frame_bytes:  # a char escapes to at most 6 bytes
        return protocol.decode(frame_of(pb.SidecarMessage(job=j)), max_frame_bytes)
    obj: Dict[str, Any] = {"type": "job", "id": job_id, "name": name}
    if args_json != "":
        obj["args"] = protocol.parse_json(args_json)
    obj["attempt"] = j.attempt
    obj["max_attempts"] = j.max_attempts
    obj["queue"] = queue
    for field, key in _JOB_OPTIONAL:
        if j.HasField(field):
            obj[key] = getattr(j, field)
    return protocol.check(obj)


class _End:
    """Ends a session's writer: with OK, or with an error status."""

    def __init__(self, code: Any = None, details: str = "") -> None:
        self.code = code
        self.details = details


@dataclass
class _Result:
    """A result for a session's writer, made a message as it is written
    (``data``: its stdio encoding, when the Runtime reported it)."""

    frame: protocol.ResultFrame
    data: Optional[bytes] = None


_Out = Union[pb.HandlerMessage, _Result, _End]

# A Results message holds at most this many results, and their messages add
# up to at most the frame limit: it stays within the stream's message size.
MAX_BATCH = 256


class _Session:
    def __init__(self, peer: str, sent: Sent) -> None:
        self.peer = peer
        self.opened = datetime.now(timezone.utc)
        self.outbox: "asyncio.Queue[_Out]" = asyncio.Queue()
        self.shutdown = False  # the sidecar sent shutdown (or closed its side)
        self.ended = False
        self.closed = False  # _close has run
        self.sent = sent  # the results sent on it and not acknowledged yet
        self.jobs: Set[str] = set()  # ids of the jobs it brought that are still held
        self.batches = False  # the sidecar sent a Jobs message: it takes Results

    def describe(self) -> str:
        # A Unix socket's peer has no address: gRPC says just "unix:".
        peer = self.peer if self.peer not in ("", "unix:") else "a peer on the socket (no address)"
        return f"opened at {self.opened.isoformat(timespec='seconds')} by {peer}"

    def end(self, code: Any = None, details: str = "") -> None:
        if not self.ended:
            self.ended = True
            self.outbox.put_nowait(_End(code, details))


class _Trace:
    """$HANDLER_TRACE_FRAMES: a debugging aid for a transport that has no
    frame stream to tap. Each message from the sidecar is appended to that
    file as the stdio frame it stands for, "> " first (the format of a
    recorder between sidecar and handler on stdio)."""

    def __init__(self, path: Optional[str]) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None
        self.on = self.fd is not None

    def __call__(self, line: bytes) -> None:
        if self.fd is not None:
            # What the sidecar sent, as it came: before the frame checks.
            os.write(self.fd, b"> " + line + b"\n")


class SessionCore:
    """The Session RPC over a Runtime, for the life of the process: the jobs
    of each session go to the Runtime, their results to the session open
    when they end (attach mode: kept in the Ledger until acknowledged).

    ``attach``: the process serves a socket of its own and lives across
    sessions; otherwise (spawned) the first session's end is the process's
    (``session_ended``) and no other session is taken. ``on_change`` is
    called when a job ended, a session ended, results were acknowledged or
    serving failed: the transport checks whether it is done.
    """

    def __init__(
        self, rt: Runtime, version: int, attach: bool, on_change: Optional[Callable[[], None]] = None
    ) -> None:
        self.rt = rt
        self.version = version
        self.attach = attach
        self.on_change = on_change
        rt.on_change = self._changed
        self.ledger = Ledger(attach)
        self.current: Optional[_Session] = None
        self.draining = False  # SIGTERM (attach mode): no new job
        self.sessions = 0  # sessions opened so far
        self.session_ended = False  # spawned mode: the one session is over
        self.trace = _Trace(os.environ.get("HANDLER_TRACE_FRAMES"))

    # ------------------------------------------------------------------ RPC

    async def session(self, requests: Any, context: Any) -> None:
        open_ = self.current
        if open_ is not None:
            text = f"a session is already open ({open_.describe()}); one session at a time"
            log(f"WARN: Session from {context.peer() or 'an unknown peer'} refused: {text}")
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, text)
        if not self.attach and self.session_ended:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, "this process's session has ended; it is exiting"
            )
        hello = self._hello()
        sent, kept = self.ledger.open()
        s = _Session(str(context.peer() or ""), sent)
        self.current = s
        self.sessions += 1
        s.outbox.put_nowait(pb.HandlerMessage(hello=hello))
        # ctx.enqueue sends on this session; its Features message says
        # whether the sidecar takes child jobs.
        self.rt.children.connect(
            lambda frame, data: s.outbox.put_nowait(pb.HandlerMessage(enqueue=enqueue_message(frame))),
            asyncio.get_running_loop(),
        )
        for frame in kept:
            s.outbox.put_nowait(_Result(frame))
        if self.draining:
            s.outbox.put_nowait(pb.HandlerMessage(draining=pb.Draining()))
        reader = asyncio.ensure_future(self._read(s, requests))
        carry: Optional[_Out] = None  # taken from the outbox while batching
        try:
            while True:
                out = carry if carry is not None else await s.outbox.get()
                carry = None
                if isinstance(out, _End):
                    # The socket is free for the next session before the
                    # status reaches this one's peer: awaiting abort lets
                    # other RPCs run, and a sidecar that reconnects at once
                    # must not be refused as if this session were open.
                    reader.cancel()
                    self._close(s)
                    if out.code is not None:
                        await context.abort(out.code, out.details)
                    return
                if isinstance(out, _Result):
                    out, carry = self._results(s, out)
                await context.write(out)
        finally:
            reader.cancel()
            self._close(s)

    def _results(self, s: _Session, first: _Result) -> Tuple[pb.HandlerMessage, Optional[_Out]]:
        """``first`` as a message, with the results queued behind it when
        the sidecar takes Results (a stream message costs far more than the
        result it carries); and what was taken from the outbox after them."""
        msg = result_message(first.frame, first.data)
        if not s.batches or s.outbox.empty():
            return pb.HandlerMessage(result=msg), None
        batch = [msg]
        size = msg.ByteSize()
        carry: Optional[_Out] = None
        while len(batch) < MAX_BATCH and not s.outbox.empty():
            nxt = s.outbox.get_nowait()
            if not isinstance(nxt, _Result):
                carry = nxt
                break
            msg = result_message(nxt.frame, nxt.data)
            size += msg.ByteSize()
            if size > self.rt.max_frame_bytes:
                carry = nxt  # the next message's first
                break
            batch.append(msg)
        if len(batch) == 1:
            return pb.HandlerMessage(result=batch[0]), carry
        return pb.HandlerMessage(results=pb.Results(results=batch)), carry

    def _hello(self) -> pb.Hello:
        h = self.rt.hello(self.version)
        held = self.rt.held()
        return pb.Hello(
            protocol=h["protocol"],
            sdk=h["sdk"],
            pid=h["pid"],
            jobs=[pb.HelloJob(name=j["name"], cancellable=j["cancellable"]) for j in h["jobs"]],
            concurrency=h["concurrency"],
            sync_concurrency=h["sync_concurrency"],
            running=[pb.RunningJob(id=i, name=name) for i, name in held],
            kept=[i for i in self.ledger.kept if i not in dict(held)],
            acks=self.attach,
            batches=True,
            features=True,  # this SDK reads a Features message (child jobs)
        )

    async def _read(self, s: _Session, requests: Any) -> None:
        try:
            async for msg in requests:
                if s.ended:
                    return
                kind = msg.WhichOneof("message")
                if kind == "jobs":
                    # Sent empty right after the hello: the sidecar takes
                    # Results. That says nothing about acknowledgements.
                    s.batches = True
                    if not msg.jobs.jobs:
                        continue
                    self.ledger.heard(s.sent, False)
                    for job in msg.jobs.jobs:
                        if not self._take(s, msg, job):
                            return
                    continue
                if kind == "features":
                    # Not a stdio frame: what this sidecar speaks beyond v1.
                    self.rt.children.announce(msg.features.names)
                    continue
                is_ack = kind == "ack"
                self.ledger.heard(s.sent, is_ack)
                if is_ack:
                    # Not a stdio frame: the sidecar settled these results.
                    if self.ledger.acked(s.sent, list(msg.ack.ids)):
                        self._changed()
                    continue
                if not self._take(s, msg):
                    return
        except (asyncio.CancelledError, grpc.RpcError, grpc.aio.AioRpcError):
            # The stream broke, or the session ended: nothing more to read.
            return
        # The sidecar closed its side: as EOF on stdin, the session ends once
        # it holds no job of it.
        self._shutdown(s)

    def _take(self, s: _Session, msg: pb.SidecarMessage, job: Optional[pb.Job] = None) -> bool:
        """Checks one message (or ``job``, an entry of the Jobs message
        ``msg``) as its stdio frame and acts on it; False after a protocol
        error (the session is over)."""
        if job is None and msg.WhichOneof("message") == "job":
            job = msg.job
        try:
            if job is not None and not self.trace.on:
                frame = job_frame(job, self.rt.max_frame_bytes)
            else:
                one = msg if job is None else pb.SidecarMessage(job=job)
                line = frame_of(one)
                self.trace(line)
                frame = protocol.decode(line, self.rt.max_frame_bytes)
        except protocol.ProtocolError as e:
            bad = msg if job is None else pb.SidecarMessage(job=job)
            self._protocol_error(s, f"protocol error: {e} in message {quote(_text(bad))}")
            return False
        self._dispatch(s, frame)
        return True

    def _protocol_error(self, s: _Session, text: str) -> None:
        if not self.attach:
            # As on stdio: the process cannot go on (exits 4 under run()).
            self.rt.fail(EXIT_PROTOCOL_ERROR, text)
        else:
            # The process outlives its sidecars: this session ends, its jobs run on.
            log(f"{text}; session ended")
        s.end(grpc.StatusCode.INVALID_ARGUMENT, text)

    def _dispatch(self, s: _Session, frame: protocol.Frame) -> None:
        if frame["type"] == "job":
            self._job(s, frame)
        elif frame["type"] == "cancel":
            self.rt.cancel(frame["id"], frame["reason"])
        elif frame["type"] == "ping":
            s.outbox.put_nowait(pb.HandlerMessage(pong=pb.Pong(seq=frame["seq"])))
        elif frame["type"] == "shutdown":
            self._shutdown(s)
        elif frame["type"] == "enqueued":
            self.rt.children.answered(frame)

    # ----------------------------------------------------------------- jobs

    def _job(self, s: _Session, msg: protocol.JobFrame) -> None:
        job_id = msg["id"]
        if self.rt.duplicate(job_id):
            return
        if self.draining:
            # Told to stop: the attempt goes back at once, not counted as a failure.
            s.outbox.put_nowait(_Result(draining(job_id)))
            return
        if s.shutdown:
            # As on stdio: a job that slips in after shutdown goes back for a retry.
            s.outbox.put_nowait(_Result(shutting_down(job_id)))
            return
        s.jobs.add(job_id)
        self.rt.start(msg, lambda frame, data: self._finished(s, frame, data))

    def _finished(self, s: _Session, frame: protocol.ResultFrame, data: bytes) -> None:
        """A job's result, reported by the Runtime: to the session open now
        (kept there until it acknowledges it), else kept for the next one."""
        s.jobs.discard(frame["id"])
        current = self.current
        if current is not None and not current.ended:
            current.outbox.put_nowait(_Result(frame, data))
            self.ledger.sent(current.sent, frame)
        else:
            self.ledger.keep(frame, "ended with no session open")
        self._maybe_end(s)

    # ------------------------------------------------------------- sessions

    def _shutdown(self, s: _Session) -> None:
        s.shutdown = True
        self._maybe_end(s)

    def _maybe_end(self, s: _Session) -> None:
        if s.shutdown and not s.jobs:
            s.end()

    def _close(self, s: _Session) -> None:
        """The session is over (ended, refused by us, or broken)."""
        if s.closed:
            return
        s.closed = True
        s.ended = True
        if self.current is s:
            self.current = None
            self.rt.children.disconnect("the session with the sidecar ended")
        # Results not acknowledged go to the next session: those queued but
        # never written, and, when the sidecar acknowledges results, those
        # written that it may never have received or recorded (the session
        # broke with them in flight, or before they were written).
        unsent: List[protocol.ResultFrame] = []
        while not s.outbox.empty():
            out = s.outbox.get_nowait()
            if isinstance(out, _Result):
                unsent.append(out.frame)
        self.ledger.closed(s.sent, unsent, "had its result unsent or unacknowledged when the session ended")
        s.jobs.clear()
        if not self.attach:
            self.session_ended = True
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    # --------------------------------------------------------- attach mode

    def begin_draining(self) -> None:
        """SIGTERM in attach mode: take no new job; the open session hears it."""
        if self.draining:
            return
        self.draining = True
        s = self.current
        if s is not None and not s.ended:
            s.outbox.put_nowait(pb.HandlerMessage(draining=pb.Draining()))
        self._changed()

    def end_current(self) -> None:
        """Ends the open session (the process is exiting)."""
        s = self.current
        if s is not None:
            s.end()

    def awaiting_acks(self) -> bool:
        """The open session acknowledges results and has not acknowledged
        some it was sent."""
        s = self.current
        return s is not None and not s.ended and self.ledger.awaiting(s.sent)

    def lost_results(self) -> List[str]:
        """Ids of results no session received (or acknowledged)."""
        s = self.current
        return self.ledger.lost(s.sent if s is not None else None)


def _text(msg: pb.SidecarMessage) -> bytes:
    """A message as text for the log (its protobuf text form)."""
    return str(msg).replace("\n", " ").strip().encode("utf-8", "replace")


def session_method(core: SessionCore) -> Any:
    """The gRPC method handler of rpc Session."""
    return grpc.stream_stream_rpc_method_handler(
        core.session,
        request_deserializer=pb.SidecarMessage.FromString,
        response_serializer=pb.HandlerMessage.SerializeToString,
    )
