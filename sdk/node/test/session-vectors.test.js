'use strict';
// The conformance vectors of the sidecar → handler direction over a real Session: each frame
// that a SidecarMessage can carry is sent as that message to the example handler serving a
// socket of its own (--listen), through a real @grpc/grpc-js client, with the vector's
// expected outcome: a valid frame is taken (a job answered by its result, a ping by its pong,
// a cancel silently, a shutdown by the end of the session), an invalid one ends the session
// with INVALID_ARGUMENT and the protocol error the stdio decoder reports.
const nodeTest = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { Listening, openSession, tempDir, grpc } = require('./support/attach');

const VECTORS = path.join(__dirname, '..', '..', '..', 'protocol', 'testdata', 'vectors.json');
const file = JSON.parse(fs.readFileSync(VECTORS, 'utf8'));

const KNOWN = {
  job: ['type', 'id', 'name', 'args', 'attempt', 'max_attempts', 'queue', 'deadline', 'traceparent', 'worker_id', 'scheduled_at', 'created_at'],
  cancel: ['type', 'id', 'reason'],
  ping: ['type', 'seq'],
  shutdown: ['type'],
};
const INT = /^-?(?:0|[1-9][0-9]*)$/;
const INT32 = [-(2n ** 31n), 2n ** 31n - 1n];
const INT64 = [-(2n ** 63n), 2n ** 63n - 1n];
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

// The top-level members of a JSON object as [key, raw value text], or null when the text is
// no JSON object. Raw text keeps what JSON.parse would lose (1.0 against 1, 1e400, 2^63).
function members(text) {
  try {
    const v = JSON.parse(text);
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return null;
  } catch {
    return null;
  }
  let i = 0;
  const ws = () => { while (/\s/.test(text[i] ?? '')) i++; };
  const skipString = () => {
    i++;
    while (text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
    i++;
  };
  const skipValue = () => {
    if (text[i] === '"') return skipString();
    if (text[i] === '{' || text[i] === '[') {
      let depth = 0;
      do {
        if (text[i] === '"') {
          skipString();
          continue;
        }
        if (text[i] === '{' || text[i] === '[') depth++;
        if (text[i] === '}' || text[i] === ']') depth--;
        i++;
      } while (depth > 0);
      return undefined;
    }
    while (i < text.length && !/[\s,}\]]/.test(text[i])) i++;
    return undefined;
  };
  const out = [];
  ws();
  i++; // {
  for (;;) {
    ws();
    if (text[i] === '}') return out;
    const k0 = i;
    skipString();
    const key = JSON.parse(text.slice(k0, i));
    ws();
    i++; // :
    ws();
    const v0 = i;
    skipValue();
    out.push([key, text.slice(v0, i)]);
    ws();
    if (text[i] === ',') i++;
  }
}

const int = (raw, [lo, hi]) => INT.test(raw) && BigInt(raw) >= lo && BigInt(raw) <= hi;
const str = (raw) => {
  if (raw === undefined || raw[0] !== '"') return undefined;
  const s = JSON.parse(raw);
  return LONE_SURROGATE.test(s) ? undefined : s; // protobuf strings are UTF-8
};

// The SidecarMessage that carries the vector's frame, or null when protobuf cannot express it
// (no JSON object, a handler → sidecar type, a member the message has no field for, a value
// of a type or range its field cannot hold, a required member missing that proto3 would turn
// into its default). A job's args travel as the JSON text they are in the frame.
function asMessage(v) {
  let text;
  try {
    text = 'frame' in v ? v.frame : new TextDecoder('utf-8', { fatal: true }).decode(Buffer.from(v.frame_b64, 'base64'));
  } catch {
    return null;
  }
  const list = members(text);
  if (!list) return null;
  const m = new Map(list); // a duplicate member: the last one wins, as in the decoder
  const type = m.has('type') ? str(m.get('type')) : undefined;
  if (!type || !KNOWN[type]) return null;
  if ([...m.keys()].some((k) => !KNOWN[type].includes(k))) return null;
  if (type === 'shutdown') return { shutdown: {} };
  if (type === 'ping') return m.has('seq') && int(m.get('seq'), INT64) ? { ping: { seq: m.get('seq') } } : null;
  if (type === 'cancel') {
    const [id, reason] = [str(m.get('id')), str(m.get('reason'))];
    return id === undefined || reason === undefined ? null : { cancel: { id, reason } };
  }
  const job = {};
  for (const k of ['id', 'name', 'queue']) {
    job[k] = str(m.get(k));
    if (job[k] === undefined) return null;
  }
  for (const k of ['attempt', 'max_attempts']) {
    if (!m.has(k) || !int(m.get(k), INT32)) return null;
    job[k] = Number(m.get(k));
  }
  if (m.has('args')) job.args_json = m.get('args');
  for (const [k, field] of [['deadline', 'deadline_ms'], ['scheduled_at', 'scheduled_at_ms'], ['created_at', 'created_at_ms']]) {
    if (!m.has(k) || m.get(k) === 'null') continue;
    if (!int(m.get(k), INT64)) return null;
    job[field] = m.get(k);
  }
  for (const k of ['traceparent', 'worker_id']) {
    if (!m.has(k) || m.get(k) === 'null') continue;
    job[k] = str(m.get(k));
    if (job[k] === undefined) return null;
  }
  return { job };
}

const CASES = file.vectors.map((v) => [v, asMessage(v)]).filter(([, msg]) => msg !== null);

// One listening handler per frame limit the vectors use, for the whole file.
const dir = tempDir();
const handlers = new Map();
async function handlerFor(limit) {
  if (!handlers.has(limit)) {
    const env = limit === undefined ? {} : { SONIQ_MAX_FRAME_BYTES: String(limit) };
    handlers.set(limit, new Listening(path.join(dir, `v${handlers.size}.sock`), { env }).listening());
  }
  return handlers.get(limit);
}
nodeTest.after(async () => {
  for (const h of handlers.values()) (await h).kill();
});

nodeTest('enough vectors travel over a Session', () => {
  const valid = CASES.filter(([v]) => v.valid).length;
  const invalid = CASES.length - valid;
  assert.ok(valid >= 25 && invalid >= 15, `valid ${valid}, invalid ${invalid}`);
  for (const kind of ['job', 'cancel', 'ping', 'shutdown']) {
    assert.ok(CASES.some(([v, msg]) => v.valid && msg[kind]), `a valid ${kind}`);
  }
  for (const kind of ['job', 'cancel', 'ping']) {
    assert.ok(CASES.some(([v, msg]) => !v.valid && msg[kind]), `an invalid ${kind}`);
  }
});

for (const [v, msg] of CASES) {
  nodeTest(`vector over a Session: ${v.name}`, async () => {
    const h = await handlerFor(v.max_frame_bytes);
    const { c } = await openSession(h.sock);
    try {
      c.send(msg);
      if (!v.valid) {
        const end = await c.ended();
        const want = `protocol error: ${v.error.code}${v.error.field ? ` at ${v.error.field}` : ''}`;
        assert.equal(end.code, grpc.status.INVALID_ARGUMENT, JSON.stringify(end));
        assert.ok(end.details.startsWith(want), `${end.details} does not start with ${want}`);
        assert.ok(h.running, 'the process outlives the session');
        return;
      }
      if (msg.shutdown) {
        assert.equal((await c.ended()).code, grpc.status.OK); // holds no job: ends at once
        return;
      }
      if (msg.job) {
        assert.equal((await c.result()).id, msg.job.id);
      } else if (msg.ping) {
        assert.equal((await c.next('pong')).pong.seq, msg.ping.seq);
      }
      await c.sync(9); // a cancel has no answer: the pong shows it was taken
      c.send({ shutdown: {} });
      assert.equal((await c.ended()).code, grpc.status.OK);
    } finally {
      c.close();
    }
  });
}
