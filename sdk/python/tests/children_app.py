"""Handlers that make child jobs (ctx.enqueue), for test_children.py
(``python3 -m soniq_handler children_app``)."""

from datetime import timedelta

import soniq_handler
from soniq_handler import ChildJobError

app = soniq_handler.App(concurrency=4, sync_concurrency=2)


@app.job("c.fan")
async def fan(args, ctx):
    opts = args.get("opts", {})
    return {"ids": [ctx.enqueue("c.kid", {"n": i}, **opts) for i in range(args.get("n", 1))]}


@app.job("c.fan_sync")
def fan_sync(args, ctx):
    return {"ids": [ctx.enqueue("c.kid", {"n": i}) for i in range(args.get("n", 1))]}


@app.job("c.now_sync")
def now_sync(args, ctx):
    try:
        return {"job_id": ctx.enqueue("c.kid", {"at": "once"}, immediate=True)}
    except ChildJobError as e:
        return {"code": e.code, "message": e.message}


@app.job("c.now_async")
async def now_async(args, ctx):
    try:
        return {"job_id": await ctx.enqueue_async("c.kid", {"at": "once"}, immediate=True)}
    except ChildJobError as e:
        return {"code": e.code, "message": e.message}


@app.job("c.blocking")
async def blocking(args, ctx):
    try:
        ctx.enqueue("c.kid", {}, immediate=True)
    except RuntimeError as e:
        return {"error": str(e)}
    return {"error": None}


@app.job("c.bad")
async def bad(args, ctx):
    calls = {
        "empty name": lambda: ctx.enqueue("", {}),
        "args a list": lambda: ctx.enqueue("c.kid", [1, 2]),
        "args not JSON": lambda: ctx.enqueue("c.kid", {"x": object()}),
        "queue empty": lambda: ctx.enqueue("c.kid", {}, queue=""),
        "priority a float": lambda: ctx.enqueue("c.kid", {}, priority=1.5),
        "priority a bool": lambda: ctx.enqueue("c.kid", {}, priority=True),
        "max_attempts 0": lambda: ctx.enqueue("c.kid", {}, max_attempts=0),
        "delay negative": lambda: ctx.enqueue("c.kid", {}, delay=-1),
        "delay a string": lambda: ctx.enqueue("c.kid", {}, delay="5s"),
        "unique a string": lambda: ctx.enqueue("c.kid", {}, unique="yes"),
        "frame too big": lambda: ctx.enqueue("c.kid", {"pad": "x" * 5000}),
    }
    out = {}
    for label, call in calls.items():
        try:
            call()
            out[label] = None
        except Exception as e:
            out[label] = type(e).__name__
    out["timedelta delay"] = ctx.enqueue("c.kid", {}, delay=timedelta(seconds=90))
    return out
