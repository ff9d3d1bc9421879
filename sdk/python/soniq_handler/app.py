"""The public API: App (jobs, middleware, hooks; run and serve) and the types
a handler uses. The jobs run in the Runtime (_runtime.py), whichever
transport carries them (_stdio.py, _unix.py, _listen.py; chosen in _serve.py);
the command line is _cli.py."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from typing import Any, Callable, List, NoReturn, Optional, Sequence, TypeVar

from . import _serve, protocol
from ._log import log
from ._options import UsageError, listen_option
from ._registry import Registry, validator
from ._runtime import Runtime
from ._types import EXIT_OK, EXIT_USAGE, Middleware, Validator

# The package's public names are soniq_handler.__all__ (__init__.py), the one
# list of them; this module defines App and lists nothing of its own.

# A job handler: f(args) or f(args, ctx), a plain def or an async def. The
# decorator hands it back unchanged, with its own type.
HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])
MiddlewareT = TypeVar("MiddlewareT", bound=Middleware)
# Hooks, called as Soniq calls them: before_job(job_name, job_id, attempt),
# after_job(job_name, job_id, duration_ms), on_error(job_name, job_id, error,
# attempt); a plain def or an async def, handed back unchanged.
HookT = TypeVar("HookT", bound=Callable[..., Any])
BeforeJobT = TypeVar("BeforeJobT", bound=Callable[[str, str, int], Any])
AfterJobT = TypeVar("AfterJobT", bound=Callable[[str, str, float], Any])
OnErrorT = TypeVar("OnErrorT", bound=Callable[[str, str, str, int], Any])


class App:
    """A registry of job handlers, served to soniq-sidecar by ``run()`` or
    ``serve()``.

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
        self._max_frame_bytes = max_frame_bytes
        self._registry = Registry()
        self._serving = False
        self._exit_at_once = False  # set by run(): see Runtime.fail

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
        check = validator(name, validate)

        def register(func: HandlerT) -> HandlerT:
            self._registry.add_job(name, func, check)
            return func

        return register

    def middleware(self, fn: MiddlewareT) -> MiddlewareT:
        """Registers a middleware wrapping every job: ``async def mw(ctx,
        call_next)``. ``await call_next(ctx)`` runs the rest of the chain and
        returns the handler's value; the middleware returns it (or another
        value: that becomes the result), may skip call_next altogether, and
        what it raises fails the job as if the handler had raised it. The first
        registered is the outermost. Usable as a decorator."""
        self._registry.add_middleware(fn)
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
        succeeded, once its result is reported (as Soniq calls it after
        marking the row done): it holds no slot and no timeout applies. A
        hook that raises is logged and ignored."""
        return self._add_hook("after_job", fn)

    def on_error(self, fn: OnErrorT) -> OnErrorT:
        """Registers ``fn(job_name, job_id, error, attempt)``, called after a
        job failed (``error`` is the text the row's last_error gets), before
        its failure is reported (as Soniq calls it before it writes the
        failure). A hook that raises is logged and ignored."""
        return self._add_hook("on_error", fn)

    def _add_hook(self, event: str, fn: HookT) -> HookT:
        self._registry.add_hook(event, fn)
        return fn

    @property
    def jobs(self) -> List[protocol.HelloJob]:
        """The ``jobs`` list of hello, in registration order."""
        return self._registry.jobs

    # ------------------------------------------------------------------- run

    def run(self, listen: Optional[str] = None, *, argv: Optional[Sequence[str]] = None) -> NoReturn:
        """Serves the protocol until the sidecar shuts the process down (in
        attach mode: until SIGTERM), then exits the process:
        ``asyncio.run(app.serve(listen))`` plus the exit status the sidecar
        expects (0, or that of the ServeError). Never returns.

        ``listen`` is attach mode's socket path. When it is None, run() is a
        script's entry point and reads the script's command line: ``--listen
        PATH`` (or ``--listen=PATH``) among ``argv`` (by default
        ``sys.argv[1:]``; the script's other arguments are left alone), else
        $SONIQ_LISTEN. A --listen without a path exits with status 2.
        """
        if listen is None:
            try:
                listen = listen_option(sys.argv[1:] if argv is None else argv)
            except UsageError as e:
                log(str(e))
                sys.exit(EXIT_USAGE)
        # Here the process is ours: one that cannot go on exits at once from
        # inside the loop (Runtime.fail), so that neither asyncio.run's task
        # cleanup nor a sync handler still running in a thread delays the exit.
        self._exit_at_once = True
        asyncio.run(self.serve(listen))
        # Clean exit through SystemExit so atexit hooks (logging.shutdown, user
        # cleanup) still run; every job has finished, the pool threads are idle.
        sys.exit(EXIT_OK)

    async def serve(self, listen: Optional[str] = None) -> None:
        """Serves the protocol in the running event loop until the sidecar
        shuts the process down (or closes stdin) and every job held has
        reported its result; then returns. For programs that own their event
        loop; ``run()`` is ``asyncio.run(app.serve())`` plus the exit status.

        The transport is $SONIQ_TRANSPORT: stdio (NDJSON on stdin and stdout,
        the default) or unix (gRPC on a Unix socket, see _unix; it needs the
        ``unix`` extra: ``pip install "soniq-handler[unix]"``). With
        ``listen`` (default: $SONIQ_LISTEN) it serves a socket of its own at
        that path instead, across sidecar sessions, until SIGTERM (attach
        mode, see _listen; the unix extra too). serve() reads no command
        line. The stdio transport takes over the process's stdin and stdout,
        so an App is served once per process. Raises ServeError when serving
        cannot start or go on (jobs still held are then abandoned).
        """
        if self._serving:
            raise RuntimeError("App.serve() runs once per process")
        self._serving = True
        if listen is None:
            listen = os.environ.get("SONIQ_LISTEN") or None
        elif not listen:
            raise ValueError("listen must be a socket path or None")
        rt = Runtime(
            self._registry,
            concurrency=self.concurrency,
            sync_concurrency=self.sync_concurrency,
            max_frame_bytes=self._max_frame_bytes,
            exit_at_once=self._exit_at_once,
        )
        await _serve.serve(rt, listen)
