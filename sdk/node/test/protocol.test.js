'use strict';
// Codec behaviour beyond the shared vectors (SDK-side concerns).
const { test } = require('node:test');
const assert = require('node:assert/strict');
const { decode, encode, ProtocolError } = require('../protocol');
const { negotiateVersion } = require('../index');

const fails = (frame, code, field = null, opts) => assert.throws(() => decode(frame, opts), (e) => {
  assert.ok(e instanceof ProtocolError);
  assert.deepEqual([e.code, e.field], [code, field]);
  return true;
});

test('encoder replaces unpaired surrogates so the sidecar can decode the frame', () => {
  const text = encode({ type: 'result', id: 'j', status: 'done', result: { ['k\udc00']: 'a\ud800b \ud83d\ude00 \\ud800' } });
  assert.equal(text, '{"type":"result","id":"j","status":"done","result":{"k\ufffd":"a\ufffdb \ud83d\ude00 \\\\ud800"}}');
  assert.deepEqual(decode(text).result, { 'k\ufffd': 'a\ufffdb \ud83d\ude00 \\ud800' });
});

test('encoder writes only the fields that belong to the status, in table order', () => {
  assert.equal(
    encode({ reason: 'r', seconds: 2, error: { message: 'm', type: 'E' }, result: 1, status: 'snooze', id: 'j', type: 'result', extra: 1 }),
    '{"type":"result","id":"j","status":"snooze","seconds":2,"reason":"r"}',
  );
  assert.equal(
    encode({ type: 'result', id: 'j', status: 'failed', result: 1, error: { retryable: false, traceback: null, message: 'm', type: 'E', x: 1 } }),
    '{"type":"result","id":"j","status":"failed","error":{"type":"E","message":"m","retryable":false}}',
  );
  assert.throws(() => encode({ type: 'nope' }), TypeError);
  assert.throws(() => encode({ type: 'result', id: 'j', status: 'done', result: { n: 1n } }), TypeError);
});

test('decoder: deep nesting is invalid_json, not a crash; strings are UTF-8 encoded', () => {
  fails(`{"type":"shutdown","x":${'['.repeat(100000)}${']'.repeat(100000)}}`, 'invalid_json');
  assert.deepEqual(decode(`{"type":"shutdown","x":${'['.repeat(5000)}${']'.repeat(5000)}}`), { type: 'shutdown' });
  assert.deepEqual(decode('{"type":"ping","seq":-0}'), { type: 'ping', seq: 0 });
  fails('{"type":"ping","seq":01}', 'invalid_json');
  fails('{"type":"ping","seq":1.}', 'invalid_json');
  assert.deepEqual(decode('{"type":"ping","seq":1}\r\r'), { type: 'ping', seq: 1 }); // one stripped, one whitespace
});

test('decoder: the size limit excludes one trailing carriage return', () => {
  const frame = '{"type":"ping","seq":1}';
  assert.deepEqual(decode(`${frame}\r`, { maxFrameBytes: frame.length }), { type: 'ping', seq: 1 });
  fails(`${frame} `, 'oversize', null, { maxFrameBytes: frame.length });
});

test('decoder: __proto__ keys stay plain data', () => {
  const msg = decode('{"type":"job","id":"j","name":"n","args":{"__proto__":{"polluted":true}},"attempt":1,"max_attempts":1,"queue":""}');
  assert.equal(Object.getPrototypeOf(msg.args), Object.prototype);
  assert.deepEqual(Object.keys(msg.args), ['__proto__']);
  assert.equal({}.polluted, undefined);
});

test('version negotiation', () => {
  assert.equal(negotiateVersion(undefined), 1);
  assert.equal(negotiateVersion(' 1 '), 1);
  assert.equal(negotiateVersion('2, 1, x, -1'), 1);
  assert.equal(negotiateVersion('2,3'), null);
  assert.equal(negotiateVersion(''), null);
  assert.equal(negotiateVersion('3', [1, 2, 3]), 3);
  assert.equal(negotiateVersion('1,2', [1, 2, 3]), 2);
});
