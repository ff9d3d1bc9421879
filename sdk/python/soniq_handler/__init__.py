"""soniq_handler: write Soniq job handlers in Python, served to soniq-sidecar.

    import soniq_handler

    app = soniq_handler.App()

    @app.job("billing.invoices.send")
    async def send_invoice(args, ctx):      # async def: cancellable
        ...
        return {"sent": True}

    if __name__ == "__main__":
        app.run()                           # or: await app.serve() in your own loop

See README.md next to this package for the full story.
"""

from ._version import PROTOCOL_VERSIONS, __version__
from .app import App, CallNext, JobContext, Middleware, PermanentError, ServeError, Snooze, Validator, negotiate_version
from .protocol import ProtocolError

__all__ = [
    "App",
    "CallNext",
    "JobContext",
    "Middleware",
    "PermanentError",
    "PROTOCOL_VERSIONS",
    "ProtocolError",
    "ServeError",
    "Snooze",
    "Validator",
    "__version__",
    "negotiate_version",
]
