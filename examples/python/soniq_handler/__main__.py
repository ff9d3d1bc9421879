"""``python3 -m soniq_handler MODULE[:ATTR]``: import MODULE and run its App.

ATTR defaults to ``app``. An exception raised while importing MODULE is not
caught: Python prints its traceback on stderr and exits with status 1, which
is what the sidecar reports.
"""

import importlib
import sys
from typing import List, Optional

from .app import App


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        sys.stderr.write("usage: python3 -m soniq_handler MODULE[:ATTR]  (ATTR defaults to app)\n")
        sys.exit(2)
    module_name, _, attr = argv[0].partition(":")
    module = importlib.import_module(module_name)
    app = getattr(module, attr or "app", None)
    if not isinstance(app, App):
        sys.stderr.write(f"{module_name}.{attr or 'app'} is not a soniq_handler.App\n")
        sys.exit(2)
    app.run()


if __name__ == "__main__":
    main()
