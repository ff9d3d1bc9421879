"""The SDK's own lines on stderr, and the exit of its error paths."""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def log(message: str) -> None:
    try:
        sys.stderr.write(f"soniq-handler[{os.getpid()}]: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def exit_now(code: int) -> NoReturn:
    """Exits at once, for the error paths. os._exit skips joining threads: a
    sync handler still running after a protocol error must not keep the
    process alive."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def quote(line: bytes, limit: int = 200) -> str:
    text = repr(line[:limit])
    return text + ("..." if len(line) > limit else "")
