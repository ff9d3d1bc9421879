"""The part every Python peer shares: the process modes the bench driver
(bench/peers.go) runs, the command loop of the producer ("client") process,
and the result line a worker prints when it stops. Each peer's peer.py
supplies only what is its own: schema setup, its worker and its enqueue."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any


def database_url() -> str:
    url = os.environ.get("BENCH_DATABASE_URL")
    if not url:
        raise SystemExit("BENCH_DATABASE_URL is not set")
    return url


def concurrency() -> int:
    n = int(os.environ.get("BENCH_CONCURRENCY", "0"))
    if n < 1:
        raise SystemExit("BENCH_CONCURRENCY must be a positive integer")
    return n


def now_us() -> int:
    """Microseconds since the epoch, on the clock the producer's t_us comes from."""
    return time.time_ns() // 1000


class Tally:
    """What a worker counts: no-op jobs run, and the pickup latency of each
    latency job (handler start minus the producer's t_us)."""

    def __init__(self) -> None:
        self.noop = 0
        self.latency_us: list[int] = []

    def latency(self, t_us: int) -> None:
        self.latency_us.append(now_us() - t_us)

    def print(self) -> None:
        line = json.dumps({"noop": self.noop, "latency_us": self.latency_us})
        sys.stdout.write(f"BENCH-RESULT {line}\n")
        sys.stdout.flush()


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def run_worker(
    serve: Callable[[asyncio.Event], Awaitable[None]], tally: Tally
) -> None:
    """Runs serve(stop) after saying "ready"; SIGTERM sets stop, and serve
    must then finish its jobs and return. The tally is printed after."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    say("BENCH-READY")
    await serve(stop)
    tally.print()
    # Exit here, the worker stopped and its connections closed: past this
    # point the event loop's teardown would restore SIGTERM's default, and
    # a second SIGTERM would kill the process before a clean exit.
    os._exit(0)


async def run_client(
    bulk: Callable[[int], Awaitable[Any]],
    one: Callable[[dict[str, int]], Awaitable[Any]],
) -> None:
    """Serves the driver's commands, one a line on stdin, until stdin closes:

    noop N              enqueue N no-op jobs with the peer's bulk enqueue,
                        answer "committed <unix µs>" once it returned
    latency RATE COUNT  enqueue COUNT latency jobs one at a time, RATE a
                        second, each with {"t_us": ...} taken just before its
                        enqueue call; answer "done"
    """
    loop = asyncio.get_running_loop()
    say("BENCH-READY")
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        cmd, *args = line.split() or [""]
        if cmd == "noop":
            await bulk(int(args[0]))
            say(f"committed {now_us()}")
        elif cmd == "latency":
            rate, count = float(args[0]), int(args[1])
            begin = time.monotonic()
            for i in range(count):
                wait = begin + i / rate - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                await one({"t_us": now_us()})
            say("done")
        elif cmd:
            raise SystemExit(f"unknown command {line!r}")


def main(modes: dict[str, Callable[[], Awaitable[None]]], run: Callable[[Awaitable[None]], None] = asyncio.run) -> None:
    """Dispatches on the mode in argv[1]; run is the event loop runner."""
    # Warnings and errors only: the peers would otherwise be free to log
    # every job, which no high-throughput deployment keeps.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in modes:
        raise SystemExit(f"usage: peer.py {'|'.join(modes)}")
    run(modes[mode]())
