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

from ._children import ChildJobError
from ._version import PROTOCOL_VERSIONS, __version__
from ._serve import negotiate_version
from ._types import CallNext, JobContext, Middleware, PermanentError, ServeError, Snooze, Validator
from .app import App
from .protocol import ProtocolError

# The public API, listed here only: every name a handler may import from
# soniq_handler. The submodule soniq_handler.protocol (the strict codec) is
# public too, with its own __all__; every other module is internal (_name.py,
# and app.py, where App is defined). The exit statuses are documented numbers
# (ServeError.exit_code), not names.

__all__ = [
    "App",
    "CallNext",
    "ChildJobError",
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
