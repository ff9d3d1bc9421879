"""Strict decoder and canonical encoder for the soniq handler protocol, version 1.

The message model lives in ``docs/protocol.md``; the conformance vectors in
``protocol/testdata/vectors.json`` pin down every corner (error codes, the order
of checks, the canonical encoding).  Both sides of the pipe use this module: the
SDK decodes sidecar frames (job, cancel, ping, shutdown) and encodes its own
(hello, result, pong), but the decoder accepts all eight types so that the
conformance vectors can be run against it in full.

    decode(line: bytes) -> Frame     # raises ProtocolError(code, field)
    encode(msg: Frame) -> bytes      # canonical JSON, without the trailing "\\n"

A ``Frame`` is one of the TypedDicts below (``JobFrame``, ``ResultFrame``...):
the canonical decoded message, with every field of its type (absent optional
fields are None).
"""

from __future__ import annotations

import json
import math
import sys
from decimal import Decimal
from typing import Any, Callable, Dict, List, Literal, Mapping, Optional, Tuple, TypedDict, Union, cast

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "MAX_DEPTH",
    "MAX_SAFE_INT",
    "MESSAGE_TYPES",
    "CancelFrame",
    "DepthError",
    "EnqueueFrame",
    "EnqueuedError",
    "EnqueuedFrame",
    "ErrorInfo",
    "Frame",
    "HelloFrame",
    "HelloJob",
    "JobFrame",
    "PingFrame",
    "PongFrame",
    "ProtocolError",
    "ResultFrame",
    "ResultStatus",
    "ShutdownFrame",
    "parse_json",
    "check",
    "decode",
    "encode",
    "encode_value",
]

DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
MAX_SAFE_INT = 2**53 - 1
# How deep a frame may nest, its own object included: what the sidecar's
# decoder (and the Node SDK's) take. The encoder refuses deeper values.
MAX_DEPTH = 10000

# Error codes (protocol/testdata/README.md).
INVALID_UTF8 = "invalid_utf8"
INVALID_JSON = "invalid_json"
NOT_OBJECT = "not_object"
UNKNOWN_TYPE = "unknown_type"
MISSING_FIELD = "missing_field"
WRONG_TYPE = "wrong_type"
INVALID_VALUE = "invalid_value"
OVERSIZE = "oversize"


class ProtocolError(Exception):
    """A frame that violates the protocol.

    ``code`` is one of the error codes of the conformance vectors; ``field`` is
    the dotted path of the offending field (``id``, ``error.message``,
    ``jobs[0].cancellable``) for missing_field / wrong_type / invalid_value, and
    None otherwise.
    """

    def __init__(self, code: str, field: Optional[str] = None, detail: str = "") -> None:
        self.code = code
        self.field = field
        self.detail = detail
        text = code if field is None else f"{code} at {field}"
        super().__init__(f"{text}: {detail}" if detail else text)


class DepthError(ValueError):
    """The encoder met a value nested deeper than ``MAX_DEPTH`` (a frame
    holding it would be refused)."""


# --------------------------------------------------------------------------
# The seven frame types as decoded: every field present, None where an
# optional field was absent (docs/protocol.md has the tables).
# --------------------------------------------------------------------------


class HelloJob(TypedDict):
    name: str
    cancellable: bool


class HelloFrame(TypedDict):
    type: Literal["hello"]
    protocol: int
    sdk: str
    pid: int
    jobs: List[HelloJob]
    concurrency: int
    sync_concurrency: Optional[int]


class JobFrame(TypedDict):
    type: Literal["job"]
    id: str
    name: str
    args: Dict[str, Any]
    attempt: int
    max_attempts: int
    queue: str
    deadline: Optional[int]  # epoch milliseconds
    traceparent: Optional[str]
    worker_id: Optional[str]
    scheduled_at: Optional[int]  # epoch milliseconds
    created_at: Optional[int]  # epoch milliseconds


class ErrorInfo(TypedDict):
    type: str
    message: str
    traceback: Optional[str]
    retryable: bool
    # "invalid_arguments" when the job's args failed validation, else None.
    reason: Optional[str]


ResultStatus = Literal["done", "failed", "snooze", "cancelled"]


class ResultFrame(TypedDict):
    type: Literal["result"]
    id: str
    status: ResultStatus
    result: Any  # done only: any JSON value
    error: Optional[ErrorInfo]  # failed only
    seconds: Optional[float]  # snooze only
    reason: Optional[str]  # snooze only


class CancelFrame(TypedDict):
    type: Literal["cancel"]
    id: str
    reason: Literal["job_timeout", "shutdown_timeout", "user"]


class PingFrame(TypedDict):
    type: Literal["ping"]
    seq: int


class PongFrame(TypedDict):
    type: Literal["pong"]
    seq: int


class ShutdownFrame(TypedDict):
    type: Literal["shutdown"]


class EnqueueFrame(TypedDict):
    type: Literal["enqueue"]
    parent: str
    id: str  # a canonical lower-case UUID
    name: str
    args: Dict[str, Any]
    queue: Optional[str]
    priority: Optional[int]
    max_attempts: Optional[int]
    delay: Optional[float]  # seconds
    dedup_key: Optional[str]
    unique: Optional[bool]
    immediate: Optional[bool]


class EnqueuedError(TypedDict):
    code: Literal["invalid", "cap", "parent", "unavailable"]
    message: str


class EnqueuedFrame(TypedDict):
    type: Literal["enqueued"]
    id: str
    job_id: Optional[str]
    error: Optional[EnqueuedError]


Frame = Union[
    HelloFrame, JobFrame, ResultFrame, CancelFrame, PingFrame, PongFrame, ShutdownFrame, EnqueueFrame, EnqueuedFrame
]


# --------------------------------------------------------------------------
# Field checkers.  Each takes the raw JSON value and its dotted path, raises
# ProtocolError(wrong_type | invalid_value, path) or returns the canonical value.
# --------------------------------------------------------------------------

Checker = Callable[[Any, str], Any]


def _is_int(v: Any) -> bool:
    # json.loads yields int exactly for numbers written without fraction or
    # exponent, so "1.0" and "1e3" arrive as float and are rejected here; bool
    # is a subclass of int in Python and must be excluded explicitly.
    return type(v) is int


def _int(minimum: Optional[int] = None) -> Checker:
    def check(v: Any, path: str) -> int:
        if not _is_int(v):
            raise ProtocolError(WRONG_TYPE, path, "expected an integer")
        if v > MAX_SAFE_INT or v < -MAX_SAFE_INT:
            raise ProtocolError(INVALID_VALUE, path, "integer outside ±(2^53-1)")
        if minimum is not None and v < minimum:
            raise ProtocolError(INVALID_VALUE, path, f"must be >= {minimum}")
        return int(v)

    return check


def _number(minimum: Optional[float] = None) -> Checker:
    def check(v: Any, path: str) -> Any:
        if type(v) not in (int, float):
            raise ProtocolError(WRONG_TYPE, path, "expected a number")
        if minimum is not None and v < minimum:
            raise ProtocolError(INVALID_VALUE, path, f"must be >= {minimum}")
        return v

    return check


def _string(non_empty: bool = False, choices: Optional[Tuple[str, ...]] = None) -> Checker:
    def check(v: Any, path: str) -> str:
        if type(v) is not str:
            raise ProtocolError(WRONG_TYPE, path, "expected a string")
        if non_empty and v == "":
            raise ProtocolError(INVALID_VALUE, path, "must not be empty")
        if choices is not None and v not in choices:
            raise ProtocolError(INVALID_VALUE, path, f"must be one of {', '.join(choices)}")
        return v

    return check


def _bool(v: Any, path: str) -> bool:
    if type(v) is not bool:
        raise ProtocolError(WRONG_TYPE, path, "expected a boolean")
    return v


def _object(v: Any, path: str) -> Dict[str, Any]:
    if type(v) is not dict:
        raise ProtocolError(WRONG_TYPE, path, "expected an object")
    return v


def _any(v: Any, path: str) -> Any:
    return v


# A field spec: (name, checker, required, default).  For "result", whose fields
# depend on its status, ``required`` may instead be a pair
# (statuses, required_there): outside those statuses the field is neither
# checked nor kept (it decodes as null).
Field = Tuple[str, Checker, Any, Any]


def _decode_fields(obj: Dict[str, Any], fields: List[Field], prefix: str = "") -> Dict[str, Any]:
    """Checks ``fields`` in table order: presence, then JSON type, then range.

    An absent field, or an optional one that is null, takes its default.
    """
    out: Dict[str, Any] = {}
    for name, check, required, default in fields:
        path = prefix + name
        if isinstance(required, tuple):
            statuses, required = required
            if out.get("status") not in statuses:
                out[name] = None
                continue
        if name not in obj:
            if required:
                raise ProtocolError(MISSING_FIELD, path)
            out[name] = default
            continue
        value = obj[name]
        if value is None and not required:
            out[name] = default
            continue
        out[name] = check(value, path)
    return out


def _job_entries(v: Any, path: str) -> List[Dict[str, Any]]:
    if type(v) is not list:
        raise ProtocolError(WRONG_TYPE, path, "expected an array")
    if not v:
        raise ProtocolError(INVALID_VALUE, path, "at least one job is required")
    seen = set()
    out = []
    for i, entry in enumerate(v):
        epath = f"{path}[{i}]"
        entry = _object(entry, epath)
        # Field by field, so a duplicate name is reported at `name` before
        # `cancellable` is looked at (the check order of the vectors).
        job = _decode_fields(entry, [("name", _string(non_empty=True), True, None)], prefix=epath + ".")
        if job["name"] in seen:
            raise ProtocolError(INVALID_VALUE, epath + ".name", "duplicate job name")
        seen.add(job["name"])
        job.update(_decode_fields(entry, [("cancellable", _bool, True, None)], prefix=epath + "."))
        out.append(job)
    return out


def _error_object(v: Any, path: str) -> Dict[str, Any]:
    return _decode_fields(
        _object(v, path),
        [
            ("type", _string(), True, None),
            ("message", _string(), True, None),
            ("traceback", _string(), False, None),
            ("retryable", _bool, False, True),
            ("reason", _string(choices=ERROR_REASONS), False, None),
        ],
        prefix=path + ".",
    )


_HEX = frozenset("0123456789abcdef")


def is_uuid(v: str) -> bool:
    """Whether ``v`` is a UUID in its canonical lower-case form (8-4-4-4-12)."""
    return (
        len(v) == 36
        and all(v[i] == "-" for i in (8, 13, 18, 23))
        and all(c in _HEX for i, c in enumerate(v) if i not in (8, 13, 18, 23))
    )


def _uuid(v: Any, path: str) -> str:
    s: str = _string()(v, path)
    if not is_uuid(s):
        raise ProtocolError(INVALID_VALUE, path, "must be a lower-case UUID (8-4-4-4-12 hex digits)")
    return s


ENQUEUE_ERROR_CODES = ("invalid", "cap", "parent", "unavailable")


def _enqueued_error(v: Any, path: str) -> Dict[str, Any]:
    return _decode_fields(
        _object(v, path),
        [("code", _string(choices=ENQUEUE_ERROR_CODES), True, None), ("message", _string(), True, None)],
        prefix=path + ".",
    )


RESULT_STATUSES = ("done", "failed", "snooze", "cancelled")
CANCEL_REASONS = ("job_timeout", "shutdown_timeout", "user")
ERROR_REASONS = ("invalid_arguments",)

# Table order of docs/protocol.md; "type" is handled separately.
_SPECS: Dict[str, List[Field]] = {
    "hello": [
        ("protocol", _int(1), True, None),
        ("sdk", _string(), True, None),
        ("pid", _int(1), True, None),
        ("jobs", _job_entries, True, None),
        ("concurrency", _int(1), True, None),
        ("sync_concurrency", _int(1), False, None),
    ],
    "job": [
        ("id", _string(non_empty=True), True, None),
        ("name", _string(non_empty=True), True, None),
        ("args", _object, True, None),
        ("attempt", _int(1), True, None),
        ("max_attempts", _int(1), True, None),
        ("queue", _string(), True, None),
        ("deadline", _int(), False, None),
        ("traceparent", _string(), False, None),
        ("worker_id", _string(), False, None),
        ("scheduled_at", _int(), False, None),
        ("created_at", _int(), False, None),
    ],
    "result": [
        ("id", _string(non_empty=True), True, None),
        ("status", _string(choices=RESULT_STATUSES), True, None),
        ("result", _any, (("done",), False), None),
        ("error", _error_object, (("failed",), True), None),
        ("seconds", _number(0), (("snooze",), True), None),
        ("reason", _string(), (("snooze",), False), None),
    ],
    "cancel": [
        ("id", _string(), True, None),
        ("reason", _string(choices=CANCEL_REASONS), True, None),
    ],
    "ping": [("seq", _int(0), True, None)],
    "pong": [("seq", _int(0), True, None)],
    "shutdown": [],
    "enqueue": [
        ("parent", _string(non_empty=True), True, None),
        ("id", _uuid, True, None),
        ("name", _string(non_empty=True), True, None),
        ("args", _object, True, None),
        ("queue", _string(non_empty=True), False, None),
        ("priority", _int(), False, None),
        ("max_attempts", _int(1), False, None),
        ("delay", _number(0), False, None),
        ("dedup_key", _string(non_empty=True), False, None),
        ("unique", _bool, False, None),
        ("immediate", _bool, False, None),
    ],
    "enqueued": [
        ("id", _string(non_empty=True), True, None),
        ("job_id", _string(), False, None),
        ("error", _enqueued_error, False, None),
    ],
}

MESSAGE_TYPES = tuple(_SPECS)  # the nine frame types


def _reject_constant(name: str) -> Any:
    # Python's json module accepts NaN / Infinity / -Infinity; JSON does not.
    raise ValueError(f"{name} is not valid JSON")


def _parse_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        # e.g. 1e400: not representable, and other decoders refuse it too.
        raise ValueError(f"number {text} out of range")
    return value


def _parse_int(text: str) -> int:
    # Integers are exact in Python, but Go and Node hold numbers as 64-bit
    # floats: one beyond that range is refused everywhere alike.
    if math.isinf(float(text)):
        raise ValueError(f"number {text[:40]} out of range")
    return int(text)


def _has_lone_surrogate(v: Any) -> bool:
    # json.loads turns an escaped lone surrogate ("\ud800") into a str that
    # cannot be encoded as UTF-8; the other decoders refuse such frames.
    if isinstance(v, str):
        return any("\ud800" <= c <= "\udfff" for c in v)
    if isinstance(v, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(x) for k, x in v.items())
    if isinstance(v, list):
        return any(_has_lone_surrogate(x) for x in v)
    return False


def decode(line: bytes, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> Frame:
    """Decodes one frame (the line's bytes, with or without its ``\\n``).

    Returns the canonical decoded message: every field of the type in table
    order with defaults filled in; fields the spec does not define are dropped.
    """
    if line.endswith(b"\n"):
        line = line[:-1]
    if len(line) > max_frame_bytes:
        raise ProtocolError(OVERSIZE, None, f"{len(line)} bytes > {max_frame_bytes}")
    if line.endswith(b"\r"):
        line = line[:-1]
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError(INVALID_UTF8, None, str(e)) from None
    return check(parse_json(text))


# The decoders are made once: json.loads with hooks makes a new decoder (and
# scanner) per call. An integer beyond a 64-bit float has at least 309
# digits, so a shorter text cannot hold one and needs no per-integer hook.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_parse_float, parse_int=_parse_int)
_DECODER_SHORT = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_parse_float)
_SHORT = 309
_Scan = Callable[[str, int], Tuple[Any, int]]
_SCANS: Dict[bool, Tuple[json.JSONDecoder, _Scan]] = {
    True: (_DECODER_SHORT, _DECODER_SHORT.scan_once),  # type: ignore[attr-defined]
    False: (_DECODER, _DECODER.scan_once),  # type: ignore[attr-defined]
}


# The "fast" extra (pip install "soniq-handler[fast]"): orjson parses long
# texts (a frame with args of a few KB: about 3 times faster than json) when
# it is installed. Only where its result is json's: no run of 19 digits (an
# integer beyond 64 bits is a float to orjson, exact to json) and nesting that
# json takes too (it refuses what nests past the interpreter's recursion
# limit, orjson past 1024 levels; brackets bound the nesting). What orjson
# refuses, json parses again, for the exact error.
_fast_loads: Optional[Callable[[str], Any]]
try:
    from orjson import loads as _fast_loads
except ImportError:
    _fast_loads = None
FAST_MIN_CHARS = 1024  # below this json costs about what the checks do
# A run of 19 digits shows as 19 zeros once every digit is a zero (a
# translate and a search in C: a regular expression costs twice orjson).
_DIGITS_AS_ZERO = str.maketrans("123456789", "000000000")
_LONG_DIGITS = "0" * 19


def _fast(text: str) -> bool:
    if _fast_loads is None or len(text) < FAST_MIN_CHARS:
        return False
    brackets = text.count("[") + text.count("{")
    return brackets < min(1000, sys.getrecursionlimit()) - 200 and _LONG_DIGITS not in text.translate(_DIGITS_AS_ZERO)


def parse_json(text: str) -> Any:
    """One JSON value, parsed as ``decode`` parses a frame: no NaN or
    Infinity, no number beyond a 64-bit float, no unpaired surrogate escape
    (``INVALID_JSON`` otherwise)."""
    if _fast(text):
        assert _fast_loads is not None
        try:
            # orjson refuses NaN, Infinity, numbers beyond a 64-bit float and
            # unpaired surrogate escapes, as the checks below do.
            return _fast_loads(text)
        except ValueError:
            pass
    try:
        if text.startswith("\ufeff"):
            # What json.loads says of a str that starts with a BOM.
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        decoder, scan = _SCANS[len(text) < _SHORT]
        try:
            # One value filling the text (a frame as the sidecar writes it):
            # what decode() would return, without its two whitespace scans.
            obj, end = scan(text, 0)
        except (StopIteration, ValueError):
            end = -1
        if end != len(text):
            obj = decoder.decode(text)  # whitespace around it, or the exact error
    except (ValueError, RecursionError) as e:
        raise ProtocolError(INVALID_JSON, None, str(e)) from None
    if "\\u" in text and _has_lone_surrogate(obj):
        raise ProtocolError(INVALID_JSON, None, "unpaired UTF-16 surrogate escape")
    return obj


def check(obj: Any) -> Frame:
    """The checks ``decode`` applies to a parsed frame: returns the
    canonical decoded message."""
    if type(obj) is not dict:
        raise ProtocolError(NOT_OBJECT, None, "a frame must be a JSON object")
    if "type" not in obj:
        raise ProtocolError(MISSING_FIELD, "type")
    mtype = obj["type"]
    if type(mtype) is not str:
        raise ProtocolError(WRONG_TYPE, "type", "expected a string")
    if mtype == "job":
        job = _valid_job(obj)
        if job is not None:
            return job
    spec = _SPECS.get(mtype)
    if spec is None:
        raise ProtocolError(UNKNOWN_TYPE, None, f"unknown message type {mtype!r}")
    out: Dict[str, Any] = {"type": mtype}
    out.update(_decode_fields(obj, spec))
    return cast(Frame, out)


def _valid_int(v: Any, minimum: int) -> bool:
    return type(v) is int and minimum <= v <= MAX_SAFE_INT


def _valid_job(obj: Dict[str, Any]) -> Optional[JobFrame]:
    """A job frame that passes every check of its spec, decoded as
    ``_decode_fields`` decodes it, without walking the spec (a job per job
    is the hot path); None for anything else, which the spec's walk then
    decodes or refuses with its error."""
    get = obj.get
    id_, name, args, queue = get("id"), get("name"), get("args"), get("queue")
    attempt: Any = get("attempt")
    max_attempts: Any = get("max_attempts")
    if not (
        type(id_) is str
        and id_
        and type(name) is str
        and name
        and type(args) is dict
        and _valid_int(attempt, 1)
        and _valid_int(max_attempts, 1)
        and type(queue) is str
    ):
        return None
    deadline, traceparent, worker_id = get("deadline"), get("traceparent"), get("worker_id")
    scheduled_at, created_at = get("scheduled_at"), get("created_at")
    if not (
        (deadline is None or _valid_int(deadline, -MAX_SAFE_INT))
        and (traceparent is None or type(traceparent) is str)
        and (worker_id is None or type(worker_id) is str)
        and (scheduled_at is None or _valid_int(scheduled_at, -MAX_SAFE_INT))
        and (created_at is None or _valid_int(created_at, -MAX_SAFE_INT))
    ):
        return None
    job: JobFrame = {
        "type": "job",
        "id": id_,
        "name": name,
        "args": args,
        "attempt": attempt,
        "max_attempts": max_attempts,
        "queue": queue,
        "deadline": deadline,
        "traceparent": traceparent,
        "worker_id": worker_id,
        "scheduled_at": scheduled_at,
        "created_at": created_at,
    }
    return job


# --------------------------------------------------------------------------
# Canonical encoder
# --------------------------------------------------------------------------

_KEY_ORDER: Dict[str, List[str]] = {t: ["type"] + [f[0] for f in spec] for t, spec in _SPECS.items()}
_NESTED_ORDER = {
    "jobs": ["name", "cancellable"],
    "error": ["type", "message", "traceback", "retryable", "reason"],
}


def _format_float(f: float) -> str:
    """Formats a float the way ECMAScript's Number::toString (and Go's
    encoding/json) do, so that the three SDKs agree byte for byte: integral
    values without ".0", plain notation for 1e-6 <= |f| < 1e21, otherwise
    exponent notation such as 1e+21 or 1.5e-7."""
    if math.isnan(f) or math.isinf(f):
        raise ValueError(f"{f!r} is not representable in JSON")
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    sign = "-" if f < 0 else ""
    # repr() gives the shortest digit string that round-trips, like the others.
    _, digits_t, exp = Decimal(repr(abs(f))).as_tuple()
    assert isinstance(exp, int)  # a finite value has an int exponent
    digits = "".join(map(str, digits_t)).lstrip("0")
    stripped = digits.rstrip("0")
    exp += len(digits) - len(stripped)
    digits = stripped
    k = len(digits)
    n = k + exp  # decimal point position: value = 0.<digits> * 10**n
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        esign = "+" if e >= 0 else "-"
        mant = digits if k == 1 else digits[0] + "." + digits[1:]
        body = f"{mant}e{esign}{abs(e)}"
    return sign + body


# json.dumps(s, ensure_ascii=False) for a str, without making an encoder
# per call: non-ASCII characters are written as UTF-8, not \\u escapes, and
# <, > and & are not escaped (no HTML escaping).
_encode_string: Callable[[str], str] = json.encoder.encode_basestring


def _json_float(f: float) -> str:
    """Formats a float inside ``args`` or ``result`` the way Python's json
    module does (``float.__repr__``): 2.0 stays ``2.0``, so a value a handler
    returns as a float reads back as a float wherever Python decodes it."""
    if math.isnan(f) or math.isinf(f):
        raise ValueError(f"{f!r} is not representable in JSON")
    return float.__repr__(f)


# Integers within this bound are exact as 64-bit floats' neighbours and far
# from overflowing one: no float() check needed.
_SMALL_INT = 2**63


def _encode_value(v: Any, out: List[str], format_float: Callable[[float], str], depth: int) -> None:
    # ``depth``: how many containers enclose ``v`` in the frame (the frame's
    # own object is the first). The exact str and int types go first (the
    # common values); everything else, subclasses included, takes the
    # isinstance chain below.
    t = type(v)
    if t is str:
        out.append(_encode_string(v))
    elif t is int and -_SMALL_INT < v < _SMALL_INT:
        out.append(int.__repr__(v))
    elif v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, str):
        out.append(_encode_string(v))
    elif isinstance(v, int):
        try:
            float(v)
        except OverflowError:
            # Exact in Python, but every other decoder (and ours) refuses a
            # number that rounds to infinity as a 64-bit float.
            raise ValueError(f"integer of {len(str(abs(v)))} digits is out of range for a 64-bit float") from None
        out.append(int.__repr__(v))
    elif isinstance(v, float):
        out.append(format_float(v))
    elif isinstance(v, dict):
        if depth >= MAX_DEPTH:
            raise DepthError(f"nested deeper than the {MAX_DEPTH} levels a frame may have")
        out.append("{")
        first = True
        for key, item in v.items():
            if not isinstance(key, str):
                raise TypeError(f"object keys must be strings, not {type(key).__name__}")
            if not first:
                out.append(",")
            first = False
            out.append(_encode_string(key))
            out.append(":")
            _encode_value(item, out, format_float, depth + 1)
        out.append("}")
    elif isinstance(v, (list, tuple)):
        if depth >= MAX_DEPTH:
            raise DepthError(f"nested deeper than the {MAX_DEPTH} levels a frame may have")
        out.append("[")
        for i, item in enumerate(v):
            if i:
                out.append(",")
            _encode_value(item, out, format_float, depth + 1)
        out.append("]")
    else:
        raise TypeError(f"Object of type {type(v).__name__} is not JSON serializable")


def encode_value(value: Any) -> str:
    """A free-form value (``args``, ``result``) as compact JSON, the way the
    encoder writes it inside a frame. Raises TypeError or ValueError for
    values JSON cannot represent (DepthError, a ValueError, for one nested
    deeper than a frame may be); a value whose own methods raise, or nested
    beyond the interpreter's recursion limit, raises what they raise."""
    out: List[str] = []
    _encode_value(value, out, _json_float, 1)
    return "".join(out)


_ENQUEUED_ERROR = ["code", "message"]

# Fields whose value is the user's JSON rather than the protocol's.
_FREE_FORM = frozenset({"args", "result"})


def _ordered(msg: Mapping[str, Any], order: List[str]) -> Dict[str, Any]:
    """Keys of ``order`` first (in that order), null values dropped."""
    return {k: msg[k] for k in order if msg.get(k) is not None}


def encode(msg: Frame) -> bytes:
    """Encodes a message canonically (no trailing newline).

    Keys follow the spec's table order, fields whose value is None are omitted,
    output is compact UTF-8 JSON with no HTML escaping.  Free-form values
    (``args``, ``result``) keep their own key order, and their numbers the
    text Python's json module gives them (2.0 is ``2.0``); the protocol's own
    numbers (``seconds``) are written as ECMAScript does (2.0 is ``2``).
    Raises TypeError or ValueError for values JSON cannot represent.
    """
    fields: Mapping[str, Any] = msg
    mtype = fields.get("type")
    if mtype == "result":
        data = _encode_plain_result(fields)
        if data is not None:
            return data
    order = _KEY_ORDER.get(mtype) if isinstance(mtype, str) else None
    if order is None:
        raise ValueError(f"unknown message type {mtype!r}")
    top = _ordered(fields, order)
    if "jobs" in top:
        top["jobs"] = [_ordered(j, _NESTED_ORDER["jobs"]) for j in top["jobs"]]
    if "error" in top:
        top["error"] = _ordered(top["error"], _ENQUEUED_ERROR if mtype == "enqueued" else _NESTED_ORDER["error"])
    out: List[str] = ["{"]
    for i, (key, value) in enumerate(top.items()):
        if i:
            out.append(",")
        out.append(_encode_string(key))
        out.append(":")
        _encode_value(value, out, _json_float if key in _FREE_FORM else _format_float, 1)
    out.append("}")
    return "".join(out).encode("utf-8")


def encode_done(job_id: str) -> Optional[bytes]:
    """``encode`` of a done result with no value (what a job that returns
    None reports), written without looking its fields up; None where
    ``encode`` raises (an id holding a lone surrogate)."""
    try:
        return ('{"type":"result","id":' + _encode_string(job_id) + ',"status":"done"}').encode("utf-8")
    except UnicodeEncodeError:
        return None


def _encode_plain_result(msg: Mapping[str, Any]) -> Optional[bytes]:
    """A result frame with no error, seconds or reason (every done result,
    and cancelled), encoded as ``encode`` encodes it; None for any other
    (``encode`` walks the key order for it)."""
    get = msg.get
    job_id, status = get("id"), get("status")
    if type(job_id) is not str or type(status) is not str or get("error") is not None:
        return None
    if get("seconds") is not None or get("reason") is not None:
        return None
    value = get("result")
    if value is None:
        text = '{"type":"result","id":' + _encode_string(job_id) + ',"status":' + _encode_string(status) + "}"
    else:
        text = (
            '{"type":"result","id":'
            + _encode_string(job_id)
            + ',"status":'
            + _encode_string(status)
            + ',"result":'
            + encode_value(value)
            + "}"
        )
    return text.encode("utf-8")
