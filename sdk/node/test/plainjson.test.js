'use strict';
// The decoders' fast way (JSON.parse, when jsontext.js plainJSON finds nothing in a frame that
// could break a rule JSON.parse does not enforce) against their strict way (protocol.js's own
// parser, for every frame): the same message, or the same error, word for word, for every
// conformance vector, for frames made to sit on each rule's edge and for generated ones. The
// strict decoder is protocol.js loaded again with plainJSON answering false.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const fc = require('fast-check');
const jsontext = require('../jsontext');
const { plainJSON } = jsontext;
const fast = require('../protocol');

const strict = (() => {
  const file = require.resolve('../protocol');
  const cached = require.cache[file];
  delete require.cache[file];
  jsontext.plainJSON = () => false;
  try {
    return require('../protocol');
  } finally {
    jsontext.plainJSON = plainJSON;
    require.cache[file] = cached;
  }
})();

const VECTORS = path.join(__dirname, '..', '..', '..', 'protocol', 'testdata', 'vectors.json');
const vectors = JSON.parse(fs.readFileSync(VECTORS, 'utf8')).vectors;

// What a decoder makes of a frame: the message with its key order, or the error's code, field
// and words.
function outcome(decoder, ...args) {
  try {
    return { ok: shape(decoder(...args)) };
  } catch (err) {
    assert.ok(err instanceof fast.ProtocolError || err instanceof strict.ProtocolError, `not a ProtocolError: ${err}`);
    return { code: err.code, field: err.field, message: err.message };
  }
}

// A value with its key order (deepStrictEqual ignores it), -0 told from 0; below 200 levels of
// arrays, only how deep their first elements go (a frame may nest deeper than a recursion can
// follow).
function shape(v, depth = 0) {
  if (depth > 200 && Array.isArray(v)) {
    let levels = 0;
    for (; Array.isArray(v); levels++) v = v[0];
    return ['deep', levels, shape(v)];
  }
  if (Array.isArray(v)) return ['[]', v.map((x) => shape(x, depth + 1))];
  if (v !== null && typeof v === 'object') return ['{}', Object.entries(v).map(([k, x]) => [k, shape(x, depth + 1)])];
  return Object.is(v, -0) ? '-0' : v;
}

function same(frame, opts = {}) {
  assert.deepStrictEqual(outcome(fast.decode, frame, opts), outcome(strict.decode, frame, opts), frame.toString());
}

test('the strict decoder takes no fast way', () => {
  const frame = '{"type":"ping","seq":1}';
  assert.equal(plainJSON(frame), true);
  // Proof that `strict` is another copy, whose answer for a frame plainJSON passes is its own.
  assert.notEqual(strict.decode, fast.decode);
  assert.deepStrictEqual(strict.decode(frame), fast.decode(frame));
});

test('every conformance vector decodes the same both ways', () => {
  for (const v of vectors) {
    const bytes = 'frame' in v ? Buffer.from(v.frame, 'utf8') : Buffer.from(v.frame_b64, 'base64');
    same(bytes, v.max_frame_bytes === undefined ? {} : { maxFrameBytes: v.max_frame_bytes });
  }
});

const JOB = '{"type":"job","id":"j1","name":"n","args":ARGS,"attempt":ATTEMPT,"max_attempts":3,"queue":"q"}';
const job = (args, attempt = '1') => JOB.replace('ARGS', args).replace('ATTEMPT', attempt);

test('frames on the edge of each rule decode the same both ways', () => {
  const attempts = ['1', '1.0', '1e0', '10E-1', '-0', '0', '-1', '123456789012345', '1234567890123456', '9007199254740991',
    '9007199254740993', '1e400', '-2e308', '9'.repeat(310), '01', '-', '1.', '"1"', 'null', 'true', '[1]', '{"a":1}'];
  for (const a of attempts) same(job('{}', a));
  const args = ['{}', '{"a":1.5}', '{"a":-0}', '{"a":1e5}', '{"a":1E400}', `{"a":${'9'.repeat(308)}}`, `{"a":${'9'.repeat(309)}}`,
    `{"a":${'9'.repeat(310)}.5}`, '{"a":[1.0,{"b":2e-3}]}', '{"s":"\\ud800"}', '{"s":"\\uD83D\\uDE00"}', '{"s":"\\uDE00\\uD83D"}',
    '{"s":"\\udbff"}', '{"s":"\\u00e9\\n\\"\\\\"}', '{"s":"\\\\ud800"}', '{"a":1,"a":2}', '{"a":1.5,"a":"x"}',
    '{"__proto__":{"x":1}}', '{"__proto__":1,"__proto__":2}', '{"2":1,"1":2,"b":3}', '[1]', '1', '"s"', 'null',
    '{"a":NaN}', '{"a":Infinity}', '{"a":1,}', '{"a":01}', "{'a':1}", '{"a":"\u0001"}', '{"a":tru}',
    '{"d":' + '['.repeat(9997) + ']'.repeat(9997) + '}', '{"d":' + '['.repeat(9998) + ']'.repeat(9998) + '}',
    '{"d":' + '['.repeat(9999) + ']'.repeat(9999) + '}'];
  for (const a of args) same(job(a));
  // Integers directly in the frame, of every frame type that has them.
  for (const n of ['0', '1', '-0', '1.0', '2e0', '18446744073709551616']) {
    same(`{"type":"ping","seq":${n}}`);
    same(`{"type":"hello","protocol":${n},"sdk":"s","pid":${n},"jobs":[{"name":"a","cancellable":true}],"concurrency":${n}}`);
    same(`{"type":"result","id":"r","status":"snooze","seconds":${n}}`);
  }
  // An integer field of a frame type whose fast way cannot tell its text: a nested one.
  same('{"type":"result","id":"r","status":"failed","error":{"type":"E","message":"m","retryable":1.0}}');
  same('  {"type":"shutdown"}  ');
  same('{"type":"shutdown"} {"type":"shutdown"}');
  same('\ufeff{"type":"shutdown"}');
});

test('job frames with each field on its edge decode the same both ways', () => {
  // The fast way checks a plain job frame's fields without a Reader (protocol.js plainJob):
  // each field absent, null, of another type, empty or below its minimum, one at a time.
  const base = {
    id: '"j1"', name: '"n"', args: '{}', attempt: '1', max_attempts: '3', queue: '"q"', deadline: '1765000000000',
    traceparent: '"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"', worker_id: '"w"',
    scheduled_at: '-1', created_at: '0',
  };
  const values = [undefined, 'null', '""', '"x"', '0', '1', '-1', '2', '9007199254740991', '-9007199254740991',
    '9007199254740992', '{}', '[]', 'true', '{"a":1}'];
  const frame = (fields) => `{"type":"job",${Object.entries(fields).filter(([, v]) => v !== undefined).map(([k, v]) => `"${k}":${v}`).join(',')}}`;
  same(frame(base));
  for (const key of Object.keys(base)) {
    for (const v of values) same(frame({ ...base, [key]: v }));
    const { [key]: _, ...rest } = base;
    same(frame({ ...rest, [key]: base[key] })); // another key order
  }
  same('{"type":"job","id":"j","name":"n","args":{},"attempt":1,"max_attempts":1,"queue":"","extra":[1,2]}');
  same('{"type":"job","id":"j","id":"k","name":"n","args":{},"attempt":2,"max_attempts":1,"queue":"q","attempt":1}');
  same('{"type":"job","__proto__":{"id":"j"},"name":"n","args":{},"attempt":1,"max_attempts":1,"queue":"q"}');
});

test('generated frames decode the same both ways', () => {
  const json = fc.letrec((tie) => ({
    value: fc.oneof({ depthSize: 'small' }, fc.constant(null), fc.boolean(), fc.integer(), fc.double(), fc.string({ unit: 'grapheme' }),
      fc.string({ unit: 'binary' }), fc.array(tie('value'), { maxLength: 4 }), fc.dictionary(fc.string(), tie('value'), { maxKeys: 4 })),
  })).value;
  // Numbers as a frame may write them, beyond what JSON.stringify writes.
  const number = fc.oneof(fc.integer().map(String), fc.double({ noNaN: true }).map((d) => JSON.stringify(d) ?? '0'),
    fc.tuple(fc.integer({ min: -400, max: 400 }), fc.integer({ min: -400, max: 400 })).map(([a, e]) => `${a}e${e}`),
    fc.stringMatching(/^-?(0|[1-9][0-9]{0,320})(\.[0-9]{1,4})?$/));
  fc.assert(fc.property(json, number, number, (args, attempt, extra) => {
    const text = JSON.stringify(args) ?? 'null';
    same(job(text.replace(/1/g, extra), attempt));
    same(`{"type":"job","id":"j","name":"n","args":{"v":${text},"n":${extra}},"attempt":${attempt},"max_attempts":${extra},"queue":"q","x":${extra}}`);
    same(fast.encode({ type: 'job', id: 'j', name: 'n', args: { v: args }, attempt: 1, max_attempts: 1, queue: 'q' }));
    // The Session stream's way: args apart from the frame, the integers as text.
    assert.deepStrictEqual(
      outcome(fast.decodeJobMessage, { id: 'j', name: 'n', queue: 'q' }, text, { attempt: attempt, max_attempts: '2' }),
      outcome(strict.decodeJobMessage, { id: 'j', name: 'n', queue: 'q' }, text, { attempt: attempt, max_attempts: '2' }));
  }), { seed: 20261206, numRuns: 2000 });
});

test('plainJSON passes the frames a sidecar sends and stops at what only the strict parser can judge', () => {
  assert.equal(plainJSON(job('{"a":[1.5,-2,{"b":"\\u00e9"}],"c":true,"d":false,"e":null}')), true);
  for (const [text, why] of [
    [job('{}', '1.0'), 'a fraction directly in the frame'],
    [job('{}', '-0'), '-0 directly in the frame'],
    [job('{}', '1234567890123456'), 'an integer directly in the frame that may not print back as written'],
    [job('{"a":1e2}'), 'an exponent'],
    [job(`{"a":${'1'.repeat(309)}}`), 'an integer part that may round to infinity'],
    [job('{"s":"\\uDbFf"}'), 'a surrogate escape'],
    ['['.repeat(10001), 'nesting too deep'],
  ]) assert.equal(plainJSON(text), false, why);
  // The args of a Session's Job stand one level down: a fraction there is the handler's data.
  assert.equal(plainJSON('{"a":1.5}', 1), true);
  assert.equal(plainJSON('{"a":1.5}'), false);
});
