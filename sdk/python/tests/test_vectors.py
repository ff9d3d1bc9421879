"""Runs every conformance vector through soniq_handler.protocol."""

import base64
import json
import os

import pytest

from soniq_handler import protocol

VECTORS_PATH = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "protocol", "testdata", "vectors.json"
)


def _load():
    with open(VECTORS_PATH, "rb") as f:
        data = json.load(f)
    assert data["protocol"] == 1
    return data["vectors"]


VECTORS = _load()


def _frame(v):
    assert ("frame" in v) != ("frame_b64" in v), "exactly one of frame / frame_b64"
    if "frame" in v:
        return v["frame"].encode("utf-8")
    return base64.b64decode(v["frame_b64"])


def strict(value):
    """A comparable form of a JSON value in which True != 1, 1 == 1.0 and key
    order matters (plain == on dicts ignores order and equates bools and ints)."""
    if value is None or isinstance(value, (bool, str)):
        return (type(value).__name__, value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, dict):
        return ("object", [(k, strict(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("array", [strict(v) for v in value])
    raise TypeError(type(value))


def test_vector_file_is_substantial():
    assert len(VECTORS) > 50
    assert any(v["valid"] for v in VECTORS) and any(not v["valid"] for v in VECTORS)


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_decode(vector):
    kwargs = {}
    if "max_frame_bytes" in vector:
        kwargs["max_frame_bytes"] = vector["max_frame_bytes"]
    line = _frame(vector)
    if vector["valid"]:
        got = protocol.decode(line, **kwargs)
        assert strict(got) == strict(vector["decoded"])
        # The same frame read off the wire with its newline decodes the same.
        assert strict(protocol.decode(line + b"\n", **kwargs)) == strict(vector["decoded"])
    else:
        with pytest.raises(protocol.ProtocolError) as info:
            protocol.decode(line, **kwargs)
        want = vector["error"]
        assert info.value.code == want["code"], str(info.value)
        assert info.value.field == want.get("field"), str(info.value)


ENCODE_VECTORS = [v for v in VECTORS if v["valid"] and "encoded" in v]


@pytest.mark.parametrize("vector", ENCODE_VECTORS, ids=[v["name"] for v in ENCODE_VECTORS])
def test_encode(vector):
    assert protocol.encode(vector["decoded"]) == vector["encoded"].encode("utf-8")


@pytest.mark.parametrize("vector", ENCODE_VECTORS, ids=[v["name"] for v in ENCODE_VECTORS])
def test_encoded_decodes_back(vector):
    kwargs = {}
    if "max_frame_bytes" in vector:
        kwargs["max_frame_bytes"] = vector["max_frame_bytes"]
    again = protocol.decode(vector["encoded"].encode("utf-8"), **kwargs)
    assert strict(again) == strict(vector["decoded"])
