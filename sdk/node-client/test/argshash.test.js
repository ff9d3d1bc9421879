'use strict';
// args_hash against the shared vectors (Soniq 0.1.0's compute_args_hash made them; Go checks
// them too), and what JSON cannot hold faithfully refused with the place named.
const test = require('node:test');
const assert = require('node:assert/strict');
const { argsHash, ArgsError } = require('..');
const { normalizeArgs, pythonJSON } = require('../argshash');
const { vectors } = require('./support/db');

const file = vectors();

test('the vectors are there', () => {
  assert.ok(file.args_hash.length >= 20);
  assert.ok(file.args_hash.some((v) => v.node_args_hash), 'cases where a JS number reads differently are marked');
});

for (const v of file.args_hash) {
  test(`args_hash vector: ${v.name}`, () => {
    // What a producer holding JSON.parse(args) writes; node_args_hash where JavaScript's
    // numbers read the text differently from Python's (1.0 is the number 1).
    assert.equal(argsHash(JSON.parse(v.args)), v.node_args_hash ?? v.args_hash, v.args);
  });
}

test('a JavaScript 1.0 is the number 1 and hashes as Soniq hashes the int 1', () => {
  const one = file.args_hash.find((v) => v.args === '{"a":1}');
  const oneFloat = file.args_hash.find((v) => v.args === '{"a":1.0}');
  assert.equal(argsHash({ a: 1.0 }), one.args_hash);
  assert.equal(oneFloat.node_args_hash, one.args_hash);
  assert.notEqual(oneFloat.args_hash, one.args_hash, 'Python tells them apart');
  assert.equal(normalizeArgs({ a: 1.0 }).text, '{"a":1}', 'and the stored args say 1, as the hash does');
});

test('Python repr of floats and ensure_ascii', () => {
  assert.equal(pythonJSON({ f: [0.1, 1.5e-7, 1e-5, 0.0001, 1e21, -2.5, 5e-324, 1.7976931348623157e308, 123456.789] }),
    '{"f":[0.1,1.5e-07,1e-05,0.0001,1e+21,-2.5,5e-324,1.7976931348623157e+308,123456.789]}');
  assert.equal(pythonJSON({ s: 'é🎉\u007f\n"/' }), '{"s":"\\u00e9\\ud83c\\udf89\\u007f\\n\\"/"}');
  assert.equal(pythonJSON({ '\uff01': 1, '\ud83d\ude00': 2 }), '{"\\uff01":1,"\\ud83d\\ude00":2}', 'code point order');
  assert.equal(pythonJSON({ z: -0 }), '{"z":0}');
});

test('args as JSON.stringify writes them: toJSON, undefined dropped', () => {
  const d = new Date('2026-01-02T03:04:05.678Z');
  assert.equal(normalizeArgs({ at: d, gone: undefined, f() {}, list: [undefined, 1] }).text,
    '{"at":"2026-01-02T03:04:05.678Z","list":[null,1]}');
  assert.equal(argsHash({ at: d }), argsHash({ at: '2026-01-02T03:04:05.678Z' }));
});

test('what JSON cannot hold is refused, naming where', () => {
  const cyc = { a: {} };
  cyc.a.self = cyc;
  const cases = [
    [[1], /args must be a plain object \(a JSON object\), got an array/],
    [null, /got null/],
    ['x', /got a string/],
    [new Date(), /got a Date object/],
    [{ n: NaN }, /args\.n is NaN/],
    [{ deep: [1, { x: Infinity }] }, /args\.deep\[1\]\.x is Infinity/],
    [{ b: 10n }, /args\.b is a BigInt/],
    [cyc, /args\.a\.self refers back/],
    [{ m: new Map() }, /args\.m is a Map/],
    [{ s: 'a\u0000b' }, /args\.s contains U\+0000/],
    [{ s: 'x\ud800' }, /args\.s contains a lone surrogate/],
    [{ ['k\udc00']: 1 }, /key .* contains a lone surrogate/],
  ];
  for (const [args, re] of cases) {
    assert.throws(() => argsHash(args), (e) => e instanceof ArgsError && re.test(e.message), String(re));
  }
});
