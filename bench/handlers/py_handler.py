"""Benchmark handlers for soniq-sidecar, written with the Python example SDK.

The benchmark driver (bench/main.go) runs this file as the command of a
generated manifest; PYTHONPATH points at sdk/python.
"""

import asyncio
import os
import sys
import time

import soniq_handler

app = soniq_handler.App(concurrency=int(os.environ["BENCH_CONCURRENCY"]), sync_concurrency=1)
# With result_ttl 0 the result goes with the row: the start is reported on
# stderr (the sidecar logs it) for the driver to read instead.
LATENCY_STDERR = os.environ.get("BENCH_LATENCY_STDERR") == "1"


@app.job("bench.noop")
async def noop(args, ctx):
    return None


@app.job("bench.latency")
async def latency(args, ctx):
    # Pickup latency: the driver subtracts the producer's args["t_us"].
    started = time.time_ns() // 1000
    if LATENCY_STDERR:
        print(f"BENCH-LATENCY {args['t_us']} {started}", file=sys.stderr, flush=True)
    return {"started_us": started}


@app.job("bench.sleep")
async def sleep(args, ctx):
    await asyncio.sleep(args["seconds"])
    return None


app.run()
