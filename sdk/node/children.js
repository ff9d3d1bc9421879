'use strict';
// Child jobs: ctx.enqueue (docs/protocol.md, "Child jobs"). A handler makes new jobs from inside
// a running one: the SDK draws the child's id (a random UUID), sends an `enqueue` frame naming
// the running job as its parent and returns the id at once. By default the sidecar writes the
// child with the parent's successful result, in the same transaction: a parent that fails,
// snoozes, is cancelled or crashes leaves no child of that attempt. `immediate: true` asks for
// the child to be written at once: ctx.enqueue then returns a Promise of the id of the row that
// holds it, settled by the sidecar's `enqueued` answer.
//
// A transport connects one Children (per Runtime) to what it sends with and hands it every
// `enqueued` frame; the feature is offered only by a sidecar that announced it (SONIQ_FEATURES,
// or the Session's Features message).

const { randomUUID } = require('node:crypto');
const { encode } = require('./protocol');
const { replaceLoneSurrogates } = require('./jsontext');

const FEATURE = 'enqueue';
const OPTIONS = new Set(['queue', 'priority', 'delay', 'maxAttempts', 'dedupKey', 'unique', 'immediate']);

// A child job that was not written: refused by the sidecar (code invalid, cap, parent,
// unavailable) or asked of a sidecar that takes no child jobs (unsupported).
class ChildJobError extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
    this.name = 'ChildJobError';
    this.code = code;
    this.reason = message;
  }
}

class Children {
  constructor(maxFrameBytes, env = process.env) {
    this.maxFrameBytes = maxFrameBytes;
    this.envFeatures = new Set(String(env.SONIQ_FEATURES ?? '').split(',').map((s) => s.trim()).filter(Boolean));
    this.sessionFeatures = new Set();
    this.send = null; // (frame, text) => void
    this.waiting = new Map(); // child id -> { resolve, reject }
  }

  // The transport sends with `send(frame, text)` from now on; `features` are those a Session
  // announced (a spawned process also has its environment's).
  connect(send, features = []) {
    this.send = send;
    this.sessionFeatures = new Set(features);
  }

  // The Session's Features message.
  announce(names) {
    this.sessionFeatures = new Set(names);
  }

  // The sidecar is gone: nothing more can be sent, and the immediate children waiting for their
  // answer are rejected with `unavailable`.
  disconnect(why) {
    this.send = null;
    this.sessionFeatures = new Set();
    const waiting = [...this.waiting.values()];
    this.waiting.clear();
    for (const w of waiting) w.reject(new ChildJobError('unavailable', why));
  }

  // An `enqueued` frame from the sidecar.
  answered(frame) {
    const w = this.waiting.get(frame.id);
    if (!w) return; // nobody waits for it any more
    this.waiting.delete(frame.id);
    if (frame.error) w.reject(new ChildJobError(frame.error.code, frame.error.message));
    else w.resolve(frame.job_id ?? frame.id);
  }

  get supported() {
    return this.envFeatures.has(FEATURE) || this.sessionFeatures.has(FEATURE);
  }

  // ctx.enqueue: the child's id at once (deferred), or a Promise of the written row's id
  // (immediate).
  enqueue(parent, name, args, options) {
    const { frame, text } = this.frame(parent, name, args, options);
    if (!frame.immediate) {
      this.post(frame, text);
      return frame.id;
    }
    return new Promise((resolve, reject) => {
      this.waiting.set(frame.id, { resolve, reject });
      try {
        this.post(frame, text);
      } catch (err) {
        this.waiting.delete(frame.id);
        reject(err);
      }
    });
  }

  post(frame, text) {
    if (!this.send) throw new ChildJobError('unavailable', 'the process is not connected to a sidecar');
    this.send(frame, text);
  }

  frame(parent, name, args, options = {}) {
    if (!this.supported) {
      throw new ChildJobError('unsupported',
        "this sidecar does not take child jobs (it announced no 'enqueue' feature): upgrade soniq-sidecar");
    }
    if (typeof name !== 'string' || name === '') {
      throw new TypeError(`ctx.enqueue: the job name must be a non-empty string, got ${JSON.stringify(name)}`);
    }
    const what = `ctx.enqueue(${JSON.stringify(name)})`;
    if (args === undefined || args === null) args = {};
    if (typeof args !== 'object' || Array.isArray(args)) {
      throw new TypeError(`${what}: args must be a plain object (a JSON object), got ${Array.isArray(args) ? 'an array' : typeof args}`);
    }
    if (options === null || typeof options !== 'object') throw new TypeError(`${what}: options must be an object`);
    for (const key of Object.keys(options)) {
      if (!OPTIONS.has(key)) throw new TypeError(`${what}: unknown option ${JSON.stringify(key)} (known: ${[...OPTIONS].join(', ')})`);
    }
    const o = options;
    const frame = {
      type: 'enqueue',
      parent,
      id: randomUUID(),
      name,
      args,
      queue: optString(what, 'queue', o.queue),
      priority: optInt(what, 'priority', o.priority, null),
      max_attempts: optInt(what, 'maxAttempts', o.maxAttempts, 1),
      delay: optDelay(what, o.delay),
      dedup_key: optString(what, 'dedupKey', o.dedupKey),
      unique: optFlag(what, 'unique', o.unique),
      immediate: optFlag(what, 'immediate', o.immediate),
    };
    let text;
    try {
      text = encode(frame);
    } catch (err) {
      throw new TypeError(`${what}: args cannot be written as JSON: ${err.message}`);
    }
    const bytes = Buffer.byteLength(text, 'utf8');
    if (bytes > this.maxFrameBytes) {
      throw new RangeError(`${what}: the enqueue frame is ${bytes} bytes, over the frame limit of ${this.maxFrameBytes}`);
    }
    return { frame, text };
  }
}

function optString(what, key, v) {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string' || v === '') throw new TypeError(`${what}: ${key} must be a non-empty string, got ${JSON.stringify(v)}`);
  return v;
}

function optInt(what, key, v, min) {
  if (v === undefined || v === null) return null;
  if (!Number.isSafeInteger(v)) throw new TypeError(`${what}: ${key} must be an integer, got ${JSON.stringify(v)}`);
  if (min !== null && v < min) throw new RangeError(`${what}: ${key} must be >= ${min}, got ${v}`);
  return v;
}

// delay is in milliseconds, as Node's timers and the producer take it; the frame carries seconds.
function optDelay(what, v) {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
    throw new RangeError(`${what}: delay must be a number of milliseconds >= 0, got ${JSON.stringify(v)}`);
  }
  return v / 1000;
}

function optFlag(what, key, v) {
  if (v === undefined || v === null || v === false) return null; // the default: not written
  if (v !== true) throw new TypeError(`${what}: ${key} must be a boolean, got ${JSON.stringify(v)}`);
  return true;
}

// The Session's Enqueue message of an enqueue frame.
function enqueueMessage(frame) {
  // As the frame's encoder writes args (a lone surrogate becomes U+FFFD).
  const m = { parent: frame.parent, id: frame.id, name: frame.name, args_json: replaceLoneSurrogates(JSON.stringify(frame.args)) };
  if (frame.queue !== null) m.queue = frame.queue;
  if (frame.priority !== null) m.priority = String(frame.priority);
  if (frame.max_attempts !== null) m.max_attempts = String(frame.max_attempts);
  if (frame.delay !== null) m.delay_seconds = frame.delay;
  if (frame.dedup_key !== null) m.dedup_key = frame.dedup_key;
  if (frame.unique !== null) m.unique = frame.unique;
  if (frame.immediate !== null) m.immediate = frame.immediate;
  return m;
}

// The enqueued frame an Enqueued message stands for.
function enqueuedFrame(m) {
  const frame = { type: 'enqueued', id: m.id ?? '', job_id: m.job_id ?? null, error: null };
  if (m.error_code !== undefined || m.error_message !== undefined) {
    frame.error = { code: m.error_code ?? '', message: m.error_message ?? '' };
  }
  return frame;
}

module.exports = { Children, ChildJobError, enqueueMessage, enqueuedFrame, FEATURE };
