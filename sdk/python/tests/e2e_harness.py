"""What the end-to-end tests share: a handler process driven frame by frame (Handler),
its environment, and the examples' job list."""

import os
import queue
import subprocess
import sys
import threading
import time

import pytest

from soniq_handler import __version__, protocol

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
PKG_DIR = os.path.dirname(TESTS_DIR)

EXAMPLE_JOBS = [
    {"name": "examples.add", "cancellable": True},
    {"name": "examples.sleep_async", "cancellable": True},
    {"name": "examples.sleep_sync", "cancellable": False},
    {"name": "examples.fail", "cancellable": False},
    {"name": "examples.print", "cancellable": True},
    {"name": "examples.snooze", "cancellable": True},
    {"name": "examples.permanent", "cancellable": True},
]


def child_env(extra_path=(), **overrides):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env["PYTHONPATH"] = os.pathsep.join([PKG_DIR, *extra_path])
    env["SONIQ_PROTOCOL_VERSIONS"] = "1"
    for k, v in overrides.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


class Handler:
    """A handler process with its stdout split into decoded frames."""

    def __init__(self, args, env=None, cwd=None):
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env or child_env(),
            cwd=cwd or TESTS_DIR,
        )
        self.frames = queue.Queue()
        self.pending = []  # frames read by sync() while waiting for its pong
        self.raw_lines = []
        self.stderr_chunks = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        self._stderr_thread = threading.Thread(target=self._read_stderr, daemon=True)
        self._stderr_thread.start()

    def _read_stdout(self):
        for line in self.proc.stdout:
            self.raw_lines.append(line)
            # Every line the SDK writes must be a valid frame.
            try:
                self.frames.put(protocol.decode(line))
            except protocol.ProtocolError as e:
                self.frames.put(AssertionError(f"invalid frame on stdout ({e}): {line!r}"))
        self.frames.put(None)

    def _read_stderr(self):
        for chunk in iter(lambda: self.proc.stderr.read1(4096), b""):
            self.stderr_chunks.append(chunk)

    @property
    def stderr(self):
        return b"".join(self.stderr_chunks).decode("utf-8", "replace")

    def wait_stderr(self, text, timeout=5.0):
        """Waits until ``text`` shows up on stderr (read by another thread)."""
        deadline = time.monotonic() + timeout
        while text not in self.stderr:
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not on stderr within {timeout}s:\n{self.stderr}")
            time.sleep(0.02)

    def send(self, msg):
        self.proc.stdin.write(protocol.encode(msg) + b"\n")
        self.proc.stdin.flush()

    def send_raw(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def job(self, job_id, name, args=None, **extra):
        msg = {
            "type": "job",
            "id": job_id,
            "name": name,
            "args": {} if args is None else args,
            "attempt": 1,
            "max_attempts": 3,
            "queue": "default",
        }
        msg.update(extra)
        self.send(msg)

    def recv(self, timeout=5.0):
        if self.pending:
            return self.pending.pop(0)
        try:
            frame = self.frames.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no frame within {timeout}s; stderr:\n{self.stderr}") from None
        if frame is None:
            raise AssertionError(f"stdout closed; stderr:\n{self.stderr}")
        if isinstance(frame, AssertionError):
            raise frame
        return frame

    def sync(self, seq):
        """Pings and waits for the pong. The SDK reads its input in order, so
        every frame sent before the ping has been read and dispatched by then
        (a job is held, its task started); a test waits on this instead of
        sleeping. Frames that arrive first are kept for recv()."""
        self.send({"type": "ping", "seq": seq})
        other = []
        while True:
            frame = self.recv()
            if frame == {"type": "pong", "seq": seq}:
                self.pending = other + self.pending
                return
            other.append(frame)

    def no_frame_for(self, seconds):
        try:
            frame = self.frames.get(timeout=seconds)
        except queue.Empty:
            return
        if isinstance(frame, AssertionError):
            raise frame
        raise AssertionError(f"unexpected frame {frame}")

    def hello(self):
        frame = self.recv(timeout=10)
        assert frame["type"] == "hello", frame
        return frame

    def results(self, n, timeout=5.0):
        out = {}
        deadline = time.monotonic() + timeout
        while len(out) < n:
            frame = self.recv(timeout=max(0.01, deadline - time.monotonic()))
            assert frame["type"] == "result", frame
            assert frame["id"] not in out, f"second result for {frame['id']}"
            out[frame["id"]] = frame
        return out

    def close_stdin(self):
        self.proc.stdin.close()

    def wait(self, timeout=10):
        rc = self.proc.wait(timeout=timeout)
        self._stderr_thread.join(timeout=5)
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass
