"""The SDK's public value types: what a handler knows about its job
(JobContext), the outcomes it can give besides a value (Snooze,
PermanentError), the error serving ends with (ServeError) and the exit
statuses the sidecar tells apart. Kept apart from app.py so that the runtime
and the transports use them without importing the App."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable, Dict, Mapping, Optional, Type, Union

from ._children import Children
from ._version import __version__

SDK_NAME = f"soniq-python/{__version__}"

# Exit statuses the sidecar can tell apart.
EXIT_OK = 0
EXIT_NO_COMMON_PROTOCOL = 3
EXIT_PROTOCOL_ERROR = 4
EXIT_SIDECAR_GONE = 1
EXIT_CANNOT_START = 1
EXIT_USAGE = 2  # a bad command line; attach mode: its socket path in use or not a socket


class ServeError(Exception):
    """App.serve() cannot start or go on: no common protocol version, a
    malformed frame from the sidecar, the sidecar gone... ``exit_code`` is the
    status App.run() exits with for it (the sidecar tells them apart)."""

    __module__ = "soniq_handler"

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class PermanentError(Exception):
    """Raise to fail a job without retrying it (dead-lettered at once)."""

    __module__ = "soniq_handler"
    retryable = False


class Snooze(Exception):
    """Return (or raise) ``Snooze(seconds, reason)`` to run the job again later
    without counting a failure."""

    __module__ = "soniq_handler"

    def __init__(self, seconds: float, reason: Optional[str] = None) -> None:
        if type(seconds) not in (int, float) or not seconds >= 0:
            raise ValueError(f"Snooze seconds must be a number >= 0, got {seconds!r}")
        if reason is not None and not isinstance(reason, str):
            raise TypeError("Snooze reason must be a string or None")
        super().__init__(seconds, reason)
        self.seconds = seconds
        self.reason = reason

    def __repr__(self) -> str:
        return f"Snooze({self.seconds!r}, {self.reason!r})"


@dataclass(frozen=True)
class JobContext:
    """What a handler knows about the job it runs, besides its args.

    ``worker_id``, ``scheduled_at`` and ``created_at`` are those of the job's
    row, as a Soniq worker's JobContext has them: the id of the sidecar that
    claimed it ("" when the sidecar does not say), and timezone-aware UTC
    datetimes (None for a row without one: ``scheduled_at`` is None for a job
    queued to run at once).
    """

    id: str
    name: str
    attempt: int
    max_attempts: int
    queue: str
    deadline: Optional[datetime]  # timezone-aware UTC, None = no deadline
    traceparent: Optional[str]
    deadline_ms: Optional[int] = None  # the raw epoch milliseconds
    worker_id: str = ""
    scheduled_at: Optional[datetime] = None
    created_at: Optional[datetime] = None

    # Soniq's JobContext calls the first two job_id and job_name: code written
    # for a Soniq worker (a middleware, say) reads them unchanged.
    @property
    def job_id(self) -> str:
        return self.id

    @property
    def job_name(self) -> str:
        return self.name

    def enqueue(
        self,
        name: str,
        args: Optional[Mapping[str, Any]] = None,
        *,
        queue: Optional[str] = None,
        priority: Optional[int] = None,
        delay: Optional[Union[int, float, timedelta]] = None,
        max_attempts: Optional[int] = None,
        dedup_key: Optional[str] = None,
        unique: bool = False,
        immediate: bool = False,
    ) -> str:
        """Makes a child job of this one and returns its id at once.

        By default the child is written with this job's successful result,
        in the same transaction: if this attempt fails, snoozes, is
        cancelled or crashes, the child is never written (a retry makes it
        again). ``immediate=True`` writes it now, whatever this job does
        next: the call blocks this (sync handler's) thread until the sidecar
        has written it and returns the id of the row that holds it (a queued
        duplicate's on a ``dedup_key`` or ``unique`` hit), or raises
        ChildJobError; an async handler uses ``await ctx.enqueue_async``.
        ``delay`` is in seconds (or a timedelta). Raises ChildJobError
        (``unsupported``) under a sidecar that does not take child jobs, and
        TypeError or ValueError for bad input, before anything is sent.
        """
        return _children_of(self).enqueue(self.id, name, args, dict(
            queue=queue, priority=priority, delay=delay, max_attempts=max_attempts,
            dedup_key=dedup_key, unique=unique, immediate=immediate))

    async def enqueue_async(
        self,
        name: str,
        args: Optional[Mapping[str, Any]] = None,
        *,
        queue: Optional[str] = None,
        priority: Optional[int] = None,
        delay: Optional[Union[int, float, timedelta]] = None,
        max_attempts: Optional[int] = None,
        dedup_key: Optional[str] = None,
        unique: bool = False,
        immediate: bool = False,
    ) -> str:
        """``enqueue`` for async handlers: awaits an immediate child's write
        without blocking the event loop (a deferred one returns at once)."""
        return await _children_of(self).enqueue_async(self.id, name, args, dict(
            queue=queue, priority=priority, delay=delay, max_attempts=max_attempts,
            dedup_key=dedup_key, unique=unique, immediate=immediate))


def _children_of(ctx: JobContext) -> Children:
    """The Children of the process that runs ctx's job (set by the Runtime)."""
    children: Optional[Children] = ctx.__dict__.get("_children")
    if children is None:
        raise RuntimeError("ctx.enqueue needs a job run by the sidecar (this JobContext was made by hand)")
    return children


def datetime_of_ms(ms: Optional[int]) -> Optional[datetime]:
    """Epoch milliseconds as a timezone-aware UTC datetime; None for None."""
    if ms is None:
        return None
    try:
        return _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        # Outside datetime's years 1..9999: clamp rather than fail the job.
        return datetime.max.replace(tzinfo=timezone.utc) if ms > 0 else datetime.min.replace(
            tzinfo=timezone.utc
        )


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class _FromMillis:
    """A datetime field of JobContext made from epoch milliseconds when it is
    first read, then kept: most handlers never read it, and three datetimes
    per job were a good part of the context's cost. A context made by its
    constructor holds the value itself, which takes precedence (this is a
    non-data descriptor)."""

    def __init__(self, name: str, raw: str) -> None:
        self.name, self.raw = name, raw

    def __get__(self, obj: Any, owner: Any = None) -> Optional[datetime]:
        if obj is None:
            return None  # the field's default, as the class attribute was
        value = datetime_of_ms(obj.__dict__.get(self.raw))
        obj.__dict__[self.name] = value
        return value


# The context of a job frame, as job_context makes it, keeps the raw
# milliseconds of these under the private names; deadline's are deadline_ms.
JobContext.deadline = _FromMillis("deadline", "deadline_ms")  # type: ignore[assignment]
JobContext.scheduled_at = _FromMillis("scheduled_at", "_scheduled_at_ms")  # type: ignore[assignment]
JobContext.created_at = _FromMillis("created_at", "_created_at_ms")  # type: ignore[assignment]


def job_context_of(
    id: str,
    name: str,
    attempt: int,
    max_attempts: int,
    queue: str,
    traceparent: Optional[str],
    deadline_ms: Optional[int],
    worker_id: str,
    scheduled_at_ms: Optional[int],
    created_at_ms: Optional[int],
) -> JobContext:
    """A JobContext whose datetimes are made when first read, without the
    frozen dataclass's constructor (a guarded setattr per field)."""
    ctx = object.__new__(JobContext)
    ctx.__dict__.update(
        id=id,
        name=name,
        attempt=attempt,
        max_attempts=max_attempts,
        queue=queue,
        traceparent=traceparent,
        deadline_ms=deadline_ms,
        worker_id=worker_id,
        _scheduled_at_ms=scheduled_at_ms,
        _created_at_ms=created_at_ms,
    )
    return ctx


# call_next of a middleware: runs the rest of the chain (in the end the
# handler) for that context and returns what the handler returned.
CallNext = Callable[[JobContext], Awaitable[Any]]
# A middleware: ``async def mw(ctx, call_next)`` wraps every job's handler.
Middleware = Callable[[JobContext, CallNext], Awaitable[Any]]
# validate= of @app.job: a callable taking the job's args and returning the
# args the handler gets (raising when they are invalid), or a pydantic model
# class (any class with pydantic v2's model_validate/model_dump).
Validator = Union[Callable[[Dict[str, Any]], Any], Type[Any]]
