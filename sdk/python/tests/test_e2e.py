"""End-to-end: spawn handler processes and drive them frame by frame."""

import os
import queue
import subprocess
import sys
import threading
import time

import pytest

from soniq_handler import __version__, protocol

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
PKG_DIR = os.path.dirname(TESTS_DIR)

EXAMPLE_JOBS = [
    {"name": "examples.add", "cancellable": True},
    {"name": "examples.sleep_async", "cancellable": True},
    {"name": "examples.sleep_sync", "cancellable": False},
    {"name": "examples.fail", "cancellable": False},
    {"name": "examples.print", "cancellable": True},
    {"name": "examples.snooze", "cancellable": True},
    {"name": "examples.permanent", "cancellable": True},
]


def child_env(extra_path=(), **overrides):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env["PYTHONPATH"] = os.pathsep.join([PKG_DIR, *extra_path])
    env["SONIQ_PROTOCOL_VERSIONS"] = "1"
    for k, v in overrides.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


class Handler:
    """A handler process with its stdout split into decoded frames."""

    def __init__(self, args, env=None, cwd=None):
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env or child_env(),
            cwd=cwd or TESTS_DIR,
        )
        self.frames = queue.Queue()
        self.pending = []  # frames read by sync() while waiting for its pong
        self.raw_lines = []
        self.stderr_chunks = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        self._stderr_thread = threading.Thread(target=self._read_stderr, daemon=True)
        self._stderr_thread.start()

    def _read_stdout(self):
        for line in self.proc.stdout:
            self.raw_lines.append(line)
            # Every line the SDK writes must be a valid frame.
            try:
                self.frames.put(protocol.decode(line))
            except protocol.ProtocolError as e:
                self.frames.put(AssertionError(f"invalid frame on stdout ({e}): {line!r}"))
        self.frames.put(None)

    def _read_stderr(self):
        for chunk in iter(lambda: self.proc.stderr.read1(4096), b""):
            self.stderr_chunks.append(chunk)

    @property
    def stderr(self):
        return b"".join(self.stderr_chunks).decode("utf-8", "replace")

    def wait_stderr(self, text, timeout=5.0):
        """Waits until ``text`` shows up on stderr (read by another thread)."""
        deadline = time.monotonic() + timeout
        while text not in self.stderr:
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not on stderr within {timeout}s:\n{self.stderr}")
            time.sleep(0.02)

    def send(self, msg):
        self.proc.stdin.write(protocol.encode(msg) + b"\n")
        self.proc.stdin.flush()

    def send_raw(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def job(self, job_id, name, args=None, **extra):
        msg = {
            "type": "job",
            "id": job_id,
            "name": name,
            "args": {} if args is None else args,
            "attempt": 1,
            "max_attempts": 3,
            "queue": "default",
        }
        msg.update(extra)
        self.send(msg)

    def recv(self, timeout=5.0):
        if self.pending:
            return self.pending.pop(0)
        try:
            frame = self.frames.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no frame within {timeout}s; stderr:\n{self.stderr}") from None
        if frame is None:
            raise AssertionError(f"stdout closed; stderr:\n{self.stderr}")
        if isinstance(frame, AssertionError):
            raise frame
        return frame

    def sync(self, seq):
        """Pings and waits for the pong. The SDK reads its input in order, so
        every frame sent before the ping has been read and dispatched by then
        (a job is held, its task started); a test waits on this instead of
        sleeping. Frames that arrive first are kept for recv()."""
        self.send({"type": "ping", "seq": seq})
        other = []
        while True:
            frame = self.recv()
            if frame == {"type": "pong", "seq": seq}:
                self.pending = other + self.pending
                return
            other.append(frame)

    def no_frame_for(self, seconds):
        try:
            frame = self.frames.get(timeout=seconds)
        except queue.Empty:
            return
        if isinstance(frame, AssertionError):
            raise frame
        raise AssertionError(f"unexpected frame {frame}")

    def hello(self):
        frame = self.recv(timeout=10)
        assert frame["type"] == "hello", frame
        return frame

    def results(self, n, timeout=5.0):
        out = {}
        deadline = time.monotonic() + timeout
        while len(out) < n:
            frame = self.recv(timeout=max(0.01, deadline - time.monotonic()))
            assert frame["type"] == "result", frame
            assert frame["id"] not in out, f"second result for {frame['id']}"
            out[frame["id"]] = frame
        return out

    def close_stdin(self):
        self.proc.stdin.close()

    def wait(self, timeout=10):
        rc = self.proc.wait(timeout=timeout)
        self._stderr_thread.join(timeout=5)
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass


@pytest.fixture
def examples():
    h = Handler(["-m", "soniq_handler_examples"])
    h.hello()
    yield h
    h.kill()


@pytest.fixture
def testapp():
    h = Handler(["-m", "soniq_handler", "e2e_app"], env=child_env(extra_path=[TESTS_DIR]))
    h.hello()
    yield h
    h.kill()


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
    testapp.job("j1", "t.unserialisable")
    res = testapp.recv()
    assert res["status"] == "failed"
    assert res["error"]["type"] == "TypeError"
    assert "not JSON-serialisable" in res["error"]["message"]


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
