"""What an App registers (handlers by name, middleware, hooks) and what a
job's handler is given: ``validate=`` as a function of the args, and the
JobContext of a job frame."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Type

from . import protocol
from ._types import JobContext, Validator, job_context_of

HOOK_EVENTS = ("before_job", "after_job", "on_error")


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
    return job_context_of(
        msg["id"],
        msg["name"],
        msg["attempt"],
        msg["max_attempts"],
        msg["queue"],
        msg["traceparent"],
        msg["deadline"],
        msg["worker_id"] or "",
        msg["scheduled_at"],
        msg["created_at"],
    )
