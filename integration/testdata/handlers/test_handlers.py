"""Handlers for the integration tests, on the Python SDK (sdk/python)."""
import asyncio
import os
import sys
import time

import soniq_handler

app = soniq_handler.App(
    concurrency=int(os.environ.get("TEST_CONCURRENCY", "8")),
    sync_concurrency=int(os.environ.get("TEST_SYNC_CONCURRENCY", "4")),
)


def record(event, ctx):
    path = os.environ.get("TEST_RECORD")
    if path:
        with open(path, "a") as f:
            f.write(f"{event} {ctx.id} {os.getpid()} {ctx.attempt}\n")


@app.job("t.noop")
async def noop(args, ctx):
    return None


@app.job("t.record")
async def record_job(args, ctx):
    record("run", ctx)
    return {"pid": os.getpid()}


@app.job("t.trace")
async def trace(args, ctx):
    # The W3C traceparent the sidecar put in the job frame, as the SDK hands it over.
    record("trace", ctx)
    path = os.environ.get("TEST_RECORD")
    with open(path + ".traceparent", "a") as f:
        f.write(f"{ctx.id} {ctx.traceparent}\n")
    return None


@app.job("t.sleep_async")
async def sleep_async(args, ctx):
    record("start", ctx)
    if args.get("trigger"):
        # Returns as soon as the test creates this file (within seconds).
        deadline = time.monotonic() + args["seconds"]
        while not os.path.exists(args["trigger"]) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    else:
        await asyncio.sleep(args["seconds"])
    record("end", ctx)
    if args.get("pid"):
        # Tells which handler process wrote the row's result.
        return {"slept": args["seconds"], "pid": os.getpid()}
    return {"slept": args["seconds"]}


@app.job("t.await_cancel")
async def await_cancel(args, ctx):
    # Waits to be cancelled and records the cancel's reason: the
    # CancelledError's message.
    record("start", ctx)
    try:
        await asyncio.sleep(args.get("seconds", 60))
    except asyncio.CancelledError as e:
        record("cancelled-%s" % (e.args[0] if e.args else "none"), ctx)
        raise
    record("end", ctx)
    return {"late": True}


@app.job("t.sleep_sync")
def sleep_sync(args, ctx):
    record("start", ctx)
    time.sleep(args["seconds"])
    record("end", ctx)
    return {"slept": args["seconds"]}


@app.job("t.stubborn")
async def stubborn(args, ctx):
    # Ignores cancellation: finishes anyway, a little later.
    record("start", ctx)
    try:
        await asyncio.sleep(args["seconds"])
    except asyncio.CancelledError:
        record("cancelled", ctx)
        await asyncio.sleep(args.get("extra", 0.2))
    return {"late": True}


@app.job("t.fail")
def fail(args, ctx):
    raise ValueError("boom from attempt %d" % ctx.attempt)


@app.job("t.snooze")
async def snooze(args, ctx):
    if ctx.attempt == 1 and not os.path.exists(os.environ["TEST_RECORD"] + ".snoozed-" + ctx.id):
        open(os.environ["TEST_RECORD"] + ".snoozed-" + ctx.id, "w").close()
        return soniq_handler.Snooze(args.get("seconds", 1), "not yet")
    return {"snoozed_before": True}


@app.job("t.children")
async def children(args, ctx):
    # Child jobs (t.child, a name nobody serves: they stay queued) of this
    # attempt, deferred unless immediate; then it fails while its attempt is
    # below fail_until, or holds for hold seconds.
    ids = []
    for k in range(args.get("n", 2)):
        child = {"parent": ctx.id, "attempt": ctx.attempt, "k": k}
        if args.get("immediate"):
            ids.append(await ctx.enqueue_async("t.child", child, immediate=True))
        else:
            ids.append(ctx.enqueue("t.child", child))
    record("children", ctx)
    if ctx.attempt < args.get("fail_until", 0):
        raise ValueError(f"attempt {ctx.attempt} fails on purpose")
    if args.get("hold"):
        await asyncio.sleep(args["hold"])
    return {"ids": ids}


@app.job("t.crash")
async def crash(args, ctx):
    # A poison job: it takes its whole process down, neighbours included.
    record("start", ctx)
    await asyncio.sleep(args.get("seconds", 0))
    print("t.crash: poison job %s exiting with status 7" % ctx.id, file=sys.stderr, flush=True)
    os._exit(7)


app.run()
