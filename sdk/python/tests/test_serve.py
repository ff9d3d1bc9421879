"""App.serve(), for programs that own their event loop: it returns when the
sidecar shuts the process down, and raises ServeError (with the exit status
App.run() would use) where run() exits."""

import os
import subprocess
import sys
import textwrap

import pytest

from soniq_handler import protocol

# Serves in its own loop next to a task of its own; reports on stderr how
# serve() ended and what the other task saw.
PROGRAM = textwrap.dedent(
    """
    import asyncio
    import sys

    import soniq_handler

    app = soniq_handler.App(concurrency=2, sync_concurrency=1)


    @app.job("s.add")
    async def add(args):
        return {"sum": args["a"] + args["b"]}


    @app.job("s.hang")
    async def hang(args):
        print("hang started", file=sys.stderr, flush=True)
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            print("hang cancelled", file=sys.stderr)
            raise


    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        other = asyncio.ensure_future(ticker())
        try:
            await app.serve()
            print("serve returned", file=sys.stderr)
        except soniq_handler.ServeError as e:
            print(f"ServeError exit_code={e.exit_code}: {e}", file=sys.stderr)
        print(f"other task alive={not other.done()} ticked={ticks > 0}", file=sys.stderr)
        other.cancel()


    asyncio.run(main())
    print("main returned", file=sys.stderr)
    """
)


def job(job_id, name, args):
    return protocol.encode(
        {"type": "job", "id": job_id, "name": name, "args": args, "attempt": 1, "max_attempts": 1,
         "queue": "default", "deadline": None, "traceparent": None}
    )


def start(tmp_path, **env):
    (tmp_path / "prog.py").write_text(PROGRAM)
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    child_env.update({"SONIQ_PROTOCOL_VERSIONS": "1", **env})
    return subprocess.Popen([sys.executable, "prog.py"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path, env=child_env)


def finish(proc, frames=()):
    stdout, stderr = proc.communicate(b"".join(f + b"\n" for f in frames), timeout=60)
    return proc, [protocol.decode(line) for line in stdout.splitlines()], stderr.decode()


def serve(tmp_path, frames, **env):
    return finish(start(tmp_path, **env), frames)


def test_serve_returns_after_shutdown(tmp_path):
    proc, out, err = serve(tmp_path, [job("j1", "s.add", {"a": 1, "b": 2.5}), b'{"type":"shutdown"}'])
    assert proc.returncode == 0, err
    assert [f["type"] for f in out] == ["hello", "result"]
    assert out[1]["type"] == "result" and out[1]["result"] == {"sum": 3.5}
    assert "serve returned" in err
    assert "other task alive=True ticked=True" in err
    assert "main returned" in err


def test_serve_raises_on_a_malformed_frame(tmp_path):
    # A job still held is cancelled, not reported; serve() raises instead of exiting.
    proc = start(tmp_path)
    proc.stdin.write(job("j1", "s.hang", {}) + b"\n")
    proc.stdin.flush()
    assert proc.stderr.readline() == b"hang started\n"
    proc, out, err = finish(proc, [b'{"type":"job"}'])
    assert proc.returncode == 0, err
    assert [f["type"] for f in out] == ["hello"]
    assert "protocol error: missing_field at id" in err
    assert "ServeError exit_code=4: protocol error" in err
    assert "hang cancelled" in err
    assert "other task alive=True" in err and "main returned" in err


@pytest.mark.parametrize(
    "env, code, text",
    [
        ({"SONIQ_PROTOCOL_VERSIONS": "2"}, 3, "no common protocol version"),
        ({"SONIQ_TRANSPORT": "unix"}, 1, "must be started by soniq-sidecar"),
    ],
)
def test_serve_raises_when_it_cannot_start(tmp_path, env, code, text):
    proc, out, err = serve(tmp_path, [], **env)
    assert proc.returncode == 0, err
    assert out == []
    assert f"ServeError exit_code={code}: " in err and text in err
    assert "main returned" in err


@pytest.mark.parametrize("stdin", ["pipe", "file"])
def test_frames_from_a_pipe_or_from_a_file_that_cannot_be_polled(tmp_path, stdin):
    # The sidecar gives a pipe, which the event loop reads itself; a regular
    # file (the event loop cannot poll one) is read by a thread. The same
    # frames give the same results either way, up to EOF and past a partial
    # last line.
    frames = [job(f"j{i}", "s.add", {"a": i, "b": 1}) for i in range(50)]
    data = b"".join(f + b"\n" for f in frames) + b'{"type":"ping","seq":7}\n{"type":"res'
    if stdin == "file":
        (tmp_path / "frames").write_bytes(data)
        (tmp_path / "prog.py").write_text(PROGRAM)
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
        child_env["SONIQ_PROTOCOL_VERSIONS"] = "1"
        with open(tmp_path / "frames", "rb") as f:
            done = subprocess.run([sys.executable, "prog.py"], stdin=f, capture_output=True, cwd=tmp_path,
                                  env=child_env, timeout=60)
        code, stdout, err = done.returncode, done.stdout, done.stderr.decode()
    else:
        proc = start(tmp_path)
        stdout, stderr = proc.communicate(data, timeout=60)
        code, err = proc.returncode, stderr.decode()
    assert code == 0, err
    out = [protocol.decode(line) for line in stdout.splitlines()]
    assert out[0]["type"] == "hello"
    results = {f["id"]: f["result"] for f in out if f["type"] == "result"}
    assert results == {f"j{i}": {"sum": i + 1} for i in range(50)}
    assert [f["seq"] for f in out if f["type"] == "pong"] == [7]
    assert "partial last line before EOF ignored: b'{\"type\":\"res'" in err
    assert "serve returned" in err


# Counts the SDK's writes to the sidecar (os.write on its private fd): the
# frames of one turn of the loop go out in one write.
COUNTING = textwrap.dedent(
    """
    import asyncio
    import os
    import sys

    import soniq_handler

    writes = []
    real_write = os.write


    def write(fd, data):
        if fd > 2:  # the SDK's private copy of stdout
            writes.append(bytes(data).count(b"\\n"))
        return real_write(fd, data)


    os.write = write
    app = soniq_handler.App(concurrency=8, sync_concurrency=1)


    @app.job("s.noop")
    async def noop(args):
        return None


    asyncio.run(app.serve())
    print(f"frames per write {writes}", file=sys.stderr)
    """
)


def test_results_ready_in_one_turn_go_out_in_one_write(tmp_path):
    # Eight async no-op jobs (the App's concurrency) in one read end in the
    # same turn: their results go out in one write, after the hello's own.
    (tmp_path / "prog.py").write_text(COUNTING)
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    child_env["SONIQ_PROTOCOL_VERSIONS"] = "1"
    proc = subprocess.Popen([sys.executable, "prog.py"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path, env=child_env)
    assert protocol.decode(proc.stdout.readline())["type"] == "hello"
    frames = b"".join(job(f"j{i}", "s.noop", {}) + b"\n" for i in range(8))
    assert len(frames) < 4096  # one write to the pipe, so one read
    proc.stdin.write(frames)
    proc.stdin.flush()
    results = [protocol.decode(proc.stdout.readline()) for _ in range(8)]
    assert sorted(r["id"] for r in results) == sorted(f"j{i}" for i in range(8))
    _, stderr = proc.communicate(b"", timeout=60)
    assert proc.returncode == 0, stderr
    assert "frames per write [1, 8]" in stderr.decode()


def test_a_stream_split_into_reads_anywhere_gives_the_same_frames():
    # What stdin brings, cut into reads at every place and in random sizes:
    # the same frames, in order, empty lines (and a lone "\r") ignored, the
    # bytes after the last "\n" kept for the next read.
    import random

    from soniq_handler._stdio import _Splitter

    stream = b'{"a":1}\n\n\r\n{"b":"x\\ny"}\r\n' + b"f" * 300 + b"\n" + b"\n".join(b"%d" % i for i in range(50)) + b"\ntail"
    want = [line for line in stream.split(b"\n")[:-1] if line not in (b"", b"\r")]
    cuts = [[i] for i in range(len(stream) + 1)] + [[i, j] for i in range(0, 40) for j in range(i, 45)]
    rng = random.Random(7)
    cuts += [sorted(rng.sample(range(len(stream)), k)) for k in (1, 3, 10, 50, 200) for _ in range(20)]
    for points in cuts:
        split = _Splitter(1 << 20)
        got = []
        start = 0
        for p in points + [len(stream)]:
            got += split.feed(stream[start:p])
            start = p
        assert got == want, points
        assert bytes(split.buf) == b"tail", points
        assert not split.oversize


def test_a_frame_over_the_limit_is_seen_however_it_is_read():
    from soniq_handler._stdio import _Splitter

    for step in (1, 7, 64, 1000):
        split = _Splitter(100)
        data = b'{"ok":1}\n' + b"x" * 102
        over = False
        got = []
        for i in range(0, len(data), step):
            got += split.feed(data[i : i + step])
            over = over or split.oversize
        assert got == [b'{"ok":1}'] and over, step
        # One "\r" before the "\n" does not count.
        split = _Splitter(100)
        split.feed(b"y" * 100 + b"\r")
        assert not split.oversize
