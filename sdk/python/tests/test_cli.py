"""The command lines: ``python3 -m soniq_handler`` (argparse, usage errors
exit 2), the ``--listen`` a script's ``app.run()`` reads from its own
arguments, and ``serve()``, which reads no command line (its ``listen=``
parameter, else $SONIQ_LISTEN)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from soniq_handler import protocol
from soniq_handler._options import UsageError, listen_option
from e2e_harness import TESTS_DIR, child_env


@pytest.mark.parametrize(
    "argv, listen",
    [
        ([], None),
        (["--listen", "/run/h.sock"], "/run/h.sock"),
        (["--listen=/run/h.sock"], "/run/h.sock"),
        (["-v", "input.csv", "--listen", "a.sock", "--listen-port", "9"], "a.sock"),  # the script's own args stay
        (["--listen-port", "9"], None),
        (["--lis", "x"], None),  # no abbreviations: --lis is the script's
        (["-h"], None),  # the script's own -h, not ours
    ],
)
def test_listen_option_of_a_script(argv, listen):
    assert listen_option(argv) == listen


@pytest.mark.parametrize("argv", [["--listen"], ["--listen="], ["x", "--listen", ""]])
def test_listen_option_needs_a_path(argv):
    with pytest.raises(UsageError):
        listen_option(argv)


def cli(*args, **env):
    return subprocess.run([sys.executable, "-m", "soniq_handler", *args], capture_output=True, timeout=60,
                          env=child_env(extra_path=[TESTS_DIR], **env), cwd=TESTS_DIR)


@pytest.mark.parametrize(
    "args, text",
    [
        ((), "the following arguments are required: MODULE[:ATTR]"),
        (("-x",), "the following arguments are required"),
        (("e2e_app", "extra"), "unrecognized arguments: extra"),
        (("e2e_app", "--listen"), "argument --listen: expected one argument"),
        (("e2e_app", "--listen="), "argument --listen: needs a socket path"),
        (("e2e_app:nothing",), "e2e_app.nothing is not a soniq_handler.App"),
        ((":app",), "no module in ':app'"),
        (("probe",), "the following arguments are required: PATH"),
        (("probe", "h.sock", "--timeout", "0"), "--timeout must be a number of seconds > 0"),
        (("probe", "h.sock", "--timeout", "soon"), "--timeout must be a number of seconds > 0"),
        (("probe", "a.sock", "b.sock"), "unrecognized arguments: b.sock"),
    ],
)
def test_usage_errors_exit_2(args, text):
    r = cli(*args)
    err = r.stderr.decode()
    assert r.returncode == 2, err
    assert r.stdout == b""
    assert err.startswith("usage: python3 -m soniq_handler") and text in err, err


def test_help_exits_0():
    r = cli("--help")
    assert r.returncode == 0 and b"MODULE[:ATTR] [--listen PATH]" in r.stdout
    r = cli("probe", "--help")
    assert r.returncode == 0 and b"--timeout SECONDS" in r.stdout


SCRIPT = textwrap.dedent(
    """
    import asyncio
    import sys

    import soniq_handler

    app = soniq_handler.App()


    @app.job("c.echo")
    async def echo(args):
        return args


    if sys.argv[1] == "run":
        app.run()
    elif sys.argv[1] == "serve":
        asyncio.run(app.serve())
    else:
        asyncio.run(app.serve(listen=sys.argv[2]))
    print("serve returned", file=sys.stderr)
    """
)


def script(tmp_path, *args, **env):
    (tmp_path / "handler.py").write_text(SCRIPT)
    return subprocess.Popen([sys.executable, "handler.py", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path, env=child_env(**env))


def wait_listening(proc, sock):
    deadline = time.monotonic() + 20
    while not os.path.exists(sock):
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "no socket"
        time.sleep(0.05)
    probe = cli("probe", sock)
    assert probe.returncode == 0, probe.stderr


def test_a_script_run_without_a_listen_path_exits_2(tmp_path):
    proc = script(tmp_path, "run", "--listen")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == b""
    assert b"--listen needs a socket path" in err


def test_a_script_run_reads_listen_among_its_own_arguments(tmp_path):
    sock = str(tmp_path / "h.sock")
    proc = script(tmp_path, "run", "--verbose", f"--listen={sock}")
    try:
        wait_listening(proc, sock)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()


def test_serve_reads_no_command_line(tmp_path):
    # --listen among the process's arguments: serve() does not see it and
    # serves stdio (the sidecar's spawn), as its listen= parameter says.
    proc = script(tmp_path, "serve", "--listen", str(tmp_path / "no.sock"))
    out, err = proc.communicate(b'{"type":"shutdown"}\n', timeout=60)
    assert proc.returncode == 0, err
    assert [protocol.decode(line)["type"] for line in out.splitlines()] == ["hello"]
    assert b"serve returned" in err and not (tmp_path / "no.sock").exists()


def test_serve_listen_parameter_and_the_environment(tmp_path):
    sock = str(tmp_path / "p.sock")
    proc = script(tmp_path, "listen", sock)
    try:
        wait_listening(proc, sock)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert b"serve returned" in proc.stderr.read()
    finally:
        proc.kill()
    env_sock = str(tmp_path / "e.sock")
    proc = script(tmp_path, "serve", SONIQ_LISTEN=env_sock)
    try:
        wait_listening(proc, env_sock)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
