'use strict';
// soniq-handler: write Soniq job handlers in Node and serve them to soniq-sidecar over the
// stdio NDJSON protocol (docs/protocol.md). Stdlib only, Node >= 18.

const { once } = require('node:events');
const { Console } = require('node:console');
const { decode, encode, ProtocolError, DEFAULT_MAX_FRAME_BYTES } = require('./protocol');
const { version: VERSION } = require('./package.json');

const SDK = `soniq-node/${VERSION}`;
const SUPPORTED_PROTOCOLS = [1];
const EXIT_PROTOCOL_ERROR = 4;
const EXIT_NO_SHARED_VERSION = 3;
const SNOOZE = Symbol.for('soniq.snooze');

function log(...parts) {
  process.stderr.write(`soniq-handler[${process.pid}]: ${parts.join(' ')}\n`);
}

// ---------------------------------------------------------------------------------------
// Outcome types

// Throw a PermanentError for a failure a retry cannot fix: the job is dead-lettered at once
// (`retryable: false`). Any error with `retryable === false` is treated the same way.
class PermanentError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = 'PermanentError';
    this.retryable = false;
  }
}

// Return a Snooze to put the job back for `seconds` without counting a failure.
class Snooze {
  constructor(seconds, reason = null) {
    if (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds < 0) {
      throw new TypeError(`Snooze seconds must be a finite number >= 0, got ${String(seconds)}`);
    }
    if (reason !== null && reason !== undefined && typeof reason !== 'string') {
      throw new TypeError('Snooze reason must be a string or null');
    }
    this.seconds = seconds;
    this.reason = reason ?? null;
    this[SNOOZE] = true;
  }
}

// ---------------------------------------------------------------------------------------
// Protocol stream protection

let stdoutGuard = null;

// Routes console.log/info/debug/... and process.stdout.write to stderr and returns a
// function that writes to the real stdout. Called by App.run(); call it yourself at the very
// top of your entry module if other modules print while they load. Idempotent.
function protectStdout() {
  if (stdoutGuard) return stdoutGuard;
  const stdout = process.stdout;
  const stderr = process.stderr;
  const realWrite = stdout.write.bind(stdout);
  stdout.write = function writeToStderr(chunk, encoding, cb) {
    return stderr.write(chunk, encoding, cb);
  };
  const errConsole = new Console({ stdout: stderr, stderr });
  for (const m of ['log', 'info', 'debug', 'dir', 'dirxml', 'table', 'group', 'groupCollapsed',
    'groupEnd', 'count', 'countReset', 'time', 'timeEnd', 'timeLog']) {
    if (typeof errConsole[m] === 'function') console[m] = errConsole[m].bind(errConsole);
  }
  stdoutGuard = { stream: stdout, write: realWrite };
  return stdoutGuard;
}

// One serialised writer for protocol frames: one write per frame (frames never interleave),
// waits for 'drain' when the pipe is full.
class FrameWriter {
  constructor(stream, write) {
    this.stream = stream;
    this.write = write;
    this.queue = [];
    this.busy = false;
    this.idleWaiters = [];
    this.pending = 0;
  }

  // Queues one frame. The promise resolves once it is handed to the OS; it never rejects
  // (a broken stdout ends the process through the stream's 'error' handler).
  send(text) {
    this.pending++;
    return new Promise((resolve) => {
      this.queue.push({ text, resolve });
      this._pump();
    });
  }

  async _pump() {
    if (this.busy) return;
    this.busy = true;
    while (this.queue.length > 0) {
      const item = this.queue.shift();
      const ok = this.write(item.text, () => {
        this.pending--;
        item.resolve();
        this._checkIdle();
      });
      if (!ok) {
        try {
          await once(this.stream, 'drain');
        } catch {
          return; // stream error: handled by the stream's 'error' listener
        }
      }
    }
    this.busy = false;
    this._checkIdle();
  }

  _checkIdle() {
    if (this.pending === 0 && !this.busy) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }

  idle() {
    return new Promise((resolve) => {
      this.idleWaiters.push(resolve);
      this._checkIdle();
    });
  }
}

// ---------------------------------------------------------------------------------------
// Version negotiation

// Highest version both sides speak, or null. `env` is SONIQ_PROTOCOL_VERSIONS (unset = "1").
function negotiateVersion(env, supported = SUPPORTED_PROTOCOLS) {
  const offered = (env === undefined ? '1' : env)
    .split(',')
    .map((s) => s.trim())
    .filter((s) => /^[0-9]+$/.test(s))
    .map(Number);
  const shared = offered.filter((v) => supported.includes(v));
  return shared.length ? Math.max(...shared) : null;
}

// ---------------------------------------------------------------------------------------
// Errors -> protocol error objects

const MAX_ERROR_TEXT = 64 * 1024;

function errorPayload(err, retryable) {
  if (err instanceof Error || (err !== null && typeof err === 'object' && 'message' in err)) {
    let type = typeof err.name === 'string' && err.name ? err.name : '';
    const ctor = err.constructor && typeof err.constructor.name === 'string' ? err.constructor.name : '';
    if ((!type || type === 'Error') && ctor && ctor !== 'Object') type = ctor;
    return {
      type: type || 'Error',
      message: truncate(String(err.message), MAX_ERROR_TEXT),
      traceback: typeof err.stack === 'string' ? truncate(err.stack, MAX_ERROR_TEXT) : null,
      retryable: retryable && err.retryable !== false,
    };
  }
  // Something that is not an Error was thrown (`throw 'oops'`).
  let message;
  try {
    message = typeof err === 'string' ? err : JSON.stringify(err) ?? String(err);
  } catch {
    message = String(err);
  }
  return { type: err === null ? 'null' : typeof err, message: truncate(message, MAX_ERROR_TEXT), traceback: null, retryable };
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

// Epoch milliseconds from a job frame as a Date; null when absent.
function dateOrNull(ms) {
  return ms === null || ms === undefined ? null : new Date(ms);
}

function truncate(s, max) {
  if (typeof s !== 'string' || s.length <= max) return s;
  return `${s.slice(0, max)}... [truncated ${s.length - max} chars]`;
}

// ---------------------------------------------------------------------------------------
// App

class App {
  constructor({ concurrency = 8, maxFrameBytes } = {}) {
    if (!Number.isSafeInteger(concurrency) || concurrency < 1) {
      throw new TypeError(`concurrency must be an integer >= 1, got ${String(concurrency)}`);
    }
    this.concurrency = concurrency;
    const envLimit = process.env.SONIQ_MAX_FRAME_BYTES;
    this.maxFrameBytes = maxFrameBytes
      ?? (envLimit && /^[0-9]+$/.test(envLimit) ? Number(envLimit) : DEFAULT_MAX_FRAME_BYTES);
    this.handlers = new Map();
    this.inflight = new Map(); // id -> {controller, cancellable, started}
    this.running = 0;
    this.waiting = []; // jobs over the concurrency limit, in arrival order
    this.draining = false;
    this.exiting = false;
    this.writer = null;
    this._hooks = { beforeJob: [], afterJob: [], onError: [] };
    this._middleware = [];
  }

  // Registers a handler. `fn(args, ctx)` may be async. `cancellable` is required, as in the
  // manifest: it is a capability the handler declares, never assumed. `true` puts the job on
  // the async branch: a `cancel` aborts ctx.signal (a timeout, or shutdown, which puts the job
  // back in the queue). `false` is the sync branch: cancels are ignored and its real result is
  // sent; shutdown waits for it.
  // `validate(args)` (optional) runs before the middleware and the handler: what it returns
  // (undefined: the args as they came) is what they get; if it throws, the job fails at once,
  // without retries, with "Corrupted argument data: <its message>" as Soniq words it.
  job(name, fn, { cancellable, validate } = {}) {
    if (typeof name !== 'string' || name.length === 0) throw new TypeError('job name must be a non-empty string');
    if (typeof fn !== 'function') throw new TypeError(`handler for ${name} must be a function`);
    if (cancellable === undefined) {
      throw new TypeError(`job ${name}: declare { cancellable: true } (it stops when ctx.signal aborts; at shutdown it goes back to the queue) ` +
        'or { cancellable: false } (it always runs to the end; shutdown waits for it), the same as in the manifest');
    }
    if (typeof cancellable !== 'boolean') throw new TypeError(`cancellable for ${name} must be a boolean`);
    if (validate !== undefined && typeof validate !== 'function') throw new TypeError(`validate for ${name} must be a function`);
    if (this.handlers.has(name)) throw new Error(`job ${name} registered twice`);
    this.handlers.set(name, { fn, cancellable, validate });
    return this;
  }

  // Hooks, as Soniq's before_job / after_job / on_error: one-shot side effects, run in
  // registration order and awaited; one that throws is logged on stderr and changes nothing.
  // beforeJob(ctx): before validation, for every job this process serves.
  beforeJob(fn) {
    return this._addHook('beforeJob', fn);
  }

  // afterJob(ctx, {result, durationMs}): after the job succeeded (not after a snooze).
  afterJob(fn) {
    return this._addHook('afterJob', fn);
  }

  // onError(ctx, error): after the handler or a middleware threw (a cancel for job_timeout
  // included, not a shutdown's), before the result is sent. Not for a failed validation.
  onError(fn) {
    return this._addHook('onError', fn);
  }

  // Middleware, as Soniq's app.middleware: `fn(ctx, args, next)` wraps every job's handler,
  // the first registered outermost. `next(args?)` runs the rest of the chain (with other args
  // if given) and resolves with the handler's value; what fn returns or throws is the job's.
  use(fn) {
    if (typeof fn !== 'function') throw new TypeError('middleware must be a function');
    this._middleware.push(fn);
    return this;
  }

  _addHook(kind, fn) {
    if (typeof fn !== 'function') throw new TypeError(`${kind} hook must be a function`);
    this._hooks[kind].push(fn);
    return this;
  }

  async _runHooks(kind, ctx, args) {
    for (const fn of this._hooks[kind]) {
      try {
        await fn(...args);
      } catch (err) {
        log(`${kind} hook failed for job ${ctx.id} (${ctx.name}): ${describeThrown(err)}; ignored`);
      }
    }
  }

  // The middleware chain around the handler, as it is when the job starts.
  _chain(fn, ctx, args) {
    const mws = this._middleware.slice();
    const dispatch = async (i, a) => {
      if (i === mws.length) return fn(a, ctx);
      return mws[i](ctx, a, (next) => dispatch(i + 1, next === undefined ? a : next));
    };
    return dispatch(0, args);
  }

  hello(protocol) {
    return {
      type: 'hello',
      protocol,
      sdk: SDK,
      pid: process.pid,
      jobs: [...this.handlers].map(([name, h]) => ({ name, cancellable: h.cancellable })),
      concurrency: this.concurrency,
    };
  }

  // Serves jobs until shutdown, then exits the process (0). The transport is $SONIQ_TRANSPORT:
  // stdio (NDJSON on stdin/stdout, the default; runs until `shutdown` or EOF) or unix (gRPC
  // on a Unix socket, see unix.js). With `--listen PATH` among the process's arguments (or
  // $SONIQ_LISTEN) it serves a socket of its own instead, across sessions, until SIGTERM
  // (attach mode, see listen.js).
  run() {
    if (this.writer) throw new Error('App.run() called twice');
    if (this.handlers.size === 0) throw new Error('no jobs registered: call app.job(name, fn, { cancellable }) before app.run()');
    const guard = protectStdout();
    this.writer = new FrameWriter(guard.stream, guard.write);
    guard.stream.on('error', (err) => {
      log(`stdout failed (${err.code || err.message}); the sidecar is gone, exiting`);
      process.exit(1);
    });

    const protocol = negotiateVersion(process.env.SONIQ_PROTOCOL_VERSIONS);
    if (protocol === null) {
      log(`no shared protocol version: sidecar offers SONIQ_PROTOCOL_VERSIONS=${JSON.stringify(process.env.SONIQ_PROTOCOL_VERSIONS)}, ${SDK} speaks ${SUPPORTED_PROTOCOLS.join(',')}`);
      process.exit(EXIT_NO_SHARED_VERSION);
    }
    let listen;
    try {
      listen = require('./listen').listenPath(process.argv.slice(2), process.env);
    } catch (err) {
      log(err.message);
      process.exit(2);
    }
    if (listen !== null) {
      // Attach mode: a socket of its own that sidecars connect to (listen.js).
      require('./listen').serve(this, protocol, listen).catch((err) => {
        log(`cannot serve --listen ${listen}: ${err.stack || err}`);
        process.exit(1);
      });
      return;
    }
    if ((process.env.SONIQ_TRANSPORT || 'stdio') === 'unix') {
      // gRPC over a Unix socket (unix.js); its packages are required only here.
      require('./unix').serve(this, protocol, guard);
      return;
    }
    this._send(this.hello(protocol));

    process.on('exit', () => {
      if (this.inflight.size > 0 && !this.exiting) {
        log(`exiting with ${this.inflight.size} job(s) in flight and no result sent`);
        if (!process.exitCode) process.exitCode = 1;
      }
    });

    const input = process.stdin;
    let parts = [];
    let partsLen = 0;
    input.on('data', (chunk) => {
      let start = 0;
      for (;;) {
        const nl = chunk.indexOf(0x0a, start);
        if (nl === -1) {
          if (start < chunk.length) {
            const rest = chunk.subarray(start);
            parts.push(rest);
            partsLen += rest.length;
            // +1: a trailing '\r' is not part of the frame.
            if (partsLen > this.maxFrameBytes + 1) {
              this._fatal(new ProtocolError('oversize', null, `frame exceeds ${this.maxFrameBytes} bytes`));
            }
          }
          return;
        }
        let line = chunk.subarray(start, nl);
        if (parts.length) {
          parts.push(line);
          line = Buffer.concat(parts, partsLen + line.length);
          parts = [];
          partsLen = 0;
        }
        start = nl + 1;
        this._onLine(line);
        if (this.exiting) return;
      }
    });
    input.on('end', () => {
      if (partsLen > 0) {
        // A frame must end with '\n': a partial last line is a truncated frame, not run.
        const excerpt = Buffer.concat(parts, partsLen).subarray(0, 200).toString('utf8');
        log(`partial last line before EOF ignored: ${JSON.stringify(excerpt)}`);
        parts = [];
        partsLen = 0;
      }
      this._beginDrain();
    });
    input.on('error', (err) => {
      log(`stdin failed: ${err.message}`);
      this._beginDrain();
    });
  }

  _send(msg) {
    return this.writer.send(`${encode(msg)}\n`);
  }

  _fatal(err) {
    if (this.exiting) return;
    this.exiting = true;
    log(`protocol error from sidecar: ${err.message}; exiting with status ${EXIT_PROTOCOL_ERROR}`);
    process.exit(EXIT_PROTOCOL_ERROR);
  }

  _onLine(line) {
    if (this.exiting) return;
    if (line.length === 0 || (line.length === 1 && line[0] === 0x0d)) return; // empty line
    let msg;
    try {
      msg = decode(line, { maxFrameBytes: this.maxFrameBytes });
    } catch (err) {
      if (!(err instanceof ProtocolError)) throw err;
      const excerpt = line.subarray(0, 200).toString('utf8');
      return this._fatal(new ProtocolError(err.code, err.field, `${err.message}; frame: ${JSON.stringify(excerpt)}`));
    }
    switch (msg.type) {
      case 'job': return this._onJob(msg);
      case 'cancel': return this._onCancel(msg);
      case 'ping': return void this._send({ type: 'pong', seq: msg.seq });
      case 'shutdown': return this._beginDrain();
      default:
        return this._fatal(new Error(`unexpected ${JSON.stringify(msg.type)} frame from the sidecar`));
    }
  }

  _onJob(msg) {
    if (this.inflight.has(msg.id)) {
      log(`job ${msg.id} received while already in flight; ignoring the duplicate`);
      return;
    }
    if (this.draining) {
      log(`job ${msg.id} (${msg.name}) received after shutdown; refusing it`);
      this._send({
        type: 'result', id: msg.id, status: 'failed',
        error: { type: 'ShuttingDown', message: 'handler process is shutting down', traceback: null, retryable: true },
      });
      return;
    }
    const handler = this.handlers.get(msg.name);
    const entry = { controller: new AbortController(), cancellable: handler ? handler.cancellable : true, msg, handler };
    this.inflight.set(msg.id, entry);
    if (this.running < this.concurrency) this._start(entry);
    else this.waiting.push(entry);
  }

  _onCancel(msg) {
    const entry = this.inflight.get(msg.id);
    if (!entry) return; // already finished; the result is on its way or written
    if (!entry.cancellable) {
      log(`cancel (${msg.reason}) for non-cancellable job ${msg.id} (${entry.msg.name}) ignored; it runs to completion`);
      return;
    }
    if (!entry.controller.signal.aborted) entry.controller.abort(msg.reason);
  }

  _start(entry) {
    this.running++;
    this._execute(entry)
      .catch((err) => ({
        type: 'result', id: entry.msg.id, status: 'failed', error: errorPayload(err, true),
      }))
      .then((result) => this._finish(entry, result));
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
    if (entry.cancellable && controller.signal.aborted) return { ...base, status: 'cancelled' };
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
      signal: controller.signal,
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
    if (entry.cancellable && controller.signal.aborted) return { ...base, status: 'cancelled' };
    let value;
    try {
      value = await this._chain(handler.fn, ctx, args);
    } catch (err) {
      const cancelled = entry.cancellable && controller.signal.aborted;
      // A job timeout is a failure of the job (Soniq calls on_error for it); a cancel at
      // shutdown gives the job back to the queue, which is not.
      if (!cancelled || controller.signal.reason === 'job_timeout') await this._runHooks('onError', ctx, [ctx, err]);
      if (cancelled) return { ...base, status: 'cancelled' };
      return { ...base, status: 'failed', error: errorPayload(err, !(err instanceof PermanentError)) };
    }
    if (value instanceof Snooze || (value !== null && typeof value === 'object' && value[SNOOZE] === true)) {
      return { ...base, status: 'snooze', seconds: value.seconds, reason: value.reason ?? null };
    }
    const result = value === undefined ? null : value;
    await this._runHooks('afterJob', ctx, [ctx, { result, durationMs: performance.now() - started }]);
    return { ...base, status: 'done', result };
  }

  // Encodes the result, replacing it with a failure if it cannot be sent as is.
  _encodeResult(result) {
    let text;
    try {
      text = encode(result);
    } catch (err) {
      const error = errorPayload(err, false);
      error.message = `result of job ${result.id} is not JSON-serialisable: ${error.message}`;
      return this._encodeResult({ type: 'result', id: result.id, status: 'failed', error });
    }
    if (Buffer.byteLength(text) <= this.maxFrameBytes) return text;
    return encode({
      type: 'result', id: result.id, status: 'failed',
      error: { type: 'ResultTooLarge', message: `result frame of ${Buffer.byteLength(text)} bytes exceeds the ${this.maxFrameBytes}-byte frame limit`, traceback: null, retryable: false },
    });
  }

  _finish(entry, result) {
    this.inflight.delete(entry.msg.id);
    this.running--;
    this.writer.send(`${this._encodeResult(result)}\n`);
    while (this.running < this.concurrency && this.waiting.length > 0) this._start(this.waiting.shift());
    this._maybeExit();
  }

  _beginDrain() {
    this.draining = true;
    this._maybeExit();
  }

  _maybeExit() {
    if (!this.draining || this.inflight.size > 0 || this.exiting) return;
    this.exiting = true;
    this.writer.idle().then(() => process.exit(0));
  }
}

module.exports = {
  App,
  PermanentError,
  Snooze,
  ProtocolError,
  decode,
  encode,
  negotiateVersion,
  protectStdout,
  SDK,
  SUPPORTED_PROTOCOLS,
};
