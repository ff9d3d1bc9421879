"""The tests import soniq_handler as installed: `make deps-python` installs it
editable, with its unix extra, into the project's virtualenv (.venv)."""

import importlib.util

import pytest

if importlib.util.find_spec("soniq_handler") is None:
    raise pytest.UsageError(
        'soniq_handler is not installed: run `make deps-python` (pip install -e "sdk/python[unix]" '
        "into .venv) and the tests with .venv/bin/python -m pytest"
    )

from e2e_harness import TESTS_DIR, Handler, child_env  # noqa: E402 (after the check above)


@pytest.fixture
def examples():
    h = Handler(["-m", "soniq_handler_examples"])
    h.hello()
    yield h
    h.kill()


@pytest.fixture
def testapp():
    h = Handler(["-m", "soniq_handler", "e2e_app"], env=child_env(extra_path=[TESTS_DIR]))
    h.hello()
    yield h
    h.kill()
