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

// The most digits an integer may have for its double to hold it exactly and print back as the
// same text (2^53 has 16).
const EXACT_DIGITS = 15;
// An integer part this long may round to infinity (1.8e308 has 309 digits).
const FINITE_DIGITS = 308;

// Whether JSON.parse may stand in for the decoders' strict parser (protocol.js) on `text`: true
// when nothing in it could break a rule JSON.parse does not enforce (docs/protocol.md,
// "Framing"), so that JSON.parse either fails (the strict parser then says why) or builds what
// the strict parser would. False for a `\u` escape of a surrogate (it may be unpaired), a number
// with an exponent or an integer part of more than FINITE_DIGITS digits (it may round to
// infinity), nesting deeper than MAX_DEPTH, and, directly in the outermost container (where a
// frame's own integer fields are; `outer`: how deep in its frame the text's value stands), a
// number with a fraction, of more than EXACT_DIGITS digits or
// written `-0`: there every number is then an integer whose String() is its text, which is what
// the integer fields' checks read. A key given twice needs no check: JSON.parse keeps its last
// value in its first place, as the strict parser does. One pass, no allocation.
function plainJSON(text, outer = 0) {
  const n = text.length;
  let depth = outer;
  let backslash = text.indexOf('\\'); // the next one: a string before it has no escapes
  for (let i = 0; i < n; i++) {
    let c = text.charCodeAt(i);
    if (c === 0x22) {
      // A string: only its escapes matter.
      const end = text.indexOf('"', i + 1);
      if (end === -1) return true; // unterminated: JSON.parse fails
      if (backslash === -1 || backslash > end) {
        i = end;
        continue;
      }
      for (i++; i < n; i++) {
        c = text.charCodeAt(i);
        if (c === 0x22) break;
        if (c === 0x5c) {
          i++;
          if (text.charCodeAt(i) === 0x75 && (text.charCodeAt(i + 1) | 0x20) === 0x64) {
            const d = text.charCodeAt(i + 2) | 0x20;
            if ((d >= 0x38 && d <= 0x39) || (d >= 0x61 && d <= 0x66)) return false; // \ud800-\udfff
          }
        }
      }
      backslash = text.indexOf('\\', i);
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > MAX_DEPTH) return false;
    } else if (c === 0x7d || c === 0x5d) {
      depth--;
    } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      // A number: its integer part, then what follows it.
      const start = i;
      if (c === 0x2d) i++;
      const first = i;
      while (i < n && (c = text.charCodeAt(i)) >= 0x30 && c <= 0x39) i++;
      const digits = i - first;
      if (digits > FINITE_DIGITS) return false;
      if (depth <= 1 && (digits > EXACT_DIGITS || c === 0x2e || (start !== first && text.charCodeAt(first) === 0x30))) return false;
      if (c === 0x2e) {
        for (i++; i < n && (c = text.charCodeAt(i)) >= 0x30 && c <= 0x39;) i++;
      }
      if (c === 0x65 || c === 0x45) return false;
      i--; // the loop steps past the character after the number
    }
  }
  return true;
}

module.exports = { MAX_DEPTH, checkDepth, depthOf, plainJSON, replaceLoneSurrogates };
