"""Drives the released Soniq package for soniq_interop_test.go.

Usage: python soniq_interop.py COMMAND DATABASE_URL [JSON_ARGS]
Prints one JSON document on stdout. Only Soniq's public API is used, so the
test proves what a Soniq user would see.
"""

import ast
import asyncio
import json
import sys
from datetime import datetime, timedelta

from soniq import Soniq
from soniq.core.leadership import advisory_key, with_advisory_lock
from soniq.utils.hashing import compute_args_hash


def make_app(url):
    app = Soniq(database_url=url, enqueue_validation="none")

    # Soniq's dead-letter replay refuses names not registered locally.
    @app.job(name="interop.fail")
    async def interop_fail(**kwargs):
        return None

    # The Python value its args spell as a literal: what a Soniq worker
    # stores for it is what a handler on the sidecar must store too.
    @app.job(name="interop.literal")
    async def interop_literal(literal):
        return ast.literal_eval(literal)

    return app


async def run(command, url, args):
    app = make_app(url)
    try:
        if command == "setup":
            return {"applied": await app.setup()}
        if command == "args_hashes":
            # Soniq's own hash of each JSON text (the shared enqueue vectors).
            return [compute_args_hash(json.loads(a)) for a in args]
        if command == "advisory_keys":
            return {n: advisory_key(n) for n in ("soniq.migrations", "soniq.maintenance")}
        if command == "scheduler_leader":
            await app.ensure_initialized()
            async with with_advisory_lock(app.backend, "soniq.scheduler") as leader:
                return {"leader": leader}
        if command == "maintenance_leader":
            await app.ensure_initialized()
            async with with_advisory_lock(app.backend, "soniq.maintenance") as leader:
                return {"leader": leader}
        if command == "enqueue":
            job_id = await app.enqueue(
                args["name"],
                args=args.get("args", {}),
                queue=args.get("queue"),
                unique=args.get("unique"),
                dedup_key=args.get("dedup_key"),
            )
            return {"id": job_id}
        if command == "stats":
            return dict(await app.get_queue_stats())
        if command == "get_result":
            # repr tells 2 from 2.0 and keeps big ints exact, which the JSON
            # printed here (read by Go) would not.
            result = await app.get_result(args["id"])
            return {"result": result, "result_repr": repr(result), "job": await app.get_job(args["id"])}
        if command == "work_once":
            # A Soniq worker runs the jobs waiting in these queues, then stops.
            await app.run_worker(concurrency=1, run_once=True, queues=args["queues"])
            return {}
        if command == "dead_letters":
            jobs = await app.dead_letter.list_dead_letter_jobs()
            return [
                {
                    "id": j.id,
                    "job_name": j.job_name,
                    "args": j.args,
                    "attempts": j.attempts,
                    "last_error": j.last_error,
                    "dead_letter_reason": j.dead_letter_reason,
                    "resurrection_count": j.resurrection_count,
                }
                for j in jobs
            ]
        if command == "register_worker":
            # What a Soniq worker does at start (another container of the pod).
            await app.ensure_initialized()
            await app.backend.register_worker(
                worker_id=args["worker_id"],
                hostname=args["hostname"],
                pid=args["pid"],
                queues=args.get("queues", []),
                concurrency=args.get("concurrency", 1),
            )
            return {"id": args["worker_id"]}
        if command == "claim":
            # A Soniq worker taking a job from its queues.
            await app.ensure_initialized()
            job = await app.backend.fetch_and_lock_job(queues=args["queues"], worker_id=args["worker_id"])
            return {"id": str(job["id"]) if job else None}
        if command == "scheduler_add":
            # A schedule declared through Soniq's own API.
            name = await app.scheduler.add(
                args["name"],
                every=timedelta(seconds=args["every"]) if "every" in args else None,
                cron=args.get("cron"),
                args=args.get("args"),
                queue=args.get("queue"),
                priority=args.get("priority"),
                max_attempts=args.get("max_attempts"),
            )
            return await app.scheduler.get(name)
        if command == "scheduler_list":
            return await app.scheduler.list()
        if command == "scheduler_run":
            # Soniq's scheduler, ticking every second, for the given seconds
            # or until the stop file appears.
            import os
            import time

            await app.scheduler.start(check_interval=1)
            deadline = time.monotonic() + args["seconds"]
            stop = args.get("stop_file")
            while time.monotonic() < deadline and not (stop and os.path.exists(stop)):
                await asyncio.sleep(0.05)
            await app.scheduler.stop()
            return {}
        if command == "cron_next":
            # The next run Soniq's scheduler computes for each (expr, time).
            from croniter import croniter

            return [
                croniter(expr, datetime.fromisoformat(at)).get_next(datetime).isoformat()
                for expr, at in args["cases"]
            ]
        if command == "replay":
            return {"id": await app.dead_letter.replay(args["id"])}
        raise SystemExit(f"unknown command {command!r}")
    finally:
        await app.close()


def main():
    command, url = sys.argv[1], sys.argv[2]
    args = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    print(json.dumps(asyncio.run(run(command, url, args)), default=str))


if __name__ == "__main__":
    main()
