'use strict';
// The result frames a job ends with, and how each is reported: a thrown value as a protocol
// error object (whatever it does when read), the frames a transport sends on its own, and the
// one check every result passes before it goes out (encodeResult). A value JSON cannot hold (a
// BigInt) is written as Soniq's worker stores what JSON cannot hold, as a string, with a WARN
// line; a value that cannot be written at all (a cycle, nested too deep, a toJSON that throws),
// or is over the frame limit, fails its job with the cause (docs/protocol.md, "Result encoding
// failures"); nothing here throws for what a handler returned.

const { encode } = require('./protocol');
const { checkDepth, replaceLoneSurrogates } = require('./jsontext');
const { log } = require('./log');

const MAX_ERROR_TEXT = 64 * 1024;

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

function truncate(s, max) {
  if (typeof s !== 'string' || s.length <= max) return s;
  return `${s.slice(0, max)}... [truncated ${s.length - max} chars]`;
}

// A done result whose value JSON.stringify could not write (`err`), with what JSON cannot hold
// replaced by a string, in this SDK's terms of the rule Soniq's worker follows (it stores
// str() of such a value): a BigInt, anywhere, becomes its decimal digits; a Symbol or a
// function that is the whole value (JSON.stringify leaves them out inside objects and writes
// null for them in arrays, and still does) becomes String(symbol) or `[function name]`. The
// answer is {frame, types} (the names of the types replaced), {err} for what still cannot be
// written (a cycle, a toJSON that throws: the error JSON.stringify threw then), or null when
// nothing was replaced.
function stringified(result, err) {
  if (result.status !== 'done') return { err };
  const types = new Set();
  let top = true;
  let text;
  try {
    text = JSON.stringify(result.result, function replace(key, v) {
      const whole = top;
      top = false;
      if (typeof v === 'bigint') {
        types.add('bigint');
        return v.toString();
      }
      if (whole && (typeof v === 'symbol' || typeof v === 'function')) {
        types.add(typeof v);
        return describe(v);
      }
      return v;
    });
  } catch (again) {
    return { err: again };
  }
  if (text === undefined || types.size === 0) return { err };
  return { frame: { ...result, result: JSON.parse(text) }, types };
}

function warnStringified(frame, name, types) {
  const job = name === undefined ? frame.id : `${frame.id} (${name})`;
  log(`WARN: job ${job} returned ${[...types].sort().join(', ')}, which JSON cannot hold; its result stores each as a string, as a Soniq worker stores str() of it`);
}

// The result as it is reported, and its encoding, for a frame limit of `limit` bytes (every
// transport reports what this returns); `name` is the job's, for the WARN line.
// A done value holding what JSON cannot hold (a BigInt) is sent with each such value as a
// string (stringified), and a WARN line says so. A value that cannot be written (a cycle,
// nesting too deep, a toJSON or getter that throws) or one over the frame limit fails the job
// instead, with the cause in the message; a failure over the limit keeps its type and
// retryability and is cut to fit. Never throws.
function encodeResult(result, limit, name) {
  let text;
  try {
    text = isDone(result) ? encodeDone(result) : encode(result);
  } catch (err) {
    const s = stringified(result, err);
    if (s.err) return unwritable(result, s.err, limit);
    try {
      text = encode(s.frame);
    } catch (again) {
      return unwritable(result, again, limit);
    }
    const fitted = fit(s.frame, text, limit);
    if (fitted.frame.status === 'done') warnStringified(fitted.frame, name, s.types);
    return fitted;
  }
  return fit(result, text, limit);
}

// A done result encodeDone writes.
function isDone(result) {
  return result.type === 'result' && result.status === 'done' && typeof result.id === 'string';
}

// encode(result) for a done result (isDone), written directly (encode goes through the frame's
// field table, which cost a no-op job more than its own work): the same text, and where encode
// throws, the same error.
function encodeDone(result) {
  const head = `{"type":"result","id":${replaceLoneSurrogates(JSON.stringify(result.id))},"status":"done"`;
  const v = result.result;
  if (v === null || v === undefined) return `${head}}`;
  const raw = JSON.stringify(v);
  if (raw === undefined) throw new TypeError('result is not JSON-serialisable');
  const text = `${head},"result":${replaceLoneSurrogates(raw)}}`;
  checkDepth(text);
  return text;
}

function unwritable(result, err, limit) {
  const failed = unencodable(result.id, err, result.result);
  return fit(failed, encode(failed), limit);
}

function fit(result, text, limit) {
  if (text.length <= limit / 3 || Buffer.byteLength(text) <= limit) return { frame: result, text };
  return fitFrame(result, text, limit);
}

// encodeResult for a transport that carries a result's value apart from its frame (the
// Session stream), with the frame's size in `bytes`. A done result is checked as encodeResult
// checks it, without its frame being written: `text` is null and `value` the text its value
// has in that frame (null for none). That frame is `{"type":"result","id":ID,"status":"done"}`
// with `,"result":VALUE` before the brace when there is a value, so its length, size and depth
// follow from its parts. Anything else, and a value with a lone surrogate replaced (its text is
// no longer that value's JSON), comes with `text` as from encodeResult. Never throws.
function encodeResultApart(result, limit, name) {
  if (result.status !== 'done' || typeof result.id !== 'string') return withBytes(encodeResult(result, limit, name));
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
      // What JSON cannot hold is checked as encodeResult checks it, frame and all: rare.
      if (typeof raw !== 'string') return withBytes(encodeResult(result, limit, name));
      return withBytes(unwritable(result, err, limit));
    }
  }
  const bytes = Buffer.byteLength(head) + (value === null ? 1 : 11 + Buffer.byteLength(value));
  if (bytes > limit || value !== raw) {
    return withBytes(fit(result, value === null ? `${head}}` : `${head},"result":${value}}`, limit));
  }
  return { frame: result, text: null, value, bytes };
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

module.exports = {
  MAX_ERROR_TEXT, describe, describeThrown, draining, encodeResult, encodeResultApart, errorPayload,
  shuttingDown, truncate, unencodable, validationError,
};
