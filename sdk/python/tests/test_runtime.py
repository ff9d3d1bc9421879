"""In-process checks of the Runtime, the job machinery every transport calls
(start, cancel, report, hooks, slots, fail/close), and of the Ledger that
keeps attach mode's results until a session acknowledges them. Real asyncio
tasks and a real thread pool: no transport, the report callback is the
transport."""

import asyncio
import json
import sys
import threading
from datetime import datetime

import pytest

import soniq_handler
from soniq_handler import protocol
from soniq_handler._ledger import Ledger
from soniq_handler._registry import Registry, validator
from soniq_handler._results import encode_result, raised, result
from soniq_handler._runtime import Runtime


def job(job_id, name, args=None):
    return {
        "type": "job", "id": job_id, "name": name, "args": args or {}, "attempt": 2, "max_attempts": 5,
        "queue": "default", "deadline": None, "traceparent": None, "worker_id": None, "scheduled_at": None,
        "created_at": None,
    }


class Harness:
    """A Runtime over a Registry, its reports recorded in order."""

    def __init__(self, concurrency=2, sync_concurrency=1, max_frame_bytes=protocol.DEFAULT_MAX_FRAME_BYTES):
        self.reg = Registry()
        self.rt = Runtime(self.reg, concurrency=concurrency, sync_concurrency=sync_concurrency,
                          max_frame_bytes=max_frame_bytes)
        self.reports = []
        self.events = []  # hooks, in the order they ran
        self.changes = 0
        self.rt.on_change = self._changed
        self.reported = asyncio.Event()

    def _changed(self):
        self.changes += 1

    def report(self, frame, data):
        assert protocol.decode(data) == frame  # the encoding is the frame's
        self.reports.append(frame)
        self.reported.set()

    def start(self, job_id, name, args=None):
        self.rt.start(job(job_id, name, args), self.report)

    async def until(self, n, timeout=5):
        async def wait():
            while len(self.reports) < n:
                self.reported.clear()
                await self.reported.wait()

        await asyncio.wait_for(wait(), timeout)
        return {f["id"]: f for f in self.reports}


def run(coro):
    return asyncio.run(coro)


def test_slots_hold_extra_jobs_in_arrival_order():
    async def main():
        h = Harness(concurrency=1)
        gate = asyncio.Event()
        started = []

        async def work(args):
            started.append(args["n"])
            await gate.wait()
            return args["n"]

        h.reg.add_job("w", work, None)
        h.rt.open()
        for n in range(3):
            h.start(f"j{n}", "w", {"n": n})
        await asyncio.sleep(0.05)
        assert started == [0]  # one slot
        assert h.rt.held() == [("j0", "w"), ("j1", "w"), ("j2", "w")] and h.rt.count == 3
        gate.set()
        got = await h.until(3)
        assert [f["id"] for f in h.reports] == ["j0", "j1", "j2"] and started == [0, 1, 2]
        assert got["j2"]["status"] == "done" and got["j2"]["result"] == 2
        assert h.rt.count == 0 and h.rt.idle
        h.rt.close()

    run(main())


def test_cancel_waiting_job_reports_at_once_and_it_never_runs():
    async def main():
        h = Harness(concurrency=1)
        gate = asyncio.Event()
        before = []
        h.reg.add_hook("before_job", lambda name, job_id, attempt: before.append(job_id))

        async def work(args):
            await gate.wait()

        h.reg.add_job("w", work, None)
        h.rt.open()
        h.start("a", "w")
        h.start("b", "w")
        await asyncio.sleep(0.05)
        h.rt.cancel("b", "shutdown_timeout")
        assert h.reports == [result("b", "cancelled")]  # at once: it only waited
        gate.set()
        await h.until(2)
        assert before == ["a"]
        h.rt.close()

    run(main())


@pytest.mark.parametrize("reason, hook_runs", [("job_timeout", True), ("shutdown_timeout", False), ("user", False)])
def test_cancel_running_async_job(reason, hook_runs):
    async def main():
        h = Harness()
        errors = []
        h.reg.add_hook("on_error", lambda *a: errors.append(a))
        cancelled = asyncio.Event()
        seen = []

        async def hang(args, ctx):
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError as e:
                seen.append(e.args)
                cancelled.set()
                raise

        h.reg.add_job("hang", hang, None)
        h.rt.open()
        h.start("h1", "hang")
        await asyncio.sleep(0.05)
        h.rt.cancel("h1", reason)
        got = await h.until(1)
        assert got["h1"]["status"] == "cancelled" and cancelled.is_set()
        assert seen == [(reason,)], "the reason is the CancelledError's message"
        await h.rt.hooks_idle()
        assert errors == ([("hang", "h1", "Job timed out", 2)] if hook_runs else [])
        h.rt.close()

    run(main())


# An App with no hooks and no middleware takes a shorter way: its jobs'
# tasks report their own results as they end, and a callback is added only
# once a job is cancelled or raises. The same outcomes either way:


@pytest.mark.parametrize("hooked", [False, True])
def test_a_job_cancelled_before_its_first_step_is_reported_cancelled_and_never_runs(hooked):
    async def main():
        h = Harness()
        ran = []

        async def work(args):
            ran.append(1)

        if hooked:
            h.reg.add_hook("on_error", lambda *a: None)
        h.reg.add_job("w", work, None)
        h.rt.open()
        # One turn of the loop: the task exists and has not stepped yet.
        h.start("a", "w")
        h.rt.cancel("a", "user")
        got = await h.until(1)
        assert got["a"]["status"] == "cancelled" and ran == []
        await asyncio.sleep(0.05)
        assert len(h.reports) == 1 and h.rt.count == 0 and h.rt.idle
        h.rt.close()

    run(main())


@pytest.mark.parametrize("hooked", [False, True])
def test_a_handler_that_swallows_its_cancel_is_reported_once_with_its_value(hooked):
    async def main():
        h = Harness()
        after = []

        async def stubborn(args):
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                return "kept"

        if hooked:
            h.reg.add_hook("after_job", lambda *a: after.append(a))
        h.reg.add_job("s", stubborn, None)
        h.rt.open()
        h.start("a", "s")
        await asyncio.sleep(0.05)
        h.rt.cancel("a", "user")
        got = await h.until(1)
        assert (got["a"]["status"], got["a"]["result"]) == ("done", "kept")
        await asyncio.sleep(0.05)
        await h.rt.hooks_idle()
        assert len(h.reports) == 1 and h.rt.count == 0
        assert after == []  # a cancelled job runs no after_job hook, whatever it returned
        h.rt.close()

    run(main())


def test_a_job_that_waited_for_a_slot_starts_in_serves_context_not_the_one_the_job_before_left():
    import contextvars

    var = contextvars.ContextVar("var", default="unset")

    async def main():
        h = Harness(concurrency=1)
        seen = []

        async def work(args):
            seen.append((args["n"], var.get()))
            var.set(f"set by {args['n']}")
            await asyncio.sleep(0)
            return args["n"]

        h.reg.add_job("w", work, None)
        h.rt.open()
        for n in range(3):
            h.start(str(n), "w", {"n": n})
        got = await h.until(3)
        assert [got[str(n)]["result"] for n in range(3)] == [0, 1, 2]
        assert seen == [(0, "serve"), (1, "serve"), (2, "serve")]
        assert h.rt.count == 0 and h.rt.idle
        h.rt.close()

    async def serve():
        var.set("serve")
        await main()

    run(serve())


def test_sync_jobs_are_not_cancelled_and_run_in_the_pool():
    async def main():
        h = Harness(sync_concurrency=1)
        release = threading.Event()

        def blocking(args):
            release.wait(5)
            return threading.current_thread().name

        h.reg.add_job("s", blocking, None)
        h.rt.open()
        h.start("s1", "s")
        await asyncio.sleep(0.05)
        h.rt.cancel("s1", "job_timeout")  # ignored (logged)
        release.set()
        got = await h.until(1)
        assert got["s1"]["status"] == "done" and got["s1"]["result"].startswith("soniq-sync")
        h.rt.close()

    run(main())


def test_outcomes_of_a_job():
    async def main():
        h = Harness(max_frame_bytes=4096)
        h.reg.add_job("snooze", lambda args: soniq_handler.Snooze(3, "later"), None)
        h.reg.add_job("permanent", lambda args: (_ for _ in ()).throw(soniq_handler.PermanentError("no")), None)
        h.reg.add_job("odd", lambda args: {1, 2}, None)  # JSON cannot carry a set
        h.reg.add_job("big", lambda args: "x" * 5000, None)
        h.reg.add_job("checked", lambda args: args, validator("checked", lambda a: {"n": int(a["n"])}))
        h.rt.open()
        for job_id, name, args in [("1", "snooze", {}), ("2", "permanent", {}), ("3", "odd", {}), ("4", "big", {}),
                                   ("5", "checked", {"n": "7"}), ("6", "checked", {}), ("7", "nope", {})]:
            h.start(job_id, name, args)
        got = await h.until(7)
        assert (got["1"]["status"], got["1"]["seconds"], got["1"]["reason"]) == ("snooze", 3, "later")
        assert got["2"]["error"]["type"] == "PermanentError" and got["2"]["error"]["retryable"] is False
        # What JSON cannot hold is stored as str() of it, as a Soniq worker does: done.
        assert (got["3"]["status"], got["3"]["result"]) == ("done", "{1, 2}")
        assert got["4"]["error"]["type"] == "ResultTooLarge"
        assert got["5"]["result"] == {"n": 7}
        assert got["6"]["error"]["reason"] == "invalid_arguments"
        assert got["6"]["error"]["message"].startswith("Corrupted argument data: ")
        assert got["7"]["error"]["type"] == "UnknownJob"
        h.rt.close()

    run(main())


def test_after_job_hooks_run_after_the_report_and_count_as_busy():
    async def main():
        h = Harness()
        gate = asyncio.Event()
        seen = []

        async def after(name, job_id, duration_ms):
            seen.append((job_id, len(h.reports)))  # the result was reported first
            await gate.wait()

        h.reg.add_hook("after_job", after)
        h.reg.add_job("ok", lambda args: 1, None)
        h.rt.open()
        h.start("a", "ok")
        await h.until(1)
        await asyncio.sleep(0.05)
        assert seen == [("a", 1)]
        assert h.rt.count == 0 and not h.rt.idle  # a hook still runs
        changes = h.changes
        gate.set()
        await h.rt.hooks_idle()
        await asyncio.sleep(0)
        assert h.rt.idle and h.changes > changes  # its end is a change too
        h.rt.close()

    run(main())


def test_duplicate_and_start_of_a_held_job():
    async def main():
        h = Harness()
        gate = asyncio.Event()

        async def wait(args):
            await gate.wait()

        h.reg.add_job("w", wait, None)
        h.rt.open()
        assert not h.rt.duplicate("d")
        h.start("d", "w")
        assert h.rt.duplicate("d")
        with pytest.raises(ValueError):
            h.start("d", "w")
        gate.set()
        await h.until(1)
        assert not h.rt.duplicate("d")
        h.rt.close()

    run(main())


def test_fail_then_close_abandons_what_is_held():
    async def main():
        h = Harness()
        cancelled = asyncio.Event()

        async def hang(args):
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        h.reg.add_job("hang", hang, None)
        h.rt.open()
        h.start("h", "hang")
        await asyncio.sleep(0.05)
        changes = h.changes
        err = h.rt.fail(4, "protocol error: test")
        assert isinstance(err, soniq_handler.ServeError) and err.exit_code == 4
        assert h.rt.failure is err and h.changes == changes + 1
        assert h.rt.fail(1, "later") is err  # the first failure stays
        h.rt.close()
        await asyncio.wait_for(cancelled.wait(), 5)
        await asyncio.sleep(0)
        assert h.reports == []  # nothing is reported after a failure

    run(main())


def test_hello_and_jobs():
    reg = Registry()
    reg.add_job("a", lambda args: None, None)

    async def b(args, ctx):
        pass

    reg.add_job("b", b, None)
    rt = Runtime(reg, concurrency=3, sync_concurrency=2, max_frame_bytes=1 << 20)
    hello = rt.hello(1)
    assert protocol.decode(protocol.encode(hello)) == hello
    assert hello["jobs"] == [{"name": "a", "cancellable": False}, {"name": "b", "cancellable": True}]
    assert (hello["concurrency"], hello["sync_concurrency"], hello["sdk"]) == (3, 2, soniq_handler._types.SDK_NAME)


def test_encode_result_keeps_a_good_frame():
    frame = result("x", "done", value={"a": [1, 2.5]})
    assert encode_result(frame, 1 << 20) == (frame, protocol.encode(frame))


# ------------------------------------------------------------------ Ledger


def done(job_id):
    return result(job_id, "done", value=job_id)


def test_ledger_results_wait_until_acknowledged():
    led = Ledger(attach=True)
    s, kept = led.open()
    assert kept == []
    led.sent(s, done("a"))  # before the sidecar said anything: tracked
    led.heard(s, is_ack=True)
    assert led.acked(s, []) is False and Ledger.awaiting(s)
    led.sent(s, done("b"))
    assert led.acked(s, ["a"]) is True
    assert list(s.unacked) == ["b"] and led.lost(s) == ["b"]
    # The session breaks: b goes to the next one, with what was never written.
    led.closed(s, [done("c")], "unacknowledged")
    assert list(led.kept) == ["b", "c"]
    t, kept = led.open()
    assert [f["id"] for f in kept] == ["b", "c"] and led.kept == {}
    assert list(t.unacked) == ["b", "c"]  # until the new sidecar says whether it acknowledges


def test_ledger_with_a_sidecar_that_never_acknowledges():
    led = Ledger(attach=True)
    s, _ = led.open()
    led.sent(s, done("a"))
    led.heard(s, is_ack=False)  # anything but an Ack first: it never will
    assert s.unacked == {}
    led.sent(s, done("b"))
    assert s.unacked == {} and not Ledger.awaiting(s)
    led.closed(s, [], "gone")
    assert led.kept == {}  # it was trusted with what it received


def test_ledger_keeps_at_most_its_limit_and_nothing_when_spawned():
    led = Ledger(attach=True, limit=2)
    for job_id in "abc":
        led.keep(done(job_id), "no session")
    assert list(led.kept) == ["b", "c"]  # the oldest dropped
    spawned = Ledger(attach=False)
    spawned.keep(done("a"), "no session")
    s, _ = spawned.open()
    spawned.sent(s, done("b"))
    assert spawned.kept == {} and s.unacked == {}


# ------------------------------------------------- results that cannot be written


def _done(value, job_id="j"):
    return result(job_id, "done", value=value)


class _Point:
    def __str__(self):
        return "Point(1, 2)"


@pytest.mark.parametrize(
    "value, stored, types",
    [
        # json.dumps(v, default=str), as Soniq's Postgres codec stores a result.
        ({"ids": {1, 2}}, {"ids": "{1, 2}"}, "set"),
        (b"\xff", "b'\\xff'", "bytes"),
        ({"at": datetime(2026, 1, 2, 3, 4, 5), "p": [_Point()]}, {"at": "2026-01-02 03:04:05", "p": ["Point(1, 2)"]},
         "_Point, datetime"),
        ({1: "a", None: "b", 2.5: "c"}, {"1": "a", "null": "b", "2.5": "c"}, "NoneType key, float key, int key"),
        # Beyond json.dumps, so that the sidecar can read it: what it would not.
        ({(1, 2): "t"}, {"(1, 2)": "t"}, "tuple key"),
        ([float("nan"), float("-inf")], ["nan", "-inf"], "float -inf, float nan"),
        (10**400, str(10**400), "int too large for a 64-bit float"),
        ("a\udc80b", "a\ufffdb", "str with lone surrogates"),
    ],
)
def test_a_value_json_cannot_hold_is_stored_as_its_str_with_a_warning(value, stored, types, capfd):
    assert json.loads(json.dumps({"v": {1, 2}}, default=str)) == {"v": "{1, 2}"}  # Soniq's rule
    frame, data = encode_result(_done(value, "j7"), protocol.DEFAULT_MAX_FRAME_BYTES, "t.job")
    assert (frame["status"], frame["result"]) == ("done", stored)
    assert protocol.decode(data) == frame
    warn = [line for line in capfd.readouterr().err.splitlines() if "WARN" in line]
    assert len(warn) == 1, warn
    assert warn[0].endswith(f"WARN: job j7 (t.job) returned {types}, which JSON cannot hold; "
                            "its result stores str() of each, as a Soniq worker does")


def test_a_cycle_is_a_failure_even_behind_a_value_that_would_be_stringified(capfd):
    d = {"ids": {1, 2}, "a": []}
    d["a"].append(d)
    frame, _ = encode_result(_done(d), protocol.DEFAULT_MAX_FRAME_BYTES)
    assert (frame["status"], frame["error"]["retryable"]) == ("failed", False)
    assert frame["error"]["message"] == "job result is not JSON-serialisable: it contains itself: result['a'][0] is result"
    assert "WARN" not in capfd.readouterr().err


def test_a_stringified_value_over_the_frame_limit_fails_without_a_warning(capfd):
    frame, _ = encode_result(_done({"b": b"x" * 5000}), 4096)
    assert (frame["error"]["type"], frame["error"]["retryable"]) == ("ResultTooLarge", False)
    assert "WARN" not in capfd.readouterr().err


def test_a_value_that_contains_itself_fails_permanently_naming_where():
    d = {"a": [1]}
    d["a"].append(d)
    frame, data = encode_result(_done(d), protocol.DEFAULT_MAX_FRAME_BYTES)
    assert protocol.decode(data) == frame
    error = frame["error"]
    assert (frame["status"], error["retryable"]) == ("failed", False)
    assert error["message"] == "job result is not JSON-serialisable: it contains itself: result['a'][1] is result"


def test_a_value_nested_too_deep_fails_permanently_with_its_depth():
    v = 1
    for _ in range(20000):
        v = [v]
    frame, _ = encode_result(_done(v), protocol.DEFAULT_MAX_FRAME_BYTES)
    assert frame["error"]["retryable"] is False
    assert frame["error"]["type"] == "RecursionError"  # this interpreter's limit comes first
    assert "nested 20000 levels deep" in frame["error"]["message"]
    # Under a recursion limit raised past a frame's depth, the encoder's own
    # check refuses what the sidecar would (9,999 levels in a frame's field).
    v = [1]
    for _ in range(protocol.MAX_DEPTH - 2):
        v = [v]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(protocol.MAX_DEPTH + 2000)
    try:
        assert protocol.encode_value(v).count("[") == protocol.MAX_DEPTH - 1
        frame, _ = encode_result(_done([v]), protocol.DEFAULT_MAX_FRAME_BYTES)
    finally:
        sys.setrecursionlimit(limit)
    assert frame["error"]["type"] == "DepthError"
    assert frame["error"]["message"] == (
        "job result is not JSON-serialisable: it is nested 10000 levels deep, over the 9999 a result may have"
    )


def test_whatever_a_value_raises_while_written_fails_the_job_with_it():
    class Exploding(list):
        def __iter__(self):
            raise MemoryError()

    class Exiting(dict):
        def items(self):
            raise SystemExit(3)

    class BadStr:
        def __str__(self):
            raise LookupError("no text")

    for value, etype in ((Exploding([1]), "MemoryError"), (Exiting(a=1), "SystemExit"), (BadStr(), "LookupError")):
        frame, _ = encode_result(_done({"v": value}), protocol.DEFAULT_MAX_FRAME_BYTES)
        assert (frame["error"]["type"], frame["error"]["retryable"]) == (etype, False), frame
        assert frame["error"]["message"].startswith("job result is not JSON-serialisable: "), frame


def test_failures_whose_texts_cannot_be_written_are_made_writable():
    class BadStr(Exception):
        def __str__(self):
            raise RecursionError("deep")

    frame = raised("j", BadStr())
    assert frame["error"]["message"] == "<str() of BadStr failed: RecursionError>"
    frame = raised("j", ValueError("lone \udc80 surrogate, pair \ud83d\ude00"))
    frame2, data = encode_result(frame, protocol.DEFAULT_MAX_FRAME_BYTES)
    assert frame2 == frame and frame["error"]["type"] == "ValueError" and frame["error"]["retryable"] is True
    assert frame["error"]["message"] == "lone \ufffd surrogate, pair \U0001f600"
    assert protocol.decode(data)["error"]["message"] == frame["error"]["message"]


def test_a_failure_over_the_frame_limit_is_cut_to_fit_and_keeps_its_retryability():
    frame = raised("j", ValueError("é" * 20000))
    assert frame["error"]["traceback"]
    cut, data = encode_result(frame, 4096)
    assert len(data) <= 4096
    error = cut["error"]
    assert (error["type"], error["retryable"], error["traceback"]) == ("ValueError", True, None)
    assert error["message"].startswith("éé") and error["message"].endswith("[cut to fit the 4096-byte frame limit]")
    # A done result over the limit cannot be cut: it fails, not retried.
    big, _ = encode_result(_done("x" * 5000), 4096)
    assert (big["error"]["type"], big["error"]["retryable"]) == ("ResultTooLarge", False)


def test_a_transport_that_cannot_take_a_result_ends_serving():
    async def main():
        h = Harness()
        h.reg.add_job("a", lambda args: 1, None)

        def broken(frame, data):
            raise RuntimeError("queue closed")

        h.rt.open()
        h.rt.start(job("1", "a"), broken)
        while h.rt.failure is None:
            await asyncio.sleep(0.01)
        assert "could not report the result of job 1: RuntimeError: queue closed" in str(h.rt.failure)
        assert h.rt.count == 0
        h.rt.close()

    run(main())


def _flaky_dict_type():
    """A dict type whose items can be read once: a second encoding fails."""

    class Flaky(dict):
        calls = 0

        def items(self):
            Flaky.calls += 1
            if Flaky.calls > 1:
                raise RuntimeError("changed size during iteration")
            return super().items()

    return Flaky


def test_a_session_result_whose_value_changed_since_it_was_checked_fails():
    from soniq_handler._session import result_message

    Flaky = _flaky_dict_type()
    frame, _ = encode_result(_done(Flaky(a=1)), protocol.DEFAULT_MAX_FRAME_BYTES)
    assert frame["status"] == "done"
    msg = result_message(frame)
    assert msg.status == msg.FAILED and msg.error.retryable is False
    assert msg.error.message == "job result is not JSON-serialisable: changed size during iteration"


def test_a_session_result_takes_its_value_from_the_checked_encoding():
    from soniq_handler._session import result_message

    Flaky = _flaky_dict_type()
    # Written once, by the Runtime's check: the message carries that text.
    frame, data = encode_result(_done(Flaky(a=[1.0, "é\u2028"])), protocol.DEFAULT_MAX_FRAME_BYTES)
    msg = result_message(frame, data)
    assert msg.status == msg.DONE and msg.result_json == '{"a":[1.0,"é\u2028"]}'
    assert Flaky.calls == 1
    # The same message as the value written again gives, whatever the value.
    values = [None, 0, -0.0, 1e300, 2**63, "", '"\\\n\x01', [1, (2, 3)], {"b": 1, "a": {}}, "x" * 70000]
    for value in values:
        frame, data = encode_result(_done(value), 1 << 20)
        assert result_message(frame, data) == result_message(frame), value
    for frame in [raised("f", ValueError("bad")), result("s", "snooze", seconds=1.5, reason="later"), result("c", "cancelled")]:
        frame, data = encode_result(frame, 1 << 20)
        assert result_message(frame, data) == result_message(frame)


def test_a_job_that_returns_none_reports_what_encode_result_makes_of_its_result():
    # A done result with no value is written directly; where that frame is over the limit, the
    # result is what encode_result makes of it, as for any value.
    from soniq_handler._results import encode_result, result

    async def main():
        h = Harness(max_frame_bytes=4096)

        async def none(args):
            return None

        h.reg.add_job("none", none, None)
        ids = ["n1", "é\u2028\"\\", "x" * 4050, "y" * 5000]
        for job_id in ids:
            h.start(job_id, "none")
        got = await h.until(len(ids))
        for job_id in ids:
            assert got[job_id] == encode_result(result(job_id, "done"), 4096)[0], job_id
        assert got["n1"]["status"] == "done" and got["x" * 4050]["status"] == "done"
        assert got["y" * 5000]["status"] == "failed"

    run(main())
