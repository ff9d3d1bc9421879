'use strict';
// Runs every protocol v1 conformance vector through the decoder and the encoder.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { decode, encode, ProtocolError } = require('../protocol');

const VECTORS = path.join(__dirname, '..', '..', '..', 'protocol', 'testdata', 'vectors.json');
const file = JSON.parse(fs.readFileSync(VECTORS, 'utf8'));

function frameBytes(v) {
  if (('frame' in v) === ('frame_b64' in v)) throw new Error(`vector ${v.name}: exactly one of frame/frame_b64`);
  return 'frame' in v ? Buffer.from(v.frame, 'utf8') : Buffer.from(v.frame_b64, 'base64');
}

// Key order matters for "decoded" (table order); deepStrictEqual ignores it, so compare it too.
function keyOrder(v) {
  if (Array.isArray(v)) return v.map(keyOrder);
  if (v !== null && typeof v === 'object') return Object.entries(v).map(([k, x]) => [k, keyOrder(x)]);
  return null;
}

test('vectors file is protocol 1 and not empty', () => {
  assert.equal(file.protocol, 1);
  assert.ok(Array.isArray(file.vectors) && file.vectors.length > 0);
  assert.ok(file.vectors.some((v) => v.valid) && file.vectors.some((v) => !v.valid));
});

for (const v of file.vectors) {
  test(`vector: ${v.name}`, () => {
    const opts = v.max_frame_bytes === undefined ? {} : { maxFrameBytes: v.max_frame_bytes };
    const bytes = frameBytes(v);
    if (v.valid) {
      const decoded = decode(bytes, opts);
      assert.deepStrictEqual(decoded, v.decoded);
      assert.deepStrictEqual(keyOrder(decoded), keyOrder(v.decoded), 'key order');
      if (v.encoded !== undefined) {
        assert.equal(encode(v.decoded), v.encoded);
        assert.equal(encode(decoded), v.encoded);
      }
      // The canonical encoding decodes back to the same message.
      assert.deepStrictEqual(decode(encode(decoded), opts), decoded);
    } else {
      assert.throws(() => decode(bytes, opts), (err) => {
        assert.ok(err instanceof ProtocolError, `not a ProtocolError: ${err}`);
        assert.deepStrictEqual({ code: err.code, field: err.field }, { code: v.error.code, field: v.error.field ?? null });
        return true;
      });
    }
  });
}
