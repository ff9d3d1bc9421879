'use strict';
// Helpers on JSON text shared by the frame encoder (protocol.js) and the Runtime's check of a
// result it does not write as a frame (runtime.js); not part of the package's interface.

// The deepest a frame may nest, its own object included (what decoders take).
const MAX_DEPTH = 10000;

// JSON.stringify writes an unpaired UTF-16 surrogate as a `\udXXX` escape, which decoders
// reject; replace each with U+FFFD (as Go and Python's "replace" error handler do).
function replaceLoneSurrogates(json) {
  if (!/\\ud[89a-f]/.test(json)) return json;
  let out = '';
  let start = 0;
  for (let i = 0; i < json.length; i++) {
    if (json.charCodeAt(i) !== 0x5c) continue;
    const next = json.charCodeAt(i + 1);
    if (next === 0x75) {
      const code = parseInt(json.slice(i + 2, i + 6), 16);
      if (code >= 0xd800 && code <= 0xdfff) {
        out += `${json.slice(start, i)}\ufffd`;
        start = i + 6;
      }
      i += 5;
    } else {
      i += 1;
    }
  }
  return out + json.slice(start);
}

// How deep JSON text nests (strings skipped).
function depthOf(text) {
  let depth = 0;
  let deepest = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i);
        if (d === 0x5c) i++;
        else if (d === 0x22) break;
      }
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > deepest) deepest = depth;
    } else if (c === 0x7d || c === 0x5d) {
      depth--;
    }
  }
  return deepest;
}

// Throws what encode throws for a frame nested deeper than MAX_DEPTH: `text` is the frame's, or
// a part of it `outer` levels deep in a frame of `length` characters.
function checkDepth(text, length = text.length, outer = 0) {
  // Only a text this long can nest that deep; JSON.stringify goes that deep only on a stack
  // raised with --stack-size.
  if (length > 2 * MAX_DEPTH && outer + depthOf(text) > MAX_DEPTH) {
    throw new RangeError(`nested deeper than the ${MAX_DEPTH} levels a frame may have`);
  }
}

module.exports = { MAX_DEPTH, checkDepth, depthOf, replaceLoneSurrogates };
