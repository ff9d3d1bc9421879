'use strict';
// Strict decoder and canonical encoder for the Soniq handler protocol, version 1
// (docs/protocol.md, conformance vectors in protocol/testdata/). Stdlib only.
//
// JSON.parse alone cannot be used for validation: it accepts `1.0` for an int, silently
// rounds integers beyond 2^53, reads `1e400` as Infinity and takes an unpaired surrogate
// escape. This module has its own small JSON parser that builds ordinary JS values (the same
// values JSON.parse would build) and remembers the raw text of every number so the validators
// can tell `1` from `1.0` / `1e0` and detect overflow. It is the slow way: a frame in which
// nothing could break those rules (jsontext.js plainJSON, one pass over the text) is parsed by
// JSON.parse, which builds the same values several times faster and with less garbage.

const { MAX_DEPTH, checkDepth, plainJSON, replaceLoneSurrogates } = require('./jsontext');

const DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024;

class ProtocolError extends Error {
  constructor(code, field, detail) {
    let msg = code;
    if (field) msg += ` (${field})`;
    if (detail) msg += `: ${detail}`;
    super(msg);
    this.name = 'ProtocolError';
    this.code = code;
    this.field = field || null;
  }
}

// ---------------------------------------------------------------------------------------
// JSON parsing

class JSONSyntaxError extends Error {}

const NUMBER_RE = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const INT_RE = /^-?(?:0|[1-9][0-9]*)$/;

function setOwn(obj, key, value) {
  if (key === '__proto__') {
    Object.defineProperty(obj, key, { value, writable: true, enumerable: true, configurable: true });
  } else {
    obj[key] = value;
  }
}

// Parses RFC 8259 JSON text. Returns {value, raw} where raw is a WeakMap from container
// (object or array) to a Map(key -> number text) for every number member.
function parseJSON(s) {
  const n = s.length;
  const raw = new WeakMap();
  let i = 0;

  const fail = (what) => {
    throw new JSONSyntaxError(`${what} at offset ${i}`);
  };
  const ws = () => {
    while (i < n) {
      const c = s.charCodeAt(i);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) i++;
      else break;
    }
  };
  const hex4 = () => {
    if (i + 4 > n) fail('truncated \\u escape');
    let v = 0;
    for (let k = 0; k < 4; k++) {
      const c = s.charCodeAt(i + k);
      let d;
      if (c >= 0x30 && c <= 0x39) d = c - 0x30;
      else if (c >= 0x41 && c <= 0x46) d = c - 0x37;
      else if (c >= 0x61 && c <= 0x66) d = c - 0x57;
      else fail('bad \\u escape');
      v = v * 16 + d;
    }
    i += 4;
    return v;
  };
  const parseString = () => {
    // s[i] === '"'
    i++;
    let out = '';
    let start = i;
    for (;;) {
      if (i >= n) fail('unterminated string');
      const c = s.charCodeAt(i);
      if (c === 0x22) {
        out += s.slice(start, i);
        i++;
        return out;
      }
      if (c < 0x20) fail('control character in string');
      if (c !== 0x5c) {
        i++;
        continue;
      }
      out += s.slice(start, i);
      i++;
      if (i >= n) fail('unterminated escape');
      const e = s.charCodeAt(i);
      i++;
      switch (e) {
        case 0x22: out += '"'; break;
        case 0x5c: out += '\\'; break;
        case 0x2f: out += '/'; break;
        case 0x62: out += '\b'; break;
        case 0x66: out += '\f'; break;
        case 0x6e: out += '\n'; break;
        case 0x72: out += '\r'; break;
        case 0x74: out += '\t'; break;
        case 0x75: {
          // A surrogate must come as an escaped high+low pair; an unpaired one is invalid.
          const u = hex4();
          if (u >= 0xdc00 && u <= 0xdfff) fail('unpaired low surrogate escape');
          if (u >= 0xd800 && u <= 0xdbff) {
            if (s.charCodeAt(i) !== 0x5c || s.charCodeAt(i + 1) !== 0x75) fail('unpaired high surrogate escape');
            i += 2;
            const lo = hex4();
            if (lo < 0xdc00 || lo > 0xdfff) fail('unpaired high surrogate escape');
            out += String.fromCharCode(u, lo);
          } else {
            out += String.fromCharCode(u);
          }
          break;
        }
        default: i--; fail('bad escape');
      }
      start = i;
    }
  };
  const parseKey = () => {
    ws();
    if (s.charCodeAt(i) !== 0x22) fail('expected object key');
    const key = parseString();
    ws();
    if (s.charCodeAt(i) !== 0x3a) fail("expected ':'");
    i++;
    return key;
  };
  const attachRaw = (container, key, text) => {
    let m = raw.get(container);
    if (!m) {
      m = new Map();
      raw.set(container, m);
    }
    m.set(key, text);
  };

  // Iterative descent: `stack` holds open containers, so deep nesting cannot overflow
  // the JS call stack.
  const stack = [];
  let rootRaw = null;
  outer: for (;;) {
    ws();
    if (i >= n) fail('unexpected end of input');
    const c = s.charCodeAt(i);
    let value;
    let numText = null;
    if (c === 0x7b) {
      i++;
      if (stack.length >= MAX_DEPTH) fail('nesting too deep');
      const obj = {};
      ws();
      if (s.charCodeAt(i) === 0x7d) {
        i++;
        value = obj;
      } else {
        stack.push({ obj, arr: null, key: parseKey() });
        continue;
      }
    } else if (c === 0x5b) {
      i++;
      if (stack.length >= MAX_DEPTH) fail('nesting too deep');
      const arr = [];
      ws();
      if (s.charCodeAt(i) === 0x5d) {
        i++;
        value = arr;
      } else {
        stack.push({ obj: null, arr, key: null });
        continue;
      }
    } else if (c === 0x22) {
      value = parseString();
    } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      NUMBER_RE.lastIndex = i;
      const m = NUMBER_RE.exec(s);
      if (!m) fail('bad number');
      numText = m[0];
      i += numText.length;
      value = Number(numText);
      if (!Number.isFinite(value)) fail('number beyond the 64-bit float range');
    } else if (s.startsWith('true', i)) {
      i += 4;
      value = true;
    } else if (s.startsWith('false', i)) {
      i += 5;
      value = false;
    } else if (s.startsWith('null', i)) {
      i += 4;
      value = null;
    } else {
      fail('unexpected character');
    }

    // A value is complete: attach it to its parent, closing containers as they end.
    for (;;) {
      if (stack.length === 0) {
        ws();
        if (i !== n) fail('trailing data');
        if (numText !== null) rootRaw = numText;
        return { value, raw, rootRaw };
      }
      const top = stack[stack.length - 1];
      if (top.arr) {
        if (numText !== null) attachRaw(top.arr, top.arr.length, numText);
        top.arr.push(value);
      } else {
        if (numText !== null) attachRaw(top.obj, top.key, numText);
        else if (raw.has(top.obj)) raw.get(top.obj).delete(top.key); // duplicate key
        setOwn(top.obj, top.key, value);
      }
      numText = null;
      ws();
      const d = s.charCodeAt(i);
      if (d === 0x2c) {
        i++;
        if (top.obj) top.key = parseKey();
        continue outer;
      }
      if (top.arr && d === 0x5d) {
        i++;
        stack.pop();
        value = top.arr;
        continue;
      }
      if (top.obj && d === 0x7d) {
        i++;
        stack.pop();
        value = top.obj;
        continue;
      }
      fail(top.arr ? "expected ',' or ']'" : "expected ',' or '}'");
    }
  }
}

// Thrown by a Reader of a value JSON.parse built when it needs what only the strict parser
// keeps (a number's text below the frame's own fields): the frame is parsed again that way.
const STRICT = Symbol('parse strictly');

// The frame text's value: by JSON.parse when plainJSON says it builds what parseJSON would
// (`raw` null: every number directly in the outermost object is an integer written as String()
// writes it), else by parseJSON. Throws ProtocolError invalid_json.
// `outer`: how deep in the frame the text's value stands (1: args given apart from its frame).
function parseText(text, strict, outer = 0) {
  if (!strict && plainJSON(text, outer)) {
    try {
      return { value: JSON.parse(text), raw: null };
    } catch {
      // not JSON: the strict parser says where and why
    }
  }
  try {
    return parseJSON(text);
  } catch (e) {
    if (e instanceof JSONSyntaxError) throw new ProtocolError('invalid_json', null, e.message);
    throw e;
  }
}

// ---------------------------------------------------------------------------------------
// Validation

const has = (obj, key) => Object.prototype.hasOwnProperty.call(obj, key);
const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const path = (prefix, key) => (prefix ? `${prefix}.${key}` : key);

// A Reader wraps one JSON object of the frame and checks its fields in order.
class Reader {
  // `raw`: parseJSON's number texts, or null for a value JSON.parse built; `ints`: the texts of
  // the outermost object's integers when they come apart from it (decodeJobMessage), else null.
  constructor(obj, raw, prefix, ints = null) {
    this.obj = obj;
    this.raw = raw;
    this.prefix = prefix;
    this.ints = ints;
  }

  // Returns undefined when absent (or null, for optional fields).
  _get(key, required, nullable) {
    const p = path(this.prefix, key);
    if (!has(this.obj, key)) {
      if (required) throw new ProtocolError('missing_field', p);
      return undefined;
    }
    const v = this.obj[key];
    if (v === null) {
      if (nullable || !required) return undefined;
      throw new ProtocolError('wrong_type', p, 'null');
    }
    return v;
  }

  string(key, { required = true, nullable = false, nonEmpty = false, oneOf = null } = {}) {
    const v = this._get(key, required, nullable);
    if (v === undefined) return null;
    const p = path(this.prefix, key);
    if (typeof v !== 'string') throw new ProtocolError('wrong_type', p, 'expected a string');
    if (nonEmpty && v.length === 0) throw new ProtocolError('invalid_value', p, 'empty string');
    if (oneOf && !oneOf.includes(v)) throw new ProtocolError('invalid_value', p, JSON.stringify(v));
    return v;
  }

  int(key, { required = true, nullable = false, min = null } = {}) {
    const v = this._get(key, required, nullable);
    if (v === undefined) return null;
    const p = path(this.prefix, key);
    let text;
    if (this.ints !== null) {
      text = has(this.ints, key) ? this.ints[key] : undefined;
    } else if (this.raw !== null) {
      const m = this.raw.get(this.obj);
      text = m && m.get(key);
    } else if (this.prefix === '') {
      text = typeof v === 'number' ? String(v) : undefined;
    } else {
      throw STRICT;
    }
    if (typeof v !== 'number' || text === undefined || !INT_RE.test(text)) {
      throw new ProtocolError('wrong_type', p, 'expected an integer');
    }
    if (!Number.isSafeInteger(v)) throw new ProtocolError('invalid_value', p, `${text} out of range`);
    if (min !== null && v < min) throw new ProtocolError('invalid_value', p, `${text} < ${min}`);
    return v + 0; // normalise -0
  }

  number(key, { required = true, nullable = false, min = null } = {}) {
    const v = this._get(key, required, nullable);
    if (v === undefined) return null;
    const p = path(this.prefix, key);
    if (typeof v !== 'number') throw new ProtocolError('wrong_type', p, 'expected a number');
    if (!Number.isFinite(v)) throw new ProtocolError('invalid_value', p, 'out of range');
    if (min !== null && v < min) throw new ProtocolError('invalid_value', p, `${v} < ${min}`);
    return v + 0;
  }

  bool(key, { required = true, nullable = false } = {}) {
    const v = this._get(key, required, nullable);
    if (v === undefined) return null;
    if (typeof v !== 'boolean') throw new ProtocolError('wrong_type', path(this.prefix, key), 'expected a bool');
    return v;
  }

  object(key, { required = true, nullable = false } = {}) {
    const v = this._get(key, required, nullable);
    if (v === undefined) return null;
    if (!isObject(v)) throw new ProtocolError('wrong_type', path(this.prefix, key), 'expected an object');
    return v;
  }

  array(key, { required = true } = {}) {
    const v = this._get(key, required, false);
    if (v === undefined) return null;
    if (!Array.isArray(v)) throw new ProtocolError('wrong_type', path(this.prefix, key), 'expected an array');
    return v;
  }

  any(key) {
    if (!has(this.obj, key)) return null;
    return this.obj[key];
  }

  sub(key, obj) {
    return new Reader(obj, this.raw, path(this.prefix, key));
  }
}

const STATUSES = ['done', 'failed', 'snooze', 'cancelled'];
const CANCEL_REASONS = ['job_timeout', 'shutdown_timeout', 'user'];
const ERROR_REASONS = ['invalid_arguments'];
const ENQUEUE_ERROR_CODES = ['invalid', 'cap', 'parent', 'unavailable'];
// A UUID in its canonical lower-case text form: what an enqueue's id must be.
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const DECODERS = {
  hello(r) {
    const protocol = r.int('protocol', { min: 1 });
    const sdk = r.string('sdk');
    const pid = r.int('pid', { min: 1 });
    const list = r.array('jobs');
    const jobs = [];
    const seen = new Set();
    list.forEach((item, idx) => {
      const p = `jobs[${idx}]`;
      if (!isObject(item)) throw new ProtocolError('wrong_type', p, 'expected an object');
      const jr = r.sub(p, item);
      const name = jr.string('name', { nonEmpty: true });
      if (seen.has(name)) throw new ProtocolError('invalid_value', `${p}.name`, `duplicate job ${JSON.stringify(name)}`);
      seen.add(name);
      const cancellable = jr.bool('cancellable');
      jobs.push({ name, cancellable });
    });
    if (jobs.length === 0) throw new ProtocolError('invalid_value', 'jobs', 'at least one job');
    const concurrency = r.int('concurrency', { min: 1 });
    const syncConcurrency = r.int('sync_concurrency', { required: false, min: 1 });
    return { type: 'hello', protocol, sdk, pid, jobs, concurrency, sync_concurrency: syncConcurrency };
  },
  job(r) {
    return {
      type: 'job',
      id: r.string('id', { nonEmpty: true }),
      name: r.string('name', { nonEmpty: true }),
      args: r.object('args'),
      attempt: r.int('attempt', { min: 1 }),
      max_attempts: r.int('max_attempts', { min: 1 }),
      queue: r.string('queue'),
      deadline: r.int('deadline', { required: false, nullable: true }),
      traceparent: r.string('traceparent', { required: false, nullable: true }),
      worker_id: r.string('worker_id', { required: false, nullable: true }),
      scheduled_at: r.int('scheduled_at', { required: false, nullable: true }),
      created_at: r.int('created_at', { required: false, nullable: true }),
    };
  },
  result(r) {
    // Fields that do not belong to the status are dropped without being checked.
    const id = r.string('id', { nonEmpty: true });
    const status = r.string('status', { oneOf: STATUSES });
    const msg = { type: 'result', id, status, result: null, error: null, seconds: null, reason: null };
    if (status === 'done') {
      msg.result = r.any('result');
    } else if (status === 'failed') {
      const er = r.sub('error', r.object('error'));
      const type = er.string('type');
      const message = er.string('message');
      const traceback = er.string('traceback', { required: false, nullable: true });
      const retryable = er.bool('retryable', { required: false });
      const reason = er.string('reason', { required: false, nullable: true, oneOf: ERROR_REASONS });
      msg.error = { type, message, traceback, retryable: retryable === null ? true : retryable, reason };
    } else if (status === 'snooze') {
      msg.seconds = r.number('seconds', { min: 0 });
      msg.reason = r.string('reason', { required: false, nullable: true });
    }
    return msg;
  },
  cancel(r) {
    return {
      type: 'cancel',
      id: r.string('id'),
      reason: r.string('reason', { oneOf: CANCEL_REASONS }),
    };
  },
  ping(r) {
    return { type: 'ping', seq: r.int('seq', { min: 0 }) };
  },
  pong(r) {
    return { type: 'pong', seq: r.int('seq', { min: 0 }) };
  },
  shutdown() {
    return { type: 'shutdown' };
  },
  enqueue(r) {
    const opt = { required: false };
    const parent = r.string('parent', { nonEmpty: true });
    const id = r.string('id');
    if (!UUID_RE.test(id)) throw new ProtocolError('invalid_value', 'id', `${JSON.stringify(id)} is not a lower-case UUID`);
    return {
      type: 'enqueue',
      parent,
      id,
      name: r.string('name', { nonEmpty: true }),
      args: r.object('args'),
      queue: r.string('queue', { ...opt, nonEmpty: true }),
      priority: r.int('priority', opt),
      max_attempts: r.int('max_attempts', { ...opt, min: 1 }),
      delay: r.number('delay', { ...opt, min: 0 }),
      dedup_key: r.string('dedup_key', { ...opt, nonEmpty: true }),
      unique: r.bool('unique', opt),
      immediate: r.bool('immediate', opt),
    };
  },
  enqueued(r) {
    const id = r.string('id', { nonEmpty: true });
    const jobId = r.string('job_id', { required: false });
    const eo = r.object('error', { required: false });
    let error = null;
    if (eo !== null) {
      const er = r.sub('error', eo);
      error = { code: er.string('code', { oneOf: ENQUEUE_ERROR_CODES }), message: er.string('message') };
    }
    return { type: 'enqueued', id, job_id: jobId, error };
  },
};

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

// decode(line, {maxFrameBytes}) -> canonical message object, or throws ProtocolError.
// `line` is one frame without its '\n' (a Buffer/Uint8Array; a string is UTF-8 encoded).
// One trailing '\r' is stripped.
function decode(line, { maxFrameBytes = DEFAULT_MAX_FRAME_BYTES } = {}) {
  let buf = typeof line === 'string' ? Buffer.from(line, 'utf8') : line;
  if (!(buf instanceof Uint8Array)) throw new TypeError('decode expects a Buffer, Uint8Array or string');
  if (buf.length > 0 && buf[buf.length - 1] === 0x0d) buf = buf.subarray(0, buf.length - 1);
  if (buf.length > maxFrameBytes) {
    throw new ProtocolError('oversize', null, `${buf.length} bytes > ${maxFrameBytes}`);
  }
  let text;
  try {
    text = utf8.decode(buf);
  } catch (e) {
    throw new ProtocolError('invalid_utf8', null, e.message);
  }
  try {
    return decodeText(text, false);
  } catch (e) {
    if (e !== STRICT) throw e;
    return decodeText(text, true);
  }
}

function decodeText(text, strict) {
  const parsed = parseText(text, strict);
  const obj = parsed.value;
  if (!isObject(obj)) throw new ProtocolError('not_object', null);
  if (!has(obj, 'type')) throw new ProtocolError('missing_field', 'type');
  const type = obj.type;
  if (typeof type !== 'string') throw new ProtocolError('wrong_type', 'type', 'expected a string');
  if (!has(DECODERS, type)) throw new ProtocolError('unknown_type', null, JSON.stringify(type));
  if (type === 'job' && parsed.raw === null) {
    const job = plainJob(obj);
    if (job !== null) return job;
  }
  return DECODERS[type](new Reader(obj, parsed.raw, ''));
}

// A job frame JSON.parse built (plainJSON passed: every number directly in it is an integer
// whose String() is its text) whose fields all pass DECODERS.job's checks, decoded as it decodes
// it, without a Reader and its options per field (a job per job is the hot path); null for
// anything else, which DECODERS.job then decodes or refuses with its error.
function plainJob(obj) {
  const { id, name, args, attempt, queue } = obj;
  const maxAttempts = obj.max_attempts;
  if (!(typeof id === 'string' && id.length > 0 && has(obj, 'id')
    && typeof name === 'string' && name.length > 0 && has(obj, 'name')
    && isObject(args) && has(obj, 'args')
    && Number.isSafeInteger(attempt) && attempt >= 1 && has(obj, 'attempt')
    && Number.isSafeInteger(maxAttempts) && maxAttempts >= 1 && has(obj, 'max_attempts')
    && typeof queue === 'string' && has(obj, 'queue'))) {
    return null;
  }
  const deadline = optional(obj, 'deadline');
  const traceparent = optional(obj, 'traceparent');
  const workerId = optional(obj, 'worker_id');
  const scheduledAt = optional(obj, 'scheduled_at');
  const createdAt = optional(obj, 'created_at');
  if (!((deadline === null || Number.isSafeInteger(deadline))
    && (traceparent === null || typeof traceparent === 'string')
    && (workerId === null || typeof workerId === 'string')
    && (scheduledAt === null || Number.isSafeInteger(scheduledAt))
    && (createdAt === null || Number.isSafeInteger(createdAt)))) {
    return null;
  }
  return {
    type: 'job',
    id,
    name,
    args,
    attempt,
    max_attempts: maxAttempts,
    queue,
    deadline,
    traceparent,
    worker_id: workerId,
    scheduled_at: scheduledAt,
    created_at: createdAt,
  };
}

// An optional field of an object JSON.parse built: null when absent or null (an inherited
// value is absent too, as the Reader has it; JSON holds no undefined, so only a value found
// needs the own-property check).
function optional(obj, key) {
  const v = obj[key];
  if (v === undefined || v === null) return null;
  return has(obj, key) ? v : null;
}

// A job that arrives as a structured message (the Session stream's Job) rather than as frame
// text: checked exactly as its frame would be, without writing that frame and parsing it again.
// `job` holds the string fields, `argsText` the args' JSON text (undefined: no args), `ints` the
// integer fields as decimal text, as they would stand in the frame. Sizes are the caller's
// check (the frame limit).
function decodeJobMessage(job, argsText, ints) {
  try {
    return decodeJobParts(job, argsText, ints, false);
  } catch (e) {
    if (e !== STRICT) throw e;
    return decodeJobParts(job, argsText, ints, true);
  }
}

function decodeJobParts(job, argsText, ints, strict) {
  const obj = { type: 'job', id: job.id, name: job.name };
  let raw = null;
  if (argsText !== undefined) {
    const parsed = parseText(argsText, strict, 1);
    obj.args = parsed.value;
    raw = parsed.raw;
  }
  for (const key in ints) obj[key] = Number(ints[key]);
  obj.queue = job.queue;
  if (job.traceparent !== undefined) obj.traceparent = job.traceparent;
  if (job.worker_id !== undefined) obj.worker_id = job.worker_id;
  return DECODERS.job(new Reader(obj, raw, '', ints));
}

// ---------------------------------------------------------------------------------------
// Encoding

const FIELDS = {
  hello: ['type', 'protocol', 'sdk', 'pid', 'jobs', 'concurrency', 'sync_concurrency'],
  job: ['type', 'id', 'name', 'args', 'attempt', 'max_attempts', 'queue', 'deadline', 'traceparent',
    'worker_id', 'scheduled_at', 'created_at'],
  result: ['type', 'id', 'status', 'result', 'error', 'seconds', 'reason'],
  cancel: ['type', 'id', 'reason'],
  ping: ['type', 'seq'],
  pong: ['type', 'seq'],
  shutdown: ['type'],
  enqueue: ['type', 'parent', 'id', 'name', 'args', 'queue', 'priority', 'max_attempts', 'delay', 'dedup_key',
    'unique', 'immediate'],
  enqueued: ['type', 'id', 'job_id', 'error'],
};
const ENQUEUED_ERROR_FIELDS = ['code', 'message'];
const RESULT_STATUS_FIELDS = { done: ['result'], failed: ['error'], snooze: ['seconds', 'reason'], cancelled: [] };
const ERROR_FIELDS = ['type', 'message', 'traceback', 'retryable', 'reason'];
const JOB_ENTRY_FIELDS = ['name', 'cancellable'];

function encodeValue(v, what) {
  const s = JSON.stringify(v);
  if (s === undefined) throw new TypeError(`${what} is not JSON-serialisable`);
  return replaceLoneSurrogates(s);
}

function encodeFields(obj, fields, prefix, special) {
  const parts = [];
  for (const key of fields) {
    const v = obj[key];
    if (v === null || v === undefined) continue;
    const enc = special && special[key] ? special[key](v) : encodeValue(v, path(prefix, key));
    parts.push(`${JSON.stringify(key)}:${enc}`);
  }
  return `{${parts.join(',')}}`;
}

// encode(msg) -> canonical JSON text (no trailing '\n'): compact, keys in table order,
// null/undefined fields omitted, fields the type does not define dropped. Throws TypeError
// for an unknown type or a value JSON cannot represent, RangeError for one nested deeper than
// a frame may be (MAX_DEPTH levels, the frame's own object included: what decoders take).
function encode(msg) {
  const text = encodeFrame(msg);
  checkDepth(text);
  return text;
}

function encodeFrame(msg) {
  if (!isObject(msg)) throw new TypeError('encode expects a message object');
  const fields = has(FIELDS, msg.type) ? FIELDS[msg.type] : null;
  if (!fields) throw new TypeError(`unknown message type ${JSON.stringify(msg.type)}`);
  if (msg.type === 'result') {
    // Only the fields that belong to the status are written.
    const keep = RESULT_STATUS_FIELDS[msg.status] || [];
    msg = { ...msg };
    for (const k of ['result', 'error', 'seconds', 'reason']) if (!keep.includes(k)) delete msg[k];
  }
  return encodeFields(msg, fields, '', {
    jobs: (list) => `[${list.map((j, idx) => encodeFields(j, JOB_ENTRY_FIELDS, `jobs[${idx}]`)).join(',')}]`,
    error: (e) => encodeFields(e, msg.type === 'enqueued' ? ENQUEUED_ERROR_FIELDS : ERROR_FIELDS, 'error'),
  });
}

module.exports = {
  DEFAULT_MAX_FRAME_BYTES,
  MAX_DEPTH,
  ProtocolError,
  UUID_RE,
  decode,
  decodeJobMessage,
  encode,
};
