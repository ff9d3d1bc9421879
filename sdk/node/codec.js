'use strict';
// The protobuf encoding of the Session stream's two messages (proto/handler.proto), written by
// hand for the method's serialize and deserialize functions. protobufjs's reflection (decode,
// then toObject for every Job; fromObject, then encode for every Result) was the largest
// per-job cost of a Session beside HTTP/2 itself. decodeSidecarMessage gives the object
// @grpc/proto-loader gives with { keepCase: true, longs: String, enums: String, defaults:
// false, oneofs: true }, less the synthetic `_field` keys of proto3 optional fields that nothing
// reads; encodeHandlerMessage writes the bytes protobufjs writes from the same object. The
// tests hold both to protobufjs.

class DecodeError extends Error {}

const utf8Slice = typeof Buffer.prototype.utf8Slice === 'function'
  ? (buf, start, end) => buf.utf8Slice(start, end)
  : (buf, start, end) => buf.toString('utf8', start, end);
const latin1Slice = typeof Buffer.prototype.latin1Slice === 'function'
  ? (buf, start, end) => buf.latin1Slice(start, end)
  : (buf, start, end) => buf.toString('latin1', start, end);

// ---- decoding ----

// Reads one message of buf[pos, end) at a time; the functions below share it.
class Reader {
  constructor(buf) {
    this.buf = buf;
    this.pos = 0;
    this.text = undefined;
  }

  // A varint as a number, for fields of 32 bits (the low 32 bits of a longer one, as
  // protobufjs reads an int32 or a length).
  uint32() {
    const buf = this.buf;
    let pos = this.pos;
    let b = buf[pos++];
    let v = b & 0x7f;
    if (b >= 0x80) {
      b = buf[pos++]; v |= (b & 0x7f) << 7;
      if (b >= 0x80) {
        b = buf[pos++]; v |= (b & 0x7f) << 14;
        if (b >= 0x80) {
          b = buf[pos++]; v |= (b & 0x7f) << 21;
          if (b >= 0x80) {
            b = buf[pos++]; v |= (b & 0x0f) << 28;
            // The bits beyond 32 are dropped, as protobufjs drops them.
            while (b >= 0x80) {
              if (pos - this.pos >= 10) throw new DecodeError('varint longer than 10 bytes');
              b = buf[pos++];
            }
          }
        }
      }
    }
    if (pos > buf.length || b === undefined) throw new DecodeError('truncated varint');
    this.pos = pos;
    return v >>> 0;
  }

  // A signed 64-bit varint as a decimal string (longs: String).
  int64String() {
    const buf = this.buf;
    const start = this.pos;
    let lo = 0;
    let i = 0;
    let b;
    // Up to 7 bytes (49 bits) stay exact in a double.
    do {
      b = buf[this.pos++];
      if (b === undefined) throw new DecodeError('truncated varint');
      lo += (b & 0x7f) * 2 ** (7 * i);
      i++;
    } while (b >= 0x80 && i < 7);
    if (b < 0x80) return String(lo);
    this.pos = start;
    let v = 0n;
    for (i = 0; ; i++) {
      if (i >= 10) throw new DecodeError('varint longer than 10 bytes');
      b = buf[this.pos++];
      if (b === undefined) throw new DecodeError('truncated varint');
      v |= BigInt(b & 0x7f) << BigInt(7 * i);
      if (b < 0x80) break;
    }
    return BigInt.asIntN(64, v).toString();
  }

  // The end of a length-delimited field whose length comes next.
  end() {
    const len = this.uint32();
    const end = this.pos + len;
    if (end > this.buf.length) throw new DecodeError('length beyond the message');
    return end;
  }

  string() {
    const end = this.end();
    const buf = this.buf;
    const start = this.pos;
    this.pos = end;
    let i = start;
    while (i < end && buf[i] < 0x80) i++;
    if (i < end) return utf8Slice(buf, start, end);
    // ASCII: a piece of the message's text, made once (one call into the runtime per message
    // instead of one per field). A piece keeps the whole text alive, so a large message's
    // fields are copied out one by one.
    if (buf.length > 65536) return latin1Slice(buf, start, end);
    this.text ??= latin1Slice(buf, 0, buf.length);
    return this.text.substring(start, end);
  }

  skip(wireType) {
    switch (wireType) {
      case 0:
        this.uint32();
        return;
      case 1:
        this.pos += 8;
        break;
      case 2:
        this.pos = this.end();
        return;
      case 3:
        // A group: skipped to its end tag.
        for (;;) {
          const tag = this.uint32();
          if ((tag & 7) === 4) return;
          this.skip(tag & 7);
        }
      case 5:
        this.pos += 4;
        break;
      default:
        throw new DecodeError(`invalid wire type ${wireType}`);
    }
    if (this.pos > this.buf.length) throw new DecodeError('truncated field');
  }
}

function decodeJob(r, end) {
  const j = {};
  while (r.pos < end) {
    const tag = r.uint32();
    switch (tag) {
      case (1 << 3) | 2: j.id = r.string(); break;
      case (2 << 3) | 2: j.name = r.string(); break;
      case (3 << 3) | 2: j.args_json = r.string(); break;
      case (4 << 3) | 0: j.attempt = r.uint32() | 0; break;
      case (5 << 3) | 0: j.max_attempts = r.uint32() | 0; break;
      case (6 << 3) | 2: j.queue = r.string(); break;
      case (7 << 3) | 0: j.deadline_ms = r.int64String(); break;
      case (8 << 3) | 2: j.traceparent = r.string(); break;
      case (9 << 3) | 2: j.worker_id = r.string(); break;
      case (10 << 3) | 0: j.scheduled_at_ms = r.int64String(); break;
      case (11 << 3) | 0: j.created_at_ms = r.int64String(); break;
      default: r.skip(tag & 7);
    }
  }
  if (r.pos !== end) throw new DecodeError('field beyond its message');
  return j;
}

function decodeJobs(r, end) {
  const jobs = [];
  while (r.pos < end) {
    const tag = r.uint32();
    if (tag === ((1 << 3) | 2)) jobs.push(decodeJob(r, r.end()));
    else r.skip(tag & 7);
  }
  if (r.pos !== end) throw new DecodeError('field beyond its message');
  return jobs.length > 0 ? { jobs } : {};
}

// A message of string fields only, by field number.
function decodeStrings(r, end, names, repeated) {
  const m = {};
  while (r.pos < end) {
    const tag = r.uint32();
    const name = (tag & 7) === 2 ? names[tag >>> 3] : undefined;
    if (name === undefined) r.skip(tag & 7);
    else if (repeated) (m[name] ??= []).push(r.string());
    else m[name] = r.string();
  }
  if (r.pos !== end) throw new DecodeError('field beyond its message');
  return m;
}

function decodePing(r, end) {
  const m = {};
  while (r.pos < end) {
    const tag = r.uint32();
    if (tag === ((1 << 3) | 0)) m.seq = r.int64String();
    else r.skip(tag & 7);
  }
  if (r.pos !== end) throw new DecodeError('field beyond its message');
  return m;
}

function decodeEmpty(r, end) {
  while (r.pos < end) r.skip(r.uint32() & 7);
  if (r.pos !== end) throw new DecodeError('field beyond its message');
  return {};
}

const CANCEL_FIELDS = [undefined, 'id', 'reason'];
const ACK_FIELDS = [undefined, 'ids'];
const ENQUEUED_FIELDS = [undefined, 'id', 'job_id', 'error_code', 'error_message'];
const FEATURES_FIELDS = [undefined, 'names'];
// The oneof members of SidecarMessage, by field number.
const SIDECAR_MEMBERS = [undefined, 'job', 'cancel', 'ping', 'shutdown', 'ack', 'jobs', 'enqueued', 'features'];

// A SidecarMessage (the Session method's requestDeserialize).
function decodeSidecarMessage(buf) {
  const r = new Reader(buf);
  const m = {};
  let last = 0;
  while (r.pos < buf.length) {
    const tag = r.uint32();
    const field = tag >>> 3;
    if ((tag & 7) !== 2 || field < 1 || field >= SIDECAR_MEMBERS.length) {
      r.skip(tag & 7);
      continue;
    }
    const end = r.end();
    let v;
    switch (field) {
      case 1: v = decodeJob(r, end); break;
      case 2: v = decodeStrings(r, end, CANCEL_FIELDS, false); break;
      case 3: v = decodePing(r, end); break;
      case 4: v = decodeEmpty(r, end); break;
      case 5: v = decodeStrings(r, end, ACK_FIELDS, true); break;
      case 6: v = decodeJobs(r, end); break;
      case 7: v = decodeStrings(r, end, ENQUEUED_FIELDS, false); break;
      default: v = decodeStrings(r, end, FEATURES_FIELDS, true);
    }
    // A field seen twice: the last one, as protobufjs has it.
    m[SIDECAR_MEMBERS[field]] = v;
    last = Math.max(last, field);
  }
  if (r.pos !== buf.length) throw new DecodeError('field beyond the message');
  // protobufjs names the last member in field order that is set.
  if (last > 0) m.message = SIDECAR_MEMBERS[last];
  return m;
}

// ---- encoding ----

// One growing scratch buffer for every message; each message is copied out of it once written.
let scratch = Buffer.allocUnsafe(64 << 10);
let pos = 0;

function reserve(n) {
  if (pos + n <= scratch.length) return;
  const next = Buffer.allocUnsafe(Math.max(2 * scratch.length, pos + n));
  scratch.copy(next, 0, 0, pos);
  scratch = next;
}

// A varint of a non-negative integer below 2^53.
function varint(v) {
  reserve(10);
  while (v >= 0x80) {
    scratch[pos++] = (v % 0x80) | 0x80;
    v = Math.floor(v / 0x80);
  }
  scratch[pos++] = v;
}

function varintBig(v) {
  reserve(10);
  let u = BigInt.asUintN(64, v);
  while (u >= 0x80n) {
    scratch[pos++] = Number(u & 0x7fn) | 0x80;
    u >>= 7n;
  }
  scratch[pos++] = Number(u);
}

function varintSize(v) {
  let n = 1;
  while (v >= 0x80) {
    v = Math.floor(v / 0x80);
    n++;
  }
  return n;
}

// An int32 or enum value: a negative one as its 64-bit two's complement, as protobuf has it.
function int32(v) {
  v |= 0;
  if (v >= 0) varint(v);
  else varintBig(BigInt(v));
}

// An int64 given as a decimal string or a number (longs: String).
function int64(v) {
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) {
    varint(v);
    return;
  }
  varintBig(BigInt.asIntN(64, BigInt(typeof v === 'number' ? Math.trunc(v) : String(v))));
}

const utf8Write = typeof Buffer.prototype.utf8Write === 'function'
  ? (buf, s, at) => buf.utf8Write(s, at)
  : (buf, s, at) => buf.write(s, at, 'utf8');

// A length-delimited string at the current position (its tag already written).
function string(s) {
  const len = s.length;
  if (len < 43) {
    // At most 126 bytes: a one-byte length, written once the text is.
    reserve(1 + 3 * len);
    const start = pos + 1;
    let i = 0;
    for (; i < len; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0x80) break;
      scratch[start + i] = c;
    }
    const n = i === len ? len : utf8Write(scratch, s, start);
    scratch[pos] = n;
    pos = start + n;
    return;
  }
  const n = Buffer.byteLength(s, 'utf8');
  varint(n);
  reserve(n);
  utf8Write(scratch, s, pos);
  pos += n;
}

// A length-delimited submessage: body writes it, and its length goes before it.
function sub(tag, body, v) {
  reserve(2);
  scratch[pos++] = tag;
  const at = pos++;
  body(v);
  const n = pos - at - 1;
  if (n < 0x80) {
    scratch[at] = n;
    return;
  }
  // A longer body: its length takes more bytes, and the body moves up to make room.
  const extra = varintSize(n) - 1;
  reserve(extra);
  scratch.copy(scratch, at + 1 + extra, at + 1, pos);
  const end = pos + extra;
  pos = at;
  varint(n);
  pos = end;
}

function tag(t) {
  reserve(1);
  scratch[pos++] = t;
}

const has = (v) => v !== undefined && v !== null;

const STATUS = new Map([['STATUS_UNSPECIFIED', 0], ['DONE', 1], ['FAILED', 2], ['SNOOZE', 3], ['CANCELLED', 4]]);

function resultError(e) {
  if (has(e.type)) { tag(0x0a); string(String(e.type)); }
  if (has(e.message)) { tag(0x12); string(String(e.message)); }
  if (has(e.traceback)) { tag(0x1a); string(String(e.traceback)); }
  if (has(e.retryable)) { tag(0x20); varint(e.retryable ? 1 : 0); }
  if (has(e.reason)) { tag(0x2a); string(String(e.reason)); }
}

function result(r) {
  if (has(r.id)) { tag(0x0a); string(String(r.id)); }
  if (has(r.status)) {
    const s = typeof r.status === 'number' ? r.status : STATUS.get(r.status);
    if (s !== undefined) { tag(0x10); int32(s); }
  }
  if (has(r.result_json)) { tag(0x1a); string(String(r.result_json)); }
  if (has(r.error)) sub(0x22, resultError, r.error);
  if (has(r.seconds)) {
    tag(0x29);
    reserve(8);
    scratch.writeDoubleLE(Number(r.seconds), pos);
    pos += 8;
  }
  if (has(r.reason)) { tag(0x32); string(String(r.reason)); }
}

function results(rs) {
  const list = rs.results;
  if (!has(list)) return;
  for (let i = 0; i < list.length; i++) sub(0x0a, result, list[i]);
}

function helloJob(j) {
  if (has(j.name)) { tag(0x0a); string(String(j.name)); }
  if (has(j.cancellable)) { tag(0x10); varint(j.cancellable ? 1 : 0); }
}

function runningJob(j) {
  if (has(j.id)) { tag(0x0a); string(String(j.id)); }
  if (has(j.name)) { tag(0x12); string(String(j.name)); }
}

function hello(h) {
  if (has(h.protocol)) { tag(0x08); int32(h.protocol); }
  if (has(h.sdk)) { tag(0x12); string(String(h.sdk)); }
  if (has(h.pid)) { tag(0x18); int32(h.pid); }
  if (has(h.jobs)) for (const j of h.jobs) sub(0x22, helloJob, j);
  if (has(h.concurrency)) { tag(0x28); int32(h.concurrency); }
  if (has(h.sync_concurrency)) { tag(0x30); int32(h.sync_concurrency); }
  if (has(h.running)) for (const j of h.running) sub(0x3a, runningJob, j);
  if (has(h.kept)) for (const id of h.kept) { tag(0x42); string(String(id)); }
  if (has(h.acks)) { tag(0x48); varint(h.acks ? 1 : 0); }
  if (has(h.batches)) { tag(0x50); varint(h.batches ? 1 : 0); }
  if (has(h.features)) { tag(0x58); varint(h.features ? 1 : 0); }
}

// An Enqueue (a child job, children.js): its optional fields only when set.
function enqueue(e) {
  if (has(e.parent)) { tag(0x0a); string(String(e.parent)); }
  if (has(e.id)) { tag(0x12); string(String(e.id)); }
  if (has(e.name)) { tag(0x1a); string(String(e.name)); }
  if (has(e.args_json)) { tag(0x22); string(String(e.args_json)); }
  if (has(e.queue)) { tag(0x2a); string(String(e.queue)); }
  if (has(e.priority)) { tag(0x30); int64(e.priority); }
  if (has(e.max_attempts)) { tag(0x38); int64(e.max_attempts); }
  if (has(e.delay_seconds)) {
    tag(0x41);
    reserve(8);
    scratch.writeDoubleLE(Number(e.delay_seconds), pos);
    pos += 8;
  }
  if (has(e.dedup_key)) { tag(0x4a); string(String(e.dedup_key)); }
  if (has(e.unique)) { tag(0x50); varint(e.unique ? 1 : 0); }
  if (has(e.immediate)) { tag(0x58); varint(e.immediate ? 1 : 0); }
}

function pong(p) {
  if (has(p.seq)) { tag(0x08); int64(p.seq); }
}

function empty() {}

// A HandlerMessage (the Session method's responseSerialize), from the object the SDK writes
// ({ hello }, { result }, { results: { results } }, { pong }, { draining }, { enqueue }).
function encodeHandlerMessage(m) {
  pos = 0;
  try {
    if (has(m.hello)) sub(0x0a, hello, m.hello);
    if (has(m.result)) sub(0x12, result, m.result);
    if (has(m.pong)) sub(0x1a, pong, m.pong);
    if (has(m.draining)) sub(0x22, empty, m.draining);
    if (has(m.results)) sub(0x2a, results, m.results);
    if (has(m.enqueue)) sub(0x32, enqueue, m.enqueue);
    const out = Buffer.allocUnsafe(pos);
    scratch.copy(out, 0, 0, pos);
    return out;
  } finally {
    if (scratch.length > 1 << 20) scratch = Buffer.allocUnsafe(64 << 10); // do not pin a huge message
    pos = 0;
  }
}

// The Session method definition of grpc-js with these functions in place of protobufjs's.
function withCodec(method) {
  return { ...method, requestDeserialize: decodeSidecarMessage, responseSerialize: encodeHandlerMessage };
}

module.exports = { decodeSidecarMessage, encodeHandlerMessage, withCodec, DecodeError };
