"""Encoder/decoder cases the shared vectors do not cover."""

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
    assert encode(msg) == b'{"type":"result","id":"j","status":"done","result":{"b":1,"a":[true,null,"x"]}}'


@pytest.mark.parametrize("bad", [math.nan, math.inf, object(), {1: "int key"}, {"s": {1, 2}}])
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
