"""Which transport serves the Runtime: attach mode on a socket of its own
(``listen``), the unix transport go-plugin spawns ($SONIQ_TRANSPORT=unix), or
stdio (the default); the protocol version agreed with the sidecar first."""

from __future__ import annotations

import os
import re
from typing import Optional

from ._runtime import Runtime
from ._types import EXIT_CANNOT_START, EXIT_NO_COMMON_PROTOCOL, SDK_NAME
from ._version import PROTOCOL_VERSIONS


def negotiate_version(offered: Optional[str]) -> Optional[int]:
    """Highest version in the comma list ``offered`` that this SDK speaks.

    Unset means "1" (a sidecar too old to say). Entries that are not integers
    are ignored. Returns None when there is no common version.
    """
    if offered is None:
        offered = "1"
    versions = set()
    for part in offered.split(","):
        part = part.strip()
        if re.fullmatch(r"[0-9]+", part):  # str.isdigit() would accept "²"
            versions.add(int(part))
    common = versions.intersection(PROTOCOL_VERSIONS)
    return max(common) if common else None


async def serve(rt: Runtime, listen: Optional[str]) -> None:
    """Serves ``rt`` until the sidecar (attach mode: SIGTERM) ends it; raises
    the Runtime's ServeError when serving cannot start or go on. ``listen``:
    attach mode's socket path, None for a handler the sidecar spawns."""
    offered = os.environ.get("SONIQ_PROTOCOL_VERSIONS")
    version = negotiate_version(offered)
    if version is None:
        raise rt.fail(
            EXIT_NO_COMMON_PROTOCOL,
            f"no common protocol version: the sidecar offers SONIQ_PROTOCOL_VERSIONS={offered!r}, "
            f"this SDK ({SDK_NAME}) speaks {','.join(map(str, PROTOCOL_VERSIONS))}",
        )
    if not rt.registry.handlers:
        raise rt.fail(EXIT_CANNOT_START, "no jobs registered: a handler process must serve at least one job")
    rt.open()
    try:
        if listen is None and os.environ.get("SONIQ_TRANSPORT", "stdio") != "unix":
            from . import _stdio

            await _stdio.serve(rt, version)
            return
        # gRPC over a Unix socket (docs/protocol.md); its dependencies (the
        # unix extra) are imported only here.
        try:
            from . import _unix
        except ImportError as e:
            what = "--listen/SONIQ_LISTEN" if listen is not None else "SONIQ_TRANSPORT=unix"
            raise rt.fail(
                EXIT_CANNOT_START,
                f'{what} needs grpcio, grpcio-health-checking and protobuf (pip install "soniq-handler[unix]"): {e}',
            ) from None
        if listen is not None:
            # Attach mode: a socket of our own that sidecars connect to.
            from . import _listen

            await _listen.serve(rt, version, listen)
            return
        await _unix.serve(rt, version)
    finally:
        rt.close()
