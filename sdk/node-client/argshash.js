'use strict';
// Job args as Soniq stores and hashes them.
//
// A job's args are JSON: the text stored is JSON.stringify's, and a unique job's args_hash is
// what Soniq's compute_args_hash gives for the object Python's json.loads makes of that text:
// sha256 of json.dumps(args, sort_keys=True, separators=(",", ":")) with Python's defaults
// (ensure_ascii, float repr). A JavaScript number has no int/float distinction, so it hashes
// as the JSON that JSON.stringify writes for it reads in Python: 1 and 1.0 are the same
// number and both are Python's int 1 (the args stored read back as 1, so the row agrees with
// its hash); 1.5 is the float 1.5; 1e21 is written 1e+21 and is a float.

const crypto = require('node:crypto');

class ArgsError extends TypeError {
  constructor(message) {
    super(message);
    this.name = 'ArgsError';
  }
}

// A plain object: {} or Object.create(null), not an array, a Date, a Map or a class instance.
function isPlainObject(v) {
  if (v === null || typeof v !== 'object') return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

function describe(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object') return `a ${(v.constructor && v.constructor.name) || 'non-plain'} object`;
  return `a ${typeof v}`;
}

// canonical walks args as JSON.stringify would (toJSON, undefined and functions dropped from
// objects, null in arrays) and returns the plain JSON value it stands for, refusing what
// JSON.stringify would silently change or Postgres cannot store, naming where it is.
function canonical(value, where, seen) {
  if (value !== null && typeof value === 'object' && typeof value.toJSON === 'function') {
    value = value.toJSON();
  }
  switch (typeof value) {
    case 'string':
      checkString(value, where);
      return value;
    case 'number':
      if (!Number.isFinite(value)) {
        throw new ArgsError(`${where} is ${value}: JSON has no such number (JSON.stringify would store null)`);
      }
      return value;
    case 'boolean':
      return value;
    case 'bigint':
      throw new ArgsError(`${where} is a BigInt: JSON cannot hold it; pass it as a string or a number`);
    case 'undefined':
    case 'function':
    case 'symbol':
      return undefined;
    default:
  }
  if (value === null) return null;
  if (seen.has(value)) throw new ArgsError(`${where} refers back to an object that contains it: JSON cannot hold a cycle`);
  if (value instanceof Map || value instanceof Set) {
    throw new ArgsError(`${where} is a ${value.constructor.name}: JSON.stringify would store it as {}; pass an object or an array`);
  }
  seen.add(value);
  let out;
  if (Array.isArray(value)) {
    out = value.map((e, i) => {
      const c = canonical(e, `${where}[${i}]`, seen);
      return c === undefined ? null : c;
    });
  } else {
    out = {};
    for (const k of Object.keys(value)) {
      checkString(k, `${where} key ${JSON.stringify(k)}`);
      const c = canonical(value[k], `${where}.${k}`, seen);
      if (c !== undefined) out[k] = c;
    }
  }
  seen.delete(value);
  return out;
}

// Postgres jsonb cannot store U+0000 nor a lone surrogate; both would fail the insert.
function checkString(s, where) {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0) throw new ArgsError(`${where} contains U+0000, which Postgres cannot store in jsonb`);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        i++;
        continue;
      }
      throw new ArgsError(`${where} contains a lone surrogate (\\u${c.toString(16)}), which is not text Postgres can store`);
    }
    if (c >= 0xdc00 && c <= 0xdfff) {
      throw new ArgsError(`${where} contains a lone surrogate (\\u${c.toString(16)}), which is not text Postgres can store`);
    }
  }
}

// normalizeArgs checks args (undefined means {}) and returns {value, text}: the plain JSON
// value and the JSON text to store. field names the argument in errors.
function normalizeArgs(args, field = 'args') {
  if (args === undefined) return { value: {}, text: '{}' };
  if (!isPlainObject(args)) {
    throw new ArgsError(`${field} must be a plain object (a JSON object), got ${describe(args)}`);
  }
  const value = canonical(args, field, new Set());
  return { value, text: JSON.stringify(value) };
}

// Python's sort_keys orders str keys by code point; JavaScript's default sort compares UTF-16
// code units, which differs once a key holds a character above U+FFFF.
function compareCodePoints(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.codePointAt(i);
    const y = b.codePointAt(i);
    if (x !== y) return x - y;
    if (x > 0xffff) i++;
  }
  return a.length - b.length;
}

const SHORT_ESCAPES = { '"': '\\"', '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t', '\b': '\\b', '\f': '\\f' };

// json.dumps with ensure_ascii: every UTF-16 code unit outside ' '..'~' as \uXXXX (lower-case
// hex; a character above U+FFFF is its surrogate pair), except the short escapes.
function pythonString(s) {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const ch = s[i];
    const c = s.charCodeAt(i);
    if (SHORT_ESCAPES[ch]) out += SHORT_ESCAPES[ch];
    else if (c >= 0x20 && c <= 0x7e) out += ch;
    else out += '\\u' + c.toString(16).padStart(4, '0');
  }
  return out + '"';
}

// Python's repr(float): the shortest round-tripping digits, positional when the decimal
// exponent is in [-4, 16), else scientific with a sign and at least two exponent digits.
function pythonFloatRepr(f) {
  const sci = Math.abs(f).toExponential(); // shortest digits: "1.2345e+6"
  const [mant, expText] = sci.split('e');
  let exp = Number(expText);
  const digits = mant.replace('.', '');
  let out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      out = digits.length <= exp + 1
        ? digits + '0'.repeat(exp + 1 - digits.length) + '.0'
        : digits.slice(0, exp + 1) + '.' + digits.slice(exp + 1);
    } else {
      out = '0.' + '0'.repeat(-exp - 1) + digits;
    }
  } else {
    const m = digits.length > 1 ? digits[0] + '.' + digits.slice(1) : digits;
    const sign = exp < 0 ? '-' : '+';
    exp = Math.abs(exp);
    out = `${m}e${sign}${String(exp).padStart(2, '0')}`;
  }
  return (f < 0 || Object.is(f, -0)) ? '-' + out : out;
}

// A number as Python re-serialises the JSON JSON.stringify wrote for it: a literal without
// '.', 'e' or 'E' is an int, anything else a float.
function pythonNumber(n) {
  const lit = JSON.stringify(n);
  return /[.eE]/.test(lit) ? pythonFloatRepr(n) : lit;
}

function pythonJSON(v) {
  if (v === null) return 'null';
  switch (typeof v) {
    case 'boolean':
      return v ? 'true' : 'false';
    case 'number':
      return pythonNumber(v);
    case 'string':
      return pythonString(v);
    default:
  }
  if (Array.isArray(v)) return '[' + v.map(pythonJSON).join(',') + ']';
  const keys = Object.keys(v).sort(compareCodePoints);
  return '{' + keys.map((k) => pythonString(k) + ':' + pythonJSON(v[k])).join(',') + '}';
}

// argsHash is Soniq's args_hash of args (a plain object), hex.
function argsHash(args) {
  const { value } = normalizeArgs(args);
  return crypto.createHash('sha256').update(pythonJSON(value), 'utf8').digest('hex');
}

module.exports = { ArgsError, normalizeArgs, argsHash, pythonJSON, isPlainObject };
