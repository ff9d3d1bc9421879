"""Property tests at the SDK's boundary, over stdio: whatever a handler
returns or raises, and whatever args it gets, its job ends with one frame the
sidecar's decoder accepts, and the process goes on serving.

The oracle is the sidecar's own stream decoder (protocol/internal/framecheck,
built here with `go build`): the handler's stdout is piped into it, as the
sidecar reads it, and it says for each frame what it decoded or why it
refused it. One handler process (tests/property_app.py) serves the examples
of a test; it is started again only after an example broke it.

The budget is fixed: derandomized examples (the same ones on every run), a
bounded count, no shrinking (a job that hangs would make each shrinking step
wait for its timeout; the failing example is printed as found).
"""

import json
import math
import os
import queue
import re
import shutil
import subprocess
import sys
import threading

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from soniq_handler import protocol

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(TESTS_DIR)))
PKG_DIR = os.path.dirname(TESTS_DIR)

# A small frame limit, so that results and errors around it are cheap to make.
MAX_FRAME = 64 * 1024
# What a result may nest: the sidecar's decoder takes frames nested 10,000
# levels deep, the frame's own object included.
MAX_RESULT_DEPTH = 10000 - 1
RESULT_TIMEOUT = 10.0
UNENCODABLE = "job result is not JSON-serialisable"

PROPERTY_SETTINGS = settings(
    derandomize=True,
    database=None,
    deadline=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


@pytest.fixture(scope="module")
def framecheck(tmp_path_factory):
    go = shutil.which("go")
    if go is None:
        pytest.fail("the property tests build the sidecar's frame decoder (protocol/internal/framecheck): go is needed")
    out = str(tmp_path_factory.mktemp("framecheck") / "framecheck")
    subprocess.run([go, "build", "-o", out, "./protocol/internal/framecheck"], cwd=REPO, check=True)
    return out


class Served:
    """The property app over stdio, its stdout read by the sidecar's decoder."""

    def __init__(self, framecheck):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
        env.update(PYTHONPATH=os.pathsep.join([PKG_DIR, TESTS_DIR]), SONIQ_MAX_FRAME_BYTES=str(MAX_FRAME))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "soniq_handler", "property_app"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=TESTS_DIR,
        )
        self.check = subprocess.Popen(
            [framecheck, "-max-frame-bytes", str(MAX_FRAME)], stdin=self.proc.stdout, stdout=subprocess.PIPE
        )
        self.proc.stdout.close()  # the decoder's now
        self.verdicts = queue.Queue()
        self.stderr_chunks = []
        self.broken = False
        self.next_id = 0
        threading.Thread(target=self._read_verdicts, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        hello = self.verdict()
        assert hello["type"] == "hello", hello

    def _read_verdicts(self):
        for line in self.check.stdout:
            self.verdicts.put(json.loads(line))
        self.verdicts.put(None)

    def _read_stderr(self):
        for chunk in iter(lambda: self.proc.stderr.read1(4096), b""):
            self.stderr_chunks.append(chunk)

    @property
    def stderr(self):
        return b"".join(self.stderr_chunks).decode("utf-8", "replace")

    def fail(self, why):
        self.broken = True
        raise AssertionError(f"{why}\nhandler stderr (last 3000 chars):\n{self.stderr[-3000:]}")

    def verdict(self):
        try:
            v = self.verdicts.get(timeout=RESULT_TIMEOUT)
        except queue.Empty:
            self.fail(f"no frame from the handler within {RESULT_TIMEOUT}s")
        if v is None:
            self.fail(f"the handler's stdout ended (handler exit {self.proc.poll()}, decoder exit {self.check.poll()})")
        if not v["ok"]:
            self.fail(f"the sidecar's decoder refused a frame: {v}")
        return v

    def job(self, name, args):
        self.next_id += 1
        job_id = f"j{self.next_id}"
        frame = {"type": "job", "id": job_id, "name": name, "args": args, "attempt": 1, "max_attempts": 3,
                 "queue": "default"}
        try:
            self.proc.stdin.write(protocol.encode(frame) + b"\n")
            self.proc.stdin.flush()
        except OSError as e:
            self.fail(f"writing to the handler failed: {e}")
        return job_id

    def results(self, ids):
        """The one result of each of ``ids``, by id."""
        got = {}
        while len(got) < len(ids):
            v = self.verdict()
            if v["type"] != "result" or v["id"] not in ids:
                self.fail(f"unexpected frame {v}")
            if v["id"] in got:
                self.fail(f"a second result for {v['id']}: {v}")
            got[v["id"]] = v
        return got

    def run(self, name, args):
        """Runs one job, then an ordinary one: the process must go on serving."""
        job_id = self.job(name, args)
        ok_id = self.job("p.ok", {})
        got = self.results({job_id, ok_id})
        if got[ok_id].get("status") != "done" or got[ok_id].get("result") != '{"ok":true}':
            self.fail(f"the job after it did not complete: {got[ok_id]}")
        return got[job_id]

    def close(self):
        for p in (self.proc, self.check):
            if p.poll() is None:
                p.kill()
            p.wait()
        self.proc.stdin.close()
        self.proc.stderr.close()
        self.check.stdout.close()


@pytest.fixture(scope="module")
def served(framecheck):
    """A handler process for the module's examples: one that an example
    broke is replaced before the next. At the end none may have logged an
    exception that escaped into the event loop."""
    current = []

    def get():
        if current and current[-1].broken:
            current[-1].close()
        if not current or current[-1].broken:
            current.append(Served(framecheck))
        return current[-1]

    yield get
    for s in current:
        s.close()
        for marker in ("Exception in callback", "Task exception was never retrieved", "Traceback"):
            assert marker not in s.stderr, f"{marker!r} in the handler's stderr:\n{s.stderr[-5000:]}"


# ------------------------------------------------------------------ strategies

# JSON as a sidecar sends it in args: text without lone surrogates, numbers a
# 64-bit float holds, nesting far below the args' limit.
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=10,
)

HOSTILE_LEAVES = [
    "set", "frozenset", "bytes", "bytearray", "nan", "inf", "-inf", "object", "instance", "datetime",
    "decimal", "complex", "bad_repr", "bad_items", "recursing_items", "bad_iter", "memory", "exiting",
    "bad_class", "function",
]  # fmt: skip
NON_STR_KEYS = ["int", "none", "float", "bool", "tuple", "bytes"]

# (character, bytes it takes in a JSON string)
SIZED_CHARS = [("x", 1), ("é", 2), ("€", 3), ("😀", 4), ("\n", 2), ("\x01", 6)]


@st.composite
def sized_strings(draw):
    ch, size = draw(st.sampled_from(SIZED_CHARS))
    around = MAX_FRAME // size
    return {"k": "str", "ch": ch, "n": draw(st.integers(around - 120 // size - 40, around + 20))}


surrogates = st.builds(
    lambda s, at, code: {"k": "surrogate", "s": s, "at": min(at, len(s)), "code": code},
    st.text(max_size=8),
    st.integers(0, 8),
    st.integers(0xD800, 0xDFFF),
)

shallow_recipes = (
    json_values.map(lambda v: {"k": "json", "v": v})
    | st.just({"k": "args"})
    | st.sampled_from(HOSTILE_LEAVES).map(lambda k: {"k": k})
    | surrogates
    | st.integers(300, 320).map(lambda d: {"k": "bigint", "digits": d})
    | st.builds(lambda c, long: {"k": "cycle", "container": c, "long": long}, st.sampled_from(["list", "dict"]),
                st.booleans())
)

deep_recipes = st.builds(
    lambda depth, container, leaf: {"k": "deep", "depth": depth, "container": container, "leaf": leaf},
    st.sampled_from([1, 2, 100, 998, 1500, 9996, 9997, 9998, 9999, 10000, 10001, 11000, 14000]),
    st.sampled_from(["list", "dict"]),
    shallow_recipes,
)


def _containers(inner):
    items = st.lists(inner, max_size=3)
    keys = st.text(max_size=4) | st.sampled_from(NON_STR_KEYS).map(lambda k: {"k": k})
    return (
        items.map(lambda xs: {"k": "list", "items": xs})
        | items.map(lambda xs: {"k": "tuple", "items": xs})
        | st.lists(st.tuples(keys, inner).map(list), max_size=3).map(lambda kv: {"k": "dict", "items": kv})
    )


# Deep values only at the top, a chain of one-child containers (see same_json).
value_recipes = deep_recipes | st.recursive(shallow_recipes | sized_strings(), _containers, max_leaves=5)

snooze_recipes = st.builds(
    lambda seconds, reason: {"k": "snooze", "seconds": seconds, "reason": reason},
    st.floats(min_value=0, max_value=1e6, allow_nan=False),
    st.just({"k": "json", "v": None}) | st.text(max_size=10).map(lambda t: {"k": "json", "v": t}) | surrogates,
)

EXCEPTIONS = [
    "ValueError", "KeyError", "SystemExit", "KeyboardInterrupt", "GeneratorExit", "BadStr", "RecursiveStr",
    "NonStrStr", "SubclassStr", "BadRetryable", "Permanent", "CyclicCause", "BadClassName", "Snooze",
]  # fmt: skip

raise_recipes = st.builds(
    lambda cls, arg, retryable: {"cls": cls, "arg": arg, "retryable": retryable},
    st.sampled_from(EXCEPTIONS),
    shallow_recipes | sized_strings(),
    st.sampled_from([None, True, False]),
)


# --------------------------------------------------------------- expectations


def json_depth(v):
    if isinstance(v, (list, dict)):
        return 1 + max((json_depth(x) for x in (v.values() if isinstance(v, dict) else v)), default=0)
    return 0


class Matching:
    """Equal to any str that ``pattern`` matches in full: str() of an object
    that names its address."""

    def __init__(self, pattern):
        self.pattern = pattern

    def __eq__(self, other):
        return isinstance(other, str) and re.fullmatch(self.pattern, other) is not None

    def __repr__(self):
        return f"Matching({self.pattern!r})"


# What a leaf JSON cannot hold is stored as, under the SDK's rule (str() of
# it, as a Soniq worker stores it); None: it cannot be written at all (its
# methods raise or recurse), the job fails.
STORED_LEAVES = {
    "set": "{1, 2}",
    "frozenset": "frozenset({'a'})",
    "bytes": "b'\\x00\\xff'",
    "bytearray": "bytearray(b'ab')",
    "nan": "nan",
    "inf": "inf",
    "-inf": "-inf",
    "object": Matching(r"<object object at 0x[0-9a-f]+>"),
    "instance": Matching(r"<property_app\.Plain object at 0x[0-9a-f]+>"),
    "datetime": "2024-01-02 00:00:00+00:00",
    "decimal": "1.5",
    "complex": "1j",
    "function": Matching(r"<function build at 0x[0-9a-f]+>"),
}
# The keys of property_app.KEYS, and the text each becomes.
KEY_OBJECTS = {"int": 1, "none": None, "float": 1.5, "bool": True, "tuple": ("a",), "bytes": b"k"}


def _key_text(key):
    if isinstance(key, str):
        return key
    if key is True or key is False or key is None:
        return {True: "true", False: "false", None: "null"}[key]
    return repr(key) if isinstance(key, float) else str(key)


def expect(r, payload):
    """What a value recipe gives: (whether its job is done, the value as JSON
    reads it back, how deep it nests, whether it may be near the frame
    limit). A value JSON cannot hold is done, stored as str() of it."""
    k = r["k"]
    if k in ("json", "args"):
        v = r["v"] if k == "json" else payload
        return True, v, json_depth(v), False
    if k in ("list", "tuple"):
        parts = [expect(x, payload) for x in r["items"]]
        done = all(p[0] for p in parts)
        value = [p[1] for p in parts] if done else None
        return done, value, 1 + max((p[2] for p in parts), default=0), any(p[3] for p in parts)
    if k == "dict":
        # The handler's dict, with Python's own rules (1 and True are one
        # key; of a repeated key the last value counts), then its keys as text.
        built = {}
        for key, x in r["items"]:
            built[key if isinstance(key, str) else KEY_OBJECTS[key["k"]]] = x
        parts = {}
        for key, x in built.items():
            parts[_key_text(key)] = expect(x, payload)
        done = all(p[0] for p in parts.values())
        value = {key: p[1] for key, p in parts.items()} if done else None
        return done, value, 1 + max((p[2] for p in parts.values()), default=0), any(p[3] for p in parts.values())
    if k == "deep":
        done, v, depth, big = expect(r["leaf"], payload)
        for _ in range(r["depth"] if done else 0):
            v = [v] if r["container"] == "list" else {"d": v}
        return done, v, depth + r["depth"], big
    if k == "str":
        return True, r["ch"] * r["n"], 0, True
    if k == "bigint":
        return True, 10 ** r["digits"] if r["digits"] <= 308 else str(10 ** r["digits"]), 0, False
    if k == "surrogate":
        return True, r["s"][: r["at"]] + "\ufffd" + r["s"][r["at"]:], 0, False
    if k in STORED_LEAVES:
        return True, STORED_LEAVES[k], 0, False
    return False, None, 0, False  # a cycle, or a value whose methods raise or recurse


def same_json(text, expected):
    """Whether JSON ``text`` reads as ``expected``. The one-child containers
    a deep value is made of are peeled off first, so that nothing here
    recurses through them (json.loads and == would)."""
    start, end = 0, len(text)
    while True:
        if isinstance(expected, list) and len(expected) == 1 and text.startswith("[", start, end) \
                and text.endswith("]", start, end):
            expected, start, end = expected[0], start + 1, end - 1
        elif isinstance(expected, dict) and list(expected) == ["d"] and text.startswith('{"d":', start, end) \
                and text.endswith("}", start, end):
            expected, start, end = expected["d"], start + 5, end - 1
        else:
            return json.loads(text[start:end]) == expected


def check_return(v, recipe, payload):
    done, value, depth, big = expect(recipe, payload)
    if done and depth <= MAX_RESULT_DEPTH:
        if big and v["status"] == "failed" and v["error"]["type"] == "ResultTooLarge":
            assert v["error"]["retryable"] is False, v
            return
        assert v["status"] == "done", v
        assert same_json(v.get("result", "null"), value), v
        return
    assert v["status"] == "failed", v
    assert v["error"]["retryable"] is False, v
    if v["error"]["type"] != "ResultTooLarge":
        assert v["error"]["message"].startswith(UNENCODABLE), v
        assert len(v["error"]["message"]) > len(UNENCODABLE) + 2, v  # the cause is in it


# -------------------------------------------------------------------- tests


@settings(PROPERTY_SETTINGS, max_examples=200)
@given(recipe=value_recipes, payload=json_values, sync=st.booleans())
# A dict that contains itself, and a value nested beyond the recursion limit:
# once, each left its job unanswered with a RecursionError in the event loop.
@example(recipe={"k": "cycle", "container": "dict", "long": False}, payload=None, sync=False)
@example(recipe={"k": "deep", "depth": 14000, "container": "dict", "leaf": {"k": "json", "v": 1}}, payload=None,
         sync=True)
def test_any_returned_value_ends_the_job_with_a_frame_the_sidecar_accepts(served, recipe, payload, sync):
    v = served().run("p.sync" if sync else "p.async", {"mode": "return", "recipe": recipe, "payload": payload})
    check_return(v, recipe, payload)


@settings(PROPERTY_SETTINGS, max_examples=40)
@given(recipe=snooze_recipes, sync=st.booleans())
def test_a_returned_snooze_ends_as_a_snooze(served, recipe, sync):
    v = served().run("p.sync" if sync else "p.async", {"mode": "return", "recipe": recipe})
    assert v["status"] == "snooze", v
    assert math.isclose(v["seconds"], recipe["seconds"]), v
    reason = recipe["reason"]
    if reason["k"] == "json":
        assert v.get("reason") == reason["v"], v
    else:  # a lone surrogate UTF-8 cannot carry is replaced
        assert "\ufffd" in v["reason"], v


@settings(PROPERTY_SETTINGS, max_examples=120)
@given(recipe=raise_recipes, sync=st.booleans())
def test_any_raised_exception_ends_the_job_with_a_frame_the_sidecar_accepts(served, recipe, sync):
    v = served().run("p.sync" if sync else "p.async", {"mode": "raise", "recipe": recipe})
    cls = recipe["cls"]
    if cls == "Snooze":
        assert v["status"] == "snooze", v
        return
    assert v["status"] == "failed", v
    error = v["error"]
    if cls == "Permanent":
        assert error["retryable"] is False, v
    elif cls in ("BadRetryable", "CyclicCause", "BadClassName") or recipe["retryable"] is None:
        assert error["retryable"] is True, v  # the default, also when `retryable` itself raises
    else:
        assert error["retryable"] is recipe["retryable"], v
    names = {"Permanent": "PermanentError", "CyclicCause": "ValueError", "BadClassName": "object"}
    assert error["type"] == names.get(cls, cls), v


@settings(PROPERTY_SETTINGS, max_examples=100)
@given(payload=json_values, sync=st.booleans())
def test_args_come_back_as_they_were_sent(served, payload, sync):
    v = served().run("p.sync" if sync else "p.async", {"mode": "return", "recipe": {"k": "args"}, "payload": payload})
    assert v["status"] == "done", v
    assert same_json(v.get("result", "null"), payload), v
