'use strict';
// The hand-written Session codec (codec.js) against protobufjs, which @grpc/proto-loader would
// use in its place: the same objects from the same bytes, the same bytes from the same objects.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const fc = require('fast-check');
const protobuf = require('protobufjs');
const protoLoader = require('@grpc/proto-loader');
const { decodeSidecarMessage, encodeHandlerMessage } = require('../codec');

const PROTO = path.join(__dirname, '..', 'proto', 'handler.proto');
const root = protobuf.loadSync(PROTO);
const SidecarMessage = root.lookupType('soniq.handler.v1.SidecarMessage');
const HandlerMessage = root.lookupType('soniq.handler.v1.HandlerMessage');
const OPTIONS = { keepCase: true, longs: String, enums: String, defaults: false, oneofs: true };
const def = protoLoader.loadSync(PROTO, OPTIONS);
const method = def['soniq.handler.v1.Handler'].Session;

// What proto-loader's deserializer gives, less the synthetic `_field` keys of optional fields.
function reference(buf) {
  const strip = (v) => {
    if (Array.isArray(v)) return v.map(strip);
    if (v && typeof v === 'object') {
      const out = {};
      for (const [k, x] of Object.entries(v)) if (!k.startsWith('_')) out[k] = strip(x);
      return out;
    }
    return v;
  };
  return strip(method.requestDeserialize(buf));
}

const text = fc.oneof(
  fc.string({ maxLength: 20 }),
  fc.string({ unit: 'grapheme', maxLength: 60 }),
  fc.string({ unit: 'binary', maxLength: 300 }).map((s) => s.replace(/[\uD800-\uDFFF]/g, '')),
  fc.constantFrom('', 'é', '日本語', '😀', 'a'.repeat(42), 'é'.repeat(43), 'x'.repeat(200), 'ü'.repeat(5000)),
);
const int64 = fc.oneof(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), fc.constantFrom(0n, 1n, -1n, 2n ** 53n, 2n ** 49n - 1n, 2n ** 49n, 2n ** 63n - 1n, -(2n ** 63n)));
const int32 = fc.oneof(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), fc.constantFrom(0, 1, 127, 128, -1, 2 ** 31 - 1, -(2 ** 31)));
const opt = (arb) => fc.option(arb, { nil: undefined });

const job = fc.record({
  id: opt(text), name: opt(text), args_json: opt(text), attempt: opt(int32), max_attempts: opt(int32), queue: opt(text),
  deadline_ms: opt(int64), traceparent: opt(text), worker_id: opt(text), scheduled_at_ms: opt(int64), created_at_ms: opt(int64),
}, { requiredKeys: [] });
const sidecar = fc.oneof(
  job.map((j) => ({ job: j })),
  fc.record({ id: opt(text), reason: opt(text) }, { requiredKeys: [] }).map((c) => ({ cancel: c })),
  fc.record({ seq: opt(int64) }, { requiredKeys: [] }).map((p) => ({ ping: p })),
  fc.constant({ shutdown: {} }),
  fc.array(text, { maxLength: 5 }).map((ids) => ({ ack: { ids } })),
  fc.array(job, { maxLength: 8 }).map((jobs) => ({ jobs: { jobs } })),
  fc.record({ id: opt(text), job_id: opt(text), error_code: opt(text), error_message: opt(text) }, { requiredKeys: [] })
    .map((e) => ({ enqueued: e })),
  fc.array(text, { maxLength: 5 }).map((names) => ({ features: { names } })),
  fc.constant({}),
);

const toLong = (v) => (typeof v === 'bigint' ? protobuf.util.Long.fromString(v.toString()) : v);
function longs(v) {
  if (typeof v === 'bigint') return toLong(v);
  if (Array.isArray(v)) return v.map(longs);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).filter(([, x]) => x !== undefined).map(([k, x]) => [k, longs(x)]));
  return v;
}

// Unknown fields of every wire type, to be skipped wherever they appear.
function unknownFields(n) {
  const fields = [
    (w) => w.uint32((100 << 3) | 0).uint64(protobuf.util.Long.fromString('18446744073709551615', true)),
    (w) => w.uint32((101 << 3) | 1).fixed64(7),
    (w) => w.uint32((102 << 3) | 2).string('unknown é'),
    (w) => w.uint32((103 << 3) | 5).fixed32(9),
    (w) => w.uint32((104 << 3) | 3).uint32((1 << 3) | 0).uint32(5).uint32((104 << 3) | 4),
  ];
  const w = protobuf.Writer.create();
  for (const f of fields.slice(0, n)) f(w);
  return Buffer.from(w.finish());
}

test('codec: SidecarMessages decode as protobufjs decodes them', () => {
  fc.assert(fc.property(sidecar, (m) => {
    const buf = Buffer.from(SidecarMessage.encode(SidecarMessage.fromObject(longs(m))).finish());
    assert.deepEqual(decodeSidecarMessage(buf), reference(buf));
  }), { numRuns: 2000 });
});

test('codec: unknown fields, in the message and inside a job, are skipped as protobufjs skips them', () => {
  fc.assert(fc.property(job, fc.integer({ min: 0, max: 5 }), fc.integer({ min: 0, max: 5 }), (j, a, b) => {
    const inner = Buffer.concat([unknownFields(a), Buffer.from(root.lookupType('soniq.handler.v1.Job').encode(longs(j)).finish()), unknownFields(b)]);
    const w = protobuf.Writer.create();
    w.uint32((1 << 3) | 2).bytes(inner);
    const buf = Buffer.concat([unknownFields(b), Buffer.from(w.finish()), unknownFields(a)]);
    assert.deepEqual(decodeSidecarMessage(buf), reference(buf));
    const batch = protobuf.Writer.create();
    batch.uint32((1 << 3) | 2).bytes(inner).uint32((1 << 3) | 2).bytes(inner);
    const jobs = protobuf.Writer.create();
    jobs.uint32((6 << 3) | 2).bytes(Buffer.concat([Buffer.from(batch.finish()), unknownFields(a)]));
    const jb = Buffer.from(jobs.finish());
    assert.deepEqual(decodeSidecarMessage(jb), reference(jb));
  }), { numRuns: 500 });
});

test('codec: a field sent twice, and two members of the oneof, decode as protobufjs has them', () => {
  const a = SidecarMessage.encode({ job: { id: 'a', attempt: 1 } }).finish();
  const b = SidecarMessage.encode({ job: { id: 'b', name: 'n' } }).finish();
  const c = SidecarMessage.encode({ ping: { seq: 5 } }).finish();
  for (const buf of [Buffer.concat([a, b]), Buffer.concat([c, a]), Buffer.concat([a, c])]) {
    assert.deepEqual(decodeSidecarMessage(buf), reference(buf));
  }
});

test('codec: malformed bytes are refused', () => {
  for (const bytes of [[0x0a, 0x05, 0x0a], [0x0a], [0x0a, 0x80], [0x0f], [0x0a, 0x02, 0x08, 0x80]]) {
    assert.throws(() => decodeSidecarMessage(Buffer.from(bytes)));
    assert.throws(() => reference(Buffer.from(bytes)));
  }
});

const status = fc.constantFrom('DONE', 'FAILED', 'SNOOZE', 'CANCELLED', 'STATUS_UNSPECIFIED', 2);
const result = fc.record({
  id: opt(text), status: opt(status), result_json: opt(text),
  error: opt(fc.record({ type: opt(text), message: opt(text), traceback: opt(text), retryable: opt(fc.boolean()), reason: opt(text) }, { requiredKeys: [] })),
  seconds: opt(fc.oneof(fc.double({ noNaN: true }), fc.constantFrom(0, 1.5, -0, 1e300, Number.MAX_VALUE))), reason: opt(text),
}, { requiredKeys: [] });
const handler = fc.oneof(
  result.map((r) => ({ result: r })),
  fc.array(result, { maxLength: 20 }).map((results) => ({ results: { results } })),
  fc.record({ seq: opt(int64.map(String)) }, { requiredKeys: [] }).map((p) => ({ pong: p })),
  fc.constant({ draining: {} }),
  fc.record({
    protocol: opt(int32), sdk: opt(text), pid: opt(int32),
    jobs: opt(fc.array(fc.record({ name: opt(text), cancellable: opt(fc.boolean()) }, { requiredKeys: [] }), { maxLength: 4 })),
    concurrency: opt(int32), sync_concurrency: opt(int32),
    running: opt(fc.array(fc.record({ id: opt(text), name: opt(text) }, { requiredKeys: [] }), { maxLength: 4 })),
    kept: opt(fc.array(text, { maxLength: 4 })), acks: opt(fc.boolean()), batches: opt(fc.boolean()),
    features: opt(fc.boolean()),
  }, { requiredKeys: [] }).map((hello) => ({ hello })),
  fc.record({
    parent: opt(text), id: opt(text), name: opt(text), args_json: opt(text), queue: opt(text),
    priority: opt(int64.map(String)), max_attempts: opt(int64.map(String)),
    delay_seconds: opt(fc.oneof(fc.double({ noNaN: true }), fc.constantFrom(0, 2.5, 1e9))),
    dedup_key: opt(text), unique: opt(fc.boolean()), immediate: opt(fc.boolean()),
  }, { requiredKeys: [] }).map((enqueue) => ({ enqueue })),
);

test('codec: HandlerMessages encode to the bytes protobufjs writes', () => {
  fc.assert(fc.property(handler, (m) => {
    assert.deepEqual(encodeHandlerMessage(m), Buffer.from(method.responseSerialize(m)));
  }), { numRuns: 2000 });
});

test('codec: a large batch of results, with bodies of every length prefix size', () => {
  const results = [];
  for (const n of [0, 1, 42, 43, 127, 128, 200, 16383, 16384, 70000, 2100000]) {
    results.push({ id: `j${n}`, status: 'DONE', result_json: JSON.stringify('é'.repeat(n)) });
  }
  const m = { results: { results } };
  assert.deepEqual(encodeHandlerMessage(m), Buffer.from(method.responseSerialize(m)));
  // The scratch buffer grew for that one and is released after it; small messages still agree.
  const small = { result: { id: 'x', status: 'FAILED', error: { type: 'E', message: 'm', retryable: false } } };
  assert.deepEqual(encodeHandlerMessage(small), Buffer.from(method.responseSerialize(small)));
});

test('codec: a lone surrogate is written as U+FFFD, valid UTF-8', () => {
  for (const s of ['a\uD800b', '\uDC00'.repeat(50)]) {
    const buf = encodeHandlerMessage({ result: { id: s, status: 'DONE' } });
    const back = HandlerMessage.toObject(HandlerMessage.decode(buf));
    assert.equal(back.result.id, s.replace(/[\uD800-\uDFFF]/g, '\uFFFD'));
  }
});
