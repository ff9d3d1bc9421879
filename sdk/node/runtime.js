'use strict';
// The job machinery of a handler process, whatever carries its messages. Every transport
// (stdio.js, the unix socket go-plugin spawns and attach mode's sockets through session.js)
// hands the jobs it receives to one Runtime and passes on the results it reports. The Runtime
//
// - holds every job from its job message to its result: at most `concurrency` run at once,
//   the others wait in arrival order;
// - runs each as a Soniq worker does: beforeJob hooks, `validate`, the middleware chain around
//   the handler, then afterJob (or onError) hooks;
// - cancels the cancellable ones (ctx.signal aborts with the reason);
// - settles each result: checked (JSON, the frame limit; a result that cannot be sent fails
//   the job instead), then reported once through the callback the transport gave with the job.
//
// Its interface, all a transport uses:
//
//   rt.onChange = callback          // a job ended: the transport checks whether it is done
//   rt.hello(protocol)              // the hello frame
//   rt.duplicate(id)                // held already (logged)?
//   rt.start(jobFrame, report)      // report(resultFrame, encodedText) once
//   rt.start(jobFrame, report, { apart: true }) // report(rt.encodeResultApart(result)) once
//   rt.cancel(id, reason)
//   rt.held(), rt.count, rt.maxFrameBytes
//
// Ledger keeps attach mode's results until a session acknowledges them (docs/protocol.md, "The
// Session stream and attach mode"); Registry is what App registers.

const { encode } = require('./protocol');
const { checkDepth, replaceLoneSurrogates } = require('./jsontext');
const { PermanentError, isSnooze } = require('./outcomes');
const { version: VERSION } = require('./package.json');

const SDK = `soniq-node/${VERSION}`;
const MAX_ERROR_TEXT = 64 * 1024;
// Results of jobs that ended while no session was open, or that were sent on a session that
// ended before acknowledging them, wait for the next one; at most this many (the oldest is
// dropped first, with a WARN line). A sidecar sends a process far fewer jobs than this (its
// concurrency), so only a process left alone for long gets there.
const MAX_KEPT_RESULTS = 1000;

function log(...parts) {
  process.stderr.write(`soniq-handler[${process.pid}]: ${parts.join(' ')}\n`);
}

// ---------------------------------------------------------------------------------------
// Errors -> protocol error objects
//
// Whatever was thrown is read defensively: a getter, a Proxy trap, a toString, toJSON or
// Symbol.toPrimitive that throws, a revoked Proxy, must not keep the failure from being
// written (nor end the process): a failure always has a type and a message.

// obj[key], or `fallback(err)` when reading it throws.
function read(obj, key, fallback = () => undefined) {
  try {
    return obj[key];
  } catch (err) {
    return fallback(err);
  }
}

// A thrown value (or any value) in words: its JSON when it has one, else String(), else its
// tag; never throws.
function describe(value) {
  switch (typeof value) {
    case 'string':
      return value;
    case 'undefined':
    case 'symbol':
    case 'bigint':
    case 'number':
    case 'boolean':
      return String(value); // none of these runs user code
    case 'function': {
      const name = read(value, 'name');
      return `[function ${typeof name === 'string' && name ? name : '(anonymous)'}]`;
    }
    default:
  }
  if (value === null) return 'null';
  try {
    const json = JSON.stringify(value);
    if (typeof json === 'string') return json;
  } catch {
    // a cycle, a BigInt, a toJSON that throws: try the next way
  }
  return asText(value, false);
}

// String(value) for a message; describe() when that throws.
function asText(value, tryJSON = true) {
  if (typeof value === 'string') return value;
  try {
    return String(value);
  } catch {
    if (tryJSON) return describe(value);
  }
  try {
    return Object.prototype.toString.call(value);
  } catch {
    return '[a value that cannot be printed]';
  }
}

function errorPayload(err, retryable) {
  let isError = false;
  try {
    isError = err instanceof Error || (err !== null && typeof err === 'object' && 'message' in err);
  } catch {
    // a Proxy whose traps throw: described below as a value
  }
  if (isError) {
    const name = read(err, 'name');
    let type = typeof name === 'string' && name ? name : '';
    const ctor = read(err, 'constructor');
    const ctorName = ctor !== null && ctor !== undefined ? read(ctor, 'name') : undefined;
    if ((!type || type === 'Error') && typeof ctorName === 'string' && ctorName && ctorName !== 'Object') type = ctorName;
    const message = read(err, 'message', (inner) => `<reading its message threw ${describeBrief(inner)}>`);
    const stack = read(err, 'stack');
    return {
      type: truncate(type || 'Error', MAX_ERROR_TEXT),
      message: truncate(asText(message), MAX_ERROR_TEXT),
      traceback: typeof stack === 'string' ? truncate(stack, MAX_ERROR_TEXT) : null,
      retryable: retryable && read(err, 'retryable') !== false,
    };
  }
  // Something that is not an Error was thrown (`throw 'oops'`).
  return { type: err === null ? 'null' : typeof err, message: truncate(describe(err), MAX_ERROR_TEXT), traceback: null, retryable };
}

// What was thrown while reading what was thrown, in a few words (no second level of getters).
function describeBrief(err) {
  const name = err !== null && typeof err === 'object' ? read(err, 'name') : undefined;
  return typeof name === 'string' ? name : typeof err;
}

// A failed validation: permanent, in Soniq's words ("Corrupted argument data: ..."), without
// the validator's stack; the reason lets the sidecar dead-letter it as invalid_arguments.
function validationError(err) {
  const e = errorPayload(err, false);
  return {
    ...e, message: truncate(`Corrupted argument data: ${e.message}`, MAX_ERROR_TEXT), traceback: null, retryable: false,
    reason: 'invalid_arguments',
  };
}

// One line about something thrown, for the log.
function describeThrown(err) {
  const e = errorPayload(err, true);
  return `${e.type}: ${String(e.message).split('\n')[0]}`;
}

// ---------------------------------------------------------------------------------------
// Results that cannot be written

// What a result that cannot be written becomes: a failure that is not retried. The same args
// give the same value and the same failure, so a retry would run the handler (and its side
// effects) again for nothing; the job is dead-lettered with the cause, to be replayed once the
// handler is fixed (docs/protocol.md, "Result encoding failures").
const UNENCODABLE_RETRYABLE = false;

function unencodable(id, err, value) {
  const e = errorPayload(err, false);
  let cause = e.message;
  if (e.type === 'RangeError' && /call stack/i.test(cause)) {
    const depth = nesting(value);
    if (depth > 1000) cause = `it is nested ${depth} levels deep, deeper than JSON.stringify can go here (${cause})`;
  }
  return {
    type: 'result', id, status: 'failed',
    error: {
      type: e.type, message: truncate(`result of job ${id} is not JSON-serialisable: ${cause}`, MAX_ERROR_TEXT),
      traceback: null, retryable: UNENCODABLE_RETRYABLE,
    },
  };
}

// How deep the arrays and plain objects of `value` nest, found without recursion, each object
// walked once (0 when it cannot be told: its getters or traps throw, or it is too large to walk).
function nesting(value) {
  try {
    let deepest = 0;
    let budget = 1e6;
    const seen = new Set();
    const stack = [[value, 0]];
    while (stack.length > 0 && budget-- > 0) {
      const [v, depth] = stack.pop();
      if (v === null || typeof v !== 'object' || seen.has(v)) continue;
      seen.add(v);
      deepest = Math.max(deepest, depth + 1);
      for (const x of Array.isArray(v) ? v : Object.values(v)) stack.push([x, depth + 1]);
    }
    return stack.length === 0 ? deepest : 0;
  } catch {
    return 0;
  }
}

// A frame over the limit made to fit: a failure loses its stack and has its message cut (it
// stays the handler's failure, with its retryability), a snooze its reason; anything else, or
// what still does not fit, becomes a ResultTooLarge failure.
function fitFrame(frame, text, limit) {
  const size = Buffer.byteLength(text);
  if (frame.status === 'failed' && frame.error) {
    const bare = encode({ ...frame, error: { ...frame.error, message: '', traceback: null } });
    const room = limit - Buffer.byteLength(bare) - 80;
    if (room > 0) {
      const cut = { ...frame, error: { ...frame.error, message: cutToFit(String(frame.error.message), room, limit), traceback: null } };
      const cutText = encode(cut);
      if (Buffer.byteLength(cutText) <= limit) return { frame: cut, text: cutText };
    }
  } else if (frame.status === 'snooze' && frame.reason !== null && frame.reason !== undefined) {
    const cut = { ...frame, reason: null };
    const cutText = encode(cut);
    if (Buffer.byteLength(cutText) <= limit) return { frame: cut, text: cutText };
  }
  const tooLarge = {
    type: 'result', id: frame.id, status: 'failed',
    error: { type: 'ResultTooLarge', message: `result frame of ${size} bytes exceeds the ${limit}-byte frame limit`, traceback: null, retryable: false },
  };
  return { frame: tooLarge, text: encode(tooLarge) };
}

// The longest head of `text` whose JSON encoding takes at most `room` bytes, marked as cut.
function cutToFit(text, room, limit) {
  const size = (n) => Buffer.byteLength(JSON.stringify(text.slice(0, n)));
  if (size(text.length) <= room) return text;
  let lo = 0;
  let hi = Math.min(text.length, room);
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (size(mid) <= room) lo = mid;
    else hi = mid - 1;
  }
  return `${text.slice(0, lo)}... [cut to fit the ${limit}-byte frame limit]`;
}

function withBytes(encoded) {
  return { ...encoded, bytes: Buffer.byteLength(encoded.text) };
}

// Epoch milliseconds from a job frame as a Date; null when absent.
function dateOrNull(ms) {
  return ms === null || ms === undefined ? null : new Date(ms);
}

function truncate(s, max) {
  if (typeof s !== 'string' || s.length <= max) return s;
  return `${s.slice(0, max)}... [truncated ${s.length - max} chars]`;
}

// ---------------------------------------------------------------------------------------
// Result frames a transport sends on its own

// A job that slipped in after shutdown: handed back for a retry.
function shuttingDown(id) {
  return {
    type: 'result', id, status: 'failed',
    error: { type: 'ShuttingDown', message: 'handler process is shutting down', traceback: null, retryable: true },
  };
}

// A job that came while draining (attach mode): back at once, not counted as a failure.
function draining(id) {
  return { type: 'result', id, status: 'snooze', seconds: 0, reason: 'handler draining' };
}

// ---------------------------------------------------------------------------------------
// Registry and Runtime

// What an App registers: handlers by name ({fn, cancellable, validate}), middleware (the first
// registered outermost) and hooks by kind, each in registration order.
class Registry {
  constructor() {
    this.handlers = new Map();
    this.hooks = { beforeJob: [], afterJob: [], onError: [] };
    this.middleware = [];
  }

  // The `jobs` list of hello, in registration order.
  jobs() {
    return [...this.handlers].map(([name, h]) => ({ name, cancellable: h.cancellable }));
  }
}

class Runtime {
  constructor(registry, { concurrency, maxFrameBytes }) {
    this.registry = registry;
    this.concurrency = concurrency;
    this.maxFrameBytes = maxFrameBytes;
    this.onChange = () => {};
    // The transport could not take a job's result: nothing else would ever send it, so the
    // process exits and the sidecar settles the jobs it held (tests replace this).
    this.onReportError = (id, err) => {
      log(`could not report the result of job ${id}: ${describeThrown(err)}; exiting`);
      process.exit(1);
    };
    this.jobs = new Map(); // id -> entry {controller, cancellable, msg, handler, report}, until its result is reported
    this.waiting = []; // entries over the concurrency limit, in arrival order
    this.running = 0;
  }

  hello(protocol) {
    return {
      type: 'hello',
      protocol,
      sdk: SDK,
      pid: process.pid,
      jobs: this.registry.jobs(),
      concurrency: this.concurrency,
    };
  }

  // Whether job `id` is held already (its second job message is ignored).
  duplicate(id) {
    if (!this.jobs.has(id)) return false;
    log(`job ${id} received while already in flight; ignoring the duplicate`);
    return true;
  }

  // Takes a job: it runs as soon as a slot is free and `report(frame, text)` gets its result
  // once, checked and encoded (`apart`: report(encodeResultApart's answer)). The transport has
  // checked `duplicate` and whether it takes jobs.
  start(msg, report, { apart = false } = {}) {
    if (this.jobs.has(msg.id)) throw new Error(`job ${msg.id} is held already`);
    const handler = this.registry.handlers.get(msg.name);
    // `aborted`/`abortReason` mirror the controller's signal, which Node builds only when it is
    // first read: most jobs never look at it, and building it was a tenth of a no-op job's cost.
    const entry = { controller: new AbortController(), aborted: false, abortReason: undefined, cancellable: handler ? handler.cancellable : true, msg, handler, report, apart };
    this.jobs.set(msg.id, entry);
    if (this.running < this.concurrency) this._start(entry);
    else this.waiting.push(entry);
  }

  cancel(id, reason) {
    const entry = this.jobs.get(id);
    if (!entry) return; // unknown or already finished; the result is on its way or sent
    if (!entry.cancellable) {
      log(`cancel (${reason}) for non-cancellable job ${id} (${entry.msg.name}) ignored; it runs to completion`);
      return;
    }
    // A job still waiting for a slot sees it when it starts, and reports itself cancelled.
    if (entry.aborted) return;
    entry.aborted = true;
    entry.abortReason = reason;
    entry.controller.abort(reason);
  }

  // Every job held, started or waiting for a slot.
  held() {
    return [...this.jobs.values()].map((e) => ({ id: e.msg.id, name: e.msg.name }));
  }

  get count() {
    return this.jobs.size;
  }

  // The result as it is reported, and its encoding (every transport reports what this returns).
  // A value that cannot be written (BigInt, a cycle, nesting too deep, a toJSON or getter that
  // throws) or one over the frame limit fails the job instead, with the cause in the message; a
  // failure over the limit keeps its type and retryability and is cut to fit. Never throws.
  encodeResult(result) {
    let text;
    try {
      text = encode(result);
    } catch (err) {
      return this._unwritable(result, err);
    }
    return this._fit(result, text);
  }

  _unwritable(result, err) {
    const failed = unencodable(result.id, err, result.result);
    return this._fit(failed, encode(failed));
  }

  _fit(result, text) {
    if (text.length <= this.maxFrameBytes / 3 || Buffer.byteLength(text) <= this.maxFrameBytes) return { frame: result, text };
    return fitFrame(result, text, this.maxFrameBytes);
  }

  // encodeResult for a transport that carries a result's value apart from its frame (the
  // Session stream), with the frame's size in `bytes`. A done result is checked as encodeResult
  // checks it, without its frame being written: `text` is null and `value` the text its value
  // has in that frame (null for none). That frame is `{"type":"result","id":ID,"status":"done"}`
  // with `,"result":VALUE` before the brace when there is a value, so its length, size and depth
  // follow from its parts. Anything else, and a value with a lone surrogate replaced (its text is
  // no longer that value's JSON), comes with `text` as from encodeResult. Never throws.
  encodeResultApart(result) {
    if (result.status !== 'done' || typeof result.id !== 'string') return withBytes(this.encodeResult(result));
    const head = `{"type":"result","id":${replaceLoneSurrogates(JSON.stringify(result.id))},"status":"done"`;
    let raw = null;
    let value = null;
    if (result.result !== null && result.result !== undefined) {
      try {
        raw = JSON.stringify(result.result);
        if (raw === undefined) throw new TypeError('result is not JSON-serialisable');
        value = replaceLoneSurrogates(raw);
        checkDepth(value, head.length + 11 + value.length, 1);
      } catch (err) {
        return withBytes(this._unwritable(result, err));
      }
    }
    const bytes = Buffer.byteLength(head) + (value === null ? 1 : 11 + Buffer.byteLength(value));
    if (bytes > this.maxFrameBytes || value !== raw) {
      return withBytes(this._fit(result, value === null ? `${head}}` : `${head},"result":${value}}`));
    }
    return { frame: result, text: null, value, bytes };
  }

  _start(entry) {
    this.running++;
    this._execute(entry)
      .catch((err) => ({
        type: 'result', id: entry.msg.id, status: 'failed', error: errorPayload(err, true),
      }))
      .then((result) => this._finish(entry, result));
  }

  _finish(entry, result) {
    this.jobs.delete(entry.msg.id);
    this.running--;
    try {
      if (entry.apart) {
        entry.report(this.encodeResultApart(result));
      } else {
        const { frame, text } = this.encodeResult(result);
        entry.report(frame, text);
      }
    } catch (err) {
      this.onReportError(entry.msg.id, err);
    } finally {
      // Whatever happened above, the slot is free again.
      while (this.running < this.concurrency && this.waiting.length > 0) this._start(this.waiting.shift());
      this.onChange();
    }
  }

  async _execute(entry) {
    const { msg, handler, controller } = entry;
    const base = { type: 'result', id: msg.id };
    if (!handler) {
      return {
        ...base, status: 'failed',
        error: { type: 'UnknownJob', message: `no handler registered for job ${JSON.stringify(msg.name)} in this process`, traceback: null, retryable: false },
      };
    }
    if (entry.cancellable && entry.aborted) return { ...base, status: 'cancelled' };
    const ctx = Object.freeze({
      id: msg.id,
      name: msg.name,
      attempt: msg.attempt,
      maxAttempts: msg.max_attempts,
      queue: msg.queue,
      deadline: msg.deadline === null ? null : new Date(msg.deadline),
      traceparent: msg.traceparent,
      workerId: msg.worker_id ?? null,
      scheduledAt: dateOrNull(msg.scheduled_at),
      createdAt: dateOrNull(msg.created_at),
      get signal() { return controller.signal; },
    });
    const started = performance.now();
    await this._runHooks('beforeJob', ctx, [ctx]);
    let args = msg.args;
    if (handler.validate) {
      try {
        const validated = await handler.validate(msg.args);
        if (validated !== undefined) args = validated;
      } catch (err) {
        return { ...base, status: 'failed', error: validationError(err) };
      }
    }
    if (entry.cancellable && entry.aborted) return { ...base, status: 'cancelled' };
    let value;
    try {
      value = await this._chain(handler.fn, ctx, args);
    } catch (err) {
      const cancelled = entry.cancellable && entry.aborted;
      // A job timeout is a failure of the job (Soniq calls on_error for it); a cancel at
      // shutdown gives the job back to the queue, which is not.
      if (!cancelled || entry.abortReason === 'job_timeout') await this._runHooks('onError', ctx, [ctx, err]);
      if (cancelled) return { ...base, status: 'cancelled' };
      let permanent = false;
      try {
        permanent = err instanceof PermanentError;
      } catch {
        // a revoked Proxy was thrown: not a PermanentError
      }
      return { ...base, status: 'failed', error: errorPayload(err, !permanent) };
    }
    let snooze;
    try {
      snooze = isSnooze(value) && { seconds: value.seconds, reason: value.reason ?? null };
    } catch (err) {
      return unencodable(msg.id, err); // a Proxy whose traps throw cannot be written either
    }
    if (snooze) {
      const { seconds, reason } = snooze;
      // A Snooze checks these; one made to look like a Snooze may not have.
      if (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds < 0 || (reason !== null && typeof reason !== 'string')) {
        return unencodable(msg.id, new TypeError(`a Snooze needs seconds >= 0 and a string reason, got ${describe(seconds)}, ${describe(reason)}`));
      }
      return { ...base, status: 'snooze', seconds, reason: reason === null ? null : truncate(reason, MAX_ERROR_TEXT) };
    }
    const result = value === undefined ? null : value;
    await this._runHooks('afterJob', ctx, [ctx, { result, durationMs: performance.now() - started }]);
    return { ...base, status: 'done', result };
  }

  async _runHooks(kind, ctx, args) {
    for (const fn of this.registry.hooks[kind]) {
      try {
        await fn(...args);
      } catch (err) {
        log(`${kind} hook failed for job ${ctx.id} (${ctx.name}): ${describeThrown(err)}; ignored`);
      }
    }
  }

  // The middleware chain around the handler, as it is when the job starts.
  _chain(fn, ctx, args) {
    const mws = this.registry.middleware.slice();
    const dispatch = async (i, a) => {
      if (i === mws.length) return fn(a, ctx);
      return mws[i](ctx, a, (next) => dispatch(i + 1, next === undefined ? a : next));
    };
    return dispatch(0, args);
  }
}

// ---------------------------------------------------------------------------------------
// Results kept for sessions

// One session's side of the acknowledgements: whether its sidecar acknowledges results, and the
// results sent on it that it has not acknowledged yet.
class Sent {
  constructor() {
    this.acks = false; // the sidecar said it acknowledges results (an Ack)
    // Whether a message came from the sidecar yet: one that acknowledges results sends an Ack
    // first, so anything else first means it never will.
    this.heard = false;
    this.unacked = new Map(); // id -> result (a Result message of session.js; only its id is read here)
  }
}

// Results of attach mode, each kept until a session acknowledges it. One that ends with no
// session open, or that was sent on a session that ended without acknowledging it, waits here
// for the next session (`kept`, oldest first, at most `limit`). A spawned process (`attach`
// false) has no next session: nothing is kept.
class Ledger {
  constructor(attach, limit = MAX_KEPT_RESULTS) {
    this.attach = attach;
    this.limit = limit;
    this.kept = new Map(); // id -> result, as in Sent
    // A sidecar acknowledged results once: from then on a session that ends with results
    // unacknowledged hands them to the next one.
    this.peerAcks = false;
  }

  // A session opens: the results kept for it, to send it, tracked as unacknowledged until its
  // sidecar says whether it acknowledges.
  open() {
    const sent = new Sent();
    const kept = [...this.kept.values()];
    this.kept = new Map();
    for (const r of kept) sent.unacked.set(r.id, r);
    return { sent, kept };
  }

  // A message came on the session (`isAck`: an Ack).
  heard(s, isAck) {
    if (s.heard) return;
    s.heard = true;
    if (!isAck) s.unacked.clear(); // an older sidecar: it never acknowledges
  }

  // A result went out on the session.
  sent(s, r) {
    if (this.attach && (s.acks || !s.heard)) s.unacked.set(r.id, r);
  }

  // The sidecar settled these results; true if it named any.
  acked(s, ids) {
    s.acks = true;
    this.peerAcks = true;
    for (const id of ids) s.unacked.delete(id);
    return ids.length > 0;
  }

  // The session is over: the results written on it that the sidecar may never have received or
  // recorded go to the next session, when the sidecar acknowledges results.
  closed(s, why) {
    if (s.acks || this.peerAcks) for (const r of s.unacked.values()) this.keep(r, why);
    s.unacked.clear();
  }

  keep(r, why) {
    if (!this.attach) return; // spawned: there is no next session
    this.kept.delete(r.id);
    if (this.kept.size >= this.limit) {
      const lost = this.kept.keys().next().value;
      this.kept.delete(lost);
      log(`WARN: more than ${this.limit} results wait for a session; the result of job ${lost} is dropped`);
    }
    this.kept.set(r.id, r);
    log(`job ${r.id} ${why}; its result waits for the next session`);
  }

  // The session acknowledges results and has not acknowledged some it was sent.
  static awaiting(s) {
    return Boolean(s && s.acks && s.unacked.size > 0);
  }

  // Ids of results no session received (or acknowledged).
  lost(s) {
    return [...this.kept.keys(), ...(s && s.acks ? s.unacked.keys() : [])];
  }
}

module.exports = {
  Runtime, Registry, Ledger, Sent, SDK, MAX_KEPT_RESULTS, log, shuttingDown, draining, unencodable,
};
