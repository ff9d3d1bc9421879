"""The "fast" extra: with orjson installed, long texts are parsed by orjson
instead of json, and the result must be json's, error for error: the same
values (types, key order, exact integers, floats to the bit) and the same
refusals (INVALID_JSON). orjson is in requirements-dev.txt, so these tests
always run; the default install (no orjson) is json alone."""

import json
import math
import struct
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soniq_handler import protocol

from test_vectors import VECTORS, _frame, strict

assert protocol._fast_loads is not None, "orjson (requirements-dev.txt) is needed for these tests"


def json_only(text):
    """parse_json as the default install has it: json alone."""
    saved = protocol._fast_loads
    protocol._fast_loads = None
    try:
        return outcome(text)
    finally:
        protocol._fast_loads = saved


def outcome(text):
    try:
        value = protocol.parse_json(text)
    except protocol.ProtocolError as e:
        return ("error", e.code, e.field)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))  # for strict_bits on deep values, after the parse
    try:
        return ("value", strict_bits(value))
    finally:
        sys.setrecursionlimit(limit)


def strict_bits(value):
    """strict(), with floats compared bit for bit (-0.0 is not 0.0)."""
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, dict):
        return ("object", [(k, strict_bits(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("array", [strict_bits(v) for v in value])
    return strict(value)


@pytest.fixture
def fast_everywhere(monkeypatch):
    """orjson for every text, however short (the vectors are small)."""
    monkeypatch.setattr(protocol, "FAST_MIN_CHARS", 0)


def test_long_texts_take_orjson_and_short_ones_json(monkeypatch):
    calls = []
    real = protocol._fast_loads
    monkeypatch.setattr(protocol, "_fast_loads", lambda text: calls.append(len(text)) or real(text))
    long_text = json.dumps({"items": [{"n": i, "name": f"item {i}"} for i in range(100)]})
    assert len(long_text) >= protocol.FAST_MIN_CHARS
    assert protocol.parse_json(long_text) == json.loads(long_text)
    assert protocol.parse_json('{"a":1}') == {"a": 1}
    assert calls == [len(long_text)]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_every_vector_decodes_as_with_json_alone(vector, fast_everywhere):
    kwargs = {"max_frame_bytes": vector["max_frame_bytes"]} if "max_frame_bytes" in vector else {}

    def decode():
        try:
            return ("frame", strict(protocol.decode(_frame(vector), **kwargs)))
        except protocol.ProtocolError as e:
            return ("error", e.code, e.field)

    got = decode()
    saved = protocol._fast_loads
    protocol._fast_loads = None
    try:
        want = decode()
    finally:
        protocol._fast_loads = saved
    assert got == want
    if vector["valid"]:
        assert got == ("frame", strict(vector["decoded"]))


PAD = " " * protocol.FAST_MIN_CHARS  # JSON whitespace: a text long enough for orjson


@pytest.mark.parametrize(
    "text",
    [
        # Integers: exact however long (orjson makes one beyond 64 bits a float).
        '[18446744073709551616, -9223372036854775809, 123456789012345678901234567890]',
        '[9223372036854775807, -9223372036854775808, 999999999999999999]',
        "1" + "0" * 308,  # the largest a 64-bit float holds, as an integer
        "1" + "0" * 309,  # beyond it: refused
        # Floats, to the bit, and beyond a float: refused.
        "[0.1000000000000000055511151231257827, 2.2250738585072011e-308, 4.9e-324, -0.0, 1E5, 1e308]",
        "1e400", "[-1e400]", "NaN", "[Infinity]", "-Infinity",
        # Strings: escapes, pairs, unpaired surrogates refused.
        '["\\u0000\\b\\f\\n\\r\\t\\"\\\\\\/", "\\ud83d\\ude00", "é€😀"]',
        '"\\ud800"', '"\\udc00"', '["\\ud800x"]', '"\\ud83d\\u0041"',
        # Structure: duplicates (the last wins), trailing data, commas, BOM.
        '{"a": 1, "a": 2, "b": {"a": 3}}', '{"a":1}x', "[1,2,]", "{,}", '\ufeff{"a":1}', "",
        # Nesting: json refuses what nests past the recursion limit (about
        # 1,000 levels here), orjson past 1,024; past 800 brackets json parses.
        "[" * 700 + "]" * 700, "[" * 900 + "]" * 900, "[" * 1010 + "]" * 1010, "[" * 1100 + "]" * 1100,
    ],
)
def test_texts_where_the_two_could_differ(text, fast_everywhere):
    for t in (text, text + PAD, PAD + text):
        got, want = outcome(t), json_only(t)
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 20000))  # comparing deep values
        try:
            same = got == want
        finally:
            sys.setrecursionlimit(limit)
        assert same, t[:80]


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=8), children, max_size=6),
    max_leaves=40,
)


@settings(max_examples=300, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(value=_json_values, ascii_only=st.booleans())
def test_any_json_value_parses_as_with_json_alone(value, ascii_only):
    text = json.dumps(value, ensure_ascii=ascii_only)
    t = text + PAD
    got = outcome(t)
    assert got == json_only(t)
    assert got == ("value", strict_bits(json.loads(text)))


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(text=st.text(alphabet='[]{}",:0123456789.eE+-tfnrul\\ud83 ', max_size=60))
def test_any_text_parses_or_fails_as_with_json_alone(text):
    t = text + PAD
    saved = protocol.FAST_MIN_CHARS
    protocol.FAST_MIN_CHARS = 0
    try:
        assert outcome(t) == json_only(t)
    finally:
        protocol.FAST_MIN_CHARS = saved


def test_floats_from_their_shortest_and_longest_texts_to_the_bit(fast_everywhere):
    values = [struct.unpack("<d", struct.pack("<Q", (i * 0x9E3779B97F4A7C15) % 2**64))[0] for i in range(2000)]
    values = [v for v in values if math.isfinite(v)]
    texts = [repr(v) for v in values] + ["%.25e" % v for v in values] + ["%.17f" % v for v in values if abs(v) < 1e20]
    t = "[" + ",".join(texts) + "]"
    assert outcome(t) == json_only(t)
