"""Encoder/decoder cases the shared vectors do not cover."""

import json
import math

import pytest

from soniq_handler import protocol
from soniq_handler.protocol import ProtocolError, decode, encode


@pytest.mark.parametrize(
    "value, text",
    [
        (1.0, "1"),
        (-2.0, "-2"),
        (2.5, "2.5"),
        (0.1, "0.1"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (1.5e21, "1.5e+21"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (1.25e-7, "1.25e-7"),
        (123456.789, "123456.789"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (0.0, "0"),
    ],
)
def test_float_formatting_matches_ecmascript(value, text):
    assert protocol._format_float(value) == text
    assert float(text) == value


def test_encode_result_values():
    msg = {"type": "result", "id": "j", "status": "done", "result": {"b": 1.0, "a": [True, None, "x"]}}
    assert encode(msg) == b'{"type":"result","id":"j","status":"done","result":{"b":1.0,"a":[true,null,"x"]}}'


# Values a handler returns, as json.loads gives them back: types must survive.
ROUND_TRIP = [
    {"ratio": 2.0},
    2.0,
    -0.0,
    [1, 1.0, -3.5, 0.1, 1e-07, 1e16, 1e21, 1.5e-7, 5e-324, 1.7976931348623157e308],
    [2**53 + 1, 2**63, 2**64, -(2**63) - 1, 10**300],
    {"s": "é 🎉 \u2028 \"q\" \\ \n", "n": None, "t": True, "f": False},
    {"nested": {"a": [{}, [], {"x": 0.5, "y": 3.0}]}, "tuple": (1.0, 2)},
    "plain",
    None,
]


def strict(value):
    """value with every number tagged by its type: 2 != 2.0 != True here."""
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return (type(value).__name__, value)


@pytest.mark.parametrize("value", ROUND_TRIP, ids=repr)
def test_result_values_keep_their_json_types(value):
    """A result reads back (json.loads, as Soniq does) with the types Python's
    json gives it: the SDK writes numbers as json.dumps does."""
    frame = encode({"type": "result", "id": "j", "status": "done", "result": value})
    got = json.loads(frame)["result"] if value is not None else None
    assert strict(got) == strict(json.loads(json.dumps(value)))
    text = protocol.encode_value(value)
    assert text == json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if value is not None:
        assert frame.endswith(b',"result":' + text.encode() + b"}")
    decoded = decode(frame)
    assert decoded["type"] == "result" and strict(decoded["result"]) == strict(got)


def test_args_keep_their_json_types_too():
    frame = encode({"type": "job", "id": "j", "name": "n", "args": {"r": 2.0, "i": 2}, "attempt": 1,
                    "max_attempts": 1, "queue": "q"})
    assert b'"args":{"r":2.0,"i":2}' in frame


def test_protocol_numbers_stay_canonical():
    # seconds is the protocol's own number: written as ECMAScript does, as in the vectors.
    frame = encode({"type": "result", "id": "j", "status": "snooze", "seconds": 1000.0})
    assert frame == b'{"type":"result","id":"j","status":"snooze","seconds":1000}'


@pytest.mark.parametrize("bad", [math.nan, math.inf, object(), {1: "int key"}, {"s": {1, 2}}, 10**400, [-(10**309)]])
def test_encode_rejects_non_json(bad):
    with pytest.raises((TypeError, ValueError)):
        encode({"type": "result", "id": "j", "status": "done", "result": bad})


def test_encode_reorders_and_drops_nulls():
    msg = {"seq": 3, "type": "pong", "extra": None}
    assert encode(msg) == b'{"type":"pong","seq":3}'
    err = {"retryable": False, "message": "m", "type": "E", "traceback": None}
    got = encode({"type": "result", "status": "failed", "id": "j", "error": err})
    assert got == b'{"type":"result","id":"j","status":"failed","error":{"type":"E","message":"m","retryable":false}}'


def test_encode_unknown_type():
    with pytest.raises(ValueError):
        encode({"type": "nope"})


def test_decode_rejects_out_of_range_float():
    with pytest.raises(ProtocolError) as info:
        decode(b'{"type":"result","id":"j","status":"snooze","seconds":1e400}')
    assert info.value.code == "invalid_json"


def test_decode_deep_nesting_is_invalid_json_not_a_crash():
    deep = b'{"type":"job","id":"j","name":"n","args":' + b'[' * 100000 + b']' * 100000 + b'}'
    with pytest.raises(ProtocolError) as info:
        decode(deep)
    assert info.value.code == "invalid_json"


def test_decode_size_counts_bytes_not_characters():
    frame = '{"type":"cancel","id":"é","reason":"job_timeout"}'.encode()
    assert decode(frame, max_frame_bytes=len(frame))["id"] == "é"
    with pytest.raises(ProtocolError) as info:
        decode(frame, max_frame_bytes=len(frame) - 1)
    assert info.value.code == "oversize"


@pytest.mark.parametrize(
    "job_id",
    ["j1", "00000000-0000-4000-8000-000000000001", "é\u2028\U0001f600", 'q"b\\s/', "\x00\x1f\x7f\n\t", "", "x" * 5000],
)
def test_encode_done_is_encode_of_a_done_result_with_no_value(job_id):
    frame = {"type": "result", "id": job_id, "status": "done", "result": None, "error": None, "seconds": None, "reason": None}
    assert protocol.encode_done(job_id) == encode(frame)


def test_encode_done_gives_way_where_encode_raises():
    frame = {"type": "result", "id": "a\ud800b", "status": "done"}
    with pytest.raises(UnicodeEncodeError):
        encode(frame)
    assert protocol.encode_done("a\ud800b") is None
