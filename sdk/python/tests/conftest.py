"""The tests import soniq_handler as installed: `make deps-python` installs it
editable, with its unix extra, into the project's virtualenv (.venv)."""

import importlib.util

import pytest

if importlib.util.find_spec("soniq_handler") is None:
    raise pytest.UsageError(
        'soniq_handler is not installed: run `make deps-python` (pip install -e "sdk/python[unix]" '
        "into .venv) and the tests with .venv/bin/python -m pytest"
    )
