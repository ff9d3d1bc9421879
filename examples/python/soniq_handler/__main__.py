"""``python3 -m soniq_handler MODULE[:ATTR] [--listen PATH]``: import MODULE
and run its App; ``--listen PATH`` serves it on a socket of its own (attach
mode, see README.md).

``python3 -m soniq_handler probe PATH [--timeout SECONDS]``: exit 0 when the
handler serving PATH reports SERVING, 1 otherwise (a Kubernetes exec probe).

ATTR defaults to ``app``. An exception raised while importing MODULE is not
caught: Python prints its traceback on stderr and exits with status 1, which
is what the sidecar reports.
"""

import importlib
import sys
from typing import List, Optional

from .app import App

USAGE = (
    "usage: python3 -m soniq_handler MODULE[:ATTR] [--listen PATH]  (ATTR defaults to app)\n"
    "       python3 -m soniq_handler probe PATH [--timeout SECONDS]\n"
)


def _probe(argv: List[str]) -> None:
    timeout = 3.0
    if len(argv) == 3 and argv[1] == "--timeout":
        try:
            timeout = float(argv[2])
        except ValueError:
            argv = []
    if len(argv) not in (1, 3) or argv[0].startswith("-") or timeout <= 0:
        sys.stderr.write(USAGE)
        sys.exit(2)
    try:
        from ._listen import probe
    except ImportError as e:
        sys.stderr.write(f'soniq-handler probe: needs the unix extra (pip install "soniq-handler[unix]"): {e}\n')
        sys.exit(1)
    sys.exit(probe(argv[0], timeout))


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["probe"]:
        _probe(argv[1:])
    rest = argv[1:]
    listen_ok = (len(rest) == 2 and rest[0] == "--listen") or (len(rest) == 1 and rest[0].startswith("--listen="))
    if not argv or argv[0].startswith("-") or (rest and not listen_ok):
        sys.stderr.write(USAGE)
        sys.exit(2)
    module_name, _, attr = argv[0].partition(":")
    module = importlib.import_module(module_name)
    app = getattr(module, attr or "app", None)
    if not isinstance(app, App):
        sys.stderr.write(f"{module_name}.{attr or 'app'} is not a soniq_handler.App\n")
        sys.exit(2)
    app.run()  # reads --listen from sys.argv


if __name__ == "__main__":
    main()
