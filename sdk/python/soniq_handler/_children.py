"""Child jobs: ``ctx.enqueue`` (docs/protocol.md, "Child jobs").

A handler makes new jobs from inside a running one. The SDK draws the
child's id (a random UUID), sends an ``enqueue`` frame naming the running job
as its parent, and returns the id at once. By default the sidecar writes the
child with the parent's successful result, in the same transaction: a parent
that fails, snoozes, is cancelled or crashes leaves no child of that attempt.
``immediate=True`` asks for the child to be written at once; the sidecar
answers with an ``enqueued`` frame, which ``enqueue`` (from a sync handler's
thread) or ``await enqueue_async`` (from an async handler) waits for.

The transport connects a ``Children`` (one per Runtime) to what it sends
with and hands it every ``enqueued`` frame; the feature is offered only by a
sidecar that announced it (``SONIQ_FEATURES``, or the Session's Features
message).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import uuid
from datetime import timedelta
from typing import Any, Callable, Dict, FrozenSet, Iterable, Mapping, Optional, Tuple, Union

from . import protocol

FEATURE = "enqueue"

# What a transport sends an enqueue frame with: the frame and its encoding,
# called on the event loop's thread.
Sender = Callable[[protocol.EnqueueFrame, bytes], None]

Delay = Union[int, float, timedelta]


class ChildJobError(Exception):
    """A child job that was not written: refused by the sidecar (``code``:
    ``invalid``, ``cap``, ``parent``, ``unavailable``), or asked of a sidecar
    that does not take child jobs (``unsupported``)."""

    __module__ = "soniq_handler"

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Children:
    """The child jobs of one Runtime's process (see the module docstring)."""

    def __init__(self, max_frame_bytes: int, environ: Optional[Mapping[str, str]] = None) -> None:
        env = os.environ if environ is None else environ
        self.max_frame_bytes = max_frame_bytes
        self._env_features: FrozenSet[str] = frozenset(
            n.strip() for n in env.get("SONIQ_FEATURES", "").split(",") if n.strip()
        )
        self._session_features: FrozenSet[str] = frozenset()
        self._send: Optional[Sender] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._lock = threading.Lock()
        self._waiting: Dict[str, concurrent.futures.Future[str]] = {}

    # ------------------------------------------------------------ transport

    def connect(self, send: Sender, loop: asyncio.AbstractEventLoop, features: Iterable[str] = ()) -> None:
        """The transport sends with ``send`` from now on; ``features`` are
        those a Session announced (a spawned process also has its
        environment's)."""
        self._send, self._loop = send, loop
        self._session_features = frozenset(features)

    def announce(self, features: Iterable[str]) -> None:
        """The Session's Features message."""
        self._session_features = frozenset(features)

    def disconnect(self, why: str) -> None:
        """The sidecar is gone (the session ended): nothing more can be
        sent, and the immediate children waiting for their answer get
        ``unavailable``."""
        self._send = None
        self._session_features = frozenset()
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for fut in waiting.values():
            if not fut.done():
                fut.set_exception(ChildJobError("unavailable", why))

    def answered(self, frame: protocol.EnqueuedFrame) -> None:
        """An ``enqueued`` frame from the sidecar."""
        with self._lock:
            fut = self._waiting.pop(frame["id"], None)
        if fut is None or fut.done():
            return  # an answer nobody waits for any more
        error = frame["error"]
        if error is not None:
            fut.set_exception(ChildJobError(error["code"], error["message"]))
        else:
            fut.set_result(frame["job_id"] or frame["id"])

    @property
    def supported(self) -> bool:
        return FEATURE in self._env_features or FEATURE in self._session_features

    # -------------------------------------------------------------- handler

    def enqueue(self, parent: str, name: str, args: Optional[Mapping[str, Any]], options: Dict[str, Any]) -> str:
        """ctx.enqueue: the child's id, at once for a deferred child; an
        immediate one blocks this (sync handler's) thread until the sidecar
        has written it and returns the id of the row that holds it."""
        frame, data = self._frame(parent, name, args, options)
        if not frame["immediate"]:
            self._post(frame, data)
            return frame["id"]
        loop = self._loop
        if loop is not None and _running_loop() is loop:
            raise RuntimeError(
                "ctx.enqueue(..., immediate=True) would block the event loop it waits on: "
                "in an async handler use `await ctx.enqueue_async(..., immediate=True)`"
            )
        return self._wait(frame, data).result()

    async def enqueue_async(
        self, parent: str, name: str, args: Optional[Mapping[str, Any]], options: Dict[str, Any]
    ) -> str:
        """ctx.enqueue_async: as enqueue, awaiting an immediate child's answer."""
        frame, data = self._frame(parent, name, args, options)
        if not frame["immediate"]:
            self._post(frame, data)
            return frame["id"]
        return await asyncio.wrap_future(self._wait(frame, data))

    def _wait(self, frame: protocol.EnqueueFrame, data: bytes) -> concurrent.futures.Future[str]:
        fut: concurrent.futures.Future[str] = concurrent.futures.Future()
        with self._lock:
            self._waiting[frame["id"]] = fut
        try:
            self._post(frame, data)
        except BaseException:
            with self._lock:
                self._waiting.pop(frame["id"], None)
            raise
        return fut

    def _post(self, frame: protocol.EnqueueFrame, data: bytes) -> None:
        """Sends from the event loop's thread, in order with the results:
        a deferred child sent from a sync handler's thread reaches the
        sidecar before that job's result, which follows the same way."""
        send, loop = self._send, self._loop
        if send is None or loop is None:
            raise ChildJobError("unavailable", "the process is not connected to a sidecar")
        if _running_loop() is loop:
            send(frame, data)
        else:
            loop.call_soon_threadsafe(send, frame, data)

    def _frame(
        self, parent: str, name: str, args: Optional[Mapping[str, Any]], options: Dict[str, Any]
    ) -> Tuple[protocol.EnqueueFrame, bytes]:
        if not self.supported:
            raise ChildJobError(
                "unsupported",
                "this sidecar does not take child jobs (it announced no 'enqueue' feature): upgrade soniq-sidecar",
            )
        if not isinstance(name, str) or not name:
            raise ValueError(f"ctx.enqueue: the job name must be a non-empty string, got {name!r}")
        if args is None:
            args = {}
        if not isinstance(args, Mapping):
            raise TypeError(f"ctx.enqueue({name!r}): args must be a dict (a JSON object), got {type(args).__name__}")
        frame: protocol.EnqueueFrame = {
            "type": "enqueue",
            "parent": parent,
            "id": str(uuid.uuid4()),
            "name": name,
            "args": dict(args),
            "queue": _opt_str(name, "queue", options.get("queue")),
            "priority": _opt_int(name, "priority", options.get("priority"), None),
            "max_attempts": _opt_int(name, "max_attempts", options.get("max_attempts"), 1),
            "delay": _opt_delay(name, options.get("delay")),
            "dedup_key": _opt_str(name, "dedup_key", options.get("dedup_key")),
            "unique": _opt_flag(name, "unique", options.get("unique")),
            "immediate": _opt_flag(name, "immediate", options.get("immediate")),
        }
        try:
            data = protocol.encode(frame)
        except (TypeError, ValueError, RecursionError) as e:
            raise TypeError(f"ctx.enqueue({name!r}): args cannot be written as JSON: {e}") from None
        if len(data) > self.max_frame_bytes:
            raise ValueError(
                f"ctx.enqueue({name!r}): the enqueue frame is {len(data)} bytes, "
                f"over the frame limit of {self.max_frame_bytes}"
            )
        return frame, data


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _opt_str(job: str, key: str, v: Any) -> Optional[str]:
    if v is None:
        return None
    if not isinstance(v, str) or not v:
        raise ValueError(f"ctx.enqueue({job!r}): {key} must be a non-empty string, got {v!r}")
    return v


def _opt_int(job: str, key: str, v: Any, minimum: Optional[int]) -> Optional[int]:
    if v is None:
        return None
    if type(v) is not int:
        raise TypeError(f"ctx.enqueue({job!r}): {key} must be an int, got {v!r}")
    if minimum is not None and v < minimum:
        raise ValueError(f"ctx.enqueue({job!r}): {key} must be >= {minimum}, got {v}")
    if abs(v) > protocol.MAX_SAFE_INT:
        raise ValueError(f"ctx.enqueue({job!r}): {key} {v} is out of range")
    return v


def _opt_delay(job: str, v: Any) -> Optional[float]:
    if v is None:
        return None
    if isinstance(v, timedelta):
        v = v.total_seconds()
    if type(v) not in (int, float) or not v >= 0 or v == float("inf"):
        raise ValueError(f"ctx.enqueue({job!r}): delay must be a number of seconds >= 0 (or a timedelta), got {v!r}")
    return float(v)


def _opt_flag(job: str, key: str, v: Any) -> Optional[bool]:
    if v is None or v is False:
        return None  # the default: not written
    if v is not True:
        raise TypeError(f"ctx.enqueue({job!r}): {key} must be a bool, got {v!r}")
    return True
