"""The result frames a job ends with, and how each is reported: a handler's
failure (whatever its exception does), the frames a transport sends on its
own, and the one check every result passes before it goes out
(``encode_result``). A value JSON cannot hold (a set, bytes, a datetime...)
is written as Soniq's worker stores it, ``str()`` of it, with a WARN line; a
value that contains itself, is nested deeper than a frame may be, or is over
the frame limit fails its job with the cause, not retried (docs/protocol.md,
"Result encoding failures"); nothing here raises for what a handler returned.
"""

from __future__ import annotations

import math
import os
import sys
import traceback
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

from . import protocol
from ._log import log
from ._types import Snooze

# Error texts are cut to this many characters so that a failed result stays far
# below the frame limit whatever the exception carries.
MAX_ERROR_TEXT = 64 * 1024


def result(
    job_id: str,
    status: protocol.ResultStatus,
    *,
    value: Any = None,
    error: Optional[protocol.ErrorInfo] = None,
    seconds: Optional[float] = None,
    reason: Optional[str] = None,
) -> protocol.ResultFrame:
    return {
        "type": "result",
        "id": job_id,
        "status": status,
        "result": value,
        "error": error,
        "seconds": seconds,
        "reason": reason,
    }


def failed(
    job_id: str, etype: str, message: str, tb: Optional[str], retryable: bool, reason: Optional[str] = None
) -> protocol.ResultFrame:
    # Cut, and made UTF-8 (lone surrogates replaced): whatever an exception
    # carries, its failure can always be written.
    return result(
        job_id,
        "failed",
        error={
            "type": _utf8(_truncate_head(etype)),
            "message": _utf8(_truncate_head(message)),
            "traceback": None if tb is None else _utf8(_truncate_tail(tb)),
            "retryable": retryable,
            "reason": reason,
        },
    )


def raised(job_id: str, e: BaseException, with_traceback: bool = True) -> protocol.ResultFrame:
    """The failure of a job that raised ``e``: its class name, message and
    traceback, retryable unless it says ``retryable = False``. Nothing ``e``
    does (a __str__ or a ``retryable`` property that raises or recurses)
    keeps the failure from being written."""
    tb = format_traceback(e) if with_traceback else None
    return failed(job_id, type_name(e), safe_str(e), tb, _retryable(e))


def shutting_down(job_id: str) -> protocol.ResultFrame:
    """A job that slipped in after shutdown: handed back for a retry."""
    return failed(job_id, "ShuttingDown", "handler process is shutting down", None, True)


def draining(job_id: str) -> protocol.ResultFrame:
    """A job that came while draining (attach mode): back at once, not counted as a failure."""
    return result(job_id, "snooze", seconds=0, reason="handler draining")


def snoozed(job_id: str, s: Snooze) -> protocol.ResultFrame:
    reason = None if s.reason is None else _utf8(_truncate_head(s.reason))
    return result(job_id, "snooze", seconds=s.seconds, reason=reason)


def safe_str(e: BaseException) -> str:
    """str(e); a __str__ that raises or recurses must not lose the result."""
    try:
        text = str(e)
    except BaseException as inner:  # noqa: B036 - user code runs here, whatever it raises
        return f"<str() of {type_name(e)} failed: {type_name(inner)}>"
    return str.__str__(text)  # an exact str, whatever subclass __str__ returned


def type_name(obj: object) -> str:
    try:
        name = type(obj).__name__
    except BaseException:  # noqa: B036 - a metaclass can make even this raise
        return "object"
    return name if type(name) is str else "object"


def _retryable(e: BaseException) -> bool:
    try:
        retryable = getattr(e, "retryable", True)
    except BaseException:  # noqa: B036 - a property that raises: the default
        return True
    return retryable if isinstance(retryable, bool) else True


def _utf8(text: str) -> str:
    """``text`` with lone surrogates (which UTF-8 cannot carry) replaced by
    U+FFFD; surrogate pairs become the character they stand for."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _truncate_head(text: str) -> str:
    if len(text) <= MAX_ERROR_TEXT:
        return text
    return f"{text[:MAX_ERROR_TEXT]}... [truncated {len(text) - MAX_ERROR_TEXT} chars]"


def _truncate_tail(text: str) -> str:
    # For tracebacks the end (the innermost frames, the exception) matters most.
    if len(text) <= MAX_ERROR_TEXT:
        return text
    return f"[truncated {len(text) - MAX_ERROR_TEXT} chars] ...{text[-MAX_ERROR_TEXT:]}"


# Frames of the Runtime and of the thread pool that lead into the handler:
# noise in a job's traceback, so they are cut from its top.
_PLUMBING_FILES = frozenset(
    {
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "_runtime.py"),
        getattr(sys.modules.get("concurrent.futures.thread"), "__file__", ""),
    }
)


def format_traceback(e: BaseException) -> Optional[str]:
    try:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename in _PLUMBING_FILES:
            tb = tb.tb_next
        return "".join(traceback.format_exception(type(e), e, tb or e.__traceback__))
    except BaseException:  # noqa: B036 - e's own methods run here; the failure goes out without it
        return None


def error_text(error: protocol.ErrorInfo) -> str:
    """A failure as the sidecar writes it to the row's last_error."""
    text = f"{error['type']}: {error['message']}"
    if error["traceback"]:
        text += "\n" + error["traceback"]
    return text


# What a result that cannot be written becomes: a failure that is not retried.
# The same args give the same value and the same failure, so a retry would run
# the handler (and its side effects) again for nothing; the job is
# dead-lettered with the cause, to be replayed once the handler is fixed.
UNENCODABLE_RETRYABLE = False


def encode_result(
    frame: protocol.ResultFrame, max_frame_bytes: int, job_name: Optional[str] = None
) -> Tuple[protocol.ResultFrame, bytes]:
    """The result as it is reported, encoded. A done result holding values
    JSON cannot hold is reported done with each of them as ``str()`` of it,
    as Soniq's worker stores it (``json.dumps(v, default=str)``), and one
    WARN line naming the job and the types (``stringified``). A value that
    still cannot be written (a cycle, nesting too deep, a method of it that
    raises, memory) or one over the frame limit fails the job instead, with
    the cause in the message; a failure over the limit keeps its type and
    retryability and is cut to fit. Never raises for anything in the frame
    (every transport reports what this returns)."""
    types: Set[str] = set()
    try:
        data = protocol.encode(frame)
    except BaseException as e:  # noqa: B036 - the value's own methods run here, whatever they raise
        frame, data = _stringified_or_failed(frame, e, types)
    if len(data) > max_frame_bytes:
        frame, data = _fit(frame, len(data), max_frame_bytes)
    elif types:
        job = frame["id"] if job_name is None else f"{frame['id']} ({job_name})"
        log(f"WARN: job {job} returned {', '.join(sorted(types))}, which JSON cannot hold; "
            "its result stores str() of each, as a Soniq worker does")
    return frame, data


def _stringified_or_failed(
    frame: protocol.ResultFrame, e: BaseException, types: Set[str]
) -> Tuple[protocol.ResultFrame, bytes]:
    """A frame whose encoding raised ``e``: a done one with its values JSON
    cannot hold stringified (their types added to ``types``), when that is
    all that was wrong; otherwise the failure that replaces it."""
    if frame.get("status") == "done" and not isinstance(e, (RecursionError, protocol.DepthError, MemoryError)):
        try:
            cycle, depth = _shape(frame.get("result"))
            if cycle is None and depth < protocol.MAX_DEPTH:
                found: Set[str] = set()
                done: protocol.ResultFrame = {**frame, "result": stringified(frame.get("result"), found)}
                data = protocol.encode(done)
                types.update(found)
                return done, data
        except BaseException as again:  # noqa: B036 - the value's own methods run here
            e = again
    failed = unencodable(frame, e)
    return failed, protocol.encode(failed)


def stringified(value: Any, types: Set[str]) -> Any:
    """``value`` with what JSON cannot hold replaced as ``json.dumps(value,
    default=str)`` replaces it, the way Soniq's Postgres codec stores a
    result: a value of another type becomes ``str()`` of it (a set inside a
    dict ``"{1, 2}"``, bytes ``"b'\\xff'"``), a key that is an int, float,
    bool or None the text json gives it (``"1"``, ``"true"``, ``"null"``).
    Beyond json.dumps, so that the sidecar can read every result: a key of
    another type is ``str()`` of it too (json.dumps raises there), an int too
    large for a 64-bit float, NaN and the infinities become ``str()`` of
    them, and lone surrogates U+FFFD. The names of the types replaced go to
    ``types``. The caller has checked that ``value`` holds no cycle and is
    not nested too deep; what its methods raise, this raises."""
    if value is None or value is True or value is False:
        return value
    if isinstance(value, str):
        fixed = _utf8(str.__str__(value))
        if fixed != value:
            types.add("str with lone surrogates")
        return fixed
    if isinstance(value, int):
        try:
            float(value)
            return value
        except OverflowError:
            types.add(f"{type_name(value)} too large for a 64-bit float")
            return int.__repr__(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        types.add(f"{type_name(value)} {float.__repr__(value)}")
        return float.__repr__(value)
    # Loops, not comprehensions: one stack frame per level of nesting, as the
    # encoder takes, so that what it can write this can convert.
    if isinstance(value, dict):
        out: Dict[str, Any] = {}
        for key, item in value.items():
            out[_key(key, types)] = stringified(item, types)
        return out
    if isinstance(value, (list, tuple)):
        items: List[Any] = []
        for item in value:
            items.append(stringified(item, types))
        return items
    types.add(type_name(value))
    return _utf8(str.__str__(str(value)))


def _key(key: Any, types: Set[str]) -> str:
    if isinstance(key, str):
        return stringified(key, types)  # type: ignore[no-any-return]
    types.add(f"{type_name(key)} key")
    if key is True or key is False or key is None:
        return {True: "true", False: "false", None: "null"}[key]
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        return float.__repr__(key) if math.isfinite(key) else {"inf": "Infinity", "-inf": "-Infinity"}.get(repr(key), "NaN")
    return _utf8(str.__str__(str(key)))


def unencodable(frame: protocol.ResultFrame, e: BaseException) -> protocol.ResultFrame:
    """The failure that replaces a result whose encoding raised ``e``."""
    try:
        cause = _encoding_cause(frame.get("result"), e)
    except BaseException:  # noqa: B036 - the value's methods run again here
        cause = safe_str(e)
    if not cause:
        cause = type_name(e)
    return failed(frame["id"], type_name(e), f"job result is not JSON-serialisable: {cause}", None,
                  UNENCODABLE_RETRYABLE)


def _encoding_cause(value: Any, e: BaseException) -> str:
    """Why ``value`` could not be written, in words: for a RecursionError or
    a value nested too deep, whether it contains itself (and where) or how
    deep it goes."""
    deep = isinstance(e, (RecursionError, protocol.DepthError))
    if not deep and not isinstance(value, (dict, list, tuple)):
        return safe_str(e)
    # A value that contains itself fails for that, whatever the encoder met
    # first (a set before the cycle is stringified; the cycle is not).
    cycle, depth = _shape(value)
    if cycle is not None:
        return f"it contains itself: {cycle}"
    if not deep:
        return safe_str(e)
    if depth >= protocol.MAX_DEPTH:
        return f"it is nested {depth} levels deep, over the {protocol.MAX_DEPTH - 1} a result may have"
    if isinstance(e, RecursionError) and depth > sys.getrecursionlimit() // 2:
        return (
            f"it is nested {depth} levels deep, deeper than the interpreter's recursion limit "
            f"({sys.getrecursionlimit()}) lets the encoder go"
        )
    return safe_str(e)  # a method of the value recursed


def _shape(value: Any) -> Tuple[Optional[str], int]:
    """(where ``value`` first contains itself, or None; how deep its lists
    and dicts nest), found without recursion."""
    path: List[str] = ["result"]  # how each container on the walk is reached
    on_path: Dict[int, int] = {}  # id of a container on the walk -> its index in `path`
    stack: List[Tuple[int, Iterator[Tuple[str, Any]]]] = []
    depth = 0

    def enter(v: Any) -> Optional[str]:
        nonlocal depth
        if not isinstance(v, (dict, list, tuple)):
            return None
        if id(v) in on_path:
            return f"{_path_text(path)} is {_path_text(path[: on_path[id(v)] + 1])}"
        on_path[id(v)] = len(path) - 1
        items: Iterator[Tuple[str, Any]]
        if isinstance(v, dict):
            items = ((f"[{_key_text(k)}]", x) for k, x in v.items())
        else:
            items = ((f"[{i}]", x) for i, x in enumerate(v))
        stack.append((id(v), items))
        depth = max(depth, len(stack))
        return None

    found = enter(value)
    while stack and found is None:
        vid, items = stack[-1]
        step = next(items, None)
        if step is None:
            stack.pop()
            del on_path[vid]
            path.pop()
            continue
        path.append(step[0])
        found = enter(step[1])
        if len(stack) < len(path):  # not a container: nothing below it
            path.pop()
    return found, depth


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return repr(key) if len(key) <= 40 else repr(key[:40])[:-1] + "...'"
    return f"<{type_name(key)}>"


def _path_text(path: List[str]) -> str:
    if len(path) <= 12:
        return "".join(path)
    return "".join(path[:6]) + f"...({len(path) - 11} more)..." + "".join(path[-5:])


def _fit(frame: protocol.ResultFrame, size: int, max_frame_bytes: int) -> Tuple[protocol.ResultFrame, bytes]:
    """A frame of ``size`` bytes, over the limit, made to fit: a failure
    loses its traceback and has its message cut (so that it stays the
    handler's failure, with its retryability), a snooze its reason; anything
    else, or what still does not fit, becomes a ResultTooLarge failure."""
    job_id = frame["id"]
    error = frame["error"]
    if frame["status"] == "failed" and error is not None:
        cut: protocol.ResultFrame = {**frame, "error": {**error, "message": "", "traceback": None}}
        room = max_frame_bytes - len(protocol.encode(cut)) - 80
        if room > 0:
            message = _cut_to_fit(error["message"], room, max_frame_bytes)
            cut = {**frame, "error": {**error, "message": message, "traceback": None}}
            data = protocol.encode(cut)
            if len(data) <= max_frame_bytes:
                return cut, data
    elif frame["status"] == "snooze" and frame["reason"] is not None:
        cut = {**frame, "reason": None}
        data = protocol.encode(cut)
        if len(data) <= max_frame_bytes:
            return cut, data
    too_large = failed(
        job_id,
        "ResultTooLarge",
        f"encoded result is {size} bytes, over the {max_frame_bytes}-byte frame limit",
        None,
        False,
    )
    return too_large, protocol.encode(too_large)


def _cut_to_fit(text: str, room: int, max_frame_bytes: int) -> str:
    """The longest head of ``text`` whose JSON encoding takes at most
    ``room`` bytes, marked as cut."""

    def size(n: int) -> int:
        return len(protocol.encode_value(text[:n]).encode("utf-8"))

    if size(len(text)) <= room:
        return text
    lo, hi = 0, min(len(text), room)
    while lo < hi:  # the largest n with size(n) <= room
        mid = (lo + hi + 1) // 2
        if size(mid) <= room:
            lo = mid
        else:
            hi = mid - 1
    return f"{text[:lo]}... [cut to fit the {max_frame_bytes}-byte frame limit]"
