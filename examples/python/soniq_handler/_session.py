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
from typing import Any, Callable, Dict, List, Optional, Union

import grpc

from . import handler_pb2 as pb
from . import protocol
from .app import (
    EXIT_PROTOCOL_ERROR,
    SDK_NAME,
    App,
    _failed,
    _job_context,
    _log,
    _quote,
    _result,
    _Running,
    _safe_str,
)

# Results of jobs that ended while no session was open, or that were sent on a
# session that ended before acknowledging them, wait for the next one; at most
# this many (the oldest is dropped first, with a warning). A sidecar holds far
# fewer jobs than this per process (its concurrency).
MAX_KEPT_RESULTS = 1000
# How long a handler told to stop waits, once it holds no job, for the open
# session to acknowledge the results it sent.
ACK_WAIT_SECONDS = 5.0

_STATUS = {
    "done": pb.Result.DONE,
    "failed": pb.Result.FAILED,
    "snooze": pb.Result.SNOOZE,
    "cancelled": pb.Result.CANCELLED,
}


def result_message(frame: protocol.ResultFrame) -> pb.Result:
    """The SDK's result frame as a Result message."""
    msg = pb.Result(id=frame["id"], status=_STATUS[frame["status"]])
    status = frame["status"]
    if status == "done":
        if frame.get("result") is not None:
            msg.result_json = protocol.encode_value(frame["result"])
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
        for field, key in (
            ("deadline_ms", "deadline"),
            ("traceparent", "traceparent"),
            ("worker_id", "worker_id"),
            ("scheduled_at_ms", "scheduled_at"),
            ("created_at_ms", "created_at"),
        ):
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
    else:
        raise protocol.ProtocolError(protocol.UNKNOWN_TYPE, None, "a SidecarMessage with no message set")
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


@dataclass
class _Held:
    """A job this process holds, and the session it came on."""

    running: _Running
    task: "asyncio.Task[protocol.ResultFrame]"
    session: "Optional[_Session]"


class _End:
    """Ends a session's writer: with OK, or with an error status."""

    def __init__(self, code: Any = None, details: str = "") -> None:
        self.code = code
        self.details = details


_Out = Union[pb.HandlerMessage, _End]


class _Session:
    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.opened = datetime.now(timezone.utc)
        self.outbox: "asyncio.Queue[_Out]" = asyncio.Queue()
        self.shutdown = False  # the sidecar sent shutdown (or closed its side)
        self.ended = False
        self.acks = False  # the sidecar said it acknowledges results (an Ack)
        # Whether a message came from the sidecar yet: one that acknowledges
        # results sends an Ack first, so anything else first means it never will.
        self.heard = False
        # Results sent on this session and not acknowledged yet, by job id.
        self.unacked: "Dict[str, pb.HandlerMessage]" = {}

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

    def __call__(self, line: bytes) -> None:
        if self.fd is not None:
            # What the sidecar sent, as it came: before the frame checks.
            os.write(self.fd, b"> " + line + b"\n")


class SessionCore:
    """The Session RPC and the jobs it runs, for the life of the process.

    ``attach``: the process serves a socket of its own and lives across
    sessions; otherwise (spawned) the first session's end calls ``on_end``
    and no other session is taken.
    """

    def __init__(
        self, app: App, version: int, attach: bool, on_change: Optional[Callable[[], None]] = None
    ) -> None:
        self.app = app
        self.version = version
        self.attach = attach
        self.on_change = on_change  # a job ended, a session ended: idle checks
        self.held: Dict[str, _Held] = {}
        self.current: Optional[_Session] = None
        # Results waiting for a session (attach mode), by job id, oldest first.
        self.kept: "Dict[str, pb.HandlerMessage]" = {}
        # A sidecar acknowledged results once: from then on a session that
        # ends with results unacknowledged hands them to the next one.
        self.peer_acks = False
        self.draining = False  # SIGTERM (attach mode): no new job
        self.sessions = 0  # sessions opened so far
        self.session_ended = False  # spawned mode: the one session is over
        self.slots = asyncio.Semaphore(app.concurrency)
        self.trace = _Trace(os.environ.get("HANDLER_TRACE_FRAMES"))

    # ------------------------------------------------------------------ RPC

    async def session(self, requests: Any, context: Any) -> None:
        open_ = self.current
        if open_ is not None:
            text = f"a session is already open ({open_.describe()}); one session at a time"
            _log(f"WARN: Session from {context.peer() or 'an unknown peer'} refused: {text}")
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, text)
        if not self.attach and self.session_ended:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, "this process's session has ended; it is exiting"
            )
        s = _Session(str(context.peer() or ""))
        self.current = s
        self.sessions += 1
        s.outbox.put_nowait(pb.HandlerMessage(hello=self._hello()))
        kept, self.kept = self.kept, {}
        for job_id, msg in kept.items():
            s.outbox.put_nowait(msg)
            s.unacked[job_id] = msg  # until the sidecar says whether it acknowledges
        if self.draining:
            s.outbox.put_nowait(pb.HandlerMessage(draining=pb.Draining()))
        reader = asyncio.ensure_future(self._read(s, requests))
        try:
            while True:
                out = await s.outbox.get()
                if isinstance(out, _End):
                    if out.code is not None:
                        await context.abort(out.code, out.details)
                    return
                await context.write(out)
        finally:
            reader.cancel()
            self._close(s)

    def _hello(self) -> pb.Hello:
        app = self.app
        return pb.Hello(
            protocol=self.version,
            sdk=SDK_NAME,
            pid=os.getpid(),
            jobs=[pb.HelloJob(name=j["name"], cancellable=j["cancellable"]) for j in app.jobs],
            concurrency=app.concurrency,
            sync_concurrency=app.sync_concurrency,
            running=[pb.RunningJob(id=i, name=h.running.ctx.name) for i, h in self.held.items()],
            kept=[i for i in self.kept if i not in self.held],
            acks=self.attach,
        )

    async def _read(self, s: _Session, requests: Any) -> None:
        try:
            async for msg in requests:
                if s.ended:
                    return
                if not s.heard:
                    s.heard = True
                    if msg.WhichOneof("message") != "ack":
                        s.unacked.clear()  # an older sidecar: it never acknowledges
                if msg.WhichOneof("message") == "ack":
                    # Not a stdio frame: the sidecar settled these results.
                    self._acked(s, list(msg.ack.ids))
                    continue
                try:
                    line = frame_of(msg)
                    self.trace(line)
                    frame = protocol.decode(line, self.app._max_frame_bytes)
                except protocol.ProtocolError as e:
                    self._protocol_error(s, f"protocol error: {e} in message {_quote(_text(msg))}")
                    return
                self._dispatch(s, frame)
        except (asyncio.CancelledError, grpc.RpcError, grpc.aio.AioRpcError):
            # The stream broke, or the session ended: nothing more to read.
            return
        # The sidecar closed its side: as EOF on stdin, the session ends once
        # it holds no job of it.
        self._shutdown(s)

    def _protocol_error(self, s: _Session, text: str) -> None:
        if not self.attach:
            # As on stdio: the process cannot go on (exits 4 under run()).
            self.app._fail(EXIT_PROTOCOL_ERROR, text)
        else:
            # The process outlives its sidecars: this session ends, its jobs run on.
            _log(f"{text}; session ended")
        s.end(grpc.StatusCode.INVALID_ARGUMENT, text)

    def _dispatch(self, s: _Session, frame: protocol.Frame) -> None:
        if frame["type"] == "job":
            self._job(s, frame)
        elif frame["type"] == "cancel":
            self._cancel(frame["id"], frame["reason"])
        elif frame["type"] == "ping":
            s.outbox.put_nowait(pb.HandlerMessage(pong=pb.Pong(seq=frame["seq"])))
        elif frame["type"] == "shutdown":
            self._shutdown(s)

    # ----------------------------------------------------------------- jobs

    def _job(self, s: _Session, msg: protocol.JobFrame) -> None:
        job_id = msg["id"]
        if job_id in self.held:
            _log(f"job {job_id} is already running here; duplicate message ignored")
            return
        if self.draining:
            # Told to stop: the attempt goes back at once, not counted as a failure.
            s.outbox.put_nowait(self._message(_result(job_id, "snooze", seconds=0, reason="handler draining")))
            return
        if s.shutdown:
            # As on stdio: a job that slips in after shutdown goes back for a retry.
            frame = _failed(job_id, "ShuttingDown", "handler process is shutting down", None, True)
            s.outbox.put_nowait(self._message(frame))
            return
        running = _Running(self.app._handlers.get(msg["name"]), msg["args"], _job_context(msg))
        task = asyncio.ensure_future(self._run(running))
        self.held[job_id] = _Held(running, task, s)
        task.add_done_callback(lambda t: self._finish(job_id, t))

    async def _run(self, running: _Running) -> protocol.ResultFrame:
        # At most `concurrency` at once; the sidecar never sends more.
        async with self.slots:
            return await self.app._execute(running)

    def _cancel(self, job_id: str, reason: str) -> None:
        held = self.held.get(job_id)
        if held is None:
            return  # unknown or already finished: nothing to do
        if not held.running.cancellable:
            _log(f"cancel ({reason}) for sync job {job_id} ignored: sync jobs are not cancellable")
            return
        held.running.cancel_reason = reason
        held.task.cancel()  # _finish reports it

    def _finish(self, job_id: str, task: "asyncio.Task[protocol.ResultFrame]") -> None:
        held = self.held.pop(job_id, None)
        if task.cancelled():
            if held is None or held.running.cancel_reason is None:
                return  # not our cancel: the event loop itself is going away
            frame = _result(job_id, "cancelled")
        elif (e := task.exception()) is not None:  # _execute catches everything; be safe
            frame = _failed(job_id, type(e).__name__, _safe_str(e), None, True)
        else:
            frame = task.result()
        frame = self.app._checked_result(frame)[0]
        if held is not None:
            self.app._settle(held.running, frame)
        self._deliver(self._message(frame))
        if held is not None and held.session is not None:
            self._maybe_end(held.session)
        self._changed()

    def _message(self, frame: protocol.ResultFrame) -> pb.HandlerMessage:
        return pb.HandlerMessage(result=result_message(frame))

    def _deliver(self, msg: pb.HandlerMessage) -> None:
        """To the session open now (kept there until it acknowledges it),
        else kept for the next one."""
        s = self.current
        if s is not None and not s.ended:
            s.outbox.put_nowait(msg)
            if self.attach and (s.acks or not s.heard):
                s.unacked[msg.result.id] = msg
            return
        self._keep(msg, "ended with no session open")

    def _keep(self, msg: pb.HandlerMessage, why: str) -> None:
        if not self.attach:
            return  # spawned: there is no next session
        job_id = msg.result.id
        self.kept.pop(job_id, None)
        if len(self.kept) >= MAX_KEPT_RESULTS:
            lost = next(iter(self.kept))
            del self.kept[lost]
            _log(f"WARN: more than {MAX_KEPT_RESULTS} results wait for a session; "
                 f"the result of job {lost} is dropped")
        self.kept[job_id] = msg
        _log(f"job {job_id} {why}; its result waits for the next session")

    def _acked(self, s: _Session, ids: List[str]) -> None:
        s.acks = True
        self.peer_acks = True
        for job_id in ids:
            s.unacked.pop(job_id, None)
        if ids:
            self._changed()

    # ------------------------------------------------------------- sessions

    def _shutdown(self, s: _Session) -> None:
        s.shutdown = True
        self._maybe_end(s)

    def _maybe_end(self, s: _Session) -> None:
        if s.shutdown and not any(h.session is s for h in self.held.values()):
            s.end()

    def _close(self, s: _Session) -> None:
        """The session is over (ended, refused by us, or broken)."""
        s.ended = True
        if self.current is s:
            self.current = None
        # Results not acknowledged go to the next session: those queued but
        # never written, and, when the sidecar acknowledges results, those
        # written that it may never have received or recorded (the session
        # broke with them in flight, or before they were written).
        pending: Dict[str, pb.HandlerMessage] = {}
        while not s.outbox.empty():
            out = s.outbox.get_nowait()
            if isinstance(out, pb.HandlerMessage) and out.WhichOneof("message") == "result":
                pending[out.result.id] = out
        if s.acks or self.peer_acks:
            pending = {**s.unacked, **pending}
        s.unacked = {}
        for msg in pending.values():
            self._keep(msg, "had its result unsent or unacknowledged when the session ended")
        for h in self.held.values():
            if h.session is s:
                h.session = None
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
        return s is not None and not s.ended and s.acks and bool(s.unacked)

    def lost_results(self) -> List[str]:
        """Ids of results no session received (or acknowledged)."""
        s = self.current
        unacked = list(s.unacked) if s is not None and s.acks else []
        return list(self.kept) + unacked


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
