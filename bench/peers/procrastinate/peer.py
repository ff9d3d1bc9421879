"""Procrastinate in the bench's peers section (bench/peers.go runs it).

Settings, from Procrastinate's documentation: one worker per process with
concurrency = the bench's per-process budget (its asynchronous sub-workers),
a psycopg pool of concurrency + 1 connections (its guidance for short jobs:
"as many connections as your concurrency (plus one)"), LISTEN/NOTIFY on (the
default), psycopg's C implementation (psycopg-binary, which psycopg
recommends over its pure-Python one for speed), jobs kept after success (the
default, as the sidecar keeps its done rows). Procrastinate fetches one job
per statement; it has no batch fetch. Filling uses batch_defer_async (one
call), the latency producer defer_async. The driver analyses its tables
right after each fill, as every row's: a procrastinate_jobs analysed while
it held only finished jobs makes the fetch's NOT EXISTS rescan every open
job for each candidate row, and with SKIP LOCKED under contention that
stalls the queue.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))
from bench_app import make_app, tally  # noqa: E402  (the App lives outside __main__, as Procrastinate asks)
from common import concurrency, main, run_client, run_worker  # noqa: E402


async def setup() -> None:
    app = make_app(2)
    async with app.open_async():
        exists = await app.connector.execute_query_one_async(
            "SELECT to_regclass('procrastinate_jobs') IS NOT NULL AS exists"
        )
        if not exists["exists"]:
            await app.schema_manager.apply_schema_async()


async def worker() -> None:
    conc = concurrency()

    async def serve(stop: asyncio.Event) -> None:
        app = make_app(conc + 1)
        async with app.open_async():
            task = asyncio.create_task(app.run_worker_async(concurrency=conc, install_signal_handlers=False))
            stopped = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                stopped.cancel()
                await task  # raises what ended it early
                raise SystemExit("the worker stopped on its own")
            # Procrastinate's graceful stop: cancelling run_worker_async
            # lets the running jobs finish first.
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    await run_worker(serve, tally)


async def client() -> None:
    app = make_app(2)
    async with app.open_async():
        noop = app.tasks["bench.noop"]
        latency = app.tasks["bench.latency"]
        await run_client(
            bulk=lambda n: noop.batch_defer_async(*({} for _ in range(n))),
            one=lambda payload: latency.defer_async(**payload),
        )


if __name__ == "__main__":
    main({"setup": setup, "worker": worker, "client": client})
