'use strict';
// The job machinery of a handler process, whatever carries its messages. Every transport
// (stdio.js, the unix socket go-plugin spawns and attach mode's sockets through session.js)
// hands the jobs it receives to one Runtime and passes on the results it reports. The Runtime
//
// - holds every job from its job message to its result: at most `concurrency` run at once,
//   the others wait in arrival order;
// - runs each as a Soniq worker does: beforeJob hooks, `validate`, the middleware chain around
//   the handler;
// - cancels the cancellable ones (ctx.signal aborts with the reason);
// - settles each result where a Soniq worker does: checked (JSON, the frame limit; a result
//   that cannot be sent fails the job instead) inside the job; a failure runs its onError hooks
//   before it is reported (Soniq calls on_error before it writes the failure); a success is
//   reported once through the callback the transport gave with the job, and only then are its
//   afterJob hooks called (Soniq calls after_job after mark_job_done), holding no slot and
//   outside the job's timeout.
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
//   rt.idle                         // no job held and no afterJob hook running
//
// What an App registers is a Registry (registry.js); the result frames and the check each
// passes before it is reported are in results.js; the results attach mode keeps for a session,
// in ledger.js; the exit statuses in exits.js; the SDK's stderr lines in log.js.

const { isPromise } = require('node:util').types;
const { log } = require('./log');
const { PermanentError, isSnooze } = require('./outcomes');
const {
  MAX_ERROR_TEXT, describe, describeThrown, encodeResult, encodeResultApart, errorPayload, truncate,
  unencodable, validationError,
} = require('./results');
const { SDK } = require('./version');
const { EXIT_SIDECAR_GONE } = require('./exits');
const { Children } = require('./children');

// Epoch milliseconds from a job frame as a Date; null when absent.
function dateOrNull(ms) {
  return ms === null || ms === undefined ? null : new Date(ms);
}

// ctx.signal, the last of the context's own properties: one getter for every context. A getter
// of each context's own (a closure in its literal) put every context in dictionary mode, slower
// to build and larger than the rest of a no-op job's objects; a WeakMap from context to
// controller kept its garbage past minor GCs. The controller is a private field of the context
// instead, invisible to the handler (no key, no symbol): a constructor that returns another
// object gives that object its class's private fields.
class Stamp {
  constructor(target) {
    return target;
  }
}
class WithController extends Stamp {
  #controller;

  constructor(ctx, controller) {
    super(ctx);
    this.#controller = controller;
  }

  static signal(ctx) {
    return ctx.#controller.signal;
  }
}
const SIGNAL = {
  get: Object.getOwnPropertyDescriptor({ get signal() { return WithController.signal(this); } }, 'signal').get,
  enumerable: true,
  configurable: true,
};

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
      process.exit(EXIT_SIDECAR_GONE);
    };
    this.jobs = new Map(); // id -> entry {controller, cancellable, msg, handler, report}, until its result is reported
    this.waiting = []; // entries over the concurrency limit, in arrival order
    this.running = 0;
    this.hooksRunning = 0; // afterJob hooks of jobs whose result is reported
    this.plain = []; // jobs _startPlain started this turn, their handlers not called yet
    this._runPlain = () => this._runPlainJobs();
    // The child jobs its handlers make (ctx.enqueue, children.js); the transport connects it.
    this.children = new Children(maxFrameBytes);
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
    const entry = { controller: new AbortController(), aborted: false, abortReason: undefined, cancellable: handler ? handler.cancellable : true, msg, handler, report, apart, ctx: null, started: 0, encoded: null, done: null };
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

  // No job held and no afterJob hook running: a transport that is shutting down may exit.
  get idle() {
    return this.jobs.size === 0 && this.hooksRunning === 0;
  }

  // The result as it is reported, and its encoding (results.js, encodeResult).
  encodeResult(result, name) {
    return encodeResult(result, this.maxFrameBytes, name);
  }

  // encodeResult for a transport that carries a result's value apart from its frame (results.js,
  // encodeResultApart).
  encodeResultApart(result, name) {
    return encodeResultApart(result, this.maxFrameBytes, name);
  }

  _start(entry) {
    this.running++;
    const { handler } = entry;
    const { hooks, middleware } = this.registry;
    if (handler && !handler.validate && hooks.beforeJob.length === 0 && middleware.length === 0) {
      this._startPlain(entry);
      return;
    }
    this._execute(entry)
      .catch((err) => this._crashed(entry, err))
      .then((result) => this._finish(entry, result));
  }

  // What a job ends with when running it threw where nothing should (a bug here).
  _crashed(entry, err) {
    return { type: 'result', id: entry.msg.id, status: 'failed', error: errorPayload(err, true) };
  }

  // A job with no beforeJob hook, no validation and no middleware: what _execute does, with no
  // promise, closure or await it does not need (a no-op job spent more on those than on
  // anything else). Its handler is called where _execute calls it, in a microtask after the
  // turn that started it (a cancel that came in that turn finds it not started); the handlers
  // of the jobs one turn started are called in one microtask, in order.
  _startPlain(entry) {
    if (entry.cancellable && entry.aborted) {
      this._finish(entry, { type: 'result', id: entry.msg.id, status: 'cancelled' });
      return;
    }
    entry.ctx = this._context(entry);
    entry.started = performance.now();
    this.plain.push(entry);
    if (this.plain.length === 1) queueMicrotask(this._runPlain);
  }

  _runPlainJobs() {
    const ready = this.plain;
    this.plain = [];
    for (const entry of ready) this._callPlain(entry);
  }

  _callPlain(entry) {
    const { msg, ctx } = entry;
    if (entry.cancellable && entry.aborted) {
      this._finish(entry, { type: 'result', id: msg.id, status: 'cancelled' });
      return;
    }
    const { fn } = entry.handler;
    let value;
    try {
      value = fn(msg.args, ctx);
      if (value !== null && (typeof value === 'object' || typeof value === 'function')) {
        // What awaiting it does: a thenable is followed; a native promise directly.
        if (isPromise(value) && Object.getPrototypeOf(value) === Promise.prototype && !Object.hasOwn(value, 'then')) {
          value.then((v) => this._endPlain(entry, v), (err) => this._failPlain(entry, err));
        } else {
          new Promise((resolve) => { resolve(value); }).then((v) => this._endPlain(entry, v), (err) => this._failPlain(entry, err));
        }
        return;
      }
    } catch (err) {
      this._failPlain(entry, err);
      return;
    }
    this._endPlain(entry, value);
  }

  // The handler gave `value`.
  _endPlain(entry, value) {
    let result;
    try {
      result = this._outcome(entry, entry.ctx, value, entry.started);
    } catch (err) {
      result = this._crashed(entry, err);
    }
    this._finishWhenSettled(entry, result);
  }

  // The handler threw or rejected.
  _failPlain(entry, err) {
    this._finishWhenSettled(entry, this._failure(entry, entry.ctx, err));
  }

  // `result` is a promise when onError hooks run before it is reported.
  _finishWhenSettled(entry, result) {
    if (typeof result.then === 'function') {
      result.then((r) => this._finish(entry, r), (err) => this._finish(entry, this._crashed(entry, err)));
    } else {
      this._finish(entry, result);
    }
  }

  _finish(entry, result) {
    this.jobs.delete(entry.msg.id);
    this.running--;
    try {
      // Checked in the job already when it ended with a value (_check); anything else here.
      const encoded = entry.encoded && entry.encoded.frame === result ? entry.encoded : this._encode(entry, result);
      if (entry.apart) entry.report(encoded);
      else entry.report(encoded.frame, encoded.text);
      if (encoded.frame.status === 'done' && entry.done) this._afterJob(entry.done.ctx, encoded.frame.result, entry.done.durationMs);
    } catch (err) {
      this.onReportError(entry.msg.id, err);
    } finally {
      // Whatever happened above, the slot is free again.
      while (this.running < this.concurrency && this.waiting.length > 0) this._start(this.waiting.shift());
      this.onChange();
    }
  }

  // The job's context, as its handler, hooks and middleware see it.
  _context(entry) {
    const { msg, controller } = entry;
    const children = this.children;
    const ctx = {
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
      enqueue: (name, args, options) => children.enqueue(msg.id, name, args, options),
    };
    Object.defineProperty(ctx, 'signal', SIGNAL);
    new WithController(ctx, controller);
    return Object.freeze(ctx);
  }

  async _execute(entry) {
    const { msg, handler } = entry;
    const base = { type: 'result', id: msg.id };
    if (!handler) {
      return {
        ...base, status: 'failed',
        error: { type: 'UnknownJob', message: `no handler registered for job ${JSON.stringify(msg.name)} in this process`, traceback: null, retryable: false },
      };
    }
    if (entry.cancellable && entry.aborted) return { ...base, status: 'cancelled' };
    const ctx = this._context(entry);
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
      return this._failure(entry, ctx, err);
    }
    return this._outcome(entry, ctx, value, started);
  }

  // The result of a job whose handler (or middleware) threw `err`: a promise, as its onError
  // hooks run first.
  async _failure(entry, ctx, err) {
    const base = { type: 'result', id: entry.msg.id };
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

  // The result of a job whose handler gave `value` (`started`: when it started, for the
  // duration afterJob hooks get): a promise when the value cannot be sent, as its onError
  // hooks run first.
  _outcome(entry, ctx, value, started) {
    const { msg } = entry;
    let snooze;
    try {
      snooze = isSnooze(value) && { seconds: value.seconds, reason: value.reason ?? null };
    } catch (err) {
      return this._unsendable(ctx, unencodable(msg.id, err)); // a Proxy whose traps throw cannot be written either
    }
    if (snooze) {
      const { seconds, reason } = snooze;
      // A Snooze checks these; one made to look like a Snooze may not have.
      if (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds < 0 || (reason !== null && typeof reason !== 'string')) {
        return this._unsendable(ctx, unencodable(msg.id, new TypeError(`a Snooze needs seconds >= 0 and a string reason, got ${describe(seconds)}, ${describe(reason)}`)));
      }
      return { type: 'result', id: msg.id, status: 'snooze', seconds, reason: reason === null ? null : truncate(reason, MAX_ERROR_TEXT) };
    }
    const durationMs = performance.now() - started;
    // Written out, not spread from a common base: V8 kept every object spread there alive past
    // the next minor GC, and with it the rest of the job's objects (a third of a no-op job's
    // garbage went to the old generation).
    const checked = this._check(entry, { type: 'result', id: msg.id, status: 'done', result: value === undefined ? null : value });
    if (checked.status === 'done') {
      entry.done = { ctx, durationMs };
      return checked;
    }
    return this._unsendable(ctx, checked);
  }

  // A value that cannot be sent fails the job: its onError hooks get an Error saying what went
  // wrong (the failure's type as its name), before the failure is reported.
  async _unsendable(ctx, failed) {
    const error = new Error(failed.error.message);
    error.name = failed.error.type;
    await this._runHooks('onError', ctx, [ctx, error]);
    return failed;
  }

  // The result as it is reported (encodeResult or encodeResultApart), kept for _finish.
  _check(entry, result) {
    entry.encoded = this._encode(entry, result);
    return entry.encoded.frame;
  }

  _encode(entry, result) {
    const name = entry.msg.name;
    return entry.apart ? this.encodeResultApart(result, name) : this.encodeResult(result, name);
  }

  // Once a job's success is reported: its afterJob hooks, apart from the job (its slot is free
  // and its timeout no longer runs). The transports wait for them before exiting (idle).
  _afterJob(ctx, result, durationMs) {
    if (this.registry.hooks.afterJob.length === 0) return;
    this.hooksRunning++;
    this._runHooks('afterJob', ctx, [ctx, { result, durationMs }]).finally(() => {
      this.hooksRunning--;
      this.onChange();
    });
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

module.exports = { Runtime };
