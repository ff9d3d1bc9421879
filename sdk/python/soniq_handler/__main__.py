"""``python3 -m soniq_handler MODULE[:ATTR] [--listen PATH]``: import MODULE
and run its App; ``--listen PATH`` serves it on a socket of its own (attach
mode, see README.md).

``python3 -m soniq_handler probe PATH [--timeout SECONDS]``: exit 0 when the
handler serving PATH reports SERVING, 1 otherwise (a Kubernetes exec probe).

ATTR defaults to ``app``. A bad command line exits with status 2 (usage).
An exception raised while importing MODULE is not caught: Python prints its
traceback on stderr and exits with status 1, which is what the sidecar
reports. The parsing lives in _cli.py.
"""

from ._cli import main

if __name__ == "__main__":
    main()
