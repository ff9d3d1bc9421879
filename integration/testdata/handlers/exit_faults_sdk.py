"""A handler on the Python SDK (sdk/python), for either transport, whose
sync job x.orphan_exit misbehaves on its first attempt: it starts a helper
that calls setsid and inherits the process's stdio (after the SDK's stdout
protection, fds 1 and 2 are both the stderr pipe), then the process exits with
status 3 while the helper sleeps on, holding the pipe. With args
{"trigger": path} it first waits until that file exists. Later attempts
answer done. Starts and helper pids are recorded as in exit_faults_ndjson.py.
"""
import os
import subprocess
import sys
import threading
import time

import soniq_handler

app = soniq_handler.App(concurrency=2, sync_concurrency=2)


@app.job("x.orphan_exit")
def orphan_exit(args, ctx):
    with open(os.environ["TEST_RECORD"], "a") as f:
        f.write("start %s %d %d\n" % (ctx.id, os.getpid(), ctx.attempt))
    if ctx.attempt > 1:
        return {"pid": os.getpid(), "attempt": ctx.attempt}
    trigger = args.get("trigger")
    while trigger and not os.path.exists(trigger):
        time.sleep(0.02)
    pid_file = "%s.helper-%d-%d" % (os.environ["TEST_RECORD"], os.getpid(), threading.get_ident())
    subprocess.Popen(["setsid", "sh", "-c", 'echo $$ > "$0.tmp" && mv "$0.tmp" "$0"; exec sleep 300', pid_file])
    while not os.path.exists(pid_file):
        time.sleep(0.01)
    with open(pid_file) as f:
        pid = f.read().strip()
    with open(os.environ["TEST_RECORD"] + ".helpers", "a") as f:
        f.write(pid + "\n")
    sys.stderr.write("exiting with status 3 on purpose, a setsid helper holds the pipes\n")
    sys.stderr.flush()
    os._exit(3)


app.run()
