#!/usr/bin/env python3
"""The Python SDK alone, for profiling: no sidecar, no database.

Feeds no-op jobs to one bench handler process (bench/handlers/py_handler.py)
as the bench's "SDK alone" rows do (at most --concurrency in flight, the same
job frames), over stdio or over the Session stream of attach mode, and
prints the handler's CPU per job (user + system, all its threads, read from
/proc: wall time means little on a shared machine). With --profile it
profiles the handler and prints the top entries: ``cpu`` samples its main
thread every millisecond of the process's CPU time (what bench/analysis.md
shows), ``cprofile`` runs it under cProfile (deterministic, but its cost per
call distorts small functions), ``py-spy`` attaches py-spy to it (threads
holding the GIL, sampled in wall time: on a loaded machine that counts a
thread's wait for a core as time spent where it stood). --sdk runs another
copy of the SDK (say, an export of an earlier commit) to compare.

    .venv/bin/python bench/py_alone.py -n 100000 --transport stdio --profile cpu
    .venv/bin/python bench/py_alone.py -n 100000 --transport attach --rounds 3

Run it with the project's virtualenv: attach mode needs grpcio (the SDK's
unix extra), py-spy must be installed there for --profile py-spy.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HANDLER = os.path.join(ROOT, "bench", "handlers", "py_handler.py")
TICK = os.sysconf("SC_CLK_TCK")
SDK = [os.path.join(ROOT, "sdk", "python")]  # --sdk
FULL = [False]  # --full


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_cpu(pid: int) -> Dict[str, float]:
    """CPU seconds of each thread of a process, by name (the main thread as "main")."""
    out: Dict[str, float] = collections.Counter()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                head, rest = f.read().rsplit(")", 1)
        except OSError:
            continue
        fields = rest.split()
        name = "main" if int(tid) == pid else head.split("(", 1)[1]
        out[name] += (int(fields[11]) + int(fields[12])) / TICK
    return out


def job_id(i: int) -> str:
    return f"00000000-0000-4000-8000-{i:012d}"


# --profile cpu: the handler's main thread sampled every 1 ms of the
# process's CPU time (ITIMER_PROF), its stacks collapsed as py-spy's raw
# format has them. On a loaded machine a wall-clock sampler (py-spy) counts
# the time a thread waits for a core as the time of whatever it was doing
# (a write that woke the reader gets preempted), where this counts CPU only.
# A sample taken while the main thread sleeps (in select) is CPU another
# thread of the process spent.
_CPU_SAMPLER = r"""
import collections, os, runpy, signal, sys
out, handler = sys.argv[1], sys.argv[2]
sys.argv = sys.argv[2:]
stacks = collections.Counter()
def sample(signum, frame):
    names = []
    while frame is not None:
        code = frame.f_code
        names.append("%s (%s:%d)" % (getattr(code, "co_qualname", code.co_name), code.co_filename, code.co_firstlineno))
        frame = frame.f_back
    stacks[";".join(reversed(names))] += 1
signal.signal(signal.SIGPROF, sample)
signal.setitimer(signal.ITIMER_PROF, 0.001, 0.001)
try:
    runpy.run_path(handler, run_name="__main__")
finally:
    signal.setitimer(signal.ITIMER_PROF, 0, 0)
    with open(out, "w") as f:
        for stack, n in stacks.items():
            f.write("%s %d\n" % (stack, n))
"""


def handler_argv(profile: str, out: str, python: str) -> List[str]:
    if profile == "cpu":
        return [python, "-c", _CPU_SAMPLER, out, HANDLER]
    if profile == "cprofile":
        return [python, "-m", "cProfile", "-o", out, HANDLER]
    return [python, HANDLER]


def spy(pid: int, profile: str, out: str, python: str) -> Optional[subprocess.Popen]:
    """py-spy sampling the handler until it exits (started once it said hello)."""
    if profile != "py-spy":
        return None
    exe = shutil.which("py-spy", path=os.path.dirname(python)) or "py-spy"
    # raw: collapsed stacks, one line per stack with its sample count.
    argv = [exe, "record", "--gil", "-r", "250"] + (["--native"] if os.environ.get("PY_ALONE_NATIVE") else []) + ["-f", "raw", "-o", out, "--pid", str(pid)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)  # let it attach before the jobs start
    return proc


def handler_env(concurrency: int, extra: Dict[str, str]) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=SDK[0],
        PYTHONUNBUFFERED="1",
        BENCH_CONCURRENCY=str(concurrency),
        SONIQ_PROTOCOL_VERSIONS="1",
        SONIQ_HANDLER="bench-alone",
    )
    env.update(extra)
    return env


# ------------------------------------------------------------------ stdio


def run_stdio(n: int, concurrency: int, profile: str, out: str, python: str) -> Tuple[float, float]:
    """Returns (handler CPU seconds, wall seconds) for n jobs."""
    # --full: the fields the sidecar adds to every job (its deadline, the
    # worker's id, the row's created_at), which the bench's row leaves out.
    extra = (
        ',"deadline":1765000000000,"worker_id":"0193a5c2-7d7e-7b3a-9c1e-2f4b5a6c7d8f","created_at":1765000000000'
        if FULL[0]
        else ""
    )
    frames = [
        (
            '{"type":"job","id":"%s","name":"bench.noop","args":{},"attempt":1,"max_attempts":3,"queue":"default"%s}\n'
            % (job_id(i), extra)
        ).encode()
        for i in range(n)
    ]
    proc = subprocess.Popen(
        handler_argv(profile, out, python),
        env=handler_env(concurrency, {"SONIQ_TRANSPORT": "stdio"}),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    rfd, wfd = proc.stdout.fileno(), proc.stdin.fileno()
    buf = b""
    while b"\n" not in buf:
        chunk = os.read(rfd, 1 << 16)
        if not chunk:
            raise RuntimeError("the handler exited before its hello")
        buf += chunk
    buf = buf.split(b"\n", 1)[1]
    pid = proc.pid
    spying = spy(pid, profile, out, python)
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    sent = min(concurrency, n)
    os.write(wfd, b"".join(frames[:sent]))
    done = 0
    while done < n:
        chunk = os.read(rfd, 1 << 16)
        if not chunk:
            raise RuntimeError(f"the handler closed stdout after {done} results")
        buf += chunk
        lines = buf.split(b"\n")
        buf = lines.pop()
        for line in lines:
            if b'"status":"done"' not in line:
                raise RuntimeError(f"not a done result: {line[:200]!r}")
        done += len(lines)
        more = min(len(lines), n - sent)
        if more:
            os.write(wfd, b"".join(frames[sent : sent + more]))
            sent += more
    cpu, wall = cpu_seconds(pid) - cpu0, time.monotonic() - t0
    proc.stdin.close()
    proc.wait(timeout=60)
    if spying is not None:
        spying.wait(timeout=60)
    return cpu, wall


# ----------------------------------------------------------------- attach


async def _session(sock: str, n: int, concurrency: int, pid_of: "asyncio.Future[int]") -> Tuple[float, float]:
    import grpc

    from soniq_handler import handler_pb2 as pb

    # As the sidecar's client: a fixed flow-control window as large as a
    # message may be, so no ping sizes it while results flow.
    window = 16 * 1024 * 1024 + (64 << 10)
    options = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", window)]
    async with grpc.aio.insecure_channel(f"unix:{sock}", options=options) as channel:
        call = channel.stream_stream(
            "/soniq.handler.v1.Handler/Session",
            request_serializer=pb.SidecarMessage.SerializeToString,
            response_deserializer=pb.HandlerMessage.FromString,
        )()

        def jobs(first: int, count: int) -> pb.SidecarMessage:
            return pb.SidecarMessage(
                jobs=pb.Jobs(
                    jobs=[
                        pb.Job(id=job_id(i), name="bench.noop", args_json="{}", attempt=1, max_attempts=3, queue="default")
                        for i in range(first, first + count)
                    ]
                )
            )

        hello = await call.read()
        assert hello.WhichOneof("message") == "hello", hello
        # As the sidecar does: an empty Jobs (it takes Results), then an
        # empty Ack (it acknowledges results).
        await call.write(pb.SidecarMessage(jobs=pb.Jobs()))
        await call.write(pb.SidecarMessage(ack=pb.Ack()))
        pid = await pid_of
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        sent = min(concurrency, n)
        await call.write(jobs(0, sent))
        done = msgs = 0
        while done < n:
            msg = await call.read()
            msgs += 1
            kind = msg.WhichOneof("message")
            if kind == "result":
                results = [msg.result]
            elif kind == "results":
                results = list(msg.results.results)
            else:
                raise RuntimeError(f"unexpected message {msg}")
            for r in results:
                if r.status != pb.Result.DONE:
                    raise RuntimeError(f"not a done result: {r}")
            done += len(results)
            await call.write(pb.SidecarMessage(ack=pb.Ack(ids=[r.id for r in results])))
            more = min(len(results), n - sent)
            if more:
                await call.write(jobs(sent, more))
                sent += more
        cpu, wall = cpu_seconds(pid) - cpu0, time.monotonic() - t0
        threads = ", ".join(f"{k} {v:.2f} s" for k, v in sorted(thread_cpu(pid).items(), key=lambda kv: -kv[1]))
        print(f"{msgs} result messages, {n / msgs:.1f} results per message; CPU by thread (whole life): {threads}",
              flush=True)
        await call.write(pb.SidecarMessage(shutdown=pb.Shutdown()))
        await call.done_writing()
        return cpu, wall


def run_attach(n: int, concurrency: int, profile: str, out: str, python: str) -> Tuple[float, float]:
    tmp = tempfile.mkdtemp(prefix="py-alone-")
    sock = os.path.join(tmp, "h.sock")
    proc = subprocess.Popen(
        handler_argv(profile, out, python) + ["--listen", sock],
        env=handler_env(concurrency, {}),
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(3000):
            if os.path.exists(sock):
                break
            if proc.poll() is not None:
                raise RuntimeError("the handler exited before it served its socket")
            time.sleep(0.01)
        pid = proc.pid
        spying = spy(pid, profile, out, python)

        async def main() -> Tuple[float, float]:
            fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            fut.set_result(pid)
            return await _session(sock, n, concurrency, fut)

        result = asyncio.run(main())
        os.kill(pid, 15)  # SIGTERM: attach mode's stop
        proc.wait(timeout=60)
        if spying is not None:
            spying.wait(timeout=60)
        return result
    finally:
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------- profiles


def top_cprofile(path: str, count: int) -> None:
    st = pstats.Stats(path)
    st.sort_stats("tottime").print_stats(count)


def top_stacks(path: str, count: int, profile: str) -> None:
    """Self and inclusive samples per function from collapsed stacks."""
    own: Dict[str, int] = collections.Counter()
    incl: Dict[str, int] = collections.Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, k = line.rstrip("\n").rpartition(" ")
            samples = int(k)
            frames = [_short(fr) for fr in stack.split(";")]
            total += samples
            own[frames[-1]] += samples
            for fr in set(frames):
                incl[fr] += samples
    what = "py-spy, threads holding the GIL" if profile == "py-spy" else "CPU time, main thread"
    print(f"{total} samples ({what})")
    print(f"{'self %':>7} {'incl %':>7}  function")
    for fn, k in sorted(own.items(), key=lambda kv: -kv[1])[:count]:
        print(f"{100 * k / total:7.1f} {100 * incl[fn] / total:7.1f}  {fn}")


def _short(frame: str) -> str:
    # "func (path/to/file.py:123)" -> "func (file.py)"
    name, _, where = frame.partition(" (")
    fname = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({os.path.basename(fname)})" if fname else name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=100_000, help="jobs per round")
    ap.add_argument("--concurrency", type=int, default=32, help="jobs in flight (the bench's per-process budget)")
    ap.add_argument("--transport", choices=("stdio", "attach"), default="stdio")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--profile", choices=("none", "cpu", "cprofile", "py-spy"), default="none")
    ap.add_argument("--top", type=int, default=25, help="profile entries to print")
    ap.add_argument("--out", default="", help="where the profile goes (default: a temporary file)")
    ap.add_argument("--python", default=sys.executable, help="the handler's interpreter")
    ap.add_argument("--sdk", default=SDK[0], help="the directory holding soniq_handler (another checkout's, to compare)")
    ap.add_argument("--full", action="store_true", help="stdio: job frames with the fields the sidecar adds (deadline, worker_id, created_at)")
    a = ap.parse_args()
    SDK[0] = os.path.abspath(a.sdk)
    FULL[0] = a.full
    run = run_stdio if a.transport == "stdio" else run_attach
    for r in range(a.rounds):
        out = a.out or tempfile.mktemp(prefix="py-alone-", suffix=".prof")
        cpu, wall = run(a.n, a.concurrency, a.profile, out, a.python)
        print(
            f"{a.transport} round {r + 1}: {a.n} jobs, handler CPU {cpu:.2f} s = {1e6 * cpu / a.n:.1f} µs/job "
            f"= {1e4 * cpu / a.n:.3f} CPU-s per 10,000 jobs; wall {wall:.2f} s ({a.n / wall:.0f} jobs/s)",
            flush=True,
        )
        if a.profile == "cprofile":
            top_cprofile(out, a.top)
        elif a.profile != "none":
            top_stacks(out, a.top, a.profile)


if __name__ == "__main__":
    main()
