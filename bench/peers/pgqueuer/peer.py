"""PgQueuer (asyncpg driver) in the bench's peers section (bench/peers.go runs it).

Settings, from PgQueuer's performance-tuning guide: the asyncpg driver (its
benchmarks put it at about 1.7× psycopg), a single direct asyncpg connection
for the QueueManager (the guide's advice for the LISTEN connection), the
uvloop event loop its own CLI (`pgq run`) runs on, `pgq autovac`'s
autovacuum settings applied at setup, default (durable, logged) tables as
the sidecar's are, batch_size BENCH_PGQUEUER_BATCH (PgQueuer requires
max_concurrent_tasks ≥ 2 × batch_size; the driver passes the size that
drained fastest in trials, see docs/benchmarks.md), max_concurrent_tasks the
bench's per-process budget. Filling is one enqueue() call with lists (one
statement), the latency producer enqueue() per job. The driver analyses its
tables right after each fill, as every row's.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import asyncpg
import uvloop
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))
from common import Tally, concurrency, database_url, main, run_client, run_worker  # noqa: E402


async def setup() -> None:
    conn = await asyncpg.connect(database_url())
    try:
        q = Queries(AsyncpgDriver(conn))
        if not await q.has_table("pgqueuer"):
            await q.install()
        await q.optimize_autovacuum()
    finally:
        await conn.close()


async def worker() -> None:
    tally = Tally()
    conc = concurrency()
    batch = int(os.environ.get("BENCH_PGQUEUER_BATCH", str(conc // 2)))

    async def serve(stop: asyncio.Event) -> None:
        conn = await asyncpg.connect(database_url())
        pgq = PgQueuer.from_asyncpg_connection(conn)

        @pgq.entrypoint("bench.noop")
        async def noop(job: Job) -> None:
            tally.noop += 1

        @pgq.entrypoint("bench.latency")
        async def latency(job: Job) -> None:
            tally.latency(json.loads(job.payload or b"{}")["t_us"])

        async def on_stop() -> None:
            await stop.wait()
            pgq.shutdown.set()

        stopper = asyncio.create_task(on_stop())
        try:
            await pgq.run(batch_size=batch, max_concurrent_tasks=conc)
        finally:
            stopper.cancel()
            await conn.close()

    await run_worker(serve, tally)


async def client() -> None:
    conn = await asyncpg.connect(database_url())
    q = Queries(AsyncpgDriver(conn))
    try:
        await run_client(
            bulk=lambda n: q.enqueue(["bench.noop"] * n, [None] * n, [0] * n),
            one=lambda payload: q.enqueue("bench.latency", json.dumps(payload).encode()),
        )
    finally:
        await conn.close()


if __name__ == "__main__":
    main({"setup": setup, "worker": worker, "client": client}, run=uvloop.run)
