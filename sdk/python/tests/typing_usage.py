"""Code as a user writes it, checked by mypy --strict (test_packaging.py) and
never run: the decorator hands each handler back with its own type, and the
frames are typed. Were the types erased (Any), assert_type would fail and the
``type: ignore`` comments would be reported as unused."""

from datetime import datetime
from typing import Any, Dict, List, Optional

from typing_extensions import assert_type

import soniq_handler
from soniq_handler import CallNext, JobContext, protocol

app = soniq_handler.App(concurrency=4, sync_concurrency=2)


@app.job("billing.invoices.send")
async def send_invoice(args: Dict[str, Any], ctx: JobContext) -> Dict[str, float]:
    return {"ratio": 2.0}


@app.job("billing.pdf.render")
def render_pdf(args: Dict[str, Any]) -> List[int]:
    return [1, 2]


async def caller(ctx: JobContext) -> None:
    assert_type(await send_invoice({}, ctx), Dict[str, float])
    assert_type(render_pdf({}), List[int])
    await send_invoice({}, "not a context")  # type: ignore[arg-type]
    render_pdf({}, ctx)  # type: ignore[call-arg]


@app.before_job
def before(job_name: str, job_id: str, attempt: int) -> None:
    pass


@app.after_job
async def after(job_name: str, job_id: str, duration_ms: float) -> int:
    return 1


@app.on_error
def on_error(job_name: str, job_id: str, error: str, attempt: int) -> str:
    return error


@app.before_job  # type: ignore[type-var]
def before_wrong(job_id: int) -> None:
    pass


@app.middleware
async def timing(ctx: JobContext, call_next: CallNext) -> Dict[str, Any]:
    return {"value": await call_next(ctx)}


class OrderArgs:
    """Stands for a pydantic model (mypy here targets Python 3.9, which
    pydantic's own source is beyond): validate= takes any class."""

    order_id: int


def positive(args: Dict[str, Any]) -> Dict[str, int]:
    return {"n": int(args["n"])}


@app.job("orders.ship", validate=OrderArgs)
def ship(args: Dict[str, Any]) -> None:
    pass


@app.job("orders.count", validate=positive)
async def count(args: Dict[str, int], ctx: JobContext) -> int:
    return args["n"]


async def api(ctx: JobContext, call_next: CallNext) -> None:
    # The hooks and middleware are handed back with their own types.
    assert_type(before("a", "b", 1), None)
    assert_type(await after("a", "b", 1.5), int)
    assert_type(on_error("a", "b", "c", 1), str)
    assert_type(await app.use(timing)(ctx, call_next), Dict[str, Any])
    app.use(lambda ctx: None)  # type: ignore[type-var]
    app.job("x", validate=42)  # type: ignore[arg-type]
    assert_type(ctx.worker_id, str)
    assert_type(ctx.scheduled_at, Optional[datetime])
    assert_type(ctx.created_at, Optional[datetime])
    assert_type(ctx.job_id, str)


def frames(line: bytes) -> None:
    msg = protocol.decode(line)
    if msg["type"] == "job":
        assert_type(msg["args"], Dict[str, Any])
        assert_type(msg["deadline"], Optional[int])
        assert_type(msg["worker_id"], Optional[str])
        assert_type(msg["scheduled_at"], Optional[int])
    elif msg["type"] == "result" and msg["error"] is not None:
        assert_type(msg["error"]["retryable"], bool)
    frame: protocol.PongFrame = {"type": "pong", "seq": 1}
    assert_type(protocol.encode(frame), bytes)
    bad: protocol.PongFrame = {"type": "pong"}  # type: ignore[typeddict-item]


async def own_loop() -> None:
    # A program that owns its event loop serves there; serve() returns.
    assert_type(await app.serve(), None)
