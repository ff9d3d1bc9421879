"""A stdio handler that speaks the NDJSON protocol itself (no SDK, so its fd 1
is the real frame pipe) and misbehaves on a job's first attempt:

- x.close_stdout: closes its stdout (fd 1) and keeps running, still reading
  stdin; no result can ever come back;
- x.orphan_exit: starts a helper that calls setsid and inherits stdin, stdout
  and stderr, then the process exits with status 3 while the helper sleeps
  on, holding the pipes. With args {"trigger": path} it first waits until
  that file exists.

Later attempts answer done. Every start is appended to TEST_RECORD as
"start <id> <pid> <attempt>", every helper's pid to TEST_RECORD.helpers.
"""
import json
import os
import sys
import threading
import time

VERSION = 1
JOBS = ["x.close_stdout", "x.orphan_exit"]

offered = [v.strip() for v in os.environ.get("SONIQ_PROTOCOL_VERSIONS", "1").split(",")]
if str(VERSION) not in offered:
    sys.stderr.write("no shared protocol version: offered %s, speak %d\n" % (offered, VERSION))
    sys.exit(3)

out_lock = threading.Lock()
threads = []


def write(frame):
    line = (json.dumps(frame, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
    with out_lock:
        os.write(1, line)


def record(line):
    with open(os.environ["TEST_RECORD"], "a") as f:
        f.write(line + "\n")


def start_helper():
    """A setsid helper holding our stdio; returns once it has left our group."""
    pid_file = "%s.helper-%d-%d" % (os.environ["TEST_RECORD"], os.getpid(), threading.get_ident())
    import subprocess  # the fork happens with stdin, stdout and stderr inherited

    subprocess.Popen(["setsid", "sh", "-c", 'echo $$ > "$0.tmp" && mv "$0.tmp" "$0"; exec sleep 300', pid_file])
    while not os.path.exists(pid_file):
        time.sleep(0.01)
    with open(pid_file) as f:
        pid = f.read().strip()
    with open(os.environ["TEST_RECORD"] + ".helpers", "a") as f:
        f.write(pid + "\n")


def run(job):
    jid, attempt = job["id"], job["attempt"]
    record("start %s %d %d" % (jid, os.getpid(), attempt))
    if attempt == 1 and job["name"] == "x.close_stdout":
        sys.stderr.write("closing stdout on purpose\n")
        with out_lock:
            try:
                os.close(1)
            except OSError:
                pass  # another job closed it already
        while True:
            time.sleep(60)
    if attempt == 1 and job["name"] == "x.orphan_exit":
        trigger = job["args"].get("trigger")
        while trigger and not os.path.exists(trigger):
            time.sleep(0.02)
        start_helper()
        sys.stderr.write("exiting with status 3 on purpose, a setsid helper holds the pipes\n")
        os._exit(3)
    write({"type": "result", "id": jid, "status": "done", "result": {"pid": os.getpid(), "attempt": attempt}})


write({
    "type": "hello", "protocol": VERSION, "sdk": "exit-faults/0", "pid": os.getpid(),
    "jobs": [{"name": n, "cancellable": False} for n in JOBS],
    "concurrency": 2, "sync_concurrency": 2,
})
for raw in sys.stdin.buffer:
    line = raw.rstrip(b"\r\n")
    if not line:
        continue
    m = json.loads(line)
    if m["type"] == "job":
        t = threading.Thread(target=run, args=(m,), daemon=True)
        t.start()
        threads.append(t)
    elif m["type"] == "ping":
        write({"type": "pong", "seq": m["seq"]})
    elif m["type"] == "shutdown":
        break
for t in threads:
    t.join()
sys.exit(0)
