"""The command lines: ``python3 -m soniq_handler MODULE[:ATTR] [--listen PATH]``,
``python3 -m soniq_handler probe PATH [--timeout SECONDS]`` (``main``). A bad
command line is a usage error: a line saying what is wrong, the usage, exit
status 2. The ``--listen PATH`` a script that calls ``app.run()`` accepts is
parsed in _options.py, which app.py imports: this module imports app.py,
never the reverse."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, NoReturn, Optional, Sequence

from ._options import PROG, Parser, UsageError, add_listen
from ._types import EXIT_USAGE
from .app import App

USAGE = (
    f"{PROG} MODULE[:ATTR] [--listen PATH]\n"
    f"       {PROG} probe PATH [--timeout SECONDS]"
)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"--timeout must be a number of seconds > 0, got {text!r}")
    return value


def _run_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        usage=USAGE,
        allow_abbrev=False,
        description="Imports MODULE and serves its soniq_handler.App (the attribute ATTR, app by default).",
    )
    parser.add_argument("target", metavar="MODULE[:ATTR]", help="the module holding the App, and its name there")
    add_listen(parser)
    return parser


def _probe_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=f"{PROG} probe",
        allow_abbrev=False,
        description="Exit status 0 when the handler serving PATH reports SERVING, 1 otherwise "
        "(a Kubernetes exec probe for attach mode).",
    )
    parser.add_argument("path", metavar="PATH", help="the socket the handler serves (its --listen)")
    parser.add_argument("--timeout", metavar="SECONDS", type=_positive_seconds, default=3.0,
                        help="how long to wait for the answer (default 3)")
    return parser


def _usage_error(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    parser.print_usage(sys.stderr)
    sys.stderr.write(f"{parser.prog}: error: {message}\n")
    sys.exit(EXIT_USAGE)


def main(argv: Optional[List[str]] = None) -> NoReturn:
    """``python3 -m soniq_handler``. An exception raised while importing
    MODULE is not caught: Python prints its traceback on stderr and exits
    with status 1, which is what the sidecar reports."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["probe"]:
        parser = _probe_parser()
        try:
            probe_args = parser.parse_args(args[1:])
        except UsageError as e:
            _usage_error(parser, str(e))
        _probe(probe_args.path, probe_args.timeout)
    parser = _run_parser()
    try:
        ns = parser.parse_args(args)
    except UsageError as e:
        _usage_error(parser, str(e))
    module_name, _, attr = ns.target.partition(":")
    if not module_name:
        _usage_error(parser, f"no module in {ns.target!r}")
    module = importlib.import_module(module_name)
    app = getattr(module, attr or "app", None)
    if not isinstance(app, App):
        _usage_error(parser, f"{module_name}.{attr or 'app'} is not a soniq_handler.App")
    # Everything is on this command line: the App reads no argv of its own.
    app.run(listen=ns.listen, argv=())


def _probe(path: str, timeout: float) -> NoReturn:
    try:
        from ._listen import probe
    except ImportError as e:
        sys.stderr.write(f'soniq-handler probe: needs the unix extra (pip install "soniq-handler[unix]"): {e}\n')
        sys.exit(1)
    sys.exit(probe(path, timeout))
