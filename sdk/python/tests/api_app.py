"""Handlers of the worker-API tests (test_api.py): hooks, middleware and
validate=, as a Soniq user writes them. Every hook, middleware step and
handler writes one line ``EV <job id> <what>`` on stderr, in the order they
run. Run with ``python3 -m soniq_handler api_app``.

$API_APP_RAISING_HOOKS=1 also registers hooks that raise (first of each kind).
$API_APP_RELEASE names a file: after_job of a job whose id starts with
"slowhook", and on_error of one whose id starts with "slowerr", wait until
that file exists.
"""

import asyncio
import contextvars
import os
import sys
import threading

from pydantic import BaseModel

import soniq_handler

app = soniq_handler.App(concurrency=4, sync_concurrency=2)

request_tag = contextvars.ContextVar("request_tag", default="unset")


def ev(job_id, what):
    sys.stderr.write(f"EV {job_id} {what}\n")
    sys.stderr.flush()


# ------------------------------------------------------------------- hooks

if os.environ.get("API_APP_RAISING_HOOKS") == "1":

    @app.before_job
    def raising_before(job_name, job_id, attempt):
        raise RuntimeError("before hook boom")

    @app.after_job
    async def raising_after(job_name, job_id, duration_ms):
        raise RuntimeError("after hook boom")

    @app.on_error
    def raising_on_error(job_name, job_id, error, attempt):
        raise RuntimeError("on_error hook boom")


@app.before_job
def before_one(job_name, job_id, attempt):
    ev(job_id, f"before_job#1 {job_name} attempt={attempt}")


@app.before_job
async def before_two(job_name, job_id, attempt):
    await asyncio.sleep(0)
    ev(job_id, "before_job#2")


@app.after_job
async def after(job_name, job_id, duration_ms):
    ev(job_id, f"after_job {job_name} duration_ms_is_float={isinstance(duration_ms, float) and duration_ms >= 0}")
    if job_id.startswith("slowhook"):
        release = os.environ["API_APP_RELEASE"]
        ev(job_id, "after_job waiting")
        while not os.path.exists(release):
            await asyncio.sleep(0.01)
        ev(job_id, "after_job released")


@app.on_error
def on_error(job_name, job_id, error, attempt):
    # The error text on one line, so a test can read it back.
    ev(job_id, f"on_error {job_name} attempt={attempt} error={error!r}")


@app.on_error
async def slow_on_error(job_name, job_id, error, attempt):
    if job_id.startswith("slowerr"):
        release = os.environ["API_APP_RELEASE"]
        ev(job_id, "on_error waiting")
        while not os.path.exists(release):
            await asyncio.sleep(0.01)
        ev(job_id, "on_error released")


# -------------------------------------------------------------- middleware


@app.middleware
async def outer(ctx, call_next):
    ev(ctx.job_id, "outer enter")
    token = request_tag.set(f"tag-{ctx.job_id}")
    try:
        value = await call_next(ctx)
    except asyncio.CancelledError:
        ev(ctx.job_id, "outer saw CancelledError")
        raise
    except Exception as e:
        ev(ctx.job_id, f"outer saw {type(e).__name__}")
        raise
    finally:
        request_tag.reset(token)
    ev(ctx.job_id, "outer exit")
    if isinstance(value, dict) and value.get("wrap_me"):
        return {"wrapped": value}
    return value


async def inner(ctx, call_next):
    ev(ctx.job_id, "inner enter")
    if ctx.name == "api.short_circuit":
        ev(ctx.job_id, "inner short-circuits")
        return {"short": True}
    if ctx.name == "api.mw_raises":
        raise LookupError("middleware said no")
    value = await call_next(ctx)
    ev(ctx.job_id, "inner exit")
    return value


app.use(inner)


# ---------------------------------------------------------------- handlers


def describe(args, ctx, kind):
    return {
        "kind": kind,
        "args": args,
        "tag": request_tag.get(),
        "main_thread": threading.current_thread() is threading.main_thread(),
    }


@app.job("api.async")
async def handler_async(args, ctx):
    ev(ctx.id, "handler")
    return describe(args, ctx, "async")


@app.job("api.sync")
def handler_sync(args, ctx):
    ev(ctx.id, "handler")
    return describe(args, ctx, "sync")


@app.job("api.fail_async")
async def fail_async(args, ctx):
    ev(ctx.id, "handler")
    raise RuntimeError("async boom")


@app.job("api.fail_sync")
def fail_sync(args, ctx):
    ev(ctx.id, "handler")
    raise RuntimeError("sync boom")


@app.job("api.snooze")
async def snooze(args, ctx):
    ev(ctx.id, "handler")
    return soniq_handler.Snooze(5, "later")


@app.job("api.wrap")
async def wrap(args, ctx):
    ev(ctx.id, "handler")
    return {"wrap_me": True}


@app.job("api.short_circuit")
async def short_circuit(args, ctx):
    ev(ctx.id, "handler")
    return {"short": False}


@app.job("api.mw_raises")
async def mw_raises(args, ctx):
    ev(ctx.id, "handler")
    return {}


@app.job("api.hang")
async def hang(args, ctx):
    ev(ctx.id, "handler")
    await asyncio.sleep(60)


def normalise(args):
    """A validate= callable: returns the args the handler gets, or raises."""
    try:
        return {"n": int(args["n"])}
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"n must be a whole number, got {args.get('n')!r}") from None


class OrderArgs(BaseModel):
    order_id: int
    note: str = "none"


@app.job("api.valid_fn", validate=normalise)
async def valid_fn(args, ctx):
    ev(ctx.id, "handler")
    return {"got": args}


@app.job("api.valid_model_sync", validate=OrderArgs)
def valid_model_sync(args, ctx):
    ev(ctx.id, "handler")
    return {"got": args}


@app.job("api.valid_model_async", validate=OrderArgs)
async def valid_model_async(args, ctx):
    ev(ctx.id, "handler")
    return {"got": args}


def check_only(args):
    if "forbidden" in args:
        raise KeyError("forbidden")


@app.job("api.valid_check_only", validate=check_only)
async def valid_check_only(args, ctx):
    ev(ctx.id, "handler")
    return {"got": args}


@app.job("api.ctx")
async def ctx_fields(args, ctx):
    return {
        "job_id": ctx.job_id,
        "job_name": ctx.job_name,
        "worker_id": ctx.worker_id,
        "scheduled_at": None if ctx.scheduled_at is None else ctx.scheduled_at.isoformat(),
        "created_at": None if ctx.created_at is None else ctx.created_at.isoformat(),
    }
