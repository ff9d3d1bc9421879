'use strict';
// soniq-handler: write Soniq job handlers in Node and serve them to soniq-sidecar over the
// stdio NDJSON protocol (docs/protocol.md) or gRPC on a Unix socket. Stdlib only, Node >= 18.
// The public API, and all the package's root exports (module.exports below, index.d.ts): the
// jobs run in runtime.js whichever transport carries them (stdio.js, unix.js, listen.js; the
// Session stream in session.js). The codec is `soniq-handler/protocol` (protocol.js).

const { ProtocolError, DEFAULT_MAX_FRAME_BYTES } = require('./protocol');
const { PermanentError, Snooze } = require('./outcomes');
const { Registry } = require('./registry');
const { Runtime } = require('./runtime');
const { log } = require('./log');
const { SDK, SUPPORTED_PROTOCOLS } = require('./version');
const { EXIT_CANNOT_START, EXIT_SIDECAR_GONE, EXIT_NO_COMMON_PROTOCOL, EXIT_USAGE } = require('./exits');
const stdio = require('./stdio');
const { ChildJobError } = require('./children');

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
    this._registry = new Registry();
    this.handlers = this._registry.handlers; // name -> {fn, cancellable, validate}
    this._started = false;
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

  // Hooks, as Soniq's before_job / after_job / on_error, where its worker runs them: one-shot
  // side effects, run in registration order and awaited; one that throws is logged on stderr
  // and changes nothing.
  // beforeJob(ctx): before validation, for every job this process serves.
  beforeJob(fn) {
    return this._addHook('beforeJob', fn);
  }

  // afterJob(ctx, {result, durationMs}): after the job succeeded (not after a snooze), once its
  // result is sent: outside its slot and its timeout.
  afterJob(fn) {
    return this._addHook('afterJob', fn);
  }

  // onError(ctx, error): after the handler or a middleware threw (a cancel for job_timeout
  // included, not a shutdown's) or its value cannot be sent, before the failure is sent. Not for
  // a failed validation.
  onError(fn) {
    return this._addHook('onError', fn);
  }

  // Middleware, as Soniq's app.middleware: `fn(ctx, args, next)` wraps every job's handler,
  // the first registered outermost. `next(args?)` runs the rest of the chain (with other args
  // if given) and resolves with the handler's value; what fn returns or throws is the job's.
  use(fn) {
    if (typeof fn !== 'function') throw new TypeError('middleware must be a function');
    this._registry.middleware.push(fn);
    return this;
  }

  _addHook(kind, fn) {
    if (typeof fn !== 'function') throw new TypeError(`${kind} hook must be a function`);
    this._registry.hooks[kind].push(fn);
    return this;
  }

  // Serves jobs until shutdown, then exits the process (0). The transport is $SONIQ_TRANSPORT:
  // stdio (NDJSON on stdin/stdout, the default; runs until `shutdown` or EOF) or unix (gRPC
  // on a Unix socket, see unix.js). With `listen` (a socket path) it serves a socket of its own
  // instead, across sessions, until SIGTERM (attach mode, see listen.js). Without the option
  // run() is a script's entry point and reads the script's command line: `--listen PATH` (or
  // `--listen=PATH`) among the process's arguments, else $SONIQ_LISTEN; `listen: null` is no
  // attach mode whatever they say.
  run({ listen } = {}) {
    if (this._started) throw new Error('App.run() called twice');
    if (this.handlers.size === 0) throw new Error('no jobs registered: call app.job(name, fn, { cancellable }) before app.run()');
    if (listen !== undefined && listen !== null && (typeof listen !== 'string' || listen === '')) {
      throw new TypeError('listen must be a socket path, null or undefined');
    }
    this._started = true;
    const guard = stdio.protectStdout();
    guard.stream.on('error', (err) => {
      log(`stdout failed (${err.code || err.message}); the sidecar is gone, exiting`);
      process.exit(EXIT_SIDECAR_GONE);
    });

    const protocol = negotiateVersion(process.env.SONIQ_PROTOCOL_VERSIONS);
    if (protocol === null) {
      log(`no shared protocol version: sidecar offers SONIQ_PROTOCOL_VERSIONS=${JSON.stringify(process.env.SONIQ_PROTOCOL_VERSIONS)}, ${SDK} speaks ${SUPPORTED_PROTOCOLS.join(',')}`);
      process.exit(EXIT_NO_COMMON_PROTOCOL);
    }
    if (listen === undefined) {
      try {
        listen = require('./listen').listenPath(process.argv.slice(2), process.env);
      } catch (err) {
        log(err.message);
        process.exit(EXIT_USAGE);
      }
    }
    const rt = new Runtime(this._registry, { concurrency: this.concurrency, maxFrameBytes: this.maxFrameBytes });
    if (listen) {
      // Attach mode: a socket of its own that sidecars connect to (listen.js).
      require('./listen').serve(rt, protocol, listen).catch((err) => {
        log(`cannot serve --listen ${listen}: ${err.stack || err}`);
        process.exit(EXIT_CANNOT_START);
      });
      return;
    }
    if ((process.env.SONIQ_TRANSPORT || 'stdio') === 'unix') {
      // gRPC over a Unix socket (unix.js); its packages are required only here.
      require('./unix').serve(rt, protocol, guard);
      return;
    }
    stdio.serve(rt, protocol, guard);
  }
}

// Sends console output and process.stdout.write to stderr from now on, so that nothing but
// frames reaches stdout: for an entry file whose imports print while they load, before
// app.run() does it. Idempotent. The real stdout's writer stays the SDK's own.
function protectStdout() {
  stdio.protectStdout();
}

module.exports = {
  App,
  ChildJobError,
  PermanentError,
  Snooze,
  ProtocolError,
  negotiateVersion,
  protectStdout,
  SDK,
  SUPPORTED_PROTOCOLS,
};
