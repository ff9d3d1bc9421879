"""Example handlers served by examples/python/manifest.yaml.

Run with ``python3 -m soniq_handler_examples`` (the sidecar does this).
"""

import asyncio
import os
import time

import soniq_handler

app = soniq_handler.App(concurrency=8, sync_concurrency=4)


@app.job("examples.add")
async def add(args, ctx):
    return {"sum": args["a"] + args["b"]}


@app.job("examples.sleep_async")
async def sleep_async(args, ctx):
    await asyncio.sleep(args["seconds"])
    return {"slept": args["seconds"]}


@app.job("examples.sleep_sync")
def sleep_sync(args):
    # A plain def runs in the thread pool; it cannot be cancelled.
    time.sleep(args["seconds"])
    return {"slept": args["seconds"]}


@app.job("examples.fail")
def fail(args):
    raise ValueError("boom")


@app.job("examples.print")
async def print_junk(args, ctx):
    # Neither of these reaches the protocol stream: the SDK points fd 1 at stderr.
    print("this is not a protocol frame")
    os.write(1, b"{not json either\n")
    return {"ok": True}


@app.job("examples.snooze")
async def snooze(args, ctx):
    return soniq_handler.Snooze(1, "later")


@app.job("examples.permanent")
async def permanent(args, ctx):
    raise soniq_handler.PermanentError("this job can never succeed")
