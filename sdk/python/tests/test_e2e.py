"""End-to-end: spawn handler processes and drive them frame by frame (hello, outcomes,
cancellation; the lifecycle is in test_e2e_lifecycle.py)."""

import os
import queue
import subprocess
import sys
import threading
import time

import pytest

from soniq_handler import __version__, protocol
from e2e_harness import EXAMPLE_JOBS, PKG_DIR, TESTS_DIR, Handler, child_env


# ------------------------------------------------------------------- hello


def test_hello_contents():
    h = Handler(["-m", "soniq_handler_examples"])
    try:
        hello = h.hello()
        assert hello == {
            "type": "hello",
            "protocol": 1,
            "sdk": f"soniq-python/{__version__}",
            "pid": h.proc.pid,
            "jobs": EXAMPLE_JOBS,
            "concurrency": 8,
            "sync_concurrency": 4,
        }
        # Canonical bytes on the wire, too.
        assert h.raw_lines[0] == protocol.encode(hello) + b"\n"
    finally:
        h.kill()


def test_hello_from_any_cwd_and_via_runner(tmp_path):
    h = Handler(
        ["-m", "soniq_handler", "e2e_app:app"], env=child_env(extra_path=[TESTS_DIR]), cwd=str(tmp_path)
    )
    try:
        hello = h.hello()
        assert hello["concurrency"] == 16 and hello["sync_concurrency"] == 2
        assert {"name": "t.sync_sleep", "cancellable": False} in hello["jobs"]
        assert {"name": "t.ctx", "cancellable": True} in hello["jobs"]
    finally:
        h.kill()


@pytest.mark.parametrize("offered", ["1", "1,2", " 2 , 1 ", None])
def test_version_negotiation_picks_1(offered):
    h = Handler(["-m", "soniq_handler_examples"], env=child_env(SONIQ_PROTOCOL_VERSIONS=offered))
    try:
        assert h.hello()["protocol"] == 1
    finally:
        h.kill()


@pytest.mark.parametrize("offered", ["2", "2,3", "", "x"])
def test_version_negotiation_failure_exits_3(offered):
    h = Handler(["-m", "soniq_handler_examples"], env=child_env(SONIQ_PROTOCOL_VERSIONS=offered))
    try:
        assert h.wait() == 3
        assert h.raw_lines == []
        assert "no common protocol version" in h.stderr
        assert "speaks 1" in h.stderr
    finally:
        h.kill()


# ---------------------------------------------------------------- outcomes


def test_add(examples):
    examples.job("j1", "examples.add", {"a": 2, "b": 40})
    assert examples.recv() == {
        "type": "result",
        "id": "j1",
        "status": "done",
        "result": {"sum": 42},
        "error": None,
        "seconds": None,
        "reason": None,
    }


def test_fail_has_traceback(examples):
    examples.job("j1", "examples.fail")
    res = examples.recv()
    assert res["status"] == "failed"
    err = res["error"]
    assert err["type"] == "ValueError"
    assert err["message"] == "boom"
    assert err["retryable"] is True
    assert err["traceback"].startswith("Traceback (most recent call last):")
    assert "in fail" in err["traceback"]
    assert err["traceback"].rstrip().endswith("ValueError: boom")
    # The SDK's own plumbing is cut from the top of the traceback.
    assert "concurrent/futures" not in err["traceback"]


def test_snooze(examples):
    examples.job("j1", "examples.snooze")
    res = examples.recv()
    assert (res["status"], res["seconds"], res["reason"]) == ("snooze", 1, "later")
    assert examples.raw_lines[-1] == b'{"type":"result","id":"j1","status":"snooze","seconds":1,"reason":"later"}\n'


def test_permanent(examples):
    examples.job("j1", "examples.permanent")
    res = examples.recv()
    assert res["status"] == "failed"
    assert res["error"]["type"] == "PermanentError"
    assert res["error"]["retryable"] is False


def test_unknown_job(examples):
    examples.job("j1", "nobody.serves.this")
    res = examples.recv()
    assert res["status"] == "failed"
    assert res["error"]["type"] == "UnknownJob"
    assert "nobody.serves.this" in res["error"]["message"]
    assert res["error"]["retryable"] is False


def test_stray_print_is_harmless(examples):
    examples.job("j1", "examples.print")
    examples.job("j2", "examples.add", {"a": 1, "b": 1})
    res = examples.results(2)
    assert res["j1"]["result"] == {"ok": True}
    assert res["j2"]["result"] == {"sum": 2}
    examples.close_stdin()
    assert examples.wait() == 0
    assert "this is not a protocol frame" in examples.stderr
    assert "{not json either" in examples.stderr
    # _read_stdout decodes every line strictly; check nothing else got through.
    assert all(line.startswith(b'{"type":') for line in examples.raw_lines)


def test_ctx_fields(testapp):
    testapp.job(
        "j-ctx",
        "t.ctx",
        {"k": [1, "two"]},
        attempt=2,
        max_attempts=5,
        queue="billing",
        deadline=1767225600123,
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    )
    assert testapp.recv()["result"] == {
        "id": "j-ctx",
        "name": "t.ctx",
        "attempt": 2,
        "max_attempts": 5,
        "queue": "billing",
        "deadline": "2026-01-01T00:00:00.123000+00:00",
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "args": {"k": [1, "two"]},
    }
    testapp.job("j2", "t.ctx")
    res = testapp.recv()["result"]
    assert res["deadline"] is None and res["traceparent"] is None


def test_sync_handler_runs_off_the_main_thread_and_takes_args_only(testapp):
    testapp.job("j1", "t.args_only_sync", {"x": 5})
    assert testapp.recv()["result"] == {"thread_is_main": False, "x": 5}


def test_unserialisable_result(testapp):
    # As under a Soniq worker: done, the set stored as str() of it, and a WARN line.
    testapp.job("j1", "t.unserialisable")
    res = testapp.recv()
    assert (res["status"], res["result"]) == ("done", {"s": "{1, 2}"})
    testapp.wait_stderr("WARN: job j1 (t.unserialisable) returned set, which JSON cannot hold")


def test_exception_with_retryable_false(testapp):
    testapp.job("j1", "t.not_retryable")
    res = testapp.recv()
    assert res["error"]["type"] == "Declined"
    assert res["error"]["message"] == "card declined"
    assert res["error"]["retryable"] is False


def test_raised_snooze(testapp):
    testapp.job("j1", "t.raise_snooze")
    res = testapp.recv()
    assert (res["status"], res["seconds"], res["reason"]) == ("snooze", 2.5, None)


def test_child_process_cannot_touch_protocol_streams(testapp):
    testapp.job("j1", "t.child_process")
    # Had the child read the protocol's stdin, it would swallow this ping.
    testapp.send({"type": "ping", "seq": 1})
    frames = [testapp.recv(), testapp.recv()]
    assert {"type": "pong", "seq": 1} in frames
    res = [f for f in frames if f["type"] == "result"][0]
    assert res["status"] == "done", res
    testapp.close_stdin()
    assert testapp.wait() == 0
    assert "child stdout" in testapp.stderr
    assert "''" in testapp.stderr  # the child read an empty stdin (/dev/null)


def test_result_over_frame_limit_fails_cleanly():
    h = Handler(
        ["-m", "soniq_handler", "e2e_app"],
        env=child_env(extra_path=[TESTS_DIR], SONIQ_MAX_FRAME_BYTES="2048"),
    )
    try:
        h.hello()
        h.job("j1", "t.big", {"n": 2000})
        res = h.recv()
        assert res["status"] == "failed"
        assert res["error"]["type"] == "ResultTooLarge"
        assert res["error"]["retryable"] is False
        h.job("j2", "t.big", {"n": 1000})
        assert h.recv()["result"] == {"blob": "x" * 1000}
        # The lowered limit applies to incoming frames too.
        h.job("j3", "t.big", {"n": 1, "pad": "p" * 2100})
        assert h.wait() == 4
        assert "oversize" in h.stderr
    finally:
        h.kill()


def test_long_error_texts_are_truncated(testapp):
    testapp.job("j1", "t.long_error", {"n": 200_000})
    err = testapp.recv()["error"]
    assert err["type"] == "RuntimeError"
    assert len(err["message"]) < 70_000
    assert err["message"].startswith("mmm") and "[truncated" in err["message"]
    assert len(err["traceback"]) < 70_000
    assert err["traceback"].startswith("[truncated")
    assert err["traceback"].rstrip().endswith("m")  # the tail (the exception line) is kept


def test_exception_whose_str_fails(testapp):
    testapp.job("j1", "t.bad_str")
    err = testapp.recv()["error"]
    assert err["type"] == "Weird"
    assert "str() of Weird failed" in err["message"]


# ------------------------------------------------------------ cancellation


def test_cancel_async_within_1s(examples):
    examples.job("j1", "examples.sleep_async", {"seconds": 30})
    examples.sync(1)
    start = time.monotonic()
    examples.send({"type": "cancel", "id": "j1", "reason": "job_timeout"})
    res = examples.recv(timeout=1)
    assert time.monotonic() - start < 1
    assert (res["id"], res["status"]) == ("j1", "cancelled")
    # The process carries on.
    examples.job("j2", "examples.add", {"a": 1, "b": 2})
    assert examples.recv()["result"] == {"sum": 3}


def test_cancel_right_after_job_frame(examples):
    # Both frames in one write: the task is cancelled before it ever ran.
    job = {"type": "job", "id": "j1", "name": "examples.sleep_async", "args": {"seconds": 30},
           "attempt": 1, "max_attempts": 1, "queue": "q"}
    cancel = {"type": "cancel", "id": "j1", "reason": "shutdown_timeout"}
    examples.send_raw(protocol.encode(job) + b"\n" + protocol.encode(cancel) + b"\n")
    res = examples.recv(timeout=1)
    assert (res["id"], res["status"]) == ("j1", "cancelled")


def test_cancel_sync_is_ignored_and_real_result_arrives(examples):
    examples.job("j1", "examples.sleep_sync", {"seconds": 1})
    examples.sync(1)
    examples.send({"type": "cancel", "id": "j1", "reason": "job_timeout"})
    # The SDK saw the cancel while it held the job, and ignored it.
    examples.wait_stderr("cancel (job_timeout) for sync job j1 ignored")
    examples.no_frame_for(0.5)
    res = examples.recv(timeout=3)
    assert (res["id"], res["status"], res["result"]) == ("j1", "done", {"slept": 1})


def test_cancel_unknown_id_is_ignored(examples):
    examples.send({"type": "cancel", "id": "nope", "reason": "job_timeout"})
    examples.send({"type": "ping", "seq": 9})
    assert examples.recv() == {"type": "pong", "seq": 9}


def test_handler_that_swallows_cancel_reports_its_result(testapp):
    testapp.job("j1", "t.swallow_cancel")
    # Cancelled before its body ran, it could not swallow anything.
    testapp.wait_stderr("t.swallow_cancel j1 started")
    testapp.send({"type": "cancel", "id": "j1", "reason": "job_timeout"})
    res = testapp.recv(timeout=1)
    assert (res["status"], res["result"]) == ("done", {"cleaned_up": True})
