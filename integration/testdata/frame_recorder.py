"""Test shim: run a handler command and record every protocol frame.

    python3 frame_recorder.py CMD ARGS...

Frames the sidecar sends are appended to $TEST_FRAMES as "> <frame>",
frames the handler sends as "< <frame>". The integration tests read the file
to prove which frames were (and were not) sent, e.g. cancel{shutdown_timeout}.
"""
import os
import subprocess
import sys
import threading

record = open(os.environ["TEST_FRAMES"], "ab", buffering=0)
lock = threading.Lock()
child = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def pump(src, dst, tag):
    for line in iter(src.readline, b""):
        with lock:
            record.write(tag + b" " + line)
        try:
            dst.write(line)
            dst.flush()
        except BrokenPipeError:
            break
    try:
        dst.close()
    except BrokenPipeError:
        pass


threading.Thread(target=pump, args=(sys.stdin.buffer, child.stdin, b">"), daemon=True).start()
pump(child.stdout, sys.stdout.buffer, b"<")
sys.exit(child.wait())
