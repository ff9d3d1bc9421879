"""Soniq's worker API in a handler process: before_job / after_job / on_error
hooks, middleware, validate= per job, and the job context's worker_id,
scheduled_at, created_at; driven frame by frame over stdio (and once over the
unix transport), handlers in tests/api_app.py."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from pydantic import ValidationError

import soniq_handler
from soniq_handler import protocol
from e2e_harness import TESTS_DIR, Handler, child_env

from api_app import OrderArgs


def start(**env):
    h = Handler(["-m", "soniq_handler", "api_app"], env=child_env(extra_path=[TESTS_DIR], **env))
    h.hello()
    return h


@pytest.fixture
def api():
    h = start()
    yield h
    h.kill()


def events(h, job_id):
    """The EV lines of one job, in the order they were written."""
    prefix = f"EV {job_id} "
    return [line[len(prefix):] for line in h.stderr.splitlines() if line.startswith(prefix)]


def drain(h):
    """Shuts the process down and waits for its exit: every hook has run by
    then (the process waits for them)."""
    h.send({"type": "shutdown"})
    assert h.wait() == 0, h.stderr


# ------------------------------------------------------------------ order


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_hooks_and_middleware_run_in_soniq_order(api, kind):
    api.job("j1", f"api.{kind}", {"x": 1}, attempt=2)
    res = api.recv()
    assert res["status"] == "done", res
    assert res["result"] == {
        "kind": kind,
        "args": {"x": 1},
        # A ContextVar set by a middleware is seen by the handler, also by a
        # sync one in its pool thread.
        "tag": "tag-j1",
        "main_thread": kind == "async",
    }
    drain(api)
    assert events(api, "j1") == [
        f"before_job#1 api.{kind} attempt=2",
        "before_job#2",
        "outer enter",  # the first registered middleware is the outermost
        "inner enter",
        "handler",
        "inner exit",
        "outer exit",
        f"after_job api.{kind} duration_ms_is_float=True",
    ]


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_on_error_gets_the_rows_error_text(api, kind):
    api.job("j1", f"api.fail_{kind}", attempt=3)
    res = api.recv()
    err = res["error"]
    assert (res["status"], err["type"], err["message"], err["retryable"]) == (
        "failed", "RuntimeError", f"{kind} boom", True)
    drain(api)
    # What the sidecar writes to last_error: "Type: message\ntraceback".
    text = f"RuntimeError: {kind} boom\n{err['traceback']}"
    assert events(api, "j1") == [
        f"before_job#1 api.fail_{kind} attempt=3",
        "before_job#2",
        "outer enter",
        "inner enter",
        "handler",
        "outer saw RuntimeError",
        f"on_error api.fail_{kind} attempt=3 error={text!r}",
    ]


def test_snooze_runs_neither_after_job_nor_on_error(api):
    api.job("j1", "api.snooze")
    res = api.recv()
    assert (res["status"], res["seconds"], res["reason"]) == ("snooze", 5, "later")
    drain(api)
    assert events(api, "j1") == ["before_job#1 api.snooze attempt=1", "before_job#2", "outer enter",
                                 "inner enter", "handler", "inner exit", "outer exit"]


def test_after_job_runs_once_the_result_is_reported_and_the_process_waits_for_it(tmp_path):
    release = tmp_path / "release"
    h = start(API_APP_RELEASE=str(release))
    try:
        h.job("slowhook-1", "api.async")
        # The result is out while after_job is still waiting for the file.
        assert h.recv()["status"] == "done"
        h.wait_stderr("EV slowhook-1 after_job waiting")
        # Shut down: the process keeps serving (a ping is answered) while
        # the hook runs, and exits only after it.
        h.send({"type": "shutdown"})
        h.sync(1)
        assert h.proc.poll() is None
        assert "after_job released" not in h.stderr
        release.touch()
        assert h.wait() == 0, h.stderr
        assert events(h, "slowhook-1")[-2:] == ["after_job waiting", "after_job released"]
    finally:
        h.kill()


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_on_error_runs_before_the_failure_is_reported(tmp_path, kind):
    # As Soniq's worker calls on_error before it writes the failure: the
    # failed result waits for the hook.
    release = tmp_path / "release"
    h = start(API_APP_RELEASE=str(release))
    try:
        h.job("slowerr-1", f"api.fail_{kind}")
        h.wait_stderr("EV slowerr-1 on_error waiting")
        h.sync(1)  # the process answers meanwhile
        h.no_frame_for(0.5)
        release.touch()
        res = h.recv()
        assert (res["status"], res["error"]["message"]) == ("failed", f"{kind} boom")
        # stderr is another pipe than the result's: its line may be read a
        # moment after the result (the order of the writes is what counts).
        h.wait_stderr("EV slowerr-1 on_error released")
        assert events(h, "slowerr-1")[-2:] == ["on_error waiting", "on_error released"]
    finally:
        h.kill()


def test_on_error_of_a_job_timeout_runs_before_the_cancelled_result(tmp_path):
    release = tmp_path / "release"
    h = start(API_APP_RELEASE=str(release))
    try:
        h.job("slowerr-t", "api.hang")
        h.wait_stderr("EV slowerr-t handler")
        h.send({"type": "cancel", "id": "slowerr-t", "reason": "job_timeout"})
        h.wait_stderr("EV slowerr-t on_error waiting")
        h.no_frame_for(0.5)
        release.touch()
        assert h.recv()["status"] == "cancelled"
        assert "on_error api.hang attempt=1 error='Job timed out'" in events(h, "slowerr-t")
    finally:
        h.kill()


def test_after_job_holds_no_slot(tmp_path):
    # concurrency=4: four jobs whose after_job waits, then a fifth, which runs
    # at once: a job's slot is free once its result is reported.
    release = tmp_path / "release"
    h = start(API_APP_RELEASE=str(release))
    try:
        for i in range(4):
            h.job(f"slowhook-{i}", "api.async")
        assert sorted(h.results(4)) == [f"slowhook-{i}" for i in range(4)]
        for i in range(4):
            h.wait_stderr(f"EV slowhook-{i} after_job waiting")
        h.job("j5", "api.async")
        assert h.recv()["id"] == "j5"
        release.touch()
        drain(h)
    finally:
        h.kill()


# ------------------------------------------------------------- hooks raise


def test_a_hook_that_raises_is_logged_and_changes_nothing():
    h = start(API_APP_RAISING_HOOKS="1")
    try:
        h.job("j1", "api.async")
        h.job("j2", "api.fail_sync")
        res = h.results(2)
        assert res["j1"]["status"] == "done" and res["j1"]["result"]["kind"] == "async"
        assert res["j2"]["status"] == "failed" and res["j2"]["error"]["message"] == "sync boom"
        drain(h)
        # The hooks registered after the raising ones still ran.
        assert events(h, "j1")[0] == "before_job#1 api.async attempt=1"
        assert events(h, "j1")[-1] == "after_job api.async duration_ms_is_float=True"
        assert events(h, "j2")[-1].startswith("on_error api.fail_sync")
        for event, text in [("before_job", "before hook boom"), ("after_job", "after hook boom"),
                            ("on_error", "on_error hook boom")]:
            assert re.search(rf"{event} hook raising_\w+ failed \(ignored\): RuntimeError: {text}\n"
                             r"Traceback \(most recent call last\):", h.stderr), h.stderr
    finally:
        h.kill()


# -------------------------------------------------------------- middleware


def test_middleware_may_replace_the_result(api):
    api.job("j1", "api.wrap")
    assert api.recv()["result"] == {"wrapped": {"wrap_me": True}}


def test_middleware_may_short_circuit_the_handler(api):
    api.job("j1", "api.short_circuit")
    assert api.recv()["result"] == {"short": True}
    drain(api)
    assert events(api, "j1") == [
        "before_job#1 api.short_circuit attempt=1", "before_job#2", "outer enter", "inner enter",
        "inner short-circuits", "outer exit", "after_job api.short_circuit duration_ms_is_float=True"]


def test_middleware_that_raises_fails_the_job_like_the_handler(api):
    api.job("j1", "api.mw_raises")
    res = api.recv()
    err = res["error"]
    assert (res["status"], err["type"], err["message"], err["retryable"]) == (
        "failed", "LookupError", "middleware said no", True)
    assert "in inner" in err["traceback"]
    drain(api)
    ev = events(api, "j1")
    assert "handler" not in ev
    assert ev[-2:] == ["outer saw LookupError",
                       f"on_error api.mw_raises attempt=1 error={'LookupError: middleware said no' + chr(10) + err['traceback']!r}"]


@pytest.mark.parametrize("reason, on_error", [("job_timeout", True), ("shutdown_timeout", False)])
def test_cancel_reaches_the_handler_through_the_middleware(api, reason, on_error):
    api.job("j1", "api.hang")
    api.wait_stderr("EV j1 handler")
    api.send({"type": "cancel", "id": "j1", "reason": reason})
    assert api.recv()["status"] == "cancelled"
    drain(api)
    ev = events(api, "j1")
    assert ev[:-1 if on_error else None] == [
        "before_job#1 api.hang attempt=1", "before_job#2", "outer enter", "inner enter", "handler",
        "outer saw CancelledError"]
    if on_error:
        # The sidecar failed the row for its timeout; on_error says so. A
        # job cancelled at shutdown goes back to the queue: no hook.
        assert ev[-1] == "on_error api.hang attempt=1 error='Job timed out'"


# -------------------------------------------------------------- validation


def test_validate_callable_normalises_the_args(api):
    api.job("j1", "api.valid_fn", {"n": "42"})
    assert api.recv()["result"] == {"got": {"n": 42}}


def test_validate_callable_failure_is_permanent_with_the_validation_message(api):
    api.job("j1", "api.valid_fn", {"n": "lots"})
    res = api.recv()
    assert res["status"] == "failed"
    assert res["error"] == {
        "type": "ValueError",
        "message": "Corrupted argument data: n must be a whole number, got 'lots'",
        "traceback": None,
        "retryable": False,
        "reason": "invalid_arguments",
    }
    drain(api)
    # As under a Soniq worker: before_job ran; neither the middleware, the
    # handler nor on_error did.
    assert events(api, "j1") == ["before_job#1 api.valid_fn attempt=1", "before_job#2"]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_validate_pydantic_model(api, kind):
    api.job("ok", f"api.valid_model_{kind}", {"order_id": "7"})
    assert api.recv()["result"] == {"got": {"order_id": 7, "note": "none"}}  # the model's dump

    bad = {"order_id": "seven", "note": 3}
    api.job("bad", f"api.valid_model_{kind}", bad)
    res = api.recv()
    with pytest.raises(ValidationError) as raised:
        OrderArgs(**bad)
    # Soniq's text: "Corrupted argument data: " and pydantic's message.
    assert res["error"] == {"type": "ValueError", "message": f"Corrupted argument data: {raised.value}",
                            "traceback": None, "retryable": False, "reason": "invalid_arguments"}
    assert res["error"]["message"].startswith("Corrupted argument data: 2 validation errors for OrderArgs\norder_id")


def test_validate_callable_that_only_checks(api):
    # Returning None keeps the args as they came; any exception is a
    # validation failure (a KeyError's str() is its repr).
    api.job("ok", "api.valid_check_only", {"n": "as is"})
    assert api.recv()["result"] == {"got": {"n": "as is"}}
    api.job("bad", "api.valid_check_only", {"forbidden": 1})
    err = api.recv()["error"]
    assert (err["type"], err["message"], err["retryable"], err["reason"]) == (
        "ValueError", "Corrupted argument data: 'forbidden'", False, "invalid_arguments")


# The SDK without pydantic: an import of it fails in this process.
NO_PYDANTIC = textwrap.dedent(
    """
    import importlib.abc
    import sys


    class NoPydantic(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "pydantic" or name.startswith(("pydantic.", "pydantic_core")):
                raise ImportError(f"{name} is hidden by the test")
            return None


    sys.meta_path.insert(0, NoPydantic())

    import soniq_handler

    app = soniq_handler.App()


    class NotAModel:
        pass


    try:
        app.job("x", validate=NotAModel)
    except TypeError as e:
        print(f"NotAModel refused: {e}", file=sys.stderr)


    def positive(args):
        if args.get("n", 0) <= 0:
            raise ValueError("n must be positive")
        return args


    @app.job("np.check", validate=positive)
    def check(args):
        return {"n": args["n"], "pydantic_loaded": "pydantic" in sys.modules}


    app.run()
    """
)


def test_sdk_and_validate_work_without_pydantic(tmp_path):
    (tmp_path / "prog.py").write_text(NO_PYDANTIC)
    frames = b"".join(protocol.encode(
        {"type": "job", "id": job_id, "name": "np.check", "args": {"n": n}, "attempt": 1, "max_attempts": 1,
         "queue": "default"}) + b"\n" for job_id, n in (("ok", 3), ("bad", -1)))
    proc = subprocess.run([sys.executable, "prog.py"], input=frames, capture_output=True, cwd=tmp_path,
                          env=child_env(), timeout=60)
    stderr = proc.stderr.decode()
    assert proc.returncode == 0, stderr
    assert "NotAModel refused: validate= of job 'x': NotAModel is a class but not a pydantic (v2) model" in stderr
    out = {f["id"]: f for f in map(protocol.decode, proc.stdout.splitlines()) if f["type"] == "result"}
    assert out["ok"]["result"] == {"n": 3, "pydantic_loaded": False}
    assert out["bad"]["error"]["message"] == "Corrupted argument data: n must be positive"
    assert out["bad"]["error"]["retryable"] is False


# ---------------------------------------------------------------- context


def test_ctx_has_worker_id_scheduled_at_created_at(api):
    api.job("j1", "api.ctx", worker_id="sidecar-7f3a", scheduled_at=1767225600123, created_at=0)
    assert api.recv()["result"] == {
        "job_id": "j1",
        "job_name": "api.ctx",
        "worker_id": "sidecar-7f3a",
        "scheduled_at": "2026-01-01T00:00:00.123000+00:00",
        "created_at": "1970-01-01T00:00:00+00:00",
    }
    # Absent or null: "" and None, as in a Soniq worker's JobContext.
    api.job("j2", "api.ctx", scheduled_at=None)
    assert api.recv()["result"] == {"job_id": "j2", "job_name": "api.ctx", "worker_id": "",
                                    "scheduled_at": None, "created_at": None}


# ------------------------------------------------------------ registration


def test_registration_of_hooks_middleware_and_validators():
    app = soniq_handler.App()

    async def mw(ctx, call_next):
        return await call_next(ctx)

    def hook(*args):
        pass

    # Each decorator hands the function back unchanged.
    assert app.middleware(mw) is mw and app.use(mw) is mw
    assert app.before_job(hook) is hook and app.after_job(hook) is hook and app.on_error(hook) is hook
    for register in (app.middleware, app.use, app.before_job, app.after_job, app.on_error):
        with pytest.raises(TypeError):
            register(42)
    with pytest.raises(TypeError, match="not a pydantic"):
        app.job("a", validate=dict)
    with pytest.raises(TypeError, match="must be a callable"):
        app.job("b", validate=42)
    app.job("c", validate=OrderArgs)(lambda args: None)
    app.job("d", validate=lambda args: args)(lambda args: None)
    assert [j["name"] for j in app.jobs] == ["c", "d"]


# ------------------------------------------------------------ unix transport


def test_hooks_middleware_and_validation_over_the_unix_transport(tmp_path):
    from soniq_handler import handler_pb2 as pb

    env = child_env(extra_path=[TESTS_DIR], SONIQ_TRANSPORT="unix", SONIQ_PLUGIN_MAGIC_COOKIE="soniq-handler-v1",
                    PLUGIN_PROTOCOL_VERSIONS="1", PLUGIN_UNIX_SOCKET_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "soniq_handler", "api_app"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=TESTS_DIR)
    try:
        address = proc.stdout.readline().decode().strip().split("|")[3]
        from test_session import Client

        c = Client(address)
        try:
            c.hello()
            results = {}

            def execute(j, timeout=30):
                c.send(job=j)
                while j.id not in results:
                    m = c.recv()
                    if m.WhichOneof("message") == "result":
                        results[m.result.id] = m.result
                return results.pop(j.id)

            def job(job_id, name, args, **extra):
                return pb.Job(id=job_id, name=name, args_json=args, attempt=1, max_attempts=3, queue="default",
                              **extra)

            ctx = execute(job("u0", "api.ctx", "{}"))
            assert json.loads(ctx.result_json) == {"job_id": "u0", "job_name": "api.ctx", "worker_id": "",
                                                   "scheduled_at": None, "created_at": None}
            # The row context fields (their gRPC names end in _ms).
            ctx = execute(job("u00", "api.ctx", "{}", worker_id="sidecar-7f3a", scheduled_at_ms=1767225600123,
                              created_at_ms=0))
            assert json.loads(ctx.result_json) == {
                "job_id": "u00", "job_name": "api.ctx", "worker_id": "sidecar-7f3a",
                "scheduled_at": "2026-01-01T00:00:00.123000+00:00", "created_at": "1970-01-01T00:00:00+00:00"}

            done = execute(job("u1", "api.sync", '{"x":1}'))
            assert done.status == pb.Result.DONE, done
            assert '"tag":"tag-u1"' in done.result_json
            bad = execute(job("u2", "api.valid_model_async", '{"order_id":"x"}'))
            assert bad.status == pb.Result.FAILED
            assert (bad.error.type, bad.error.retryable, bad.error.reason) == ("ValueError", False, "invalid_arguments")
            assert bad.error.message.startswith("Corrupted argument data: 1 validation error for OrderArgs")
            # A job cancelled for its timeout, as the sidecar does it.
            c.send(job=job("u3", "api.hang", "{}"))
            seen = b""
            while b"EV u3 handler" not in seen:
                chunk = proc.stderr.read1(4096)
                assert chunk, seen.decode()
                seen += chunk
            c.send(cancel=pb.CancelRequest(id="u3", reason="job_timeout"))
            while "u3" not in results:
                m = c.recv()
                if m.WhichOneof("message") == "result":
                    results[m.result.id] = m.result
            assert results["u3"].status == pb.Result.CANCELLED, results["u3"]
            c.send(shutdown=pb.Shutdown())
            with pytest.raises(StopIteration):
                c.recv()  # the session ends once it holds no job; the process exits
        finally:
            c.close()
        assert proc.wait(timeout=30) == 0
        stderr = (seen + proc.stderr.read()).decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    lines = [line for line in stderr.splitlines() if line.startswith("EV ")]
    assert [line for line in lines if line.startswith("EV u1 ")] == [
        "EV u1 before_job#1 api.sync attempt=1", "EV u1 before_job#2", "EV u1 outer enter", "EV u1 inner enter",
        "EV u1 handler", "EV u1 inner exit", "EV u1 outer exit", "EV u1 after_job api.sync duration_ms_is_float=True"]
    assert [line for line in lines if line.startswith("EV u2 ")] == [
        "EV u2 before_job#1 api.valid_model_async attempt=1", "EV u2 before_job#2"]
    assert [line for line in lines if line.startswith("EV u3 ")][-2:] == [
        "EV u3 outer saw CancelledError",
        "EV u3 on_error api.hang attempt=1 error='Job timed out'"]
