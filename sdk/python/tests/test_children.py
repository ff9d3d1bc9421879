"""Child jobs (ctx.enqueue) over stdio, frame by frame: the enqueue frames a
handler sends, in order before its result, the answers to immediate ones, and
the refusals at the call."""

import re

import pytest

from soniq_handler import ChildJobError, protocol
from soniq_handler._children import Children
from e2e_harness import Handler, child_env

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.fixture
def kids():
    h = Handler(["-m", "soniq_handler", "children_app"],
                env=child_env(SONIQ_FEATURES="enqueue", SONIQ_MAX_FRAME_BYTES="4096"))
    h.hello()
    yield h
    h.kill()


def frames_until_result(h, job_id):
    out = []
    while True:
        f = h.recv()
        out.append(f)
        if f["type"] == "result" and f["id"] == job_id:
            return out


@pytest.mark.parametrize("name", ["c.fan", "c.fan_sync"])
def test_deferred_children_go_out_before_the_result(kids, name):
    kids.job("p1", name, {"n": 3})
    frames = frames_until_result(kids, "p1")
    enq, res = frames[:-1], frames[-1]
    assert [f["type"] for f in enq] == ["enqueue"] * 3
    assert res["status"] == "done"
    assert [f["id"] for f in enq] == res["result"]["ids"], "ctx.enqueue returned the ids it sent"
    for i, f in enumerate(enq):
        assert UUID.match(f["id"])
        assert f == {"type": "enqueue", "parent": "p1", "id": f["id"], "name": "c.kid", "args": {"n": i},
                     "queue": None, "priority": None, "max_attempts": None, "delay": None, "dedup_key": None,
                     "unique": None, "immediate": None}


def test_options_are_sent(kids):
    kids.job("p1", "c.fan", {"opts": {"queue": "imgs", "priority": -2, "delay": 1.5, "max_attempts": 9,
                                      "dedup_key": "k", "unique": True}})
    enq = frames_until_result(kids, "p1")[0]
    assert (enq["queue"], enq["priority"], enq["delay"], enq["max_attempts"], enq["dedup_key"], enq["unique"]) == \
        ("imgs", -2, 1.5, 9, "k", True)


@pytest.mark.parametrize("name", ["c.now_sync", "c.now_async"])
def test_immediate_waits_for_its_answer(kids, name):
    kids.job("p1", name)
    enq = kids.recv()
    assert enq["type"] == "enqueue" and enq["immediate"] is True
    kids.no_frame_for(0.2)  # the handler waits
    kids.send({"type": "enqueued", "id": enq["id"], "job_id": "b7e1c2d3-4f5a-4b6c-8d7e-9f0a1b2c3d4e"})
    res = kids.recv()
    assert res["result"] == {"job_id": "b7e1c2d3-4f5a-4b6c-8d7e-9f0a1b2c3d4e"}, "a dedup hit names the duplicate"


@pytest.mark.parametrize("name", ["c.now_sync", "c.now_async"])
def test_immediate_refused_raises(kids, name):
    kids.job("p1", name)
    enq = kids.recv()
    kids.send({"type": "enqueued", "id": enq["id"], "error": {"code": "cap", "message": "too many"}})
    assert kids.recv()["result"] == {"code": "cap", "message": "too many"}


def test_immediate_from_the_event_loop_is_refused_at_the_call(kids):
    kids.job("p1", "c.blocking")
    res = kids.recv()
    assert "await ctx.enqueue_async" in res["result"]["error"]


def test_bad_input_raises_at_the_call_and_sends_nothing(kids):
    kids.job("p1", "c.bad")
    frames = frames_until_result(kids, "p1")
    res = frames[-1]["result"]
    assert res.pop("timedelta delay") == frames[0]["id"]
    assert frames[0]["delay"] == 90
    assert len(frames) == 2, "only the good call sent a frame"
    assert res == {
        "empty name": "ValueError",
        "args a list": "TypeError",
        "args not JSON": "TypeError",
        "queue empty": "ValueError",
        "priority a float": "TypeError",
        "priority a bool": "TypeError",
        "max_attempts 0": "ValueError",
        "delay negative": "ValueError",
        "delay a string": "ValueError",
        "unique a string": "TypeError",
        "frame too big": "ValueError",
    }


def test_without_the_feature_enqueue_raises_unsupported():
    h = Handler(["-m", "soniq_handler", "children_app"], env=child_env())
    try:
        h.hello()
        h.job("p1", "c.now_sync")
        res = h.recv()
        assert res["result"]["code"] == "unsupported"
        assert "enqueue" in res["result"]["message"]
    finally:
        h.kill()


def test_children_reads_features_from_the_environment():
    assert Children(1 << 20, {"SONIQ_FEATURES": "x, enqueue"}).supported
    assert not Children(1 << 20, {"SONIQ_FEATURES": "x"}).supported
    c = Children(1 << 20, {})
    assert not c.supported
    c.announce(["enqueue"])
    assert c.supported
    c.disconnect("gone")
    assert not c.supported, "a session's features end with it"


def test_disconnect_fails_the_waiting_immediate_children():
    import asyncio

    async def run():
        c = Children(1 << 20, {"SONIQ_FEATURES": "enqueue"})
        sent = []
        c.connect(lambda frame, data: sent.append(frame), asyncio.get_running_loop())
        task = asyncio.ensure_future(c.enqueue_async("p1", "kid", {}, {"immediate": True}))
        await asyncio.sleep(0)
        assert sent and sent[0]["immediate"] is True
        c.disconnect("the session ended")
        with pytest.raises(ChildJobError) as info:
            await task
        assert info.value.code == "unavailable"
        # An answer after that is nobody's.
        c.answered({"type": "enqueued", "id": sent[0]["id"], "job_id": sent[0]["id"], "error": None})

    asyncio.run(run())


def test_enqueue_frame_decodes_as_the_sidecar_reads_it():
    c = Children(1 << 20, {"SONIQ_FEATURES": "enqueue"})
    frame, data = c._frame("p1", "kid", {"a": 1}, {"delay": 2, "immediate": True})
    assert protocol.decode(data) == frame
