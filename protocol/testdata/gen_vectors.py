#!/usr/bin/env python3
"""Writes vectors.json next to this file.

vectors.json is the source of truth that the Go, Python and Node suites read; this script is
only how it is maintained. Frames are written by hand, `decoded` is written by hand through
the small constructors below (which only fill in defaults), and `encoded` is derived from
`decoded` by the rule in README.md (compact, table order, nulls omitted, no HTML escaping,
non-ASCII written as is).

    python3 protocol/testdata/gen_vectors.py
"""

import base64
import json
import os

MAX_SAFE = 2**53 - 1
vectors = []


def hello(protocol=1, sdk="soniq-python/0.1.0", pid=4242, jobs=None, concurrency=1, sync_concurrency=None):
    if jobs is None:
        jobs = [{"name": "examples.add", "cancellable": False}]
    return {"type": "hello", "protocol": protocol, "sdk": sdk, "pid": pid, "jobs": jobs,
            "concurrency": concurrency, "sync_concurrency": sync_concurrency}


def job(id="j1", name="examples.add", args=None, attempt=1, max_attempts=3, queue="default",
        deadline=None, traceparent=None, worker_id=None, scheduled_at=None, created_at=None):
    return {"type": "job", "id": id, "name": name, "args": {} if args is None else args,
            "attempt": attempt, "max_attempts": max_attempts, "queue": queue,
            "deadline": deadline, "traceparent": traceparent,
            "worker_id": worker_id, "scheduled_at": scheduled_at, "created_at": created_at}


def err(type="ValueError", message="boom", traceback=None, retryable=True, reason=None):
    return {"type": type, "message": message, "traceback": traceback, "retryable": retryable, "reason": reason}


def result(status, id="j1", result=None, error=None, seconds=None, reason=None):
    return {"type": "result", "id": id, "status": status, "result": result, "error": error,
            "seconds": seconds, "reason": reason}


def cancel(reason="job_timeout", id="j1"):
    return {"type": "cancel", "id": id, "reason": reason}


def ping(seq=0):
    return {"type": "ping", "seq": seq}


def pong(seq=0):
    return {"type": "pong", "seq": seq}


def shutdown():
    return {"type": "shutdown"}


CHILD = "3f2b8c1e-9d4a-4e6b-a1c7-5e2f0b9d8a34"
DUP = "b7e1c2d3-4f5a-4b6c-8d7e-9f0a1b2c3d4e"


def enqueue(parent="j1", id=CHILD, name="images.resize", args=None, queue=None, priority=None, max_attempts=None,
            delay=None, dedup_key=None, unique=None, immediate=None):
    return {"type": "enqueue", "parent": parent, "id": id, "name": name, "args": {} if args is None else args,
            "queue": queue, "priority": priority, "max_attempts": max_attempts, "delay": delay,
            "dedup_key": dedup_key, "unique": unique, "immediate": immediate}


def enqueued(id=CHILD, job_id=None, error=None):
    return {"type": "enqueued", "id": id, "job_id": job_id, "error": error}


def encode(decoded):
    """The encoder rule: drop message-level (and error-level) nulls, keep everything else."""
    out = {}
    for k, v in decoded.items():
        if v is None:
            continue
        if k == "error" and decoded["type"] in ("result", "enqueued"):
            v = {ek: ev for ek, ev in v.items() if ev is not None}
        out[k] = v
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"))


def valid(name, frame, decoded, encoded=True, max_frame_bytes=None, b64=False):
    v = {"name": name}
    if b64:
        v["frame_b64"] = base64.b64encode(frame if isinstance(frame, bytes) else frame.encode()).decode()
    else:
        v["frame"] = frame
    if max_frame_bytes is not None:
        v["max_frame_bytes"] = max_frame_bytes
    v["valid"] = True
    v["decoded"] = decoded
    if encoded:
        v["encoded"] = encode(decoded)
    vectors.append(v)


def invalid(name, frame, code, field=None, max_frame_bytes=None):
    v = {"name": name}
    if isinstance(frame, bytes):
        v["frame_b64"] = base64.b64encode(frame).decode()
    else:
        v["frame"] = frame
    if max_frame_bytes is not None:
        v["max_frame_bytes"] = max_frame_bytes
    v["valid"] = False
    v["error"] = {"code": code}
    if field is not None:
        v["error"]["field"] = field
    vectors.append(v)


# ---------------------------------------------------------------- valid: hello
H = '{"type":"hello","protocol":1,"sdk":"soniq-python/0.1.0","pid":4242,"jobs":[{"name":"examples.add","cancellable":false}],"concurrency":1'
valid("hello minimal", H + "}", hello())
valid("hello full",
      '{"type":"hello","protocol":1,"sdk":"soniq-node/0.1.0","pid":77,"jobs":[{"name":"examples.add","cancellable":false},'
      '{"name":"examples.sleep_async","cancellable":true},{"name":"examples.sleep_sync","cancellable":false}],'
      '"concurrency":8,"sync_concurrency":4}',
      hello(sdk="soniq-node/0.1.0", pid=77, concurrency=8, sync_concurrency=4, jobs=[
          {"name": "examples.add", "cancellable": False},
          {"name": "examples.sleep_async", "cancellable": True},
          {"name": "examples.sleep_sync", "cancellable": False}]))
valid("hello sync_concurrency null is absent", H + ',"sync_concurrency":null}', hello())
valid("hello unknown fields at top level and in jobs entries are dropped",
      '{"type":"hello","protocol":1,"sdk":"soniq-python/0.1.0","pid":4242,"jobs":[{"name":"examples.add","cancellable":false,"timeout":30,"tags":["x"]}],'
      '"concurrency":1,"features":{"gzip":true},"hostname":"box"}',
      hello())
valid("hello protocol 2 decodes (the sidecar, not the decoder, checks the version was offered)",
      H.replace('"protocol":1', '"protocol":2') + "}", hello(protocol=2))
valid("hello pid and concurrency at 2^53-1",
      H.replace('"pid":4242', '"pid":9007199254740991').replace('"concurrency":1', '"concurrency":9007199254740991') + "}",
      hello(pid=MAX_SAFE, concurrency=MAX_SAFE))
valid("hello job names with non-ASCII and emoji",
      '{"type":"hello","protocol":1,"sdk":"sdk-ü/1","pid":1,"jobs":[{"name":"café.naïve","cancellable":true},{"name":"\\u6587\\u5b57","cancellable":false},{"name":"🎉","cancellable":false}],"concurrency":2}',
      hello(sdk="sdk-ü/1", pid=1, concurrency=2, jobs=[
          {"name": "café.naïve", "cancellable": True},
          {"name": "文字", "cancellable": False},
          {"name": "🎉", "cancellable": False}]))

# ---------------------------------------------------------------- valid: job
J = '{"type":"job","id":"j1","name":"examples.add","args":{"a":1,"b":2},"attempt":1,"max_attempts":3,"queue":"default"'
valid("job minimal (deadline, traceparent, worker_id, scheduled_at, created_at absent are null)", J + "}",
      job(args={"a": 1, "b": 2}))
valid("job full",
      '{"type":"job","id":"0193a6f2-7c1e-7d3a-9a4b-2f1e8c3d5b6a","name":"billing.invoices.send.v2","args":{"invoice":"INV-1"},'
      '"attempt":2,"max_attempts":5,"queue":"billing","deadline":1767225600000,'
      '"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}',
      job(id="0193a6f2-7c1e-7d3a-9a4b-2f1e8c3d5b6a", name="billing.invoices.send.v2", args={"invoice": "INV-1"},
          attempt=2, max_attempts=5, queue="billing", deadline=1767225600000,
          traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
valid("job deadline and traceparent explicit null", J + ',"deadline":null,"traceparent":null}', job(args={"a": 1, "b": 2}))
valid("job with the row's context: worker_id, scheduled_at and created_at (epoch ms)",
      J + ',"deadline":1767225900000,"worker_id":"5f0c2a9e-3b1d-4c6e-8f7a-9d2b1c0e4a6f",'
          '"scheduled_at":1767225600000,"created_at":1767225599123}',
      job(args={"a": 1, "b": 2}, deadline=1767225900000, worker_id="5f0c2a9e-3b1d-4c6e-8f7a-9d2b1c0e4a6f",
          scheduled_at=1767225600000, created_at=1767225599123))
valid("job context fields explicit null (scheduled_at NULL: queued to run at once)",
      J + ',"worker_id":null,"scheduled_at":null,"created_at":null}', job(args={"a": 1, "b": 2}))
valid("job created_at before 1970 and at -(2^53-1), scheduled_at 0, worker_id empty",
      J + ',"worker_id":"","scheduled_at":0,"created_at":-9007199254740991}',
      job(args={"a": 1, "b": 2}, worker_id="", scheduled_at=0, created_at=-MAX_SAFE))
valid("job empty args", J.replace('{"a":1,"b":2}', "{}") + "}", job(args={}))
nested = {"user": {"id": 7, "tags": ["a", "b"], "flags": {"beta": True, "gdpr": False}, "manager": None},
          "items": [{"sku": "X-1", "qty": 2, "price": 9.5}, {"sku": "Y-2", "qty": 1, "price": -0.25}],
          "matrix": [[1, 2], [3, 4], []], "empty": {}, "big": 9007199254740991, "neg": -42}
valid("job nested args (objects, arrays, null, bools, fractions, negatives) keep their key order",
      J.replace('{"a":1,"b":2}', json.dumps(nested, separators=(",", ":"))) + "}", job(args=nested))
valid("job unicode: non-ASCII and emoji written as is",
      '{"type":"job","id":"j-ü","name":"café","args":{"text":"Grüße, 世界 🎉👍🏽","ключ":"значение"},"attempt":1,"max_attempts":1,"queue":"é"}',
      job(id="j-ü", name="café", args={"text": "Grüße, 世界 🎉👍🏽", "ключ": "значение"}, max_attempts=1, queue="é"))
valid("job unicode: \\u escapes (BMP and surrogate pair) decode to the characters",
      '{"type":"job","id":"j\\u00fc","name":"\\u4e16\\u754c","args":{"s":"caf\\u00e9 \\ud83c\\udf89","\\u00e9":"\\u00C9"},"attempt":1,"max_attempts":1,"queue":"default"}',
      job(id="jü", name="世界", args={"s": "café 🎉", "é": "É"}, max_attempts=1))
valid("job escapes: quote, backslash, solidus, control characters",
      '{"type":"job","id":"j1","name":"examples.add","args":{"s":"a\\"b\\\\c\\/d\\n\\t\\r\\b\\f\\u0001\\u001f"},"attempt":1,"max_attempts":3,"queue":"q\\nq"}',
      job(args={"s": "a\"b\\c/d\n\t\r\b\f\x01\x1f"}, queue="q\nq"))
valid("job HTML characters and U+2028/U+2029 are not escaped on encode",
      '{"type":"job","id":"<j&1>","name":"examples.add","args":{"html":"<b>&amp;</b>","ls":"a\\u2028b\\u2029c"},"attempt":1,"max_attempts":3,"queue":"default"}',
      job(id="<j&1>", args={"html": "<b>&amp;</b>", "ls": "a\u2028b\u2029c"}))
valid("job attempt and max_attempts at 2^53-1",
      '{"type":"job","id":"j1","name":"examples.add","args":{},"attempt":9007199254740991,"max_attempts":9007199254740991,"queue":"default"}',
      job(attempt=MAX_SAFE, max_attempts=MAX_SAFE))
valid("job empty queue is allowed", J.replace('"queue":"default"', '"queue":""') + "}", job(args={"a": 1, "b": 2}, queue=""))
valid("job unknown fields are dropped",
      J + ',"priority":5,"meta":{"x":[1,2]},"run_at":null}', job(args={"a": 1, "b": 2}))
valid("job fields in any order",
      '{"queue":"default","max_attempts":3,"attempt":1,"args":{"a":1,"b":2},"name":"examples.add","id":"j1","type":"job"}',
      job(args={"a": 1, "b": 2}))

# ---------------------------------------------------------------- valid: result
R = '{"type":"result","id":"j1","status":'
valid("result done minimal (result absent is null)", R + '"done"}', result("done"))
valid("result done with an object result", R + '"done","result":{"sum":3,"parts":[1,2],"note":null}}',
      result("done", result={"sum": 3, "parts": [1, 2], "note": None}))
valid("result done with a scalar result", R + '"done","result":42}', result("done", result=42))
valid("result done with a string result", R + '"done","result":"ok ✓"}', result("done", result="ok ✓"))
valid("result done with an array result", R + '"done","result":[1,"two",[3],{"four":4}]}',
      result("done", result=[1, "two", [3], {"four": 4}]))
valid("result done with false result", R + '"done","result":false}', result("done", result=False))
valid("result done with explicit null result", R + '"done","result":null}', result("done"))
valid("result failed minimal (traceback null, retryable true)",
      R + '"failed","error":{"type":"ValueError","message":"boom"}}', result("failed", error=err()))
valid("result failed full",
      R + '"failed","error":{"type":"billing.DeclinedError","message":"card declined: «insufficient funds»",'
          '"traceback":"Traceback (most recent call last):\\n  File \\"x.py\\", line 1\\nDeclinedError\\n","retryable":false}}',
      result("failed", error=err(type="billing.DeclinedError", message="card declined: «insufficient funds»",
                                 traceback='Traceback (most recent call last):\n  File "x.py", line 1\nDeclinedError\n',
                                 retryable=False)))
valid("result failed traceback and retryable null take their defaults",
      R + '"failed","error":{"type":"E","message":"m","traceback":null,"retryable":null}}',
      result("failed", error=err(type="E", message="m")))
valid("result failed retryable true explicit",
      R + '"failed","error":{"type":"E","message":"","retryable":true}}', result("failed", error=err(type="E", message="")))
valid("result failed with reason invalid_arguments",
      R + '"failed","error":{"type":"ValidationError","message":"Corrupted argument data: qty: not an int",'
          '"retryable":false,"reason":"invalid_arguments"}}',
      result("failed", error=err(type="ValidationError", message="Corrupted argument data: qty: not an int",
                                 retryable=False, reason="invalid_arguments")))
valid("result failed reason null takes its default",
      R + '"failed","error":{"type":"E","message":"m","reason":null}}', result("failed", error=err(type="E", message="m")))
valid("result failed unknown fields in error are dropped",
      R + '"failed","error":{"type":"E","message":"m","code":42,"cause":{"type":"F"}}}',
      result("failed", error=err(type="E", message="m")))
valid("result failed escaped message",
      R + '"failed","error":{"type":"E","message":"\\u00fcber \\ud83d\\udca5 \\"quoted\\" tab\\there"}}',
      result("failed", error=err(type="E", message='über 💥 "quoted" tab\there')))
valid("result snooze with integer seconds (reason null)", R + '"snooze","seconds":30}', result("snooze", seconds=30))
valid("result snooze with fractional seconds and a reason", R + '"snooze","seconds":2.5,"reason":"rate limited"}',
      result("snooze", seconds=2.5, reason="rate limited"))
valid("result snooze zero seconds, reason null", R + '"snooze","seconds":0,"reason":null}', result("snooze", seconds=0))
valid("result snooze seconds with exponent (number, not int)", R + '"snooze","seconds":1e3}', result("snooze", seconds=1000))
valid("result snooze seconds 0.1", R + '"snooze","seconds":0.1}', result("snooze", seconds=0.1))
valid("result cancelled", R + '"cancelled"}', result("cancelled"))
valid("result fields that do not belong to the status are dropped (done)",
      R + '"done","result":1,"error":"not checked","seconds":"soon","reason":5}', result("done", result=1))
valid("result fields that do not belong to the status are dropped (failed)",
      R + '"failed","result":{"x":1},"error":{"type":"E","message":"m"},"seconds":-1,"reason":"r"}',
      result("failed", error=err(type="E", message="m")))
valid("result fields that do not belong to the status are dropped (cancelled)",
      R + '"cancelled","result":1,"error":null,"seconds":3,"reason":"shutdown"}', result("cancelled"))
valid("result fields that do not belong to the status are dropped (snooze)",
      R + '"snooze","seconds":5,"result":[1],"error":{}}', result("snooze", seconds=5))

# ---------------------------------------------------------------- valid: cancel, ping, pong, shutdown
valid("cancel job_timeout", '{"type":"cancel","id":"j1","reason":"job_timeout"}', cancel("job_timeout"))
valid("cancel shutdown_timeout", '{"type":"cancel","id":"j1","reason":"shutdown_timeout"}', cancel("shutdown_timeout"))
valid("cancel user", '{"type":"cancel","id":"j1","reason":"user"}', cancel("user"))
valid("cancel unknown fields dropped", '{"type":"cancel","id":"j1","reason":"job_timeout","after_ms":100}', cancel())
valid("ping seq 0", '{"type":"ping","seq":0}', ping(0))
valid("ping seq 2^53-1", '{"type":"ping","seq":9007199254740991}', ping(MAX_SAFE))
valid("pong", '{"type":"pong","seq":7}', pong(7))
valid("pong unknown fields dropped", '{"type":"pong","seq":8,"load":0.5}', pong(8))
valid("shutdown", '{"type":"shutdown"}', shutdown())
valid("shutdown unknown fields dropped", '{"type":"shutdown","reason":"SIGTERM","grace_ms":30000}', shutdown())

# ---------------------------------------------------------------- valid: enqueue, enqueued
E = '{"type":"enqueue","parent":"j1","id":"%s","name":"images.resize","args":{"size":64}' % CHILD
valid("enqueue minimal (every option absent is null)", E + "}", enqueue(args={"size": 64}))
valid("enqueue with every option",
      E + ',"queue":"images","priority":-5,"max_attempts":7,"delay":2.5,"dedup_key":"img-1-64","unique":true,"immediate":true}',
      enqueue(args={"size": 64}, queue="images", priority=-5, max_attempts=7, delay=2.5, dedup_key="img-1-64",
              unique=True, immediate=True))
valid("enqueue options explicit null take their defaults",
      E + ',"queue":null,"priority":null,"max_attempts":null,"delay":null,"dedup_key":null,"unique":null,"immediate":null}',
      enqueue(args={"size": 64}))
valid("enqueue unique and immediate false, delay 0, integer delay",
      E + ',"delay":0,"unique":false,"immediate":false}',
      enqueue(args={"size": 64}, delay=0, unique=False, immediate=False))
valid("enqueue delay with exponent is a number", E + ',"delay":1e2}', enqueue(args={"size": 64}, delay=100))
valid("enqueue unknown fields are dropped", E + ',"run_at":"later","tags":["a"]}', enqueue(args={"size": 64}))
valid("enqueue nested args and a non-ASCII name",
      '{"type":"enqueue","parent":"0193a6f2-7c1e-7d3a-9a4b-2f1e8c3d5b6a","id":"%s","name":"café.résumé","args":{"a":[1,{"b":null}],"ü":"ß"}}' % CHILD,
      enqueue(parent="0193a6f2-7c1e-7d3a-9a4b-2f1e8c3d5b6a", name="café.résumé", args={"a": [1, {"b": None}], "ü": "ß"}))
valid("enqueued written", '{"type":"enqueued","id":"%s","job_id":"%s"}' % (CHILD, CHILD), enqueued(job_id=CHILD))
valid("enqueued names a queued duplicate", '{"type":"enqueued","id":"%s","job_id":"%s"}' % (CHILD, DUP), enqueued(job_id=DUP))
valid("enqueued refused",
      '{"type":"enqueued","id":"%s","error":{"code":"cap","message":"job j1 has made 1000 children, the max_children_per_job"}}' % CHILD,
      enqueued(error={"code": "cap", "message": "job j1 has made 1000 children, the max_children_per_job"}))
valid("enqueued every refusal code decodes (unavailable, job_id null)",
      '{"type":"enqueued","id":"%s","job_id":null,"error":{"code":"unavailable","message":"database is down"}}' % CHILD,
      enqueued(error={"code": "unavailable", "message": "database is down"}))
valid("enqueued error null and unknown fields dropped",
      '{"type":"enqueued","id":"%s","job_id":"%s","error":null,"at":1}' % (CHILD, CHILD), enqueued(job_id=CHILD))

# ---------------------------------------------------------------- valid: syntax details
valid("whitespace around and between tokens", ' { "type" : "ping" ,\t"seq" : 1 } ', ping(1))
valid("one trailing carriage return is stripped (CRLF line endings)", '{"type":"ping","seq":2}\r', ping(2))
valid("duplicate key: the last one wins", '{"type":"ping","seq":1,"seq":3}', ping(3))
valid("escaped key names are unescaped", '{"t\\u0079pe":"ping","\\u0073eq":4}', ping(4))
valid("frame exactly at max_frame_bytes", '{"type":"ping","seq":1}', ping(1), max_frame_bytes=23)
valid("raw 4-byte UTF-8 (frame_b64, exact bytes)", '{"type":"cancel","id":"🎉-j1","reason":"shutdown_timeout"}'.encode(),
      cancel("shutdown_timeout", id="🎉-j1"), b64=True)

# ---------------------------------------------------------------- invalid: size, UTF-8, JSON, object, type
invalid("frame over the limit", '{"type":"ping","seq":123456789}', "oversize", max_frame_bytes=16)
invalid("frame one byte over the limit", '{"type":"ping","seq":1}', "oversize", max_frame_bytes=22)
invalid("oversize is checked before JSON syntax", '{"type":"ping","seq":1', "oversize", max_frame_bytes=10)
invalid("invalid UTF-8: 0xFF byte", b'{"type":"job","id":"j\xff1","name":"n","args":{},"attempt":1,"max_attempts":1,"queue":"q"}', "invalid_utf8")
invalid("invalid UTF-8: overlong encoding of '/'", b'{"type":"cancel","id":"\xc0\xaf","reason":"job_timeout"}', "invalid_utf8")
invalid("invalid UTF-8: encoded UTF-16 surrogate", b'{"type":"cancel","id":"\xed\xa0\x80","reason":"job_timeout"}', "invalid_utf8")
invalid("invalid UTF-8: truncated multi-byte sequence", b'{"type":"cancel","id":"j1","reason":"job_timeout","x":"\xe2\x82"}', "invalid_utf8")
invalid("invalid UTF-8 outside a string", b'{"type":"ping","seq":1}\xff', "invalid_utf8")
invalid("trailing garbage after the object", '{"type":"shutdown"}x', "invalid_json")
invalid("two objects on one line", '{"type":"ping","seq":1}{"type":"ping","seq":2}', "invalid_json")
invalid("truncated object", '{"type":"ping","seq":1', "invalid_json")
invalid("not JSON at all", 'hello from a stray print()', "invalid_json")
invalid("single-quoted strings", "{'type':'ping','seq':1}", "invalid_json")
invalid("trailing comma", '{"type":"ping","seq":1,}', "invalid_json")
invalid("NaN literal", '{"type":"result","id":"j1","status":"snooze","seconds":NaN}', "invalid_json")
invalid("Infinity literal", '{"type":"result","id":"j1","status":"snooze","seconds":Infinity}', "invalid_json")
invalid("raw control character inside a string", '{"type":"cancel","id":"j\t1","reason":"job_timeout"}', "invalid_json")
invalid("byte order mark before the object", '\ufeff{"type":"shutdown"}', "invalid_json")
invalid("whitespace-only frame", '   ', "invalid_json")
invalid("number beyond the 64-bit float range", '{"type":"result","id":"j1","status":"snooze","seconds":1e400}', "invalid_json")
invalid("integer beyond the 64-bit float range inside args",
        '{"type":"job","id":"j1","name":"examples.add","args":{"n":1' + "0" * 400 + '},"attempt":1,"max_attempts":3,"queue":"default"}',
        "invalid_json")
invalid("negative number beyond the 64-bit float range in an unknown field", '{"type":"shutdown","x":-2e308}', "invalid_json")
invalid("unpaired high surrogate escape", '{"type":"cancel","id":"\\ud800","reason":"job_timeout"}', "invalid_json")
invalid("unpaired low surrogate escape inside args",
        '{"type":"job","id":"j1","name":"examples.add","args":{"s":"x\\udc00y"},"attempt":1,"max_attempts":3,"queue":"default"}',
        "invalid_json")
invalid("surrogate escapes in the wrong order", '{"type":"cancel","id":"\\udf89\\ud83c","reason":"job_timeout"}', "invalid_json")
invalid("top level array", '[{"type":"ping","seq":1}]', "not_object")
invalid("top level string", '"ping"', "not_object")
invalid("top level number", '42', "not_object")
invalid("top level null", 'null', "not_object")
invalid("top level true", 'true', "not_object")
invalid("missing type", '{"seq":1}', "missing_field", "type")
invalid("type is a number", '{"type":1,"seq":1}', "wrong_type", "type")
invalid("type is null", '{"type":null,"seq":1}', "wrong_type", "type")
invalid("unknown type", '{"type":"job_result","id":"j1"}', "unknown_type")
invalid("type is case-sensitive", '{"type":"Ping","seq":1}', "unknown_type")
invalid("empty type", '{"type":"","seq":1}', "unknown_type")

# ---------------------------------------------------------------- invalid: hello


def hello_frame(**repl):
    fields = {"type": '"hello"', "protocol": "1", "sdk": '"soniq-python/0.1.0"', "pid": "4242",
              "jobs": '[{"name":"examples.add","cancellable":false}]', "concurrency": "1"}
    for k, v in repl.items():
        if v is None:
            del fields[k]
        else:
            fields[k] = v
    return "{" + ",".join('"%s":%s' % (k, v) for k, v in fields.items()) + "}"


invalid("hello missing protocol", hello_frame(protocol=None), "missing_field", "protocol")
invalid("hello protocol is a string", hello_frame(protocol='"1"'), "wrong_type", "protocol")
invalid("hello protocol 1.0 is not an int", hello_frame(protocol="1.0"), "wrong_type", "protocol")
invalid("hello protocol 0", hello_frame(protocol="0"), "invalid_value", "protocol")
invalid("hello missing sdk", hello_frame(sdk=None), "missing_field", "sdk")
invalid("hello sdk is a number", hello_frame(sdk="5"), "wrong_type", "sdk")
invalid("hello pid 0", hello_frame(pid="0"), "invalid_value", "pid")
invalid("hello pid 1e3 is not an int", hello_frame(pid="1e3"), "wrong_type", "pid")
invalid("hello pid true is not an int", hello_frame(pid="true"), "wrong_type", "pid")
invalid("hello missing jobs", hello_frame(jobs=None), "missing_field", "jobs")
invalid("hello jobs is an object", hello_frame(jobs='{"examples.add":false}'), "wrong_type", "jobs")
invalid("hello empty jobs list", hello_frame(jobs="[]"), "invalid_value", "jobs")
invalid("hello jobs entry is a string", hello_frame(jobs='["examples.add"]'), "wrong_type", "jobs[0]")
invalid("hello jobs[0] missing name", hello_frame(jobs='[{"cancellable":false}]'), "missing_field", "jobs[0].name")
invalid("hello jobs[0].name empty", hello_frame(jobs='[{"name":"","cancellable":false}]'), "invalid_value", "jobs[0].name")
invalid("hello jobs[1].name is a number", hello_frame(jobs='[{"name":"a","cancellable":false},{"name":7,"cancellable":false}]'),
        "wrong_type", "jobs[1].name")
invalid("hello duplicate job names", hello_frame(jobs='[{"name":"a","cancellable":false},{"name":"b","cancellable":true},{"name":"a","cancellable":true}]'),
        "invalid_value", "jobs[2].name")
invalid("hello jobs[0] missing cancellable", hello_frame(jobs='[{"name":"a"}]'), "missing_field", "jobs[0].cancellable")
invalid("hello jobs[0].cancellable is a string", hello_frame(jobs='[{"name":"a","cancellable":"yes"}]'), "wrong_type", "jobs[0].cancellable")
invalid("hello jobs[0].cancellable is 0", hello_frame(jobs='[{"name":"a","cancellable":0}]'), "wrong_type", "jobs[0].cancellable")
invalid("hello missing concurrency", hello_frame(concurrency=None), "missing_field", "concurrency")
invalid("hello concurrency 0", hello_frame(concurrency="0"), "invalid_value", "concurrency")
invalid("hello sync_concurrency 0", hello_frame(sync_concurrency="0"), "invalid_value", "sync_concurrency")
invalid("hello sync_concurrency 1.5", hello_frame(sync_concurrency="1.5"), "wrong_type", "sync_concurrency")

# ---------------------------------------------------------------- invalid: job


def job_frame(**repl):
    fields = {"type": '"job"', "id": '"j1"', "name": '"examples.add"', "args": '{"a":1,"b":2}', "attempt": "1",
              "max_attempts": "3", "queue": '"default"'}
    for k, v in repl.items():
        if v is None:
            del fields[k]
        else:
            fields[k] = v
    return "{" + ",".join('"%s":%s' % (k, v) for k, v in fields.items()) + "}"


invalid("job missing id", job_frame(id=None), "missing_field", "id")
invalid("job id empty", job_frame(id='""'), "invalid_value", "id")
invalid("job id is a number", job_frame(id="123"), "wrong_type", "id")
invalid("job id null (required fields may not be null)", job_frame(id="null"), "wrong_type", "id")
invalid("job missing name", job_frame(name=None), "missing_field", "name")
invalid("job name empty", job_frame(name='""'), "invalid_value", "name")
invalid("job missing args", job_frame(args=None), "missing_field", "args")
invalid("job args is an array", job_frame(args="[1,2]"), "wrong_type", "args")
invalid("job args is a string", job_frame(args='"{\\"a\\":1}"'), "wrong_type", "args")
invalid("job args null", job_frame(args="null"), "wrong_type", "args")
invalid("job missing attempt", job_frame(attempt=None), "missing_field", "attempt")
invalid("job attempt 0", job_frame(attempt="0"), "invalid_value", "attempt")
invalid("job attempt 1.0 is not an int", job_frame(attempt="1.0"), "wrong_type", "attempt")
invalid("job attempt 1E0 is not an int", job_frame(attempt="1E0"), "wrong_type", "attempt")
invalid("job attempt is a string", job_frame(attempt='"1"'), "wrong_type", "attempt")
invalid("job max_attempts -1", job_frame(max_attempts="-1"), "invalid_value", "max_attempts")
invalid("job max_attempts 2^53 is out of range", job_frame(max_attempts="9007199254740992"), "invalid_value", "max_attempts")
invalid("job max_attempts beyond 64 bits", job_frame(max_attempts="99999999999999999999"), "invalid_value", "max_attempts")
invalid("job missing queue", job_frame(queue=None), "missing_field", "queue")
invalid("job queue null", job_frame(queue="null"), "wrong_type", "queue")
invalid("job deadline is a string", job_frame(deadline='"2026-01-01T00:00:00Z"'), "wrong_type", "deadline")
invalid("job deadline with exponent", job_frame(deadline="1.7e12"), "wrong_type", "deadline")
invalid("job deadline -2^53 is out of range", job_frame(deadline="-9007199254740992"), "invalid_value", "deadline")
invalid("job traceparent is a number", job_frame(traceparent="5"), "wrong_type", "traceparent")
invalid("job traceparent is an object", job_frame(traceparent='{"v":"00"}'), "wrong_type", "traceparent")
invalid("job worker_id is a number", job_frame(worker_id="42"), "wrong_type", "worker_id")
invalid("job worker_id is an object", job_frame(worker_id='{"id":"w"}'), "wrong_type", "worker_id")
invalid("job scheduled_at is an RFC 3339 string, not epoch ms", job_frame(scheduled_at='"2026-01-01T00:00:00Z"'),
        "wrong_type", "scheduled_at")
invalid("job scheduled_at with a fraction", job_frame(scheduled_at="1767225600000.5"), "wrong_type", "scheduled_at")
invalid("job scheduled_at is a bool", job_frame(scheduled_at="true"), "wrong_type", "scheduled_at")
invalid("job created_at is a string", job_frame(created_at='"1767225600000"'), "wrong_type", "created_at")
invalid("job created_at with exponent", job_frame(created_at="1.7e12"), "wrong_type", "created_at")
invalid("job created_at 2^53 is out of range", job_frame(created_at="9007199254740992"), "invalid_value", "created_at")
invalid("job context fields are checked in table order (worker_id before created_at)",
        job_frame(created_at='"x"', worker_id="1"), "wrong_type", "worker_id")
invalid("job deadline is checked before the context fields",
        job_frame(scheduled_at='"x"', deadline='"y"'), "wrong_type", "deadline")

# ---------------------------------------------------------------- invalid: result
invalid("result missing id", '{"type":"result","status":"done"}', "missing_field", "id")
invalid("result id empty", '{"type":"result","id":"","status":"done"}', "invalid_value", "id")
invalid("result missing status", '{"type":"result","id":"j1","result":1}', "missing_field", "status")
invalid("result status is a number", '{"type":"result","id":"j1","status":1}', "wrong_type", "status")
invalid("result unknown status", '{"type":"result","id":"j1","status":"ok"}', "invalid_value", "status")
invalid("result status is case-sensitive", '{"type":"result","id":"j1","status":"DONE"}', "invalid_value", "status")
invalid("result failed without error", '{"type":"result","id":"j1","status":"failed"}', "missing_field", "error")
invalid("result failed with null error", '{"type":"result","id":"j1","status":"failed","error":null}', "wrong_type", "error")
invalid("result failed with a string error", '{"type":"result","id":"j1","status":"failed","error":"boom"}', "wrong_type", "error")
invalid("result failed without error.type", '{"type":"result","id":"j1","status":"failed","error":{"message":"boom"}}', "missing_field", "error.type")
invalid("result failed error.type is a number", '{"type":"result","id":"j1","status":"failed","error":{"type":5,"message":"boom"}}', "wrong_type", "error.type")
invalid("result failed without error.message", '{"type":"result","id":"j1","status":"failed","error":{"type":"E"}}', "missing_field", "error.message")
invalid("result failed error.message null", '{"type":"result","id":"j1","status":"failed","error":{"type":"E","message":null}}', "wrong_type", "error.message")
invalid("result failed error.traceback is a list", '{"type":"result","id":"j1","status":"failed","error":{"type":"E","message":"m","traceback":["a","b"]}}', "wrong_type", "error.traceback")
invalid("result failed error.retryable is a string", '{"type":"result","id":"j1","status":"failed","error":{"type":"E","message":"m","retryable":"no"}}', "wrong_type", "error.retryable")
invalid("result failed error.retryable is 0", '{"type":"result","id":"j1","status":"failed","error":{"type":"E","message":"m","retryable":0}}', "wrong_type", "error.retryable")
invalid("result failed error.reason unknown", '{"type":"result","id":"j1","status":"failed","error":{"type":"E","message":"m","reason":"bad_args"}}', "invalid_value", "error.reason")
invalid("result failed error.reason is case-sensitive", '{"type":"result","id":"j1","status":"failed","error":{"type":"E","message":"m","reason":"INVALID_ARGUMENTS"}}', "invalid_value", "error.reason")
invalid("result failed error.reason empty", '{"type":"result","id":"j1","status":"failed","error":{"type":"E","message":"m","reason":""}}', "invalid_value", "error.reason")
invalid("result failed error.reason is a number", '{"type":"result","id":"j1","status":"failed","error":{"type":"E","message":"m","reason":1}}', "wrong_type", "error.reason")
invalid("result snooze without seconds", '{"type":"result","id":"j1","status":"snooze","reason":"later"}', "missing_field", "seconds")
invalid("result snooze seconds null", '{"type":"result","id":"j1","status":"snooze","seconds":null}', "wrong_type", "seconds")
invalid("result snooze negative seconds", '{"type":"result","id":"j1","status":"snooze","seconds":-1}', "invalid_value", "seconds")
invalid("result snooze negative fractional seconds", '{"type":"result","id":"j1","status":"snooze","seconds":-0.5}', "invalid_value", "seconds")
invalid("result snooze seconds is a string", '{"type":"result","id":"j1","status":"snooze","seconds":"5"}', "wrong_type", "seconds")
invalid("result snooze reason is a number", '{"type":"result","id":"j1","status":"snooze","seconds":5,"reason":5}', "wrong_type", "reason")

# ---------------------------------------------------------------- invalid: cancel, ping, pong
invalid("cancel missing id", '{"type":"cancel","reason":"job_timeout"}', "missing_field", "id")
invalid("cancel id is a number", '{"type":"cancel","id":1,"reason":"job_timeout"}', "wrong_type", "id")
invalid("cancel missing reason", '{"type":"cancel","id":"j1"}', "missing_field", "reason")
invalid("cancel unknown reason", '{"type":"cancel","id":"j1","reason":"timeout"}', "invalid_value", "reason")
invalid("cancel reason is case-sensitive", '{"type":"cancel","id":"j1","reason":"User"}', "invalid_value", "reason")
invalid("cancel reason null", '{"type":"cancel","id":"j1","reason":null}', "wrong_type", "reason")
invalid("ping missing seq", '{"type":"ping"}', "missing_field", "seq")
invalid("ping negative seq", '{"type":"ping","seq":-1}', "invalid_value", "seq")
invalid("ping seq is a string", '{"type":"ping","seq":"1"}', "wrong_type", "seq")
invalid("ping seq 1.5", '{"type":"ping","seq":1.5}', "wrong_type", "seq")
invalid("ping seq 2^53", '{"type":"ping","seq":9007199254740992}', "invalid_value", "seq")
invalid("pong missing seq", '{"type":"pong"}', "missing_field", "seq")
invalid("pong seq true", '{"type":"pong","seq":true}', "wrong_type", "seq")
invalid("pong seq 1e3", '{"type":"pong","seq":1e3}', "wrong_type", "seq")

# ---------------------------------------------------------------- invalid: enqueue, enqueued


def enqueue_frame(**repl):
    fields = {"type": '"enqueue"', "parent": '"j1"', "id": '"%s"' % CHILD, "name": '"images.resize"',
              "args": '{"size":64}'}
    for k, v in repl.items():
        if v is None:
            del fields[k]
        else:
            fields[k] = v
    return "{" + ",".join('"%s":%s' % (k, v) for k, v in fields.items()) + "}"


invalid("enqueue missing parent", enqueue_frame(parent=None), "missing_field", "parent")
invalid("enqueue parent empty", enqueue_frame(parent='""'), "invalid_value", "parent")
invalid("enqueue missing id", enqueue_frame(id=None), "missing_field", "id")
invalid("enqueue id is a number", enqueue_frame(id="7"), "wrong_type", "id")
invalid("enqueue id not a UUID", enqueue_frame(id='"child-1"'), "invalid_value", "id")
invalid("enqueue id upper-case UUID", enqueue_frame(id='"%s"' % CHILD.upper()), "invalid_value", "id")
invalid("enqueue id UUID without hyphens", enqueue_frame(id='"%s"' % CHILD.replace("-", "")), "invalid_value", "id")
invalid("enqueue missing name", enqueue_frame(name=None), "missing_field", "name")
invalid("enqueue name empty", enqueue_frame(name='""'), "invalid_value", "name")
invalid("enqueue missing args", enqueue_frame(args=None), "missing_field", "args")
invalid("enqueue args is an array", enqueue_frame(args="[1]"), "wrong_type", "args")
invalid("enqueue args null", enqueue_frame(args="null"), "wrong_type", "args")
invalid("enqueue queue empty", enqueue_frame(queue='""'), "invalid_value", "queue")
invalid("enqueue queue is a number", enqueue_frame(queue="1"), "wrong_type", "queue")
invalid("enqueue priority 1.5", enqueue_frame(priority="1.5"), "wrong_type", "priority")
invalid("enqueue priority is a string", enqueue_frame(priority='"high"'), "wrong_type", "priority")
invalid("enqueue priority beyond 2^53-1", enqueue_frame(priority="9007199254740992"), "invalid_value", "priority")
invalid("enqueue max_attempts 0", enqueue_frame(max_attempts="0"), "invalid_value", "max_attempts")
invalid("enqueue max_attempts 2.0 is not an int", enqueue_frame(max_attempts="2.0"), "wrong_type", "max_attempts")
invalid("enqueue delay negative", enqueue_frame(delay="-1"), "invalid_value", "delay")
invalid("enqueue delay is a string", enqueue_frame(delay='"5s"'), "wrong_type", "delay")
invalid("enqueue dedup_key empty", enqueue_frame(dedup_key='""'), "invalid_value", "dedup_key")
invalid("enqueue dedup_key is a number", enqueue_frame(dedup_key="5"), "wrong_type", "dedup_key")
invalid("enqueue unique is a string", enqueue_frame(unique='"yes"'), "wrong_type", "unique")
invalid("enqueue immediate is 1", enqueue_frame(immediate="1"), "wrong_type", "immediate")
invalid("enqueue fields are checked in table order (name before args)", enqueue_frame(name='""', args="[]"),
        "invalid_value", "name")
invalid("enqueued missing id", '{"type":"enqueued","job_id":"%s"}' % CHILD, "missing_field", "id")
invalid("enqueued id empty", '{"type":"enqueued","id":""}', "invalid_value", "id")
invalid("enqueued job_id is a number", '{"type":"enqueued","id":"%s","job_id":5}' % CHILD, "wrong_type", "job_id")
invalid("enqueued error is a string", '{"type":"enqueued","id":"%s","error":"cap"}' % CHILD, "wrong_type", "error")
invalid("enqueued error without code", '{"type":"enqueued","id":"%s","error":{"message":"m"}}' % CHILD,
        "missing_field", "error.code")
invalid("enqueued error code unknown", '{"type":"enqueued","id":"%s","error":{"code":"full","message":"m"}}' % CHILD,
        "invalid_value", "error.code")
invalid("enqueued error without message", '{"type":"enqueued","id":"%s","error":{"code":"cap"}}' % CHILD,
        "missing_field", "error.message")

names = [v["name"] for v in vectors]
assert len(names) == len(set(names)), "duplicate vector names"
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vectors.json")
with open(out, "w", encoding="utf-8") as f:
    json.dump({"protocol": 1, "vectors": vectors}, f, ensure_ascii=False, indent=2)
    f.write("\n")
print("%d vectors (%d valid, %d invalid) -> %s" % (len(vectors), sum(v["valid"] for v in vectors),
                                                  sum(not v["valid"] for v in vectors), out))
