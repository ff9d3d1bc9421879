"""The chaos run's handler on the Python SDK: spawned by a sidecar over stdio,
or serving a socket with --listen (attach mode).

Every execution appends a `start` line, then an `end` line with its outcome
(ok, fail, cancelled), to $CHAOS_HISTORY with one os.write on an O_APPEND
descriptor, so lines of concurrent executions and processes never interleave.
An execution whose process is killed has a start and no end. Line fields:
event token job_id attempt sidecar pid ppid unix_micros [outcome].
"""
import asyncio
import itertools
import os
import time

import soniq_handler

HISTORY = os.environ["CHAOS_HISTORY"]
SIDECAR = os.environ["CHAOS_SIDECAR"]
_seq = itertools.count(1)

app = soniq_handler.App(
    concurrency=int(os.environ.get("CHAOS_CONCURRENCY", "8")),
    sync_concurrency=int(os.environ.get("CHAOS_SYNC_CONCURRENCY", "4")),
)


def _record(event, token, ctx, outcome=""):
    line = "%s %s %s %d %s %d %d %d %s\n" % (
        event, token, ctx.id, ctx.attempt, SIDECAR, os.getpid(), os.getppid(), time.time_ns() // 1000, outcome)
    fd = os.open(HISTORY, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _start(ctx):
    token = "%d-%d" % (os.getpid(), next(_seq))
    _record("start", token, ctx)
    return token


async def _run_async(args, ctx, fail):
    token = _start(ctx)
    try:
        await asyncio.sleep(args["ms"] / 1000)
    except asyncio.CancelledError:
        _record("end", token, ctx, "cancelled")
        raise
    if fail:
        _record("end", token, ctx, "fail")
        raise RuntimeError("designed to fail (attempt %d)" % ctx.attempt)
    _record("end", token, ctx, "ok")
    return {"seq": args["seq"]}


def _run_sync(args, ctx, fail):
    token = _start(ctx)
    time.sleep(args["ms"] / 1000)
    if fail:
        _record("end", token, ctx, "fail")
        raise RuntimeError("designed to fail (attempt %d)" % ctx.attempt)
    _record("end", token, ctx, "ok")
    return {"seq": args["seq"]}


@app.job("chaos.async")
async def chaos_async(args, ctx):
    return await _run_async(args, ctx, False)


@app.job("chaos.fail_async")
async def chaos_fail_async(args, ctx):
    return await _run_async(args, ctx, True)


@app.job("chaos.sync")
def chaos_sync(args, ctx):
    return _run_sync(args, ctx, False)


@app.job("chaos.fail_sync")
def chaos_fail_sync(args, ctx):
    return _run_sync(args, ctx, True)


app.run()
