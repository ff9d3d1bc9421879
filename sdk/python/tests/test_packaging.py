"""The SDK as a user gets it: a wheel built with pip (PEP 517) from
pyproject.toml, installed into fresh virtualenvs (plain, and with the unix
extra) and run from outside the repository; and mypy --strict on the package.

pip's cache is used as usual, so after the first run the builds and installs
fetch nothing.
"""

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import soniq_handler
from soniq_handler import protocol

PKG_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = PKG_DIR.parent.parent
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
TIMEOUT = 300  # seconds for a build or an install (a cold pip cache downloads)

# The handler a user writes, in a directory of its own: it serves from its own
# event loop (App.serve) and says so when serve() has returned.
HANDLER = '''
import asyncio
import sys

import soniq_handler

app = soniq_handler.App(concurrency=1, sync_concurrency=1)


@app.job("w.values")
def values(args):
    return {"ratio": 2.0, "big": 2**64, "s": "é", "none": None, "nested": [1, 1.0],
            "file": soniq_handler.__file__, "version": soniq_handler.__version__}


async def main():
    await app.serve()
    print("serve returned", file=sys.stderr)


asyncio.run(main())
'''

JOB = protocol.encode(
    {"type": "job", "id": "j1", "name": "w.values", "args": {}, "attempt": 1, "max_attempts": 1,
     "queue": "default", "deadline": None, "traceparent": None}
)


def run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, timeout=kw.pop("timeout", TIMEOUT), **kw)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout.decode()}\n{proc.stderr.decode()}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel pip builds from a clean copy of the source (an in-tree
    build/ directory could carry files of an older build into it)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(PKG_DIR, src, ignore=shutil.ignore_patterns(
        "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".mypy_cache"))
    run([*PIP, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(tmp / "dist"), str(src)])
    (path,) = (tmp / "dist").glob("*.whl")
    return path


def fresh_venv(path, wheel_spec, *extra):
    """A virtualenv with nothing but the wheel (and what it asks for)."""
    run([sys.executable, "-m", "venv", "--without-pip", str(path)], timeout=60)
    python = path / "bin" / "python"
    run([*PIP, "--python", str(python), "install", "--quiet", *extra, wheel_spec])
    return python


def outside_env(**extra):
    """A handler's environment as the sidecar gives it: no PYTHONPATH."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SONIQ_PROTOCOL_VERSIONS": "1"}
    env.update(extra)
    return env


def test_wheel_holds_the_sdk_only(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "soniq_handler/__init__.py" in names
    assert "soniq_handler/py.typed" in names
    assert "soniq_handler/handler_pb2.pyi" in names
    assert not [n for n in names if not n.startswith(("soniq_handler/", "soniq_handler-"))], names
    assert re.search(r"^Version: " + re.escape(soniq_handler.__version__) + "$", metadata, re.M)
    assert wheel.name.startswith(f"soniq_handler-{soniq_handler.__version__}-py3-none-any")
    assert "Provides-Extra: unix" in metadata
    extra = sorted(re.findall(r'^Requires-Dist: ([a-z-]+)\b.*; extra == "unix"$', metadata, re.M))
    assert extra == ["grpcio", "grpcio-health-checking", "protobuf"]
    assert "Provides-Extra: fast" in metadata
    assert re.findall(r'^Requires-Dist: ([a-z-]+)\b.*; extra == "fast"$', metadata, re.M) == ["orjson"]
    assert not re.search(r"^Requires-Dist: (?!.*extra ==)", metadata, re.M), "stdio needs no dependency"


def test_fresh_venv_runs_a_handler_from_outside_the_repo(wheel, tmp_path):
    # --no-index: the plain install needs nothing but the wheel.
    python = fresh_venv(tmp_path / "venv", str(wheel), "--no-index")
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    (app_dir / "handler.py").write_text(HANDLER)
    proc = subprocess.run([str(python), "handler.py"], input=JOB + b"\n", capture_output=True,
                          cwd=app_dir, env=outside_env(), timeout=60)
    stderr = proc.stderr.decode()
    assert proc.returncode == 0, stderr
    assert "serve returned" in stderr
    lines = proc.stdout.splitlines()
    assert [protocol.decode(line)["type"] for line in lines] == ["hello", "result"], lines
    result = protocol.decode(lines[1])
    assert result["type"] == "result" and result["status"] == "done", result
    # Types survive: 2.0 is written as 2.0, the big int exactly.
    assert b'"ratio":2.0,"big":18446744073709551616,' in lines[1]
    assert result["result"]["nested"] == [1, 1.0] and type(result["result"]["nested"][1]) is float
    assert result["result"]["version"] == soniq_handler.__version__
    installed = Path(result["result"]["file"]).resolve()
    assert installed.is_relative_to((tmp_path / "venv").resolve()), installed

    # Without the extra, the unix transport says what to install.
    proc = subprocess.run([str(python), "handler.py"], capture_output=True, cwd=app_dir,
                          env=outside_env(SONIQ_TRANSPORT="unix"), timeout=60)
    assert proc.returncode == 1
    assert 'pip install "soniq-handler[unix]"' in proc.stderr.decode()


def test_fresh_venv_with_the_unix_extra_serves_grpc(wheel, tmp_path):
    import grpc

    from soniq_handler import handler_pb2 as pb

    # The versions the tests pin, so that pip's cache serves them.
    python = fresh_venv(tmp_path / "venv", f"{wheel}[unix]", "--constraint", str(PKG_DIR / "requirements-dev.txt"))
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    (app_dir / "handler.py").write_text(HANDLER)
    env = outside_env(SONIQ_TRANSPORT="unix", SONIQ_PLUGIN_MAGIC_COOKIE="soniq-handler-v1",
                      PLUGIN_PROTOCOL_VERSIONS="1", PLUGIN_UNIX_SOCKET_DIR=str(tmp_path))
    proc = subprocess.Popen([str(python), "handler.py"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=app_dir, env=env)
    try:
        # go-plugin's handshake line: core version|app version|unix|socket|grpc
        handshake = proc.stdout.readline().decode().strip()
        core, version, network, address, kind = handshake.split("|")
        assert (core, version, network, kind) == ("1", "1", "unix", "grpc"), handshake
        with grpc.insecure_channel(f"unix:{address}") as channel:
            out = [pb.SidecarMessage(job=pb.Job(id="j1", name="w.values", args_json="{}", attempt=1,
                                                max_attempts=1, queue="default")),
                   pb.SidecarMessage(shutdown=pb.Shutdown())]
            session = channel.stream_stream("/soniq.handler.v1.Handler/Session",
                                            request_serializer=pb.SidecarMessage.SerializeToString,
                                            response_deserializer=pb.HandlerMessage.FromString)
            msgs = list(session(iter(out), timeout=30))
            assert [m.WhichOneof("message") for m in msgs] == ["hello", "result"], msgs
            assert [j.name for j in msgs[0].hello.jobs] == ["w.values"]
            result = msgs[1].result
            assert result.status == pb.Result.DONE, result
            assert result.result_json.startswith('{"ratio":2.0,"big":18446744073709551616,'), result.result_json
            assert f'"file":"{tmp_path / "venv"}' in result.result_json
        assert proc.wait(timeout=30) == 0
        assert "serve returned" in proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_mypy_strict():
    """The package, and a user's code relying on its types (typing_usage.py),
    pass mypy --strict (the pinned mypy of requirements-dev.txt)."""
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "soniq_handler", "tests/typing_usage.py"],
        capture_output=True, cwd=PKG_DIR, timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
