"""The Procrastinate App and tasks of the bench's peer (peer.py runs them)."""

from __future__ import annotations

import procrastinate
from common import Tally, database_url

tally = Tally()


def make_app(pool_size: int) -> procrastinate.App:
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=database_url(), min_size=pool_size, max_size=pool_size)
    )

    @app.task(name="bench.noop")
    async def noop() -> None:
        tally.noop += 1

    @app.task(name="bench.latency")
    async def latency(t_us: int) -> None:
        tally.latency(t_us)

    return app
