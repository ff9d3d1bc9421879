"""In-process checks of the registration API and version negotiation."""

import asyncio
import functools

import pytest

import soniq_handler
from soniq_handler._registry import _wants_ctx
from soniq_handler._types import datetime_of_ms as _deadline_datetime


def test_registration_and_hello_jobs():
    app = soniq_handler.App()

    @app.job("a.async")
    async def a(args, ctx):
        return 1

    @app.job("a.sync")
    def b(args):
        return 2

    class AsyncCallable:
        async def __call__(self, args, ctx):
            return 3

    app.job("a.callable")(AsyncCallable())
    app.job("a.partial")(functools.partial(a))

    assert app.jobs == [
        {"name": "a.async", "cancellable": True},
        {"name": "a.sync", "cancellable": False},
        {"name": "a.callable", "cancellable": True},
        {"name": "a.partial", "cancellable": True},
    ]
    # The decorator hands the function back unchanged.
    assert asyncio.run(a({}, None)) == 1 and b({}) == 2


def test_registration_errors():
    app = soniq_handler.App()
    app.job("x")(lambda args: None)
    with pytest.raises(ValueError):
        app.job("x")(lambda args: None)
    with pytest.raises(ValueError):
        app.job("")
    with pytest.raises(TypeError):
        app.job("y")(42)


@pytest.mark.parametrize(
    "kwargs",
    [{"concurrency": 0}, {"sync_concurrency": 0}, {"concurrency": 1.5}, {"concurrency": True}, {"max_frame_bytes": 0}],
)
def test_app_rejects_bad_limits(kwargs):
    with pytest.raises(ValueError):
        soniq_handler.App(**kwargs)


def test_frame_limit_from_env(monkeypatch):
    monkeypatch.setenv("SONIQ_MAX_FRAME_BYTES", "4096")
    assert soniq_handler.App()._max_frame_bytes == 4096
    monkeypatch.setenv("SONIQ_MAX_FRAME_BYTES", "lots")
    assert soniq_handler.App()._max_frame_bytes == 16 * 1024 * 1024
    assert soniq_handler.App(max_frame_bytes=100)._max_frame_bytes == 100


def test_wants_ctx():
    assert _wants_ctx(lambda args, ctx: None)
    assert _wants_ctx(lambda *a: None)
    assert _wants_ctx(lambda args, ctx=None: None)
    assert not _wants_ctx(lambda args: None)
    assert not _wants_ctx(lambda args, *, flag=False: None)


@pytest.mark.parametrize(
    "offered, chosen",
    [(None, 1), ("1", 1), ("1,2", 1), (" 3 , 1 ", 1), ("2", None), ("", None), ("one", None), ("\u00b9", None), ("-1", None)],
)
def test_negotiate_version(offered, chosen):
    assert soniq_handler.negotiate_version(offered) == chosen


def test_snooze_validation():
    assert soniq_handler.Snooze(0).seconds == 0
    for bad in (-1, "5", True, float("nan")):
        with pytest.raises(ValueError):
            soniq_handler.Snooze(bad)
    with pytest.raises(TypeError):
        soniq_handler.Snooze(1, reason=5)


def test_deadline_conversion():
    assert _deadline_datetime(None) is None
    assert _deadline_datetime(0).isoformat() == "1970-01-01T00:00:00+00:00"
    assert _deadline_datetime(1767225600123).isoformat() == "2026-01-01T00:00:00.123000+00:00"
    assert _deadline_datetime(2**53 - 1).year == 9999  # clamped, not an error
    assert _deadline_datetime(-(2**53 - 1)).year == 1
