"""Attach mode: ``--listen PATH`` (or $SONIQ_LISTEN). The handler serves the
Session stream and the gRPC health service on a Unix socket of its own, which
a sidecar in another container attaches to, one session at a time; the process
lives across sessions. Also the probe command for Kubernetes exec probes.
See docs/protocol.md, "The Session stream and attach mode".
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
import stat
from typing import Any, List, Optional

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from ._ledger import ACK_WAIT_SECONDS
from ._log import log
from ._runtime import Runtime
from ._session import SessionCore, session_method
from ._types import EXIT_USAGE

# The service name the sidecar checks, and the server as a whole.
HEALTH_SERVICES = ("plugin", "")
# Group read/write, nothing for others: a sidecar container of another user
# sharing the volume's group (Kubernetes fsGroup) can connect; nobody else.
SOCKET_MODE = 0o660
# How long an exiting handler lets its last messages go out.
STOP_GRACE_SECONDS = 2.0


def _check_path(rt: Runtime, path: str) -> None:
    """The socket path is usable: its directory exists; nothing lives there
    but, at most, a stale socket (removed)."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise rt.fail(EXIT_USAGE, f"--listen {path}: directory {parent} does not exist")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise rt.fail(EXIT_USAGE, f"--listen {path}: the path exists and is not a socket; not replacing it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(2)
        probe.connect(path)
    except OSError as e:
        if e.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise rt.fail(EXIT_USAGE, f"--listen {path}: cannot tell whether the socket is in use: {e}") from None
        # Nobody answers: left over from an earlier run.
        log(f"removing stale socket {path} (nobody answers on it)")
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    finally:
        probe.close()
    raise rt.fail(EXIT_USAGE, f"--listen {path}: another process is serving on this socket")


def _bind(server: Any, path: str) -> None:
    """Binds the socket with mode 0660 before anyone can connect. gRPC binds
    in add_insecure_port and listens only at start(): the umask makes the file
    0660 from its creation on (never, not even for a moment, open to others),
    and the chmod makes it exactly 0660 whatever the umask left out. The
    umask is process-wide, but nothing else runs yet."""
    old = os.umask(0o117)
    try:
        server.add_insecure_port(f"unix:{path}")
    finally:
        os.umask(old)
    os.chmod(path, SOCKET_MODE)


async def serve(rt: Runtime, version: int, path: str) -> None:
    """Serves sessions on the socket at ``path`` until SIGTERM (or SIGINT)
    and then until no job is held; returns (run() exits 0)."""
    _check_path(rt, path)
    limit = rt.max_frame_bytes + (64 << 10)  # a frame's worth of payload plus the envelope
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
        ]
    )
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()
    core = SessionCore(rt, version, attach=True, on_change=changed.set)
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("soniq.handler.v1.Handler", {"Session": session_method(core)})]
    )
    health = health_aio.HealthServicer()
    for name in HEALTH_SERVICES:
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    bound = False
    signals: List[signal.Signals] = []
    try:
        # Handlers first: a SIGTERM that lands right after the "listening on"
        # line (or during the bind) must drain, not kill the process.
        def stop(signame: str) -> None:
            if core.draining:
                return
            log(f"{signame}: draining (no new job; exiting once the {rt.count} job(s) held have ended)")
            # NOT_SERVING before anything else: probes and sidecars see it at once.
            for name in HEALTH_SERVICES:
                loop.create_task(health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING))
            core.begin_draining()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop, sig.name)
            signals.append(sig)
        _bind(server, path)
        bound = True
        await server.start()
        log(f"listening on unix socket {path} (attach mode: one session at a time; SIGTERM drains and exits)")

        while not (core.draining and rt.count == 0):
            changed.clear()
            await changed.wait()
        # The last results are acknowledged once the sidecar has written
        # them; a short wait, so that none is left to a session that ends.
        deadline = loop.time() + ACK_WAIT_SECONDS
        while core.awaiting_acks() and loop.time() < deadline:
            changed.clear()
            try:
                await asyncio.wait_for(changed.wait(), deadline - loop.time())
            except asyncio.TimeoutError:
                break
        await rt.hooks_idle()  # after_job / on_error hooks still running
        for job_id in core.lost_results():
            log(f"WARN: exiting with the result of job {job_id} undelivered (no session was open)")
        core.end_current()
        await server.stop(grace=STOP_GRACE_SECONDS)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        if bound:
            try:
                os.unlink(path)
            except OSError:
                pass


def probe(path: str, timeout: float = 3.0) -> int:
    """``python -m soniq_handler probe PATH``: exit status 0 when the handler
    at PATH reports SERVING, 1 otherwise (with a one-line reason on stderr)."""
    import sys

    service = HEALTH_SERVICES[0]
    reason: Optional[str] = None
    if not os.path.exists(path):
        reason = f"{path} does not exist"
    else:
        channel = grpc.insecure_channel(f"unix:{path}")
        try:
            stub = health_pb2_grpc.HealthStub(channel)
            resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
            status = health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
            if resp.status != health_pb2.HealthCheckResponse.SERVING:
                reason = f"{path}: service {service!r} is {status}"
        except grpc.RpcError as e:
            reason = f"{path}: health check failed: {e.code().name}: {e.details()}"
        finally:
            channel.close()
    if reason is not None:
        sys.stderr.write(f"soniq-handler probe: {reason}\n")
        return 1
    return 0
