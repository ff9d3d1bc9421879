"""The unix transport: the same App served over gRPC on a Unix socket.

soniq-sidecar starts the process through hashicorp/go-plugin with
SONIQ_TRANSPORT=unix. The process serves the Handler service of
protocol/handler.proto (its Session stream carries every v1 message), the
standard gRPC health service (service "plugin" SERVING) and go-plugin's
plugin.GRPCController (Shutdown: finish what it holds, exit 0), then prints
go-plugin's handshake line ``1|<protocol>|unix|<socket path>|grpc`` on
stdout. See docs/protocol.md, "The unix transport (gRPC)".

This module is imported only in that mode: grpcio, grpcio-health-checking and
protobuf (the ``unix`` extra: pip install "soniq-handler[unix]") are not
needed for stdio.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from typing import Any, List, Optional, Tuple

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from ._runtime import Runtime
from ._session import SessionCore, session_method
from ._types import EXIT_NO_COMMON_PROTOCOL

# go-plugin's handshake: the sidecar sets this variable to this value; a
# process started by hand (without it) explains itself and exits.
MAGIC_COOKIE_KEY = "SONIQ_PLUGIN_MAGIC_COOKIE"
MAGIC_COOKIE_VALUE = "soniq-handler-v1"
CORE_PROTOCOL_VERSION = 1  # go-plugin's own protocol
EXIT_NOT_A_PLUGIN = 1

class _Server:
    """go-plugin's side of a spawned process: the Session stream (one per
    process: its end ends the process, as EOF on stdin does on stdio) and
    plugin.GRPCController's Shutdown, the sidecar's last resort."""

    def __init__(self, rt: Runtime, version: int) -> None:
        self.rt = rt
        self.draining = False
        self.drained = asyncio.Event()
        self.core = SessionCore(rt, version, attach=False, on_change=self._session_changed)

    def _session_changed(self) -> None:
        if self.core.session_ended or self.rt.failure is not None:
            self.draining = True
        self._check_drained()

    def _check_drained(self) -> None:
        if self.rt.failure is not None or (self.draining and self.rt.count == 0):
            self.drained.set()

    # ------------------------------------------------------ plugin.GRPCController

    async def shutdown(self, request: bytes, context: Any) -> bytes:
        self.draining = True
        self._check_drained()
        return b""


def _generic_handlers(srv: _Server) -> List[Any]:
    handler = grpc.method_handlers_generic_handler(
        "soniq.handler.v1.Handler",
        {"Session": session_method(srv.core)},
    )
    # go-plugin's controller: Shutdown(Empty) returns (Empty); an Empty is
    # zero bytes on the wire, so no generated code is needed for it.
    unary = grpc.unary_unary_rpc_method_handler
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


async def serve(rt: Runtime, version: int) -> None:
    """Serves the Runtime over gRPC until the sidecar shuts it down, then
    returns (App.serve, App.run)."""
    if os.environ.get(MAGIC_COOKIE_KEY) != MAGIC_COOKIE_VALUE:
        raise rt.fail(
            EXIT_NOT_A_PLUGIN,
            "SONIQ_TRANSPORT=unix: this process is a go-plugin handler and must be started by "
            f"soniq-sidecar ({MAGIC_COOKIE_KEY} is not set as expected)",
        )
    offered = os.environ.get("PLUGIN_PROTOCOL_VERSIONS", str(version))
    if str(version) not in [v.strip() for v in offered.split(",")]:
        raise rt.fail(
            EXIT_NO_COMMON_PROTOCOL, f"go-plugin offers app protocol versions {offered!r}; this SDK speaks {version}"
        )
    path, own_dir = _socket_path()
    try:
        await _serve(rt, version, path)
    finally:
        for p in (path,):
            try:
                os.unlink(p)
            except OSError:
                pass
        if own_dir:
            shutil.rmtree(own_dir, ignore_errors=True)


async def _serve(rt: Runtime, version: int, path: str) -> None:
    limit = rt.max_frame_bytes + (64 << 10)  # a frame's worth of payload plus the envelope
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
        ]
    )
    srv = _Server(rt, version)
    server.add_generic_rpc_handlers(_generic_handlers(srv))
    health = health_aio.HealthServicer()
    await health.set("plugin", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    server.add_insecure_port(f"unix:{path}")
    await server.start()
    _handshake(f"{CORE_PROTOCOL_VERSION}|{version}|unix|{path}|grpc")
    await srv.drained.wait()
    if rt.failure is not None:
        raise rt.failure  # serve() only: run() has exited already
    await rt.hooks_idle()  # after_job / on_error hooks still running
    # Every job has ended and its response was handed to gRPC; let the last
    # responses (and the Shutdown reply) go out before closing.
    await server.stop(grace=2)


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
