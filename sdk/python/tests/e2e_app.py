"""Extra handlers used only by the end-to-end tests (run with
``python3 -m soniq_handler e2e_app``)."""

import asyncio
import atexit
import subprocess
import sys
import threading
import time

import soniq_handler

app = soniq_handler.App(concurrency=16, sync_concurrency=2)

# A clean exit must still run atexit hooks (logging.shutdown relies on them).
atexit.register(lambda: sys.stderr.write("e2e_app atexit ran\n"))


@app.job("t.ctx")
async def ctx_echo(args, ctx):
    return {
        "id": ctx.id,
        "name": ctx.name,
        "attempt": ctx.attempt,
        "max_attempts": ctx.max_attempts,
        "queue": ctx.queue,
        "deadline": None if ctx.deadline is None else ctx.deadline.isoformat(),
        "traceparent": ctx.traceparent,
        "args": args,
    }


@app.job("t.args_only_sync")
def args_only_sync(args):
    return {"thread_is_main": threading.current_thread() is threading.main_thread(), "x": args.get("x")}


@app.job("t.unserialisable")
async def unserialisable(args):
    return {"s": {1, 2}}


@app.job("t.not_retryable")
def not_retryable(args):
    class Declined(Exception):
        retryable = False

    raise Declined("card declined")


@app.job("t.raise_snooze")
def raise_snooze(args):
    raise soniq_handler.Snooze(2.5)


@app.job("t.swallow_cancel")
async def swallow_cancel(args, ctx):
    # The test waits for this line before it cancels.
    sys.stderr.write("t.swallow_cancel %s started\n" % ctx.id)
    sys.stderr.flush()
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        return {"cleaned_up": True}


@app.job("t.sync_sleep")
def sync_sleep(args):
    time.sleep(args["seconds"])
    return {"slept": args["seconds"]}


@app.job("t.child_process")
def child_process(args):
    # A child inherits fds 0-2: its stdout must not reach the protocol stream,
    # and it must not be able to read the protocol's stdin.
    out = subprocess.run(
        [sys.executable, "-c", "import sys; print('child stdout'); print(repr(sys.stdin.read()))"],
        check=True,
    )
    return {"rc": out.returncode}


@app.job("t.long_error")
def long_error(args):
    raise RuntimeError("m" * args["n"])


@app.job("t.bad_str")
def bad_str(args):
    class Weird(Exception):
        def __str__(self):
            raise RuntimeError("no")

    raise Weird()


@app.job("t.big")
async def big(args):
    return {"blob": "x" * args["n"]}
