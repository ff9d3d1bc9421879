"""The Session stream over a real socket: the example handler as its own
process (attach mode with --listen, and spawned with go-plugin's handshake),
a real gRPC client in the test. Includes the conformance vectors run over a
Session."""

import json
import os
import queue
import subprocess
import sys
import threading
import time

import grpc
import pytest

from soniq_handler import handler_pb2 as pb
from soniq_handler._session import frame_of
from soniq_handler import protocol

from e2e_harness import PKG_DIR, child_env
from test_vectors import VECTORS, _frame

SESSION = "/soniq.handler.v1.Handler/Session"


class Client:
    """One Session: messages go in through a queue, come out of an iterator."""

    def __init__(self, sock):
        self.channel = grpc.insecure_channel(f"unix:{sock}")
        self.out = queue.Queue()
        call = self.channel.stream_stream(
            SESSION,
            request_serializer=pb.SidecarMessage.SerializeToString,
            response_deserializer=pb.HandlerMessage.FromString,
        )
        self.call = call(iter(self.out.get, None))
        self.msgs = iter(self.call)

    def send(self, **kw):
        self.out.put(pb.SidecarMessage(**kw))

    def recv(self):
        return next(self.msgs)

    def hello(self):
        m = self.recv()
        assert m.WhichOneof("message") == "hello", m
        return m.hello

    def close(self):
        self.out.put(None)
        self.call.cancel()
        self.channel.close()


def job(job_id, name="examples.add", args='{"a": 1, "b": 2}'):
    return pb.Job(id=job_id, name=name, args_json=args, attempt=1, max_attempts=3, queue="default")


class Listening:
    """The example handler serving a socket of its own."""

    def __init__(self, tmp_path, **env):
        self.sock = str(tmp_path / "h.sock")
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "soniq_handler_examples", "--listen", self.sock],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=child_env(**env), cwd=PKG_DIR,
        )
        self.lines = []
        self.listening = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        assert self.listening.wait(20), self.stderr()

    def _read(self):
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace")
            self.lines.append(line)
            if "listening on" in line:
                self.listening.set()

    def stderr(self):
        return "".join(self.lines)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def listening(tmp_path):
    h = Listening(tmp_path)
    yield h
    h.stop()


def test_listen_prints_no_handshake_and_serves(listening):
    c = Client(listening.sock)
    hello = c.hello()
    assert hello.protocol == 1 and hello.pid == listening.proc.pid and len(hello.running) == 0
    c.send(job=job("a1"))
    m = c.recv()
    assert m.result.id == "a1" and m.result.status == pb.Result.DONE and json.loads(m.result.result_json) == {"sum": 3}
    c.close()
    assert oct(os.stat(listening.sock).st_mode & 0o777) == oct(0o660)
    listening.proc.terminate()
    assert listening.proc.wait(10) == 0
    assert listening.proc.stdout.read() == b""  # no go-plugin handshake line
    assert not os.path.exists(listening.sock)


def test_listen_from_the_environment(tmp_path):
    sock = str(tmp_path / "env.sock")
    proc = subprocess.Popen([sys.executable, "-m", "soniq_handler_examples"], stderr=subprocess.PIPE,
                            env=child_env(SONIQ_LISTEN=sock), cwd=PKG_DIR)
    try:
        assert b"listening on unix socket " + sock.encode() in proc.stderr.readline()
        assert subprocess.run([sys.executable, "-m", "soniq_handler", "probe", sock], env=child_env()).returncode == 0
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_probe_without_a_socket_fails_with_a_reason(tmp_path):
    r = subprocess.run([sys.executable, "-m", "soniq_handler", "probe", str(tmp_path / "none.sock")],
                       capture_output=True, env=child_env())
    assert r.returncode == 1 and b"does not exist" in r.stderr and r.stderr.count(b"\n") == 1


def test_bad_message_ends_the_session_not_the_process(listening):
    c = Client(listening.sock)
    c.hello()
    c.send(ping=pb.Ping(seq=-1))
    with pytest.raises(grpc.RpcError) as info:
        c.recv()
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith("protocol error: invalid_value at seq")
    c.close()
    assert listening.proc.poll() is None
    d = Client(listening.sock)  # the next session is served
    d.hello()
    d.close()


def test_results_of_a_broken_session_go_to_the_next(listening):
    c = Client(listening.sock)
    c.hello()
    c.send(job=job("s1", "examples.sleep_async", '{"seconds": 1}'))
    c.send(ping=pb.Ping(seq=1))
    assert c.recv().pong.seq == 1
    c.close()
    deadline = time.monotonic() + 10
    while True:  # the handler may not have seen the break yet
        d = Client(listening.sock)
        try:
            hello = d.hello()
            break
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.FAILED_PRECONDITION and time.monotonic() < deadline
            d.close()
    assert [(r.id, r.name) for r in hello.running] == [("s1", "examples.sleep_async")]
    m = d.recv()
    assert m.result.id == "s1" and m.result.status == pb.Result.DONE
    d.close()


def open_session(sock, deadline=10):
    """A new session, once the handler has seen the previous one end."""
    end = time.monotonic() + deadline
    while True:
        d = Client(sock)
        try:
            return d, d.hello()
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.FAILED_PRECONDITION and time.monotonic() < end
            d.close()


def test_hello_says_results_are_kept_until_acknowledged(listening):
    c, hello = open_session(listening.sock)
    assert hello.acks and list(hello.kept) == []
    c.close()


def test_unacknowledged_results_go_to_the_next_session(listening):
    # A sidecar that acknowledges results (its empty Ack) received a result
    # and broke before acknowledging it: it may never have recorded it.
    c, _ = open_session(listening.sock)
    c.send(ack=pb.Ack())
    c.send(job=job("a1"))
    assert c.recv().result.id == "a1"
    c.close()
    d, hello = open_session(listening.sock)
    assert list(hello.kept) == ["a1"] and len(hello.running) == 0
    m = d.recv()
    assert m.result.id == "a1" and json.loads(m.result.result_json) == {"sum": 3}
    d.send(ack=pb.Ack(ids=["a1"]))
    d.send(ping=pb.Ping(seq=5))
    assert d.recv().pong.seq == 5  # the ack was read before the ping
    d.close()
    e, hello = open_session(listening.sock)
    assert list(hello.kept) == [], "an acknowledged result is forgotten"
    e.send(ping=pb.Ping(seq=6))
    assert e.recv().pong.seq == 6, "nothing is sent again"
    e.close()


def test_acknowledged_results_are_not_sent_again(listening):
    c, _ = open_session(listening.sock)
    c.send(ack=pb.Ack())
    for i in range(3):
        c.send(job=job(f"b{i}"))
    got = sorted(c.recv().result.id for _ in range(3))
    assert got == ["b0", "b1", "b2"]
    c.send(ack=pb.Ack(ids=["b0", "b2"]))
    c.send(ping=pb.Ping(seq=1))
    assert c.recv().pong.seq == 1
    c.close()
    d, hello = open_session(listening.sock)
    assert list(hello.kept) == ["b1"]
    assert d.recv().result.id == "b1"
    d.close()


def test_batches_jobs_in_and_results_out(listening):
    # The hello offers batches; a sidecar that sends a Jobs message (empty
    # first, as the sidecar does) gets Results. Every job of a Jobs message
    # runs; each result comes once, alone or with others.
    c, hello = open_session(listening.sock)
    assert hello.batches
    c.send(jobs=pb.Jobs())
    c.send(ack=pb.Ack())
    c.send(jobs=pb.Jobs(jobs=[job(f"c{i}") for i in range(40)]))
    got, messages = [], 0
    while len(got) < 40:
        m = c.recv()
        messages += 1
        kind = m.WhichOneof("message")
        assert kind in ("result", "results"), m
        batch = [m.result] if kind == "result" else list(m.results.results)
        assert len(batch) >= 1
        got += [(r.id, r.status, json.loads(r.result_json)) for r in batch]
    assert sorted(got) == sorted((f"c{i}", pb.Result.DONE, {"sum": 3}) for i in range(40))
    assert messages < 40, "results of one turn of the loop go out together"
    # The empty Jobs message said nothing of acknowledgements: the Ack that
    # followed it counts, so unacknowledged results are kept for the next session.
    c.close()
    d, hello = open_session(listening.sock)
    assert sorted(hello.kept) == sorted(f"c{i}" for i in range(40))
    d.close()


def test_results_wait_for_a_jobs_message(listening):
    # A sidecar that never sends Jobs (an older one) gets Result messages only.
    c, hello = open_session(listening.sock)
    c.send(ack=pb.Ack())
    for i in range(20):
        c.send(job=job(f"e{i}"))
    kinds = {c.recv().WhichOneof("message") for _ in range(20)}
    assert kinds == {"result"}
    c.close()


def test_a_bad_job_in_a_batch_ends_the_session_after_the_good_ones(listening):
    c, _ = open_session(listening.sock)
    c.send(jobs=pb.Jobs())
    c.send(jobs=pb.Jobs(jobs=[job("f0"), job("f1", args='[1]'), job("f2")]))
    ids = []
    with pytest.raises(grpc.RpcError) as info:
        while True:
            m = c.recv()
            ids += [m.result.id] if m.WhichOneof("message") == "result" else [r.id for r in m.results.results]
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith("protocol error: wrong_type at args"), info.value.details()
    assert "f2" not in ids
    c.close()


def test_a_sidecar_that_never_acknowledges_is_trusted_with_what_it_received(listening):
    # An older sidecar sends no Ack: a result it received is not sent again.
    c, _ = open_session(listening.sock)
    c.send(job=job("c1"))
    assert c.recv().result.id == "c1"
    c.close()
    d, hello = open_session(listening.sock)
    assert list(hello.kept) == []
    d.close()


def test_a_result_that_ends_with_no_session_is_listed_as_kept(listening):
    c, _ = open_session(listening.sock)
    c.send(ack=pb.Ack())
    c.send(job=job("k1", "examples.sleep_async", '{"seconds": 0.5}'))
    c.send(ping=pb.Ping(seq=1))
    assert c.recv().pong.seq == 1
    c.close()
    time.sleep(1.5)  # the job ends while no session is open
    d, hello = open_session(listening.sock)
    assert list(hello.kept) == ["k1"] and len(hello.running) == 0
    assert d.recv().result.id == "k1"
    d.close()


def test_draining_waits_for_the_last_acknowledgements(listening):
    c, _ = open_session(listening.sock)
    c.send(ack=pb.Ack())
    c.send(job=job("d1"))
    assert c.recv().result.id == "d1"
    listening.proc.terminate()
    assert c.recv().WhichOneof("message") == "draining"
    time.sleep(1)
    assert listening.proc.poll() is None, "it waits for the acknowledgement of d1"
    c.send(ack=pb.Ack(ids=["d1"]))
    assert listening.proc.wait(10) == 0
    assert "undelivered" not in listening.stderr()


def test_spawned_session_ends_the_process(tmp_path):
    env = child_env(SONIQ_TRANSPORT="unix", SONIQ_PLUGIN_MAGIC_COOKIE="soniq-handler-v1",
                    PLUGIN_PROTOCOL_VERSIONS="1", PLUGIN_UNIX_SOCKET_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "soniq_handler_examples"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=PKG_DIR)
    try:
        sock = proc.stdout.readline().decode().strip().split("|")[3]
        c = Client(sock)
        c.hello()
        c.send(job=job("p1", "examples.sleep_sync", '{"seconds": 0.3}'))
        c.send(shutdown=pb.Shutdown())
        m = c.recv()
        assert m.result.id == "p1" and m.result.status == pb.Result.DONE
        with pytest.raises(StopIteration):
            c.recv()  # closed cleanly once the job reported
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_spawned_protocol_error_exits_4(tmp_path):
    env = child_env(SONIQ_TRANSPORT="unix", SONIQ_PLUGIN_MAGIC_COOKIE="soniq-handler-v1",
                    PLUGIN_PROTOCOL_VERSIONS="1", PLUGIN_UNIX_SOCKET_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "soniq_handler_examples"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=PKG_DIR)
    try:
        sock = proc.stdout.readline().decode().strip().split("|")[3]
        c = Client(sock)
        c.hello()
        c.send(job=job("", "examples.add"))
        assert proc.wait(10) == 4
        assert b"protocol error: invalid_value at id" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------- vectors

KNOWN = {
    "job": {"type", "id", "name", "args", "attempt", "max_attempts", "queue", "deadline", "traceparent",
            "worker_id", "scheduled_at", "created_at"},
    "cancel": {"type", "id", "reason"},
    "ping": {"type", "seq"},
    "shutdown": {"type"},
}
SIDECAR_TYPES = set(KNOWN)
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


def _is_int(v, bounds):
    return type(v) is int and bounds[0] <= v <= bounds[1]


def as_message(vector):
    try:
        return _as_message(vector)
    except (UnicodeError, ValueError):
        return None  # a string protobuf cannot carry (not UTF-8: a lone surrogate)


def _as_message(vector):
    """The SidecarMessage that carries the vector's frame, or None when
    protobuf cannot express it (bytes that are no JSON object, a field of a
    type or range the message cannot hold, a missing field proto3 cannot
    tell from its default). A job's args travel as the JSON text they are."""
    try:
        frame = json.loads(_frame(vector).decode("utf-8"))
    except ValueError:
        return None
    if not isinstance(frame, dict) or frame.get("type") not in SIDECAR_TYPES:
        return None
    t = frame["type"]
    if set(frame) - KNOWN[t]:
        return None  # protobuf drops unknown fields: their faults cannot travel
    if t == "shutdown":
        return pb.SidecarMessage(shutdown=pb.Shutdown())
    if t == "ping":
        return pb.SidecarMessage(ping=pb.Ping(seq=frame["seq"])) if _is_int(frame.get("seq"), INT64) else None
    if t == "cancel":
        if not all(isinstance(frame.get(k), str) for k in ("id", "reason")):
            return None
        return pb.SidecarMessage(cancel=pb.CancelRequest(id=frame["id"], reason=frame["reason"]))
    if not all(isinstance(frame.get(k), str) for k in ("id", "name", "queue")):
        return None
    if not all(_is_int(frame.get(k), INT32) for k in ("attempt", "max_attempts")):
        return None
    j = pb.Job(id=frame["id"], name=frame["name"], attempt=frame["attempt"], max_attempts=frame["max_attempts"],
               queue=frame["queue"])
    if "args" in frame:
        # As the sidecar writes it: 1e400 comes out as Infinity, a lone
        # surrogate as its escape; the frame checks refuse both.
        j.args_json = json.dumps(frame["args"], allow_nan=True)
    for key, field in (("deadline", "deadline_ms"), ("scheduled_at", "scheduled_at_ms"),
                       ("created_at", "created_at_ms")):
        v = frame.get(key)
        if v is None:
            continue
        if not _is_int(v, INT64):
            return None
        setattr(j, field, v)
    for key in ("traceparent", "worker_id"):
        v = frame.get(key)
        if v is None:
            continue
        if not isinstance(v, str):
            return None
        setattr(j, key, v)
    return pb.SidecarMessage(job=j)


CASES = [(v, m) for v in VECTORS if (m := as_message(v)) is not None]


def test_enough_vectors_travel_over_a_session():
    valid = sum(1 for v, _ in CASES if v["valid"])
    invalid = len(CASES) - valid
    assert valid >= 25 and invalid >= 15, (valid, invalid)


@pytest.fixture(scope="module")
def handlers(tmp_path_factory):
    """One listening handler per frame limit the vectors use."""
    started = {}

    def get(limit):
        if limit not in started:
            env = {} if limit is None else {"SONIQ_MAX_FRAME_BYTES": str(limit)}
            started[limit] = Listening(tmp_path_factory.mktemp("vec"), **env)
        return started[limit]

    yield get
    for h in started.values():
        h.stop()


@pytest.mark.parametrize("vector,message", CASES, ids=[v["name"] for v, _ in CASES])
def test_vector_over_session(handlers, vector, message):
    h = handlers(vector.get("max_frame_bytes"))
    c = Client(h.sock)
    try:
        c.hello()
        c.send(**{message.WhichOneof("message"): getattr(message, message.WhichOneof("message"))})
        kind = message.WhichOneof("message")
        if not vector["valid"]:
            with pytest.raises(grpc.RpcError) as info:
                while True:
                    c.recv()
            want = vector["error"]
            text = want["code"] + (f" at {want['field']}" if "field" in want else "")
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value
            assert info.value.details().startswith(f"protocol error: {text}"), info.value.details()
            return
        if kind == "shutdown":
            with pytest.raises(StopIteration):
                c.recv()  # the session ends: it holds no job
            return
        if kind == "job":
            m = c.recv()
            assert m.result.id == message.job.id, m
            return
        c.send(ping=pb.Ping(seq=9))  # a cancel has no answer: the pong shows it was taken
        m = c.recv()
        if kind == "ping":
            assert m.pong.seq == message.ping.seq
            m = c.recv()
        assert m.pong.seq == 9
    finally:
        c.close()


def test_frame_of_puts_args_in_as_they_came():
    m = pb.SidecarMessage(job=pb.Job(id="i", name="n", args_json='{"b": 1, "a": [1.5]}', attempt=1,
                                     max_attempts=2, queue="q", deadline_ms=5))
    assert frame_of(m) == b'{"type":"job","id":"i","name":"n","args":{"b": 1, "a": [1.5]},' \
                          b'"attempt":1,"max_attempts":2,"queue":"q","deadline":5}'
    assert protocol.decode(frame_of(m))["args"] == {"b": 1, "a": [1.5]}
    spliced = pb.SidecarMessage(job=pb.Job(id="i", name="n", args_json='{}, "attempt": 9', attempt=1,
                                           max_attempts=2, queue="q"))
    with pytest.raises(protocol.ProtocolError) as info:
        frame_of(spliced)
    assert info.value.code == "invalid_json"
    with pytest.raises(protocol.ProtocolError) as info:
        frame_of(pb.SidecarMessage())
    assert info.value.code == "unknown_type"


def test_results_that_cannot_be_written_fail_over_a_session_too(tmp_path):
    """The property app (tests/property_app.py) in attach mode: a value that
    contains itself, one nested past the recursion limit, an exception whose
    __str__ raises; each job fails with its cause and the next one runs."""
    sock = str(tmp_path / "p.sock")
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], os.path.dirname(os.path.abspath(__file__))])
    proc = subprocess.Popen([sys.executable, "-m", "soniq_handler", "property_app", "--listen", sock],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    early = []
    try:
        # The socket's file exists from its bind, before the server listens
        # (a connection then is refused): wait for the line the SDK prints
        # once it listens.
        for line in iter(proc.stderr.readline, b""):
            early.append(line)
            if b"listening on" in line:
                break
        else:
            raise AssertionError(b"".join(early).decode(errors="replace"))
        c = Client(sock)
        c.hello()
        cases = {
            "cycle": {"mode": "return", "recipe": {"k": "cycle", "container": "dict", "long": True}},
            "deep": {"mode": "return", "recipe": {"k": "deep", "depth": 20000, "container": "list",
                                                  "leaf": {"k": "json", "v": 1}}},
            "bad_str": {"mode": "raise", "recipe": {"cls": "BadStr", "arg": {"k": "json", "v": "x"}, "retryable": None}},
            "ok": {"mode": "return", "recipe": {"k": "json", "v": {"fine": True}}},
        }
        for job_id, args in cases.items():
            c.send(job=job(job_id, "p.async", json.dumps(args)))
        got = {}
        while len(got) < len(cases):
            r = c.recv().result
            got[r.id] = r
        assert (got["cycle"].status, got["cycle"].error.retryable) == (pb.Result.FAILED, False)
        assert got["cycle"].error.message == (
            "job result is not JSON-serialisable: it contains itself: result['self']['back'] is result"
        )
        assert (got["deep"].error.type, got["deep"].error.retryable) == ("DepthError", False)
        assert "nested 20000 levels deep" in got["deep"].error.message
        assert got["bad_str"].error.message == "<str() of BadStr failed: ValueError>"
        assert got["bad_str"].error.retryable is True
        assert (got["ok"].status, json.loads(got["ok"].result_json)) == (pb.Result.DONE, {"fine": True})
        c.close()
    finally:
        proc.kill()
        proc.wait(10)
    assert b"Exception in callback" not in b"".join(early) + proc.stderr.read()


def test_results_ready_in_one_turn_go_out_in_one_results_message(listening):
    # As many async jobs as the example App runs at once (its concurrency,
    # 8), in one Jobs message: they start together, end in the same turn of
    # the loop, and their results leave in one message.
    c, hello = open_session(listening.sock)
    assert hello.concurrency == 8
    c.send(jobs=pb.Jobs())
    c.send(ack=pb.Ack())
    for rnd in range(3):
        ids = [f"t{rnd}-{i}" for i in range(8)]
        c.send(jobs=pb.Jobs(jobs=[job(i) for i in ids]))
        m = c.recv()
        assert m.WhichOneof("message") == "results", m
        assert sorted(r.id for r in m.results.results) == sorted(ids)
        c.send(ack=pb.Ack(ids=ids))
    c.close()
