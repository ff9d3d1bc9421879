"""The unix transport: the same App served over gRPC on a Unix socket.

soniq-sidecar starts the process through hashicorp/go-plugin with
SONIQ_TRANSPORT=unix. The process serves the Handler service of
protocol/handler.proto, the standard gRPC health service (service "plugin"
SERVING: the sidecar's ping) and go-plugin's plugin.GRPCController (Shutdown:
finish what it holds, exit 0), then prints go-plugin's handshake line
``1|<protocol>|unix|<socket path>|grpc`` on stdout. See docs/protocol.md,
"The unix transport (gRPC)".

This module is imported only in that mode: grpcio, grpcio-health-checking and
protobuf (the ``unix`` extra: pip install "soniq-handler[unix]") are not
needed for stdio.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Tuple, cast

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from . import handler_pb2 as pb
from . import protocol
from ._session import SessionCore, session_method
from .app import (
    EXIT_NO_COMMON_PROTOCOL,
    SDK_NAME,
    App,
    JobContext,
    _deadline_datetime,
    _Running,
    _failed,
    _log,
)

# go-plugin's handshake: the sidecar sets this variable to this value; a
# process started by hand (without it) explains itself and exits.
MAGIC_COOKIE_KEY = "SONIQ_PLUGIN_MAGIC_COOKIE"
MAGIC_COOKIE_VALUE = "soniq-handler-v1"
CORE_PROTOCOL_VERSION = 1  # go-plugin's own protocol
EXIT_NOT_A_PLUGIN = 1

_STATUS = {
    "done": pb.Result.DONE,
    "failed": pb.Result.FAILED,
    "snooze": pb.Result.SNOOZE,
    "cancelled": pb.Result.CANCELLED,
}


def _json_text(value: Any) -> str:
    """A result value as JSON, written as on stdio (floats stay floats)."""
    return protocol.encode_value(value)


def _parse_args(text: str) -> Dict[str, Any]:
    value = json.loads(
        text,
        parse_constant=protocol._reject_constant,
        parse_float=protocol._parse_float,
        parse_int=protocol._parse_int,
    )
    if not isinstance(value, dict):
        raise ValueError("args_json is not a JSON object")
    return value


def _loads_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _optional(job: pb.Job, name: str) -> Any:
    """An optional field of the Job message; None when absent."""
    if not job.HasField(name):
        return None
    return getattr(job, name)


def _result_message(frame: protocol.ResultFrame) -> pb.Result:
    """Converts the SDK's result dict (the stdio frame) to a Result message."""
    msg = pb.Result(id=frame["id"], status=_STATUS[frame["status"]])
    status = frame["status"]
    if status == "done":
        if frame.get("result") is not None:
            msg.result_json = _json_text(frame["result"])
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


class _Trace:
    """$HANDLER_TRACE_FRAMES: a debugging aid for this transport, which has no
    frame stream to tap. Each message from the sidecar is appended to that
    file as the stdio frame it stands for, "> " first (the format of a
    recorder between sidecar and handler on stdio)."""

    def __init__(self, path: Optional[str]) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None

    def __call__(self, frame: Dict[str, Any]) -> None:
        if self.fd is not None:
            # What the sidecar sent, as it came: not checked against the frame types.
            os.write(self.fd, b"> " + protocol.encode(cast(protocol.Frame, frame)) + b"\n")


class _Server:
    def __init__(self, app: App, version: int) -> None:
        self.app = app
        self.version = version
        self.held: Dict[str, asyncio.Task[protocol.ResultFrame]] = {}  # every job started, until it ends
        self.reasons: Dict[str, str] = {}  # job id -> the reason of an announced cancel
        self.cancellable: Dict[str, bool] = {}
        self.draining = False
        self.drained = asyncio.Event()
        self.slots = asyncio.Semaphore(app.concurrency)
        self.trace = _Trace(os.environ.get("HANDLER_TRACE_FRAMES"))
        # The Session stream (the sidecar's newer form of these calls): its
        # end ends the process, as EOF on stdin does on stdio.
        self.core = SessionCore(app, version, attach=False, on_change=self._session_changed)

    def _session_changed(self) -> None:
        if self.core.session_ended or self.app._failure is not None:
            self.draining = True
        self._check_drained()

    def _check_drained(self) -> None:
        failed = self.app._failure is not None
        if failed or (self.draining and not self.held and not self.core.held):
            self.drained.set()

    # ---------------------------------------------------------------- Handler

    async def describe(self, request: pb.DescribeRequest, context: Any) -> pb.Hello:
        app = self.app
        return pb.Hello(
            protocol=self.version,
            sdk=SDK_NAME,
            pid=os.getpid(),
            jobs=[pb.HelloJob(name=j["name"], cancellable=j["cancellable"]) for j in app.jobs],
            concurrency=app.concurrency,
            sync_concurrency=app.sync_concurrency,
        )

    async def execute(self, job: pb.Job, context: Any) -> pb.Result:
        if self.trace.fd is not None:
            self.trace({"type": "job", "id": job.id, "name": job.name, "args": _loads_or_text(job.args_json),
                        "attempt": job.attempt, "max_attempts": job.max_attempts, "queue": job.queue,
                        "deadline": job.deadline_ms if job.HasField("deadline_ms") else None,
                        "traceparent": job.traceparent if job.HasField("traceparent") else None,
                        "worker_id": _optional(job, "worker_id"),
                        "scheduled_at": _optional(job, "scheduled_at_ms"),
                        "created_at": _optional(job, "created_at_ms")})
        if job.id in self.held:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, f"job {job.id} is already running here")
        if self.draining:
            # As on stdio: a job that slips in after shutdown goes back for a retry.
            return _result_message(_failed(job.id, "ShuttingDown", "handler process is shutting down", None, True))
        try:
            args = _parse_args(job.args_json)
        except (ValueError, protocol.ProtocolError) as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"job {job.id}: bad args_json: {e}")
        handler = self.app._handlers.get(job.name)
        deadline = job.deadline_ms if job.HasField("deadline_ms") else None
        ctx = JobContext(
            id=job.id,
            name=job.name,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            queue=job.queue,
            deadline=_deadline_datetime(deadline),
            traceparent=job.traceparent if job.HasField("traceparent") else None,
            deadline_ms=deadline,
            worker_id=_optional(job, "worker_id") or "",
            scheduled_at=_deadline_datetime(_optional(job, "scheduled_at_ms")),
            created_at=_deadline_datetime(_optional(job, "created_at_ms")),
        )
        # The slot is held until the job really ends, even when the call is
        # gone (a cancelled task still unwinding, a sync thread still running).
        await self.slots.acquire()
        running = _Running(handler, args, ctx)
        task = asyncio.ensure_future(self.app._execute(running))
        self.held[job.id] = task
        self.cancellable[job.id] = handler is not None and handler.is_async
        task.add_done_callback(lambda _t: self._ended(job.id))
        try:
            frame = await asyncio.shield(task)
        except asyncio.CancelledError:
            # The call was cancelled: that is the cancel (its reason came
            # first through Cancel), or the sidecar went away.
            reason = self.reasons.get(job.id, "call cancelled")
            if self.cancellable.get(job.id) and not task.done():
                task.cancel(reason)
            elif not task.done():
                _log(f"call of sync job {job.id} cancelled ({reason}); it runs to completion, its result goes nowhere")
            running.cancel_reason = self.reasons.get(job.id)
            self.app._settle(running, None)
            raise
        # Same limits as stdio: unserialisable or oversized results fail the job.
        frame = self.app._checked_result(frame)[0]
        self.app._settle(running, frame)
        return _result_message(frame)

    def _ended(self, job_id: str) -> None:
        self.held.pop(job_id, None)
        self.reasons.pop(job_id, None)
        self.cancellable.pop(job_id, None)
        self.slots.release()
        self._check_drained()

    async def cancel(self, request: pb.CancelRequest, context: Any) -> pb.CancelResponse:
        self.trace({"type": "cancel", "id": request.id, "reason": request.reason})
        if request.id in self.held:
            if self.cancellable.get(request.id):
                self.reasons[request.id] = request.reason
            else:
                _log(f"cancel ({request.reason}) for sync job {request.id} ignored: sync jobs are not cancellable")
        return pb.CancelResponse()

    # ------------------------------------------------------ plugin.GRPCController

    async def shutdown(self, request: bytes, context: Any) -> bytes:
        self.trace({"type": "shutdown"})
        self.draining = True
        self._check_drained()
        return b""


def _generic_handlers(srv: _Server) -> List[Any]:
    unary = grpc.unary_unary_rpc_method_handler
    handler = grpc.method_handlers_generic_handler(
        "soniq.handler.v1.Handler",
        {
            "Describe": unary(
                srv.describe,
                request_deserializer=pb.DescribeRequest.FromString,
                response_serializer=pb.Hello.SerializeToString,
            ),
            "Execute": unary(
                srv.execute,
                request_deserializer=pb.Job.FromString,
                response_serializer=pb.Result.SerializeToString,
            ),
            "Cancel": unary(
                srv.cancel,
                request_deserializer=pb.CancelRequest.FromString,
                response_serializer=pb.CancelResponse.SerializeToString,
            ),
            "Session": session_method(srv.core),
        },
    )
    # go-plugin's controller: Shutdown(Empty) returns (Empty); an Empty is
    # zero bytes on the wire, so no generated code is needed for it.
    controller = grpc.method_handlers_generic_handler(
        "plugin.GRPCController",
        {"Shutdown": unary(srv.shutdown, request_deserializer=lambda b: b, response_serializer=lambda b: b)},
    )
    return [handler, controller]


def _socket_path() -> Tuple[str, Optional[str]]:
    """The socket's path, and a directory of our own to remove at exit."""
    base = os.environ.get("PLUGIN_UNIX_SOCKET_DIR")
    own = None
    if not base:
        own = base = tempfile.mkdtemp(prefix="soniq-handler-")  # mode 0700
    return os.path.join(base, f"handler-{os.getpid()}.sock"), own


async def serve(app: App, version: int) -> None:
    """Serves the App over gRPC until the sidecar shuts it down, then returns
    (App.serve, App.run)."""
    if os.environ.get(MAGIC_COOKIE_KEY) != MAGIC_COOKIE_VALUE:
        raise app._fail(
            EXIT_NOT_A_PLUGIN,
            "SONIQ_TRANSPORT=unix: this process is a go-plugin handler and must be started by "
            f"soniq-sidecar ({MAGIC_COOKIE_KEY} is not set as expected)",
        )
    offered = os.environ.get("PLUGIN_PROTOCOL_VERSIONS", str(version))
    if str(version) not in [v.strip() for v in offered.split(",")]:
        raise app._fail(
            EXIT_NO_COMMON_PROTOCOL, f"go-plugin offers app protocol versions {offered!r}; this SDK speaks {version}"
        )
    path, own_dir = _socket_path()
    try:
        await _serve(app, version, path)
    finally:
        for p in (path,):
            try:
                os.unlink(p)
            except OSError:
                pass
        if own_dir:
            shutil.rmtree(own_dir, ignore_errors=True)


async def _serve(app: App, version: int, path: str) -> None:
    limit = app._max_frame_bytes + (64 << 10)  # a frame's worth of payload plus the envelope
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
        ]
    )
    srv = _Server(app, version)
    server.add_generic_rpc_handlers(_generic_handlers(srv))
    health = health_aio.HealthServicer()
    await health.set("plugin", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    server.add_insecure_port(f"unix:{path}")
    executor = app._executor = ThreadPoolExecutor(max_workers=app.sync_concurrency, thread_name_prefix="soniq-sync")
    try:
        await server.start()
        _handshake(f"{CORE_PROTOCOL_VERSION}|{version}|unix|{path}|grpc")
        await srv.drained.wait()
        if app._failure is not None:
            raise app._failure  # serve() only: run() has exited already
        await app._hooks_idle()  # after_job / on_error hooks still running
        # Every job has ended and its response was handed to gRPC; let the last
        # responses (and the Shutdown reply) go out before closing.
        await server.stop(grace=2)
    finally:
        executor.shutdown(wait=False)


def _handshake(line: str) -> None:
    """Writes go-plugin's handshake line to the real stdout, then points fd 1
    at stderr: later prints from user code land in the log, as on stdio."""
    for stream in (sys.stdout, sys.__stdout__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    data = (line + "\n").encode()
    while data:
        n = os.write(1, data)
        data = data[n:]
    os.dup2(2, 1)
    sys.stdout = sys.stderr
