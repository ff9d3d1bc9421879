"""The handler process: job registry and the stdio protocol loop."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import os
import sys
import re
import threading
import time
import traceback
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import (
    Any,
    Awaitable,
    Callable,
    Deque,
    Dict,
    List,
    Mapping,
    NoReturn,
    Optional,
    Set,
    Tuple,
    Type,
    TypeVar,
    Union,
)

from . import protocol
from ._version import PROTOCOL_VERSIONS, __version__

SDK_NAME = f"soniq-python/{__version__}"

# Exit statuses the sidecar can tell apart.
EXIT_OK = 0
EXIT_NO_COMMON_PROTOCOL = 3
EXIT_PROTOCOL_ERROR = 4
EXIT_SIDECAR_GONE = 1
EXIT_CANNOT_START = 1
EXIT_USAGE = 2  # attach mode: a bad --listen, or its socket path in use or not a socket

# A job handler: f(args) or f(args, ctx), a plain def or an async def. The
# decorator hands it back unchanged, with its own type.
HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])


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


# call_next of a middleware: runs the rest of the chain (in the end the
# handler) for that context and returns what the handler returned.
CallNext = Callable[[JobContext], Awaitable[Any]]
# A middleware: ``async def mw(ctx, call_next)`` wraps every job's handler.
Middleware = Callable[[JobContext, CallNext], Awaitable[Any]]
# validate= of @app.job: a callable taking the job's args and returning the
# args the handler gets (raising when they are invalid), or a pydantic model
# class (any class with pydantic v2's model_validate/model_dump).
Validator = Union[Callable[[Dict[str, Any]], Any], Type[Any]]

MiddlewareT = TypeVar("MiddlewareT", bound=Middleware)
# Hooks, called as Soniq calls them: before_job(job_name, job_id, attempt),
# after_job(job_name, job_id, duration_ms), on_error(job_name, job_id, error,
# attempt); a plain def or an async def, handed back unchanged.
HookT = TypeVar("HookT", bound=Callable[..., Any])
BeforeJobT = TypeVar("BeforeJobT", bound=Callable[[str, str, int], Any])
AfterJobT = TypeVar("AfterJobT", bound=Callable[[str, str, float], Any])
OnErrorT = TypeVar("OnErrorT", bound=Callable[[str, str, str, int], Any])


def _job_context(msg: protocol.JobFrame) -> JobContext:
    """The JobContext of a decoded job frame (either transport's)."""
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


@dataclass
class _Handler:
    name: str
    func: Callable[..., Any]
    is_async: bool
    wants_ctx: bool
    validate: Optional[Callable[[Dict[str, Any]], Any]] = None


def _validator(name: str, validate: Optional[Validator]) -> Optional[Callable[[Dict[str, Any]], Any]]:
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


@dataclass
class _Running:
    """A job this process holds: started (task set) or waiting for a slot."""

    handler: Optional[_Handler]
    args: Dict[str, Any]
    ctx: JobContext
    task: Optional[asyncio.Task[protocol.ResultFrame]] = None
    cancel_reason: Optional[str] = None
    started: float = field(default_factory=time.monotonic)
    # Its args were valid and the handler (with its middleware) was called:
    # from then on after_job / on_error apply, as under a Soniq worker.
    ran: bool = False

    @property
    def cancellable(self) -> bool:
        return self.handler is not None and self.handler.is_async


@dataclass
class _Channel:
    """The private protocol file descriptors (see _protect_stdio)."""

    rfd: int
    wfd: int
    write_lock: threading.Lock = field(default_factory=threading.Lock)


class App:
    """A registry of job handlers plus the stdio protocol loop.

    ``concurrency`` is how many jobs the process runs at once (announced in
    hello; the sidecar never sends more, extra ones would wait for a slot).
    ``sync_concurrency`` bounds the thread pool that runs plain ``def``
    handlers. ``max_frame_bytes`` defaults to $SONIQ_MAX_FRAME_BYTES, else
    16 MiB.
    """

    def __init__(
        self, concurrency: int = 8, sync_concurrency: int = 4, max_frame_bytes: Optional[int] = None
    ) -> None:
        if max_frame_bytes is None:
            env = os.environ.get("SONIQ_MAX_FRAME_BYTES", "")
            max_frame_bytes = int(env) if re.fullmatch(r"[0-9]+", env) else protocol.DEFAULT_MAX_FRAME_BYTES
        for name, value in (
            ("concurrency", concurrency),
            ("sync_concurrency", sync_concurrency),
            ("max_frame_bytes", max_frame_bytes),
        ):
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.concurrency = concurrency
        self.sync_concurrency = sync_concurrency
        self._handlers: Dict[str, _Handler] = {}
        self._middleware: List[Callable[..., Any]] = []
        self._hooks: Dict[str, List[Callable[..., Any]]] = {"before_job": [], "after_job": [], "on_error": []}
        self._hook_tasks: Set[asyncio.Task[None]] = set()  # after_job / on_error still running
        self._max_frame_bytes = max_frame_bytes
        self._chan: Optional[_Channel] = None
        self._running: Dict[str, _Running] = {}  # every job held, started or waiting
        self._waiting: Deque[str] = deque()  # ids waiting for one of `concurrency` slots
        self._active = 0  # started jobs (tasks not yet finished)
        self._draining = False
        self._executor: Optional[ThreadPoolExecutor] = None
        self._inbox: asyncio.Queue[Tuple[str, Any]]  # created inside the running loop
        self._serving = False
        self._exit_at_once = False  # set by run(): see _fail
        self._failure: Optional[ServeError] = None

    # ---------------------------------------------------------------- registry

    def job(self, name: str, *, validate: Optional[Validator] = None) -> Callable[[HandlerT], HandlerT]:
        """Decorator registering a handler for job ``name``.

        ``async def`` handlers are cancellable (they run as asyncio tasks);
        plain ``def`` handlers run in the thread pool and are never cancellable.
        The handler is called as ``f(args, ctx)`` or, if it takes a single
        positional parameter, ``f(args)``.

        ``validate`` checks the args before the handler (and its middleware)
        runs: a pydantic model class (the handler gets ``model(**args)
        .model_dump()``, as under a Soniq worker) or a callable taking the
        args and returning those the handler gets, or None to keep them as
        they came (an awaitable is awaited).
        When it raises, the job fails permanently (``ValueError``, message
        ``"Corrupted argument data: <what it raised>"``, not retried).
        """
        if not isinstance(name, str) or not name:
            raise ValueError("job name must be a non-empty string")
        check = _validator(name, validate)

        def register(func: HandlerT) -> HandlerT:
            if name in self._handlers:
                raise ValueError(f"job {name!r} is already registered")
            if not callable(func):
                raise TypeError(f"handler for {name!r} is not callable")
            self._handlers[name] = _Handler(name, func, _is_async(func), _wants_ctx(func), check)
            return func

        return register

    def middleware(self, fn: MiddlewareT) -> MiddlewareT:
        """Registers a middleware wrapping every job: ``async def mw(ctx,
        call_next)``. ``await call_next(ctx)`` runs the rest of the chain and
        returns the handler's value; the middleware returns it (or another
        value: that becomes the result), may skip call_next altogether, and
        what it raises fails the job as if the handler had raised it. The first
        registered is the outermost. Usable as a decorator."""
        if not callable(fn):
            raise TypeError(f"middleware must be callable, got {fn!r}")
        self._middleware.append(fn)
        return fn

    def use(self, fn: MiddlewareT) -> MiddlewareT:
        """``app.use(mw)``: registers a middleware, as ``@app.middleware``."""
        return self.middleware(fn)

    def before_job(self, fn: BeforeJobT) -> BeforeJobT:
        """Registers ``fn(job_name, job_id, attempt)``, called before each job
        runs (before its args are validated). A hook that raises is logged and
        ignored."""
        return self._add_hook("before_job", fn)

    def after_job(self, fn: AfterJobT) -> AfterJobT:
        """Registers ``fn(job_name, job_id, duration_ms)``, called after a job
        succeeded, once its result is reported. A hook that raises is logged
        and ignored."""
        return self._add_hook("after_job", fn)

    def on_error(self, fn: OnErrorT) -> OnErrorT:
        """Registers ``fn(job_name, job_id, error, attempt)``, called after a
        job failed (``error`` is the text the row's last_error gets), once
        its result is reported. A hook that raises is logged and ignored."""
        return self._add_hook("on_error", fn)

    def _add_hook(self, event: str, fn: HookT) -> HookT:
        if not callable(fn):
            raise TypeError(f"{event} hook must be callable, got {fn!r}")
        self._hooks[event].append(fn)
        return fn

    @property
    def jobs(self) -> List[protocol.HelloJob]:
        """The ``jobs`` list of hello, in registration order."""
        return [{"name": h.name, "cancellable": h.is_async} for h in self._handlers.values()]

    # ------------------------------------------------------------------- run

    def run(self) -> NoReturn:
        """Serves the protocol until the sidecar shuts the process down, then
        exits the process: ``asyncio.run(app.serve())`` plus the exit status
        the sidecar expects (0, or that of the ServeError). Never returns."""
        # Here the process is ours: one that cannot go on exits at once from
        # inside the loop (_fail), so that neither asyncio.run's task cleanup
        # nor a sync handler still running in a thread delays the exit.
        self._exit_at_once = True
        asyncio.run(self.serve())
        # Clean exit through SystemExit so atexit hooks (logging.shutdown, user
        # cleanup) still run; every job has finished, the pool threads are idle.
        sys.exit(EXIT_OK)

    async def serve(self) -> None:
        """Serves the protocol in the running event loop until the sidecar
        shuts the process down (or closes stdin) and every job held has
        reported its result; then returns. For programs that own their event
        loop; ``run()`` is ``asyncio.run(app.serve())`` plus the exit status.

        The transport is $SONIQ_TRANSPORT: stdio (NDJSON on stdin and stdout,
        the default) or unix (gRPC on a Unix socket, see _unix; it needs the
        ``unix`` extra: ``pip install "soniq-handler[unix]"``). The stdio
        transport takes over the process's stdin and stdout, so an App is
        served once per process. Raises ServeError when serving cannot start
        or go on (jobs still held are then abandoned).
        """
        if self._serving:
            raise RuntimeError("App.serve() runs once per process")
        self._serving = True
        version = negotiate_version(os.environ.get("SONIQ_PROTOCOL_VERSIONS"))
        if version is None:
            raise self._fail(
                EXIT_NO_COMMON_PROTOCOL,
                "no common protocol version: the sidecar offers "
                f"SONIQ_PROTOCOL_VERSIONS={os.environ.get('SONIQ_PROTOCOL_VERSIONS')!r}, "
                f"this SDK ({SDK_NAME}) speaks {','.join(map(str, PROTOCOL_VERSIONS))}",
            )
        if not self._handlers:
            raise self._fail(EXIT_CANNOT_START, "no jobs registered: a handler process must serve at least one job")
        try:
            listen = _listen_path(sys.argv[1:], os.environ)
        except ServeError as e:
            raise self._fail(e.exit_code, str(e)) from None
        if listen is not None or os.environ.get("SONIQ_TRANSPORT", "stdio") == "unix":
            # gRPC over a Unix socket (docs/protocol.md); its dependencies
            # (the unix extra) are imported only here.
            try:
                from . import _unix
            except ImportError as e:
                what = "--listen/SONIQ_LISTEN" if listen is not None else "SONIQ_TRANSPORT=unix"
                raise self._fail(
                    EXIT_CANNOT_START,
                    f"{what} needs grpcio, grpcio-health-checking and protobuf "
                    f'(pip install "soniq-handler[unix]"): {e}',
                ) from None
            if listen is not None:
                # Attach mode: a socket of our own that sidecars connect to.
                from . import _listen

                await _listen.serve(self, version, listen)
                return
            await _unix.serve(self, version)
            return
        self._chan = _protect_stdio()
        await self._serve_stdio(version, self._chan)

    def _fail(self, code: int, message: str) -> ServeError:
        """Serving ends with exit status ``code``. Under run() the process
        exits here and now; under serve() the ServeError returned is raised
        by the caller, or by the main loop (woken by whoever got here)."""
        _log(message)
        if self._exit_at_once:
            _exit(code)
        if self._failure is None:
            self._failure = ServeError(message, code)
        return self._failure

    async def _serve_stdio(self, version: int, chan: _Channel) -> None:
        loop = asyncio.get_running_loop()
        self._inbox = asyncio.Queue()
        # The pool's threads do the blocking work of sync handlers so the event
        # loop stays free to answer pings and cancels meanwhile. Its size is the
        # sync_concurrency we announce; extra sync jobs wait in its queue.
        executor = self._executor = ThreadPoolExecutor(
            max_workers=self.sync_concurrency, thread_name_prefix="soniq-sync"
        )
        reader = threading.Thread(
            target=_read_frames,
            args=(chan.rfd, self._max_frame_bytes, loop, self._inbox),
            name="soniq-stdin",
            daemon=True,
        )
        reader.start()
        self._write(
            {
                "type": "hello",
                "protocol": version,
                "sdk": SDK_NAME,
                "pid": os.getpid(),
                "jobs": self.jobs,
                "concurrency": self.concurrency,
                "sync_concurrency": self.sync_concurrency,
            }
        )
        try:
            while True:
                if self._failure is not None:
                    raise self._failure
                if self._draining and not self._running and not self._hook_tasks:
                    break
                kind, data = await self._inbox.get()
                if kind == "eof":
                    # Same as shutdown: nothing more can arrive; the loop ends
                    # once the jobs in flight have written their results.
                    self._draining = True
                elif kind == "error":
                    self._fail(EXIT_PROTOCOL_ERROR, f"protocol error: {data}")
                elif kind == "line":
                    self._dispatch(data)
                # "drained" and "wake" only make the loop check its conditions again.
        finally:
            if self._failure is not None:
                # Giving up (serve() only: run() has exited already). Jobs
                # still held can report nothing: stop the async ones.
                self._waiting.clear()
                for running in self._running.values():
                    if running.task is not None:
                        running.task.cancel()
                for hooks in self._hook_tasks:
                    hooks.cancel()
            # On the clean path only idle threads remain; after a failure
            # running ones are abandoned.
            executor.shutdown(wait=False)

    def _wake(self) -> None:
        self._inbox.put_nowait(("wake", None))

    def _dispatch(self, line: bytes) -> None:
        """Acts on one frame from the sidecar; a malformed one ends serving
        with status 4 (under run() the process exits at once, from inside
        the loop, so no running sync thread can delay the exit)."""
        try:
            msg = protocol.decode(line, self._max_frame_bytes)
        except protocol.ProtocolError as e:
            self._fail(EXIT_PROTOCOL_ERROR, f"protocol error: {e} in frame {_quote(line)}")
            return
        if msg["type"] == "job":
            self._start_job(msg)
        elif msg["type"] == "cancel":
            self._cancel(msg["id"], msg["reason"])
        elif msg["type"] == "ping":
            self._write({"type": "pong", "seq": msg["seq"]})
        elif msg["type"] == "shutdown":
            self._draining = True
        else:
            self._fail(EXIT_PROTOCOL_ERROR, f"protocol error: unexpected {msg['type']!r} frame from the sidecar")

    # ------------------------------------------------------------------ jobs

    def _start_job(self, msg: protocol.JobFrame) -> None:
        job_id = msg["id"]
        if job_id in self._running:
            _log(f"job {job_id} is already running here; duplicate frame ignored")
            return
        if self._draining:
            # The sidecar does not send jobs after shutdown; if one slips
            # through, hand it back for a retry rather than dropping it.
            self._write(
                _failed(job_id, "ShuttingDown", "handler process is shutting down", None, True)
            )
            return
        handler = self._handlers.get(msg["name"])
        self._running[job_id] = _Running(handler, msg["args"], _job_context(msg))
        if self._active < self.concurrency:
            self._launch(job_id)
        else:
            # The sidecar never sends more than `concurrency` jobs at once;
            # should it, the extra ones wait for a slot instead of piling up.
            self._waiting.append(job_id)

    def _launch(self, job_id: str) -> None:
        running = self._running[job_id]
        running.task = asyncio.ensure_future(self._execute(running))
        self._active += 1
        running.task.add_done_callback(lambda t: self._finish(job_id, t))

    def _cancel(self, job_id: str, reason: str) -> None:
        running = self._running.get(job_id)
        if running is None:
            return  # unknown or already finished: nothing to do
        if not running.cancellable:
            # A thread cannot be interrupted from outside; the job's real
            # result will still be written when the thread returns.
            _log(f"cancel ({reason}) for sync job {job_id} ignored: sync jobs are not cancellable")
            return
        running.cancel_reason = reason
        if running.task is not None:
            running.task.cancel()  # _finish reports it
            return
        # Still waiting for a slot: it never ran.
        self._waiting.remove(job_id)
        del self._running[job_id]
        self._write(_result(job_id, "cancelled"))
        self._check_drained()

    def _finish(self, job_id: str, task: asyncio.Task[protocol.ResultFrame]) -> None:
        """Done callback of a job's task: writes its result frame.

        A callback rather than code after an await inside the task because a
        task cancelled before its first step never runs any of its body.
        """
        running = self._running.pop(job_id, None)
        self._active -= 1
        if task.cancelled():
            if running is None or running.cancel_reason is None:
                return  # not our cancel: the event loop itself is going away
            frame = _result(job_id, "cancelled")
        elif (e := task.exception()) is not None:  # _execute catches everything; be safe
            frame = _failed(job_id, type(e).__name__, _safe_str(e), None, True)
        else:
            frame = task.result()
        frame = self._write_result(frame)
        if running is not None:
            self._settle(running, frame)
        while self._waiting and self._active < self.concurrency:
            self._launch(self._waiting.popleft())
        self._check_drained()

    def _check_drained(self) -> None:
        if self._draining and not self._running and not self._hook_tasks:
            self._inbox.put_nowait(("drained", None))  # wakes the main loop

    async def _execute(self, job: _Running) -> protocol.ResultFrame:
        """Runs one job as a Soniq worker does: before_job hooks, the args
        validated, then the middleware chain around the handler. Returns its
        result frame; a cancel (async jobs) raises CancelledError."""
        handler, ctx = job.handler, job.ctx
        if handler is None:
            # As under a Soniq worker, an unregistered job runs no hook.
            return _failed(
                ctx.id, "UnknownJob", f"no handler registered for job {ctx.name!r}", None, False
            )
        await self._call_hooks("before_job", ctx.name, ctx.id, ctx.attempt)
        args: Any = job.args
        if handler.validate is not None:
            try:
                checked = handler.validate(args)
                if inspect.isawaitable(checked):
                    checked = await checked
            except Exception as e:  # CancelledError is no Exception: a cancel stays a cancel
                # Bad data stays bad: a permanent failure, with Soniq's text.
                return _failed(ctx.id, "ValueError", f"Corrupted argument data: {_safe_str(e)}", None, False,
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
            retryable = getattr(e, "retryable", True)
            return _failed(
                ctx.id,
                type(e).__name__,
                _safe_str(e),
                _format_traceback(e),
                retryable if isinstance(retryable, bool) else True,
            )
        if isinstance(value, Snooze):
            return _snooze(ctx.id, value)
        return _result(ctx.id, "done", result=value)

    def _chain(self, handler: _Handler, args: Any) -> CallNext:
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
        for mw in reversed(self._middleware):
            chain = _wrap(mw, chain)
        return chain

    async def _call_hooks(self, event: str, *args: Any) -> None:
        """Calls the hooks of ``event`` in registration order; one that raises
        is logged and the others still run (as under a Soniq worker)."""
        for fn in list(self._hooks[event]):
            try:
                value = fn(*args)
                if inspect.isawaitable(value):
                    await value
            except Exception as e:
                tb = "".join(traceback.format_exception(type(e), e, e.__traceback__)).rstrip()
                _log(f"{event} hook {_callable_name(fn)} failed (ignored): {type(e).__name__}: {_safe_str(e)}\n{tb}")

    def _settle(self, job: _Running, frame: Optional[protocol.ResultFrame]) -> None:
        """Once a job's result is reported (``frame``; None when the result
        went nowhere): its after_job or on_error hooks, in a task of their
        own, so that they neither delay the result nor count against the
        job's timeout. A job the sidecar cancelled for its timeout had its row
        failed by the sidecar: on_error; one cancelled at shutdown goes back
        to the queue: no hook."""
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
        elif frame is None:
            return
        elif frame["status"] == "done":
            duration_ms = round((time.monotonic() - job.started) * 1000, 2)
            event, args = "after_job", (ctx.name, ctx.id, duration_ms)
        elif frame["status"] == "failed" and frame["error"] is not None:
            event, args = "on_error", (ctx.name, ctx.id, _error_text(frame["error"]), ctx.attempt)
        else:
            return  # snooze: neither
        if not self._hooks[event]:
            return
        task = asyncio.ensure_future(self._call_hooks(event, *args))
        self._hook_tasks.add(task)
        task.add_done_callback(self._hooks_ended)

    def _hooks_ended(self, task: asyncio.Task[None]) -> None:
        self._hook_tasks.discard(task)
        if self._chan is not None:
            self._check_drained()

    async def _hooks_idle(self) -> None:
        """Returns once every after_job / on_error hook has returned."""
        while self._hook_tasks:
            await asyncio.wait(set(self._hook_tasks))

    # --------------------------------------------------------------- writing

    def _checked_result(self, frame: protocol.ResultFrame) -> Tuple[protocol.ResultFrame, bytes]:
        """The result as it is reported, encoded: a value JSON cannot carry or
        one over the frame limit fails the job instead (either transport)."""
        try:
            data = protocol.encode(frame)
        except (TypeError, ValueError) as e:
            # The handler returned something JSON cannot carry.
            frame = _failed(
                frame["id"],
                "TypeError",
                f"job result is not JSON-serialisable: {e}",
                None,
                False,
            )
            data = protocol.encode(frame)
        if len(data) > self._max_frame_bytes:
            frame = _failed(
                frame["id"],
                "ResultTooLarge",
                f"encoded result is {len(data)} bytes, over the {self._max_frame_bytes}-byte frame limit",
                None,
                False,
            )
            data = protocol.encode(frame)
        return frame, data

    def _write_result(self, frame: protocol.ResultFrame) -> protocol.ResultFrame:
        """Writes a job's result frame; returns it as written."""
        frame, data = self._checked_result(frame)
        self._send(data)
        return frame

    def _write(self, frame: protocol.Frame) -> None:
        self._send(protocol.encode(frame))

    def _send(self, data: bytes) -> None:
        chan = self._chan
        if chan is None or self._failure is not None:
            return  # serve() is giving up: nothing more goes out
        buf = memoryview(data + b"\n")
        # One frame per locked section: frames never interleave, and os.write
        # on the raw fd has no user-space buffer, so each frame is "flushed".
        with chan.write_lock:
            try:
                while buf:
                    n = os.write(chan.wfd, buf)
                    buf = buf[n:]
            except BrokenPipeError:
                # Nobody reads our frames any more: the sidecar is gone.
                self._fail(EXIT_SIDECAR_GONE, "stdout closed by the sidecar; exiting")
                self._wake()


# Error texts are cut to this many characters so that a failed result stays far
# below the frame limit whatever the exception carries.
MAX_ERROR_TEXT = 64 * 1024


def _safe_str(e: BaseException) -> str:
    try:
        return str(e)
    except Exception as inner:  # a broken __str__ must not lose the result
        return f"<str() of {type(e).__name__} failed: {type(inner).__name__}>"


def _truncate_head(text: str) -> str:
    if len(text) <= MAX_ERROR_TEXT:
        return text
    return f"{text[:MAX_ERROR_TEXT]}... [truncated {len(text) - MAX_ERROR_TEXT} chars]"


def _truncate_tail(text: str) -> str:
    # For tracebacks the end (the innermost frames, the exception) matters most.
    if len(text) <= MAX_ERROR_TEXT:
        return text
    return f"[truncated {len(text) - MAX_ERROR_TEXT} chars] ...{text[-MAX_ERROR_TEXT:]}"


def _result(
    job_id: str,
    status: protocol.ResultStatus,
    *,
    result: Any = None,
    error: Optional[protocol.ErrorInfo] = None,
    seconds: Optional[float] = None,
    reason: Optional[str] = None,
) -> protocol.ResultFrame:
    return {
        "type": "result",
        "id": job_id,
        "status": status,
        "result": result,
        "error": error,
        "seconds": seconds,
        "reason": reason,
    }


def _failed(
    job_id: str, etype: str, message: str, tb: Optional[str], retryable: bool, reason: Optional[str] = None
) -> protocol.ResultFrame:
    return _result(
        job_id,
        "failed",
        error={
            "type": _truncate_head(etype),
            "message": _truncate_head(message),
            "traceback": None if tb is None else _truncate_tail(tb),
            "retryable": retryable,
            "reason": reason,
        },
    )


# Frames of the SDK and of the thread pool that lead into the handler: noise in
# a job's traceback, so they are cut from its top.
_PLUMBING_FILES = frozenset({__file__, getattr(sys.modules.get("concurrent.futures.thread"), "__file__", "")})


def _format_traceback(e: BaseException) -> str:
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _PLUMBING_FILES:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(e), e, tb or e.__traceback__))


def _snooze(job_id: str, s: Snooze) -> protocol.ResultFrame:
    return _result(job_id, "snooze", seconds=s.seconds, reason=s.reason)


def _error_text(error: protocol.ErrorInfo) -> str:
    """A failure as the sidecar writes it to the row's last_error."""
    text = f"{error['type']}: {error['message']}"
    if error["traceback"]:
        text += "\n" + error["traceback"]
    return text


def _wrap(mw: Callable[..., Any], call_next: CallNext) -> CallNext:
    async def call(ctx: JobContext) -> Any:
        value = mw(ctx, call_next)
        if inspect.isawaitable(value):
            value = await value
        return value

    return call


def _callable_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _listen_path(argv: List[str], env: Mapping[str, str]) -> Optional[str]:
    """The socket path of attach mode: ``--listen PATH`` (or ``--listen=PATH``)
    on the command line, else $SONIQ_LISTEN; None for a handler the sidecar
    spawns."""
    for i, arg in enumerate(argv):
        if arg == "--listen":
            if i + 1 >= len(argv) or not argv[i + 1]:
                raise ServeError("--listen needs a socket path", EXIT_USAGE)
            return argv[i + 1]
        if arg.startswith("--listen="):
            if arg == "--listen=":
                raise ServeError("--listen needs a socket path", EXIT_USAGE)
            return arg[len("--listen="):]
    return env.get("SONIQ_LISTEN") or None


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


def _protect_stdio() -> _Channel:
    """Moves the protocol off fds 0 and 1 so user code cannot disturb it.

    stdout: the pipe to the sidecar is duplicated to a private fd that only the
    SDK writes to; fd 1 then becomes a copy of stderr and sys.stdout is rebound
    to sys.stderr. A stray print(), os.write(1, ...) or a child process writing
    to its stdout now lands in the log instead of corrupting the frame stream.

    stdin: likewise duplicated to a private fd, and fd 0 replaced by /dev/null,
    so neither input() nor a subprocess that inherits stdin can swallow frames.

    os.dup() returns non-inheritable fds, so subprocesses never see the
    private ones.
    """
    for stream in (sys.stdout, sys.__stdout__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    wfd = os.dup(1)
    rfd = os.dup(0)
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout = sys.stderr
    sys.stdin = open(os.devnull)  # noqa: SIM115 - lives as long as the process
    return _Channel(rfd=rfd, wfd=wfd)


def _read_frames(
    fd: int, max_frame_bytes: int, loop: asyncio.AbstractEventLoop, inbox: asyncio.Queue[Tuple[str, Any]]
) -> None:
    """Reader thread: splits the private stdin into lines for the event loop.

    It uses os.read on the raw fd rather than a buffered file: this thread is
    a daemon still blocked in read when the process exits, and a daemon thread
    holding a BufferedReader's lock at interpreter shutdown is a fatal error.
    """

    def put(item: Tuple[str, Any]) -> None:
        try:
            loop.call_soon_threadsafe(inbox.put_nowait, item)
        except RuntimeError:
            pass  # the loop is closed: the process is exiting

    buf = bytearray()
    # A line may carry one "\r" before its "\n" that does not count.
    limit = max_frame_bytes + 1
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except InterruptedError:
            continue
        except OSError as e:
            put(("error", f"reading stdin: {e}"))
            return
        if not chunk:
            if buf:
                # Every frame ends with "\n": bytes after the last one are a
                # truncated frame, not something to run.
                _log(f"partial last line before EOF ignored: {_quote(bytes(buf))}")
            put(("eof", None))
            return
        start = len(buf)
        buf += chunk
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            line = bytes(buf[:nl])
            del buf[: nl + 1]
            start = 0
            if line == b"" or line == b"\r":
                continue  # empty lines are ignored
            put(("line", line))
        if len(buf) > limit:
            put(("error", f"oversize: a frame exceeds {max_frame_bytes} bytes"))
            return


def _quote(line: bytes, limit: int = 200) -> str:
    text = repr(line[:limit])
    return text + ("..." if len(line) > limit else "")


def _log(message: str) -> None:
    try:
        sys.stderr.write(f"soniq-handler[{os.getpid()}]: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _exit(code: int) -> NoReturn:
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
