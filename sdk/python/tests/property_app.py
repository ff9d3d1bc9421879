"""Handlers for the property tests (tests/test_properties.py), run with
``python -m soniq_handler property_app``.

A job's args carry a recipe, plain JSON, for what its handler returns or
raises: JSON values, and everything a handler can hand the SDK that JSON
cannot carry (sets, bytes, NaN, lone surrogates, objects, cycles, nesting
beyond any limit, containers whose methods raise or recurse, exceptions whose
__str__ raises...). ``build`` turns a recipe into that value.
"""

import decimal
import sys
from datetime import datetime, timezone

import soniq_handler

# Deep enough that a result nested to the frame's limit (9,999 levels) can be
# encoded here, so that the SDK's own depth check is what refuses deeper ones.
sys.setrecursionlimit(12000)

app = soniq_handler.App(concurrency=4, sync_concurrency=2)


class Plain:
    def __init__(self):
        self.x = 1


class BadRepr:
    def __repr__(self):
        raise ValueError("repr refused")

    __str__ = __repr__


class BadItemsDict(dict):
    def items(self):
        raise ValueError("items() refused")


class RecursingDict(dict):
    def items(self):
        return self.items()


class BadIterList(list):
    def __iter__(self):
        raise RuntimeError("iteration refused")


class MemoryList(list):
    def __iter__(self):
        raise MemoryError()


class ExitingList(list):
    def __iter__(self):
        raise SystemExit(3)


class BadClass:
    @property
    def __class__(self):
        raise RuntimeError("__class__ refused")


LEAVES = {
    "set": lambda: {1, 2},
    "frozenset": lambda: frozenset({"a"}),
    "bytes": lambda: b"\x00\xff",
    "bytearray": lambda: bytearray(b"ab"),
    "nan": lambda: float("nan"),
    "inf": lambda: float("inf"),
    "-inf": lambda: float("-inf"),
    "object": object,
    "instance": Plain,
    "datetime": lambda: datetime(2024, 1, 2, tzinfo=timezone.utc),
    "decimal": lambda: decimal.Decimal("1.5"),
    "complex": lambda: 1j,
    "bad_repr": BadRepr,
    "bad_items": lambda: BadItemsDict(a=1),
    "recursing_items": lambda: RecursingDict(a=1),
    "bad_iter": lambda: BadIterList([1]),
    "memory": lambda: MemoryList([1]),
    "exiting": lambda: ExitingList([1]),
    "bad_class": BadClass,
    "function": lambda: build,
}

KEYS = {"int": 1, "none": None, "float": 1.5, "bool": True, "tuple": ("a",), "bytes": b"k"}


def build(r, args):
    k = r["k"]
    if k == "json":
        return r["v"]
    if k == "args":
        return args.get("payload")
    if k == "list":
        return [build(x, args) for x in r["items"]]
    if k == "tuple":
        return tuple(build(x, args) for x in r["items"])
    if k == "dict":
        return {(key if isinstance(key, str) else KEYS[key["k"]]): build(v, args) for key, v in r["items"]}
    if k == "deep":
        v = build(r["leaf"], args)
        for _ in range(r["depth"]):
            v = [v] if r["container"] == "list" else {"d": v}
        return v
    if k == "cycle":
        if r["container"] == "list":
            a = [1]
            b = [a]
            a.append(b if r["long"] else a)
            return a
        d = {"x": 1}
        d["self"] = {"back": d} if r["long"] else d
        return d
    if k == "str":
        return r["ch"] * r["n"]
    if k == "surrogate":
        return r["s"][: r["at"]] + chr(r["code"]) + r["s"][r["at"] :]
    if k == "bigint":
        return 10 ** r["digits"]
    if k == "snooze":
        return soniq_handler.Snooze(r["seconds"], build(r["reason"], args))
    return LEAVES[k]()


# ------------------------------------------------------------------ raising


class BadStr(Exception):
    def __str__(self):
        raise ValueError("str refused")


class RecursiveStr(Exception):
    def __str__(self):
        return str(self)


class NonStrStr(Exception):
    def __str__(self):
        return 42  # str() raises TypeError


class StrSubclass(str):
    def __len__(self):
        raise RuntimeError("len refused")


class SubclassStr(Exception):
    def __str__(self):
        return StrSubclass("a str subclass")


class BadRetryable(Exception):
    @property
    def retryable(self):
        raise RuntimeError("retryable refused")


class RaisingName(type):
    @property
    def __name__(cls):
        raise RuntimeError("__name__ refused")


class BadClassName(Exception, metaclass=RaisingName):
    pass


def exception(r, args):
    """The exception a "raise" recipe stands for."""
    cls, arg = r["cls"], build(r["arg"], args)
    if cls == "Snooze":
        return soniq_handler.Snooze(2)
    if cls == "Permanent":
        return soniq_handler.PermanentError(arg)
    if cls == "CyclicCause":
        a, b = ValueError(arg), KeyError("b")
        a.__cause__, b.__cause__ = b, a
        return a
    if cls == "BadClassName":
        return BadClassName(arg)
    classes = {
        "ValueError": ValueError,
        "KeyError": KeyError,
        "SystemExit": SystemExit,
        "KeyboardInterrupt": KeyboardInterrupt,
        "GeneratorExit": GeneratorExit,
        "BadStr": BadStr,
        "RecursiveStr": RecursiveStr,
        "NonStrStr": NonStrStr,
        "SubclassStr": SubclassStr,
        "BadRetryable": BadRetryable,
    }
    e = classes[cls](arg)
    if r["retryable"] is not None and cls != "BadRetryable":
        e.retryable = r["retryable"]
    return e


def run(args):
    if args["mode"] == "raise":
        raise exception(args["recipe"], args)
    return build(args["recipe"], args)


@app.job("p.async")
async def run_async(args):
    return run(args)


@app.job("p.sync")
def run_sync(args):
    return run(args)


@app.job("p.ok")
async def ok(args):
    return {"ok": True}
