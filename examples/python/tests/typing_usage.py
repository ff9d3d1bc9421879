"""Code as a user writes it, checked by mypy --strict (test_packaging.py) and
never run: the decorator hands each handler back with its own type, and the
frames are typed. Were the types erased (Any), assert_type would fail and the
``type: ignore`` comments would be reported as unused."""

from typing import Any, Dict, List, Optional

from typing_extensions import assert_type

import soniq_handler
from soniq_handler import JobContext, protocol

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


def frames(line: bytes) -> None:
    msg = protocol.decode(line)
    if msg["type"] == "job":
        assert_type(msg["args"], Dict[str, Any])
        assert_type(msg["deadline"], Optional[int])
    elif msg["type"] == "result" and msg["error"] is not None:
        assert_type(msg["error"]["retryable"], bool)
    frame: protocol.PongFrame = {"type": "pong", "seq": 1}
    assert_type(protocol.encode(frame), bytes)
    bad: protocol.PongFrame = {"type": "pong"}  # type: ignore[typeddict-item]


async def own_loop() -> None:
    # A program that owns its event loop serves there; serve() returns.
    assert_type(await app.serve(), None)
