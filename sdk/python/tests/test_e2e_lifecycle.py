"""End-to-end: liveness, capacity, shutdown and failures of handler processes driven frame
by frame."""

import os
import queue
import subprocess
import sys
import threading
import time

import pytest

from soniq_handler import __version__, protocol
from e2e_harness import EXAMPLE_JOBS, PKG_DIR, TESTS_DIR, Handler, child_env


# ------------------------------------------------------- liveness, capacity


def test_pong_during_sync_job(examples):
    examples.job("j1", "examples.sleep_sync", {"seconds": 2})
    examples.sync(40)  # the job's thread is running
    start = time.monotonic()
    examples.send({"type": "ping", "seq": 41})
    assert examples.recv(timeout=1) == {"type": "pong", "seq": 41}
    # Well before the 2 s job ends (and before its result, checked below).
    assert time.monotonic() - start < 1
    assert examples.recv(timeout=3)["result"] == {"slept": 2}


def test_async_concurrency(examples):
    start = time.monotonic()
    for i in range(8):
        examples.job(f"j{i}", "examples.sleep_async", {"seconds": 1})
    res = examples.results(8, timeout=3)
    elapsed = time.monotonic() - start
    assert elapsed < 2, elapsed
    assert all(r["result"] == {"slept": 1} for r in res.values())


def test_jobs_beyond_concurrency_wait_for_a_slot(examples):
    # concurrency=8: the sidecar never sends more, but if it did the extra
    # jobs would start as slots free up.
    start = time.monotonic()
    for i in range(10):
        examples.job(f"j{i}", "examples.sleep_async", {"seconds": 0.6})
    examples.job("w", "examples.sleep_async", {"seconds": 0.6})
    examples.sync(1)
    # "w" is still waiting: cancelling it answers at once.
    examples.send({"type": "cancel", "id": "w", "reason": "job_timeout"})
    first = examples.recv(timeout=0.4)
    assert (first["id"], first["status"]) == ("w", "cancelled")
    done_at = {}
    for _ in range(10):
        r = examples.recv(timeout=3)
        assert r["status"] == "done"
        done_at[r["id"]] = time.monotonic() - start
    # j8 and j9 can only start once j0..j7 are done (>= 0.6 s), so they end
    # after 1.2 s; the first eight all ran at once.
    assert max(done_at[f"j{i}"] for i in range(8)) < 1.2
    assert 1.2 <= min(done_at["j8"], done_at["j9"]) < 2.5


def test_sync_pool_is_bounded_by_sync_concurrency(testapp):
    # sync_concurrency=2: three 0.6 s sync jobs need two rounds.
    start = time.monotonic()
    for i in range(3):
        testapp.job(f"j{i}", "t.sync_sleep", {"seconds": 0.6})
    testapp.results(3, timeout=5)
    elapsed = time.monotonic() - start
    assert 1.2 <= elapsed < 2.5, elapsed


# ---------------------------------------------------------------- shutdown


@pytest.mark.parametrize("how", ["shutdown", "eof"])
def test_shutdown_finishes_in_flight_and_exits_0(examples, how):
    examples.job("a", "examples.sleep_async", {"seconds": 0.8})
    examples.job("s", "examples.sleep_sync", {"seconds": 0.8})
    examples.sync(1)  # both in flight
    if how == "shutdown":
        examples.send({"type": "shutdown"})
        # Still alive and answering while it drains.
        examples.send({"type": "ping", "seq": 5})
        assert examples.recv(timeout=1) == {"type": "pong", "seq": 5}
    else:
        examples.close_stdin()
    res = examples.results(2, timeout=5)
    assert res["a"]["result"] == {"slept": 0.8}
    assert res["s"]["result"] == {"slept": 0.8}
    assert examples.wait(timeout=5) == 0


def test_shutdown_when_idle_exits_0_at_once(examples):
    start = time.monotonic()
    examples.send({"type": "shutdown"})
    assert examples.wait(timeout=5) == 0
    assert time.monotonic() - start < 2


def test_shutdown_then_cancel_for_async(examples):
    # The sidecar's shutdown_timeout path: shutdown, then cancel what is left.
    examples.job("a", "examples.sleep_async", {"seconds": 30})
    examples.send({"type": "shutdown"})
    examples.sync(1)  # draining, the job still held
    examples.send({"type": "cancel", "id": "a", "reason": "shutdown_timeout"})
    assert examples.recv(timeout=1)["status"] == "cancelled"
    assert examples.wait(timeout=5) == 0


def test_job_after_shutdown_is_handed_back(examples):
    examples.job("a", "examples.sleep_async", {"seconds": 0.5})
    examples.send({"type": "shutdown"})
    examples.job("late", "examples.add", {"a": 1, "b": 1})
    res = examples.results(2)
    assert res["late"]["status"] == "failed"
    assert res["late"]["error"]["type"] == "ShuttingDown"
    assert res["late"]["error"]["retryable"] is True
    assert res["a"]["status"] == "done"
    assert examples.wait() == 0


def test_clean_exit_runs_atexit_hooks(testapp):
    testapp.job("j1", "t.sync_sleep", {"seconds": 0.2})
    testapp.send({"type": "shutdown"})
    assert testapp.recv()["result"] == {"slept": 0.2}
    assert testapp.wait() == 0
    assert "e2e_app atexit ran" in testapp.stderr


def test_sidecar_gone_exits(tmp_path):
    err = open(tmp_path / "stderr", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "soniq_handler_examples"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=err,
        env=child_env(),
    )
    try:
        assert protocol.decode(proc.stdout.readline())["type"] == "hello"
        proc.stdout.close()
        proc.stdin.write(b'{"type":"ping","seq":1}\n')
        proc.stdin.flush()
        assert proc.wait(timeout=5) == 1
        assert b"stdout closed by the sidecar" in (tmp_path / "stderr").read_bytes()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        err.close()


def test_empty_and_crlf_lines_are_fine(examples):
    examples.send_raw(b"\n\r\n" + b'{"type":"ping","seq":3}\r\n')
    assert examples.recv() == {"type": "pong", "seq": 3}


# ----------------------------------------------------------------- failures


@pytest.mark.parametrize(
    "frame",
    [
        b"this is not json\n",
        b'{"type":"job","id":"j1"}\n',
        b'{"type":"result","id":"j1","status":"done"}\n',  # wrong direction
        b"  \n",  # whitespace is not an empty line
    ],
)
def test_malformed_frame_exits_4(examples, frame):
    examples.job("busy", "examples.sleep_sync", {"seconds": 30})
    examples.sync(1)  # its thread is running
    examples.send_raw(frame)
    start = time.monotonic()
    assert examples.wait(timeout=5) == 4
    # A running sync thread does not keep the process alive.
    assert time.monotonic() - start < 3
    assert "protocol error" in examples.stderr


def test_partial_last_line_is_not_run(examples):
    examples.job("a", "examples.sleep_async", {"seconds": 0.3})
    examples.send_raw(b'{"type":"job","id":"cut","name":"examples.add","args":{"a":1,"b":2},"attempt":1,"max_attempts":1,"queue":"q"}')
    examples.close_stdin()
    res = examples.results(1)
    assert res["a"]["status"] == "done"
    assert examples.wait() == 0
    assert examples.frames.get(timeout=1) is None  # nothing more: no result for "cut"
    assert "partial last line before EOF ignored" in examples.stderr


def test_oversize_frame_exits_4(examples):
    # Sent in pieces without a newline: the reader must give up at the limit
    # rather than buffer forever.
    chunk = b"x" * (1 << 20)
    try:
        for _ in range(protocol.DEFAULT_MAX_FRAME_BYTES // len(chunk) + 2):
            examples.send_raw(chunk)
    except BrokenPipeError:
        pass
    assert examples.wait(timeout=10) == 4
    assert "oversize" in examples.stderr


def test_import_error_exits_nonzero_with_traceback(tmp_path):
    (tmp_path / "broken_handlers.py").write_text(
        "import soniq_handler\napp = soniq_handler.App()\nraise RuntimeError('cannot import me')\n"
    )
    for args in (["-m", "soniq_handler", "broken_handlers"], ["-m", "broken_handlers"]):
        h = Handler(args, env=child_env(extra_path=[str(tmp_path)]))
        try:
            assert h.wait() != 0
            assert h.raw_lines == []
            assert "Traceback (most recent call last)" in h.stderr
            assert "RuntimeError: cannot import me" in h.stderr
        finally:
            h.kill()


def test_missing_module_exits_nonzero():
    h = Handler(["-m", "soniq_handler", "no_such_module_here"])
    try:
        assert h.wait() != 0
        assert "ModuleNotFoundError" in h.stderr
    finally:
        h.kill()
