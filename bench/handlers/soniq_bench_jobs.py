"""The same benchmark jobs for the released Soniq worker (`soniq worker
--jobs-modules soniq_bench_jobs`), as a Soniq user would write them."""

import asyncio
import os
import time

from soniq import Soniq

app = Soniq(database_url=os.environ["SONIQ_DATABASE_URL"])


@app.job(name="bench.noop")
async def noop(**kwargs):
    return None


@app.job(name="bench.latency")
async def latency(**kwargs):
    # Pickup latency: the driver subtracts the producer's t_us argument.
    return {"started_us": time.time_ns() // 1000}


@app.job(name="bench.sleep")
async def sleep(seconds, **kwargs):
    await asyncio.sleep(seconds)
    return None
