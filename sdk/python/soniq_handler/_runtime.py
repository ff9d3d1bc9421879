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
- cancels async jobs for the sidecar (a job_timeout, a shutdown_timeout, or
  ``user``: someone ran ``soniq-sidecar cancel``), the reason as the
  ``CancelledError``'s message;
- settles each result where a Soniq worker does: a failure's on_error hooks
  run before it is reported (Soniq calls on_error before it writes the
  failure), inside the job; a success is checked (JSON, the frame limit),
  reported once through the callback the transport gave with the job, and
  only then are its after_job hooks called (Soniq calls after_job after
  mark_job_done), in a task of their own that holds no slot;
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

What an App registers is a ``Registry`` (_registry.py); the result frames
and the check each passes before it is reported are in _results.py; the
results attach mode keeps for a session, in _ledger.py.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import os
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

from . import protocol
from ._children import Children
from ._log import exit_now, log
from ._registry import Handler, Registry, job_context
from ._results import (
    encode_result,
    error_text,
    failed,
    format_traceback,
    raised,
    result,
    safe_str,
    snoozed,
    type_name,
    unencodable,
)
from ._types import EXIT_CANNOT_START, SDK_NAME, CallNext, JobContext, ServeError, Snooze

# The callback a transport gives with each job: the job's result frame as it
# is reported (checked) and its encoding on stdio.
Report = Callable[[protocol.ResultFrame, bytes], None]


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
    # The result checked and encoded inside the job (so that a value that
    # cannot be sent gets on_error before its failure goes out): reported as
    # it is when it is the frame the job ended with.
    encoded: Optional[Tuple[protocol.ResultFrame, bytes]] = None
    # Its task's done callback (_finish) reports it: always with hooks or
    # middleware, else only once it was cancelled or raised (see _run).
    watched: bool = False

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
        self._hook_tasks: Set[asyncio.Task[None]] = set()  # after_job hooks still running
        self._executor: Optional[ThreadPoolExecutor] = None
        # The context jobs start from (that of serve()): a job launched from
        # inside another job's task must not inherit what its handler set.
        self._context = contextvars.copy_context()
        # The child jobs its handlers make (ctx.enqueue); the transport
        # connects it.
        self.children = Children(max_frame_bytes)

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
        ctx = job_context(msg)
        ctx.__dict__["_children"] = self.children  # ctx.enqueue (_children.py)
        self._jobs[job_id] = _Job(self.registry.handlers.get(msg["name"]), msg["args"], ctx, report)
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
            # The reason is the CancelledError's message (its args[0]) in the
            # handler: it can tell a user's cancel from a timeout.
            self._watch(job_id, job)
            job.task.cancel(reason)  # _finish reports it
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
        """No job held and no after_job hook running."""
        return not self._jobs and not self._hook_tasks

    async def hooks_idle(self) -> None:
        """Returns once every after_job hook has returned."""
        while self._hook_tasks:
            await asyncio.wait(set(self._hook_tasks))

    def _launch(self, job_id: str) -> None:
        job = self._jobs[job_id]
        loop = asyncio.get_running_loop()
        reg = self.registry
        hooks = reg.hooks
        self._active += 1
        if reg.middleware or hooks["before_job"] or hooks["after_job"] or hooks["on_error"]:
            job.task = loop.create_task(self._execute(job))
            self._watch(job_id, job)
        else:
            # Nothing of the App's runs around the handler: the task reports
            # its own result as it ends, without a callback scheduled after it.
            job.task = loop.create_task(self._run(job_id, job))

    def _watch(self, job_id: str, job: _Job, context: Optional[contextvars.Context] = None) -> None:
        """Has the job's task report its result once it is done (_finish)."""
        if not job.watched:
            job.watched = True
            assert job.task is not None
            job.task.add_done_callback(lambda t: self._finish(job_id, t), context=context)

    async def _run(self, job_id: str, job: _Job) -> protocol.ResultFrame:
        """A job of an App with no hooks and no middleware: runs it and
        reports its result at once, in the task's last step. One cancelled
        (a cancel watches it first: one cancelled before its first step runs
        none of this) or ending in an exception reports through _finish."""
        try:
            frame = await self._execute(job)
        except BaseException:
            self._watch(job_id, job, self._context)
            raise
        if job.watched:
            return frame  # cancelled, the cancel swallowed by the handler: _finish reports it
        del self._jobs[job_id]
        self._active -= 1
        try:
            self._report(job, frame)
        finally:
            if self._waiting and self._active < self.concurrency:
                self._context.run(self._launch_waiting)
            self.on_change()
        return frame

    def _launch_waiting(self) -> None:
        """Starts jobs waiting for a slot while slots are free."""
        while self._waiting and self._active < self.concurrency:
            self._launch(self._waiting.popleft())

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
            self._launch_waiting()
            self.on_change()

    def _report(self, job: _Job, frame: protocol.ResultFrame) -> None:
        """Reports a job's result (checked and encoded), then settles it. A
        transport that cannot take it ends serving: nothing else would ever
        send that result, and the sidecar settles the jobs of a process that
        exits."""
        try:
            if job.encoded is not None and job.encoded[0] is frame:
                data = job.encoded[1]
            else:
                frame, data = encode_result(frame, self.max_frame_bytes)
            job.report(frame, data)
        except Exception as e:
            tb = format_traceback(e) or ""
            self.fail(EXIT_CANNOT_START, f"could not report the result of job {job.ctx.id}: "
                      f"{type_name(e)}: {safe_str(e)}\n{tb}".rstrip())
            return
        self._settle(job, frame)

    async def _execute(self, job: _Job) -> protocol.ResultFrame:
        """Runs one job as a Soniq worker does: before_job hooks, the args
        validated, then the middleware chain around the handler; a failure
        then runs its on_error hooks, before it is reported. Returns its
        result frame; a cancel (async jobs) raises CancelledError, after the
        on_error hooks when it was for the job's timeout."""
        handler, ctx = job.handler, job.ctx
        if handler is None:
            # As under a Soniq worker, an unregistered job runs no hook.
            return failed(ctx.id, "UnknownJob", f"no handler registered for job {ctx.name!r}", None, False)
        hooks = self.registry.hooks
        if hooks["before_job"]:
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
            if handler.is_async and not self.registry.middleware:
                # The chain of no middleware, without building it.
                value = await (handler.func(args, ctx) if handler.wants_ctx else handler.func(args))
            else:
                value = await self._chain(handler, args)(ctx)
        except asyncio.CancelledError:
            if job.cancel_reason == "job_timeout":
                # A job timeout is a failure of the job (the sidecar fails
                # its row): on_error, in Soniq's words (the row's last_error
                # adds the timeout, which the sidecar knows and the handler
                # does not). A cancel at shutdown puts the job back: no hook.
                await self._call_hooks("on_error", ctx.name, ctx.id, "Job timed out", ctx.attempt)
            raise  # reported by _finish as "cancelled"
        except Snooze as s:
            return snoozed(ctx.id, s)
        except BaseException as e:  # noqa: B902 - a handler's failure never kills the process
            return await self._failed(job, raised(ctx.id, e))
        done = result(ctx.id, "done", value=value)
        if value is None:
            # Nothing to check but the frame's size: its text written
            # directly, the same bytes as encode_result's (which handles
            # the rest: a frame over the limit, an id that cannot be written).
            data = protocol.encode_done(ctx.id)
            if data is not None and len(data) <= self.max_frame_bytes:
                job.encoded = (done, data)
                return done
        try:
            is_snooze = isinstance(value, Snooze)
        except BaseException as e:  # noqa: B036 - a __class__ that raises: the value cannot be written either
            return await self._failed(job, unencodable(done, e))
        if is_snooze:
            return snoozed(ctx.id, value)
        # Checked here, inside the job: a value that cannot be sent is a
        # failure, and gets on_error before it goes out.
        job.encoded = encode_result(done, self.max_frame_bytes, ctx.name)
        if job.encoded[0]["status"] == "failed":
            return await self._failed(job, job.encoded[0])
        return job.encoded[0]

    async def _failed(self, job: _Job, frame: protocol.ResultFrame) -> protocol.ResultFrame:
        """A failure of a job that ran: its on_error hooks, with the text the
        row's last_error gets (of the failure as it will be reported), then
        the failure to report."""
        if frame["error"] is not None and self.registry.hooks["on_error"]:
            checked, data = encode_result(frame, self.max_frame_bytes)
            job.encoded = (checked, data)
            ctx = job.ctx
            assert checked["error"] is not None
            await self._call_hooks("on_error", ctx.name, ctx.id, error_text(checked["error"]), ctx.attempt)
            return checked
        return frame

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
                tb = (format_traceback(e) or "").rstrip()
                log(f"{event} hook {_callable_name(fn)} failed (ignored): {type_name(e)}: {safe_str(e)}\n{tb}")

    def _settle(self, job: _Job, frame: protocol.ResultFrame) -> None:
        """Once a job's result is reported: the after_job hooks of a job that
        succeeded, in a task of their own, so that they neither delay the
        result nor hold its slot nor count against its timeout (Soniq calls
        after_job once the row is marked done)."""
        if not job.ran or job.cancel_reason is not None or frame["status"] != "done":
            return  # never ran, cancelled, failed (on_error ran in the job) or snoozed
        if not self.registry.hooks["after_job"]:
            return
        ctx = job.ctx
        duration_ms = round((time.monotonic() - job.started) * 1000, 2)
        task = asyncio.ensure_future(self._call_hooks("after_job", ctx.name, ctx.id, duration_ms))
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
