"""The job machinery of a handler process, whatever carries its messages.

Every transport (stdio, the unix socket go-plugin spawns, the Session stream
of attach mode) hands the jobs it receives to one ``Runtime`` and passes on
the results the Runtime reports. The Runtime:

- holds every job from its job message to its result: at most
  ``concurrency`` run at once, the others wait for a slot in arrival order;
- runs each as a Soniq worker does: before_job hooks, ``validate=``, the
  middleware chain around the handler, which runs as an asyncio task
  (``async def``: cancellable) or in the bounded thread pool (plain ``def``,
  ``sync_concurrency`` threads: never interrupted);
- cancels async jobs for the sidecar (a job_timeout or a shutdown_timeout);
- settles each result: the result frame checked (JSON, the frame limit),
  reported once through the callback the transport gave with the job, then
  the after_job / on_error hooks in a task of their own;
- ends serving with an exit status (``fail``): under App.run() at once.

Its interface, all a transport uses (called on the event loop's thread)::

    rt.open() / rt.close()                 # the thread pool; close abandons jobs after a failure
    rt.on_change = callback                # a job ended, hooks ended, serving failed
    rt.hello(version)                      # the hello frame
    rt.duplicate(job_id)                   # held already (logged)?
    rt.start(job_frame, report)            # report(result_frame, encoded) once
    rt.cancel(job_id, reason)
    rt.held(), rt.count, rt.idle, await rt.hooks_idle()
    rt.fail(code, message) -> ServeError;  rt.failure

``Ledger`` and ``Sent`` keep attach mode's results until a session
acknowledges them (see docs/protocol.md, "The Session stream and attach
mode"); ``Registry`` is what App registers (handlers, middleware, hooks).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import os
import sys
import time
import traceback
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, NoReturn, Optional, Set, Tuple, Type

from . import protocol
from ._types import EXIT_CANNOT_START, SDK_NAME, CallNext, JobContext, ServeError, Snooze, Validator

# The callback a transport gives with each job: the job's result frame as it
# is reported (checked) and its encoding on stdio.
Report = Callable[[protocol.ResultFrame, bytes], None]

# Error texts are cut to this many characters so that a failed result stays far
# below the frame limit whatever the exception carries.
MAX_ERROR_TEXT = 64 * 1024
# Results of jobs that ended while no session was open, or that were sent on a
# session that ended before acknowledging them, wait for the next one; at most
# this many (the oldest is dropped first, with a warning). A sidecar holds far
# fewer jobs than this per process (its concurrency).
MAX_KEPT_RESULTS = 1000
# How long a handler told to stop waits, once it holds no job, for the open
# session to acknowledge the results it sent.
ACK_WAIT_SECONDS = 5.0
HOOK_EVENTS = ("before_job", "after_job", "on_error")


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


# ---------------------------------------------------------------- registry


@dataclass
class Handler:
    name: str
    func: Callable[..., Any]
    is_async: bool
    wants_ctx: bool
    validate: Optional[Callable[[Dict[str, Any]], Any]] = None


class Registry:
    """What an App registers: job handlers by name, middleware (first
    registered outermost) and hooks by event, each in registration order."""

    def __init__(self) -> None:
        self.handlers: Dict[str, Handler] = {}
        self.middleware: List[Callable[..., Any]] = []
        self.hooks: Dict[str, List[Callable[..., Any]]] = {event: [] for event in HOOK_EVENTS}

    def add_job(self, name: str, func: Callable[..., Any], validate: Optional[Callable[[Dict[str, Any]], Any]]) -> None:
        if name in self.handlers:
            raise ValueError(f"job {name!r} is already registered")
        if not callable(func):
            raise TypeError(f"handler for {name!r} is not callable")
        self.handlers[name] = Handler(name, func, _is_async(func), _wants_ctx(func), validate)

    def add_middleware(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise TypeError(f"middleware must be callable, got {fn!r}")
        self.middleware.append(fn)

    def add_hook(self, event: str, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise TypeError(f"{event} hook must be callable, got {fn!r}")
        self.hooks[event].append(fn)

    @property
    def jobs(self) -> List[protocol.HelloJob]:
        """The ``jobs`` list of hello, in registration order."""
        return [{"name": h.name, "cancellable": h.is_async} for h in self.handlers.values()]


def validator(name: str, validate: Optional[Validator]) -> Optional[Callable[[Dict[str, Any]], Any]]:
    """validate= of @app.job as a function of the args. A pydantic model is
    recognised by its methods, so pydantic is never imported here (the SDK
    works without it)."""
    if validate is None:
        return None
    if isinstance(validate, type):
        if not (callable(getattr(validate, "model_validate", None)) and callable(getattr(validate, "model_dump", None))):
            raise TypeError(
                f"validate= of job {name!r}: {validate.__name__} is a class but not a pydantic (v2) model; "
                "pass a pydantic model class or a callable that returns the args"
            )
        model: Type[Any] = validate

        def check(args: Dict[str, Any]) -> Any:
            # As a Soniq worker does: the handler gets the model's dump.
            return model(**args).model_dump()

        return check
    if not callable(validate):
        raise TypeError(f"validate= of job {name!r} must be a callable or a pydantic model class, got {validate!r}")
    return validate


def _wants_ctx(func: Callable[..., Any]) -> bool:
    """True if ``func`` can be called as func(args, ctx), False for func(args)."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return True
    positional = 0
    for p in sig.parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            return True
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional += 1
    return positional >= 2


def _is_async(func: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(func):
        return True
    call = getattr(func, "__call__", None)  # callable objects with async __call__
    return call is not None and inspect.iscoroutinefunction(call)


def job_context(msg: protocol.JobFrame) -> JobContext:
    """The JobContext of a decoded job frame (any transport's)."""
    return JobContext(
        id=msg["id"],
        name=msg["name"],
        attempt=msg["attempt"],
        max_attempts=msg["max_attempts"],
        queue=msg["queue"],
        deadline=_deadline_datetime(msg["deadline"]),
        traceparent=msg["traceparent"],
        deadline_ms=msg["deadline"],
        worker_id=msg["worker_id"] or "",
        scheduled_at=_deadline_datetime(msg["scheduled_at"]),
        created_at=_deadline_datetime(msg["created_at"]),
    )


def _deadline_datetime(ms: Optional[int]) -> Optional[datetime]:
    if ms is None:
        return None
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    try:
        return epoch + timedelta(milliseconds=ms)
    except OverflowError:
        # Outside datetime's years 1..9999: clamp rather than fail the job.
        return datetime.max.replace(tzinfo=timezone.utc) if ms > 0 else datetime.min.replace(
            tzinfo=timezone.utc
        )


# ----------------------------------------------------------- result frames


def result(
    job_id: str,
    status: protocol.ResultStatus,
    *,
    value: Any = None,
    error: Optional[protocol.ErrorInfo] = None,
    seconds: Optional[float] = None,
    reason: Optional[str] = None,
) -> protocol.ResultFrame:
    return {
        "type": "result",
        "id": job_id,
        "status": status,
        "result": value,
        "error": error,
        "seconds": seconds,
        "reason": reason,
    }


def failed(
    job_id: str, etype: str, message: str, tb: Optional[str], retryable: bool, reason: Optional[str] = None
) -> protocol.ResultFrame:
    # Cut, and made UTF-8 (lone surrogates replaced): whatever an exception
    # carries, its failure can always be written.
    return result(
        job_id,
        "failed",
        error={
            "type": _utf8(_truncate_head(etype)),
            "message": _utf8(_truncate_head(message)),
            "traceback": None if tb is None else _utf8(_truncate_tail(tb)),
            "retryable": retryable,
            "reason": reason,
        },
    )


def raised(job_id: str, e: BaseException, with_traceback: bool = True) -> protocol.ResultFrame:
    """The failure of a job that raised ``e``: its class name, message and
    traceback, retryable unless it says ``retryable = False``. Nothing ``e``
    does (a __str__ or a ``retryable`` property that raises or recurses)
    keeps the failure from being written."""
    tb = _format_traceback(e) if with_traceback else None
    return failed(job_id, type_name(e), safe_str(e), tb, _retryable(e))


def shutting_down(job_id: str) -> protocol.ResultFrame:
    """A job that slipped in after shutdown: handed back for a retry."""
    return failed(job_id, "ShuttingDown", "handler process is shutting down", None, True)


def draining(job_id: str) -> protocol.ResultFrame:
    """A job that came while draining (attach mode): back at once, not counted as a failure."""
    return result(job_id, "snooze", seconds=0, reason="handler draining")


def _snooze(job_id: str, s: Snooze) -> protocol.ResultFrame:
    reason = None if s.reason is None else _utf8(_truncate_head(s.reason))
    return result(job_id, "snooze", seconds=s.seconds, reason=reason)


def safe_str(e: BaseException) -> str:
    """str(e); a __str__ that raises or recurses must not lose the result."""
    try:
        text = str(e)
    except BaseException as inner:  # noqa: B036 - user code runs here, whatever it raises
        return f"<str() of {type_name(e)} failed: {type_name(inner)}>"
    return str.__str__(text)  # an exact str, whatever subclass __str__ returned


def type_name(obj: object) -> str:
    try:
        name = type(obj).__name__
    except BaseException:  # noqa: B036 - a metaclass can make even this raise
        return "object"
    return name if type(name) is str else "object"


def _retryable(e: BaseException) -> bool:
    try:
        retryable = getattr(e, "retryable", True)
    except BaseException:  # noqa: B036 - a property that raises: the default
        return True
    return retryable if isinstance(retryable, bool) else True


def _utf8(text: str) -> str:
    """``text`` with lone surrogates (which UTF-8 cannot carry) replaced by
    U+FFFD; surrogate pairs become the character they stand for."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _truncate_head(text: str) -> str:
    if len(text) <= MAX_ERROR_TEXT:
        return text
    return f"{text[:MAX_ERROR_TEXT]}... [truncated {len(text) - MAX_ERROR_TEXT} chars]"


def _truncate_tail(text: str) -> str:
    # For tracebacks the end (the innermost frames, the exception) matters most.
    if len(text) <= MAX_ERROR_TEXT:
        return text
    return f"[truncated {len(text) - MAX_ERROR_TEXT} chars] ...{text[-MAX_ERROR_TEXT:]}"


# Frames of the SDK and of the thread pool that lead into the handler: noise in
# a job's traceback, so they are cut from its top.
_PLUMBING_FILES = frozenset({__file__, getattr(sys.modules.get("concurrent.futures.thread"), "__file__", "")})


def _format_traceback(e: BaseException) -> Optional[str]:
    try:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename in _PLUMBING_FILES:
            tb = tb.tb_next
        return "".join(traceback.format_exception(type(e), e, tb or e.__traceback__))
    except BaseException:  # noqa: B036 - e's own methods run here; the failure goes out without it
        return None


def error_text(error: protocol.ErrorInfo) -> str:
    """A failure as the sidecar writes it to the row's last_error."""
    text = f"{error['type']}: {error['message']}"
    if error["traceback"]:
        text += "\n" + error["traceback"]
    return text


# What a result that cannot be written becomes: a failure that is not retried.
# The same args give the same value and the same failure, so a retry would run
# the handler (and its side effects) again for nothing; the job is
# dead-lettered with the cause, to be replayed once the handler is fixed.
UNENCODABLE_RETRYABLE = False


def encode_result(frame: protocol.ResultFrame, max_frame_bytes: int) -> Tuple[protocol.ResultFrame, bytes]:
    """The result as it is reported, encoded. A value that cannot be written
    (a type JSON cannot carry, a cycle, nesting too deep, a method of it
    that raises, memory) or one over the frame limit fails the job instead,
    with the cause in the message; a failure over the limit keeps its type
    and retryability and is cut to fit. Never raises for anything in the
    frame (every transport reports what this returns)."""
    try:
        data = protocol.encode(frame)
    except BaseException as e:  # noqa: B036 - the value's own methods run here, whatever they raise
        frame = unencodable(frame, e)
        data = protocol.encode(frame)
    if len(data) > max_frame_bytes:
        frame, data = _fit(frame, len(data), max_frame_bytes)
    return frame, data


def unencodable(frame: protocol.ResultFrame, e: BaseException) -> protocol.ResultFrame:
    """The failure that replaces a result whose encoding raised ``e``."""
    try:
        cause = _encoding_cause(frame.get("result"), e)
    except BaseException:  # noqa: B036 - the value's methods run again here
        cause = safe_str(e)
    if not cause:
        cause = type_name(e)
    return failed(frame["id"], type_name(e), f"job result is not JSON-serialisable: {cause}", None,
                  UNENCODABLE_RETRYABLE)


def _encoding_cause(value: Any, e: BaseException) -> str:
    """Why ``value`` could not be written, in words: for a RecursionError or
    a value nested too deep, whether it contains itself (and where) or how
    deep it goes."""
    if not isinstance(e, (RecursionError, protocol.DepthError)):
        return safe_str(e)
    cycle, depth = _shape(value)
    if cycle is not None:
        return f"it contains itself: {cycle}"
    if depth >= protocol.MAX_DEPTH:
        return f"it is nested {depth} levels deep, over the {protocol.MAX_DEPTH - 1} a result may have"
    if isinstance(e, RecursionError) and depth > sys.getrecursionlimit() // 2:
        return (
            f"it is nested {depth} levels deep, deeper than the interpreter's recursion limit "
            f"({sys.getrecursionlimit()}) lets the encoder go"
        )
    return safe_str(e)  # a method of the value recursed


def _shape(value: Any) -> Tuple[Optional[str], int]:
    """(where ``value`` first contains itself, or None; how deep its lists
    and dicts nest), found without recursion."""
    path: List[str] = ["result"]  # how each container on the walk is reached
    on_path: Dict[int, int] = {}  # id of a container on the walk -> its index in `path`
    stack: List[Tuple[int, Iterator[Tuple[str, Any]]]] = []
    depth = 0

    def enter(v: Any) -> Optional[str]:
        nonlocal depth
        if not isinstance(v, (dict, list, tuple)):
            return None
        if id(v) in on_path:
            return f"{_path_text(path)} is {_path_text(path[: on_path[id(v)] + 1])}"
        on_path[id(v)] = len(path) - 1
        items: Iterator[Tuple[str, Any]]
        if isinstance(v, dict):
            items = ((f"[{_key_text(k)}]", x) for k, x in v.items())
        else:
            items = ((f"[{i}]", x) for i, x in enumerate(v))
        stack.append((id(v), items))
        depth = max(depth, len(stack))
        return None

    found = enter(value)
    while stack and found is None:
        vid, items = stack[-1]
        step = next(items, None)
        if step is None:
            stack.pop()
            del on_path[vid]
            path.pop()
            continue
        path.append(step[0])
        found = enter(step[1])
        if len(stack) < len(path):  # not a container: nothing below it
            path.pop()
    return found, depth


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return repr(key) if len(key) <= 40 else repr(key[:40])[:-1] + "...'"
    return f"<{type_name(key)}>"


def _path_text(path: List[str]) -> str:
    if len(path) <= 12:
        return "".join(path)
    return "".join(path[:6]) + f"...({len(path) - 11} more)..." + "".join(path[-5:])


def _fit(frame: protocol.ResultFrame, size: int, max_frame_bytes: int) -> Tuple[protocol.ResultFrame, bytes]:
    """A frame of ``size`` bytes, over the limit, made to fit: a failure
    loses its traceback and has its message cut (so that it stays the
    handler's failure, with its retryability), a snooze its reason; anything
    else, or what still does not fit, becomes a ResultTooLarge failure."""
    job_id = frame["id"]
    error = frame["error"]
    if frame["status"] == "failed" and error is not None:
        cut: protocol.ResultFrame = {**frame, "error": {**error, "message": "", "traceback": None}}
        room = max_frame_bytes - len(protocol.encode(cut)) - 80
        if room > 0:
            message = _cut_to_fit(error["message"], room, max_frame_bytes)
            cut = {**frame, "error": {**error, "message": message, "traceback": None}}
            data = protocol.encode(cut)
            if len(data) <= max_frame_bytes:
                return cut, data
    elif frame["status"] == "snooze" and frame["reason"] is not None:
        cut = {**frame, "reason": None}
        data = protocol.encode(cut)
        if len(data) <= max_frame_bytes:
            return cut, data
    too_large = failed(
        job_id,
        "ResultTooLarge",
        f"encoded result is {size} bytes, over the {max_frame_bytes}-byte frame limit",
        None,
        False,
    )
    return too_large, protocol.encode(too_large)


def _cut_to_fit(text: str, room: int, max_frame_bytes: int) -> str:
    """The longest head of ``text`` whose JSON encoding takes at most
    ``room`` bytes, marked as cut."""

    def size(n: int) -> int:
        return len(protocol.encode_value(text[:n]).encode("utf-8"))

    if size(len(text)) <= room:
        return text
    lo, hi = 0, min(len(text), room)
    while lo < hi:  # the largest n with size(n) <= room
        mid = (lo + hi + 1) // 2
        if size(mid) <= room:
            lo = mid
        else:
            hi = mid - 1
    return f"{text[:lo]}... [cut to fit the {max_frame_bytes}-byte frame limit]"


# ----------------------------------------------------------------- runtime


@dataclass
class _Job:
    """A job the process holds: started (task set) or waiting for a slot."""

    handler: Optional[Handler]
    args: Dict[str, Any]
    ctx: JobContext
    report: Report
    task: Optional[asyncio.Task[protocol.ResultFrame]] = None
    cancel_reason: Optional[str] = None
    started: float = field(default_factory=time.monotonic)
    # Its args were valid and the handler (with its middleware) was called:
    # from then on after_job / on_error apply, as under a Soniq worker.
    ran: bool = False

    @property
    def cancellable(self) -> bool:
        return self.handler is not None and self.handler.is_async


class Runtime:
    """The jobs of one App.serve(), for whichever transport serves it (see
    the module's docstring for the interface). ``exit_at_once``: under
    App.run(), where the process is ours, ``fail`` exits the process there
    and then, so that neither asyncio.run's task cleanup nor a sync handler
    still running in a thread delays the exit."""

    def __init__(
        self,
        registry: Registry,
        *,
        concurrency: int,
        sync_concurrency: int,
        max_frame_bytes: int,
        exit_at_once: bool = False,
    ) -> None:
        self.registry = registry
        self.concurrency = concurrency
        self.sync_concurrency = sync_concurrency
        self.max_frame_bytes = max_frame_bytes
        self.exit_at_once = exit_at_once
        self.on_change: Callable[[], None] = lambda: None
        self.failure: Optional[ServeError] = None
        self._jobs: Dict[str, _Job] = {}  # every job held, started or waiting
        self._waiting: Deque[str] = deque()  # ids waiting for one of `concurrency` slots
        self._active = 0  # started jobs (tasks not yet finished)
        self._hook_tasks: Set[asyncio.Task[None]] = set()  # after_job / on_error still running
        self._executor: Optional[ThreadPoolExecutor] = None

    # ------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Creates the thread pool of sync handlers: its threads do their
        blocking work so that the event loop stays free to answer pings and
        cancels meanwhile. Its size is the sync_concurrency hello announces;
        extra sync jobs wait in its queue."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self.sync_concurrency, thread_name_prefix="soniq-sync")

    def close(self) -> None:
        """Serving is over. After a failure the jobs still held can report
        nothing: the async ones and the hooks are cancelled, the sync ones
        abandoned in their threads. On the clean path only idle threads
        remain."""
        if self.failure is not None:
            self._waiting.clear()
            for job in self._jobs.values():
                if job.task is not None:
                    job.task.cancel()
            for hooks in self._hook_tasks:
                hooks.cancel()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    def fail(self, code: int, message: str) -> ServeError:
        """Serving ends with exit status ``code``. Under App.run() the
        process exits here and now; under serve() the ServeError returned is
        raised by the caller, or by the transport (woken by on_change)."""
        log(message)
        if self.exit_at_once:
            exit_now(code)
        if self.failure is None:
            self.failure = ServeError(message, code)
            self.on_change()
        return self.failure

    def hello(self, version: int) -> protocol.HelloFrame:
        return {
            "type": "hello",
            "protocol": version,
            "sdk": SDK_NAME,
            "pid": os.getpid(),
            "jobs": self.registry.jobs,
            "concurrency": self.concurrency,
            "sync_concurrency": self.sync_concurrency,
        }

    # ----------------------------------------------------------------- jobs

    def duplicate(self, job_id: str) -> bool:
        """Whether ``job_id`` is held already (its second job message is ignored)."""
        if job_id not in self._jobs:
            return False
        log(f"job {job_id} is already running here; duplicate ignored")
        return True

    def start(self, msg: protocol.JobFrame, report: Report) -> None:
        """Takes a job: it runs as soon as a slot is free, and ``report`` gets
        its result once (with its encoding). The transport has checked
        ``duplicate`` and whether it takes jobs at all."""
        job_id = msg["id"]
        if job_id in self._jobs:
            raise ValueError(f"job {job_id} is held already")
        self._jobs[job_id] = _Job(self.registry.handlers.get(msg["name"]), msg["args"], job_context(msg), report)
        if self._active < self.concurrency:
            self._launch(job_id)
        else:
            # The sidecar never sends more than `concurrency` jobs at once;
            # should it, the extra ones wait for a slot instead of piling up.
            self._waiting.append(job_id)

    def cancel(self, job_id: str, reason: str) -> None:
        job = self._jobs.get(job_id)
        if job is None:
            return  # unknown or already finished: nothing to do
        if not job.cancellable:
            # A thread cannot be interrupted from outside; the job's real
            # result will still be reported when the thread returns.
            log(f"cancel ({reason}) for sync job {job_id} ignored: sync jobs are not cancellable")
            return
        job.cancel_reason = reason
        if job.task is not None:
            job.task.cancel()  # _finish reports it
            return
        # Still waiting for a slot: it never ran.
        self._waiting.remove(job_id)
        del self._jobs[job_id]
        self._report(job, result(job_id, "cancelled"))
        self.on_change()

    def held(self) -> List[Tuple[str, str]]:
        """(id, name) of every job held, started or waiting for a slot."""
        return [(job_id, job.ctx.name) for job_id, job in self._jobs.items()]

    @property
    def count(self) -> int:
        """How many jobs are held."""
        return len(self._jobs)

    @property
    def idle(self) -> bool:
        """No job held and no after_job / on_error hook running."""
        return not self._jobs and not self._hook_tasks

    async def hooks_idle(self) -> None:
        """Returns once every after_job / on_error hook has returned."""
        while self._hook_tasks:
            await asyncio.wait(set(self._hook_tasks))

    def _launch(self, job_id: str) -> None:
        job = self._jobs[job_id]
        job.task = asyncio.ensure_future(self._execute(job))
        self._active += 1
        job.task.add_done_callback(lambda t: self._finish(job_id, t))

    def _finish(self, job_id: str, task: asyncio.Task[protocol.ResultFrame]) -> None:
        """Done callback of a job's task: reports its result.

        A callback rather than code after an await inside the task because a
        task cancelled before its first step never runs any of its body.
        """
        job = self._jobs.pop(job_id, None)
        self._active -= 1
        if job is None or (task.cancelled() and job.cancel_reason is None):
            return  # not our cancel: the event loop itself is going away, or serving failed
        try:
            if task.cancelled():
                frame = result(job_id, "cancelled")
            elif (e := task.exception()) is not None:  # _execute catches everything; be safe
                frame = raised(job_id, e, with_traceback=False)
            else:
                frame = task.result()
            self._report(job, frame)
        finally:
            # Whatever happened above, the slot is free again.
            while self._waiting and self._active < self.concurrency:
                self._launch(self._waiting.popleft())
            self.on_change()

    def _report(self, job: _Job, frame: protocol.ResultFrame) -> None:
        """Reports a job's result (checked and encoded), then settles it. A
        transport that cannot take it ends serving: nothing else would ever
        send that result, and the sidecar settles the jobs of a process that
        exits."""
        try:
            frame, data = encode_result(frame, self.max_frame_bytes)
            job.report(frame, data)
        except Exception as e:
            tb = _format_traceback(e) or ""
            self.fail(EXIT_CANNOT_START, f"could not report the result of job {job.ctx.id}: "
                      f"{type_name(e)}: {safe_str(e)}\n{tb}".rstrip())
            return
        self._settle(job, frame)

    async def _execute(self, job: _Job) -> protocol.ResultFrame:
        """Runs one job as a Soniq worker does: before_job hooks, the args
        validated, then the middleware chain around the handler. Returns its
        result frame; a cancel (async jobs) raises CancelledError."""
        handler, ctx = job.handler, job.ctx
        if handler is None:
            # As under a Soniq worker, an unregistered job runs no hook.
            return failed(ctx.id, "UnknownJob", f"no handler registered for job {ctx.name!r}", None, False)
        await self._call_hooks("before_job", ctx.name, ctx.id, ctx.attempt)
        args: Any = job.args
        if handler.validate is not None:
            try:
                checked = handler.validate(args)
                if inspect.isawaitable(checked):
                    checked = await checked
            except Exception as e:  # CancelledError is no Exception: a cancel stays a cancel
                # Bad data stays bad: a permanent failure, with Soniq's text.
                return failed(ctx.id, "ValueError", f"Corrupted argument data: {safe_str(e)}", None, False,
                              reason="invalid_arguments")
            if checked is not None:  # None: a check only, the args stay as they came
                args = checked
        job.ran = True
        try:
            value = await self._chain(handler, args)(ctx)
        except asyncio.CancelledError:
            raise  # reported by _finish as "cancelled"
        except Snooze as s:
            return _snooze(ctx.id, s)
        except BaseException as e:  # noqa: B902 - a handler's failure never kills the process
            return raised(ctx.id, e)
        done = result(ctx.id, "done", value=value)
        try:
            is_snooze = isinstance(value, Snooze)
        except BaseException as e:  # noqa: B036 - a __class__ that raises: the value cannot be written either
            return unencodable(done, e)
        return _snooze(ctx.id, value) if is_snooze else done

    def _chain(self, handler: Handler, args: Any) -> CallNext:
        """The handler wrapped in the middleware, first registered outermost."""

        async def call_handler(ctx: JobContext) -> Any:
            call_args = (args, ctx) if handler.wants_ctx else (args,)
            if handler.is_async:
                return await handler.func(*call_args)
            # In a pool thread, in a copy of this context: ContextVars a
            # middleware set are seen by the sync handler too.
            run = functools.partial(contextvars.copy_context().run, handler.func, *call_args)
            return await asyncio.get_running_loop().run_in_executor(self._executor, run)

        chain: CallNext = call_handler
        for mw in reversed(self.registry.middleware):
            chain = _wrap(mw, chain)
        return chain

    async def _call_hooks(self, event: str, *args: Any) -> None:
        """Calls the hooks of ``event`` in registration order; one that raises
        is logged and the others still run (as under a Soniq worker)."""
        for fn in list(self.registry.hooks[event]):
            try:
                value = fn(*args)
                if inspect.isawaitable(value):
                    await value
            except Exception as e:
                tb = (_format_traceback(e) or "").rstrip()
                log(f"{event} hook {_callable_name(fn)} failed (ignored): {type_name(e)}: {safe_str(e)}\n{tb}")

    def _settle(self, job: _Job, frame: protocol.ResultFrame) -> None:
        """Once a job's result is reported: its after_job or on_error hooks,
        in a task of their own, so that they neither delay the result nor
        count against the job's timeout. A job the sidecar cancelled for its
        timeout had its row failed by the sidecar: on_error; one cancelled at
        shutdown goes back to the queue: no hook."""
        if not job.ran:
            return  # never ran: unknown job, invalid args, cancelled before
        ctx = job.ctx
        args: Tuple[Any, ...]
        if job.cancel_reason is not None:
            if job.cancel_reason != "job_timeout":
                return
            # Soniq's words; the row's last_error adds the timeout, which
            # the sidecar knows and the handler does not.
            event, args = "on_error", (ctx.name, ctx.id, "Job timed out", ctx.attempt)
        elif frame["status"] == "done":
            duration_ms = round((time.monotonic() - job.started) * 1000, 2)
            event, args = "after_job", (ctx.name, ctx.id, duration_ms)
        elif frame["status"] == "failed" and frame["error"] is not None:
            event, args = "on_error", (ctx.name, ctx.id, error_text(frame["error"]), ctx.attempt)
        else:
            return  # snooze: neither
        if not self.registry.hooks[event]:
            return
        task = asyncio.ensure_future(self._call_hooks(event, *args))
        self._hook_tasks.add(task)
        task.add_done_callback(self._hooks_ended)

    def _hooks_ended(self, task: asyncio.Task[None]) -> None:
        self._hook_tasks.discard(task)
        self.on_change()


def _wrap(mw: Callable[..., Any], call_next: CallNext) -> CallNext:
    async def call(ctx: JobContext) -> Any:
        value = mw(ctx, call_next)
        if inspect.isawaitable(value):
            value = await value
        return value

    return call


def _callable_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


# ------------------------------------------------- results kept for sessions


class Sent:
    """One session's side of the acknowledgements: whether its sidecar
    acknowledges results, and the results sent on it that it has not
    acknowledged yet (by job id)."""

    def __init__(self) -> None:
        self.acks = False  # the sidecar said it acknowledges results (an Ack)
        # Whether a message came from the sidecar yet: one that acknowledges
        # results sends an Ack first, so anything else first means it never will.
        self.heard = False
        self.unacked: Dict[str, protocol.ResultFrame] = {}


class Ledger:
    """Results of attach mode, each kept until a session acknowledges it.

    A result that ends with no session open, or that was sent on a session
    that ended without acknowledging it, waits here for the next session
    (``kept``, oldest first, at most ``limit``). A spawned process
    (``attach`` false) has no next session: nothing is kept.
    """

    def __init__(self, attach: bool, limit: int = MAX_KEPT_RESULTS) -> None:
        self.attach = attach
        self.limit = limit
        self.kept: Dict[str, protocol.ResultFrame] = {}
        # A sidecar acknowledged results once: from then on a session that
        # ends with results unacknowledged hands them to the next one.
        self.peer_acks = False

    def open(self) -> Tuple[Sent, List[protocol.ResultFrame]]:
        """A session opens: the results kept for it, to send it, tracked as
        unacknowledged until its sidecar says whether it acknowledges."""
        sent = Sent()
        kept, self.kept = self.kept, {}
        sent.unacked.update(kept)
        return sent, list(kept.values())

    def heard(self, s: Sent, is_ack: bool) -> None:
        """A message came on the session (``is_ack``: an Ack)."""
        if not s.heard:
            s.heard = True
            if not is_ack:
                s.unacked.clear()  # an older sidecar: it never acknowledges

    def sent(self, s: Sent, frame: protocol.ResultFrame) -> None:
        """A result went out on the session."""
        if self.attach and (s.acks or not s.heard):
            s.unacked[frame["id"]] = frame

    def acked(self, s: Sent, ids: Iterable[str]) -> bool:
        """The sidecar settled these results; True if it named any."""
        s.acks = True
        self.peer_acks = True
        named = False
        for job_id in ids:
            named = True
            s.unacked.pop(job_id, None)
        return named

    def closed(self, s: Sent, unsent: Iterable[protocol.ResultFrame], why: str) -> None:
        """The session is over: the results queued for it and never written
        (``unsent``) go to the next one, and, when the sidecar acknowledges
        results, those written that it may never have received or recorded."""
        pending = {frame["id"]: frame for frame in unsent}
        if s.acks or self.peer_acks:
            pending = {**s.unacked, **pending}
        s.unacked = {}
        for frame in pending.values():
            self.keep(frame, why)

    def keep(self, frame: protocol.ResultFrame, why: str) -> None:
        if not self.attach:
            return  # spawned: there is no next session
        job_id = frame["id"]
        self.kept.pop(job_id, None)
        if len(self.kept) >= self.limit:
            lost = next(iter(self.kept))
            del self.kept[lost]
            log(f"WARN: more than {self.limit} results wait for a session; the result of job {lost} is dropped")
        self.kept[job_id] = frame
        log(f"job {job_id} {why}; its result waits for the next session")

    @staticmethod
    def awaiting(s: Optional[Sent]) -> bool:
        """The session acknowledges results and has not acknowledged some it was sent."""
        return s is not None and s.acks and bool(s.unacked)

    def lost(self, s: Optional[Sent]) -> List[str]:
        """Ids of results no session received (or acknowledged)."""
        return list(self.kept) + (list(s.unacked) if s is not None and s.acks else [])
