"""Command-line parsing shared by both entry points: the ``--listen PATH`` a
script that calls ``app.run()`` accepts among its own arguments
(``listen_option``, used by app.py) and the parser pieces of ``python3 -m
soniq_handler`` (_cli.py). It imports nothing of the package, so that app.py
and _cli.py both depend on it and never on each other the wrong way round
(_cli.py imports app.py, never the reverse)."""

from __future__ import annotations

import argparse
from typing import NoReturn, Optional, Sequence

PROG = "python3 -m soniq_handler"


class UsageError(Exception):
    """A command line that cannot be acted on; exit status 2."""


class Parser(argparse.ArgumentParser):
    """Raises UsageError instead of exiting, so that each caller decides how
    to report it (argparse's exit_on_error=False does not cover every error)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _socket_path(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("needs a socket path")
    return text


def add_listen(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--listen",
        metavar="PATH",
        type=_socket_path,
        help="attach mode: serve a Unix socket of its own at PATH (default: $SONIQ_LISTEN)",
    )


def listen_option(argv: Sequence[str]) -> Optional[str]:
    """The ``--listen PATH`` (or ``--listen=PATH``) among a script's
    arguments, None when there is none. The script's other arguments are its
    own and left alone. Raises UsageError for a --listen without a path."""
    parser = Parser(prog=PROG, add_help=False, allow_abbrev=False)
    add_listen(parser)
    try:
        known, _ = parser.parse_known_args(list(argv))
    except UsageError:
        # Nothing else can be wrong: no value, or an empty one.
        raise UsageError("--listen needs a socket path") from None
    listen: Optional[str] = known.listen
    return listen
