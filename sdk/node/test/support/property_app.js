'use strict';
// Handlers for the property tests (test/properties.test.js). A job's args carry a recipe, plain
// JSON, for what its handler returns or throws: JSON values, and everything a handler can hand
// the SDK that JSON treats badly or not at all (BigInt, Symbols, functions, Dates, Maps, class
// instances, lone surrogates, cycles, nesting beyond any limit, a toJSON or getter that throws,
// Proxies, thrown values whose message, name or toString throw...). `build` makes the value.
const { App, PermanentError, Snooze } = require('../../index');

const app = new App({ concurrency: 4 });

class Plain {
  constructor() {
    this.x = 1;
  }
}

function revoked() {
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  return proxy;
}

// An Error whose every property read throws.
function trapError() {
  return new Proxy(new Error('trapped'), { get() { throw new Error('get refused'); } });
}

const LEAVES = {
  undefined: () => undefined,
  nan: () => NaN,
  inf: () => Infinity,
  negzero: () => -0,
  date: () => new Date(0),
  bad_date: () => new Date(NaN),
  map: () => new Map([[1, 2]]),
  set: () => new Set([1]),
  instance: () => new Plain(),
  typed: () => new Uint8Array([1, 2]),
  sparse: () => [, 1], // eslint-disable-line no-sparse-arrays
  boxed: () => new String('s'), // eslint-disable-line no-new-wrappers
  function: () => build,
  symbol: () => Symbol('s'),
  bigint: () => 10n,
  to_json_throws: () => ({ toJSON() { throw new Error('toJSON refused'); } }),
  to_json_throws_string: () => ({ toJSON() { throw 'a string'; } }), // eslint-disable-line no-throw-literal
  to_json_throws_revoked: () => ({ toJSON() { throw revoked(); } }),
  to_json_throws_trap: () => ({ toJSON() { throw trapError(); } }),
  to_json_bigint: () => ({ toJSON() { return 1n; } }),
  to_json_forever: () => {
    // Each toJSON returns a value holding another: nested without end.
    const next = () => ({ a: { toJSON: next } });
    return next();
  },
  getter_throws: () => Object.defineProperty({}, 'x', { enumerable: true, get() { throw new Error('getter refused'); } }),
  proxy_keys_throw: () => new Proxy({}, { ownKeys() { throw new Error('ownKeys refused'); } }),
  revoked: () => revoked(),
  fake_snooze: () => ({ [Symbol.for('soniq.snooze')]: true, seconds: NaN, reason: null }),
  trap_snooze: () => new Proxy({}, { get() { throw new Error('get refused'); } }),
};

function build(r, args) {
  switch (r.k) {
    case 'json': return r.v;
    case 'args': return args.payload;
    case 'array': return r.items.map((x) => build(x, args));
    case 'object': {
      const o = {};
      for (const [key, x] of r.entries) {
        Object.defineProperty(o, key === '$symbol' ? Symbol('k') : key, { value: build(x, args), enumerable: true, writable: true, configurable: true });
      }
      return o;
    }
    case 'deep': {
      let v = build(r.leaf, args);
      for (let i = 0; i < r.depth; i++) v = r.container === 'array' ? [v] : { d: v };
      return v;
    }
    case 'cycle': {
      const a = r.container === 'array' ? [1] : { x: 1 };
      const back = r.long ? { back: a } : a;
      if (Array.isArray(a)) a.push(back);
      else a.self = back;
      return a;
    }
    case 'str': return r.ch.repeat(r.n);
    case 'surrogate': return r.s.slice(0, r.at) + String.fromCharCode(r.code) + r.s.slice(r.at);
    case 'snooze': return new Snooze(r.seconds, build(r.reason, args));
    default: return LEAVES[r.k]();
  }
}

class CustomError extends Error {}

// What a "throw" recipe throws.
function thrown(r) {
  const message = build(r.message, {});
  switch (r.cls) {
    case 'Error': return withRetryable(new Error(message), r);
    case 'TypeError': return withRetryable(new TypeError(message), r);
    case 'CustomError': return withRetryable(new CustomError(message), r);
    case 'PermanentError': return new PermanentError(message);
    case 'Snooze': return new Snooze(2);
    case 'string': return message;
    case 'number': return 42;
    case 'bigint': return 42n;
    case 'symbol': return Symbol(message);
    case 'null': return null;
    case 'undefined': return undefined;
    case 'object': return { message };
    case 'cyclic': {
      const o = { toString() { throw new Error('toString refused'); } };
      o.self = o;
      return o;
    }
    case 'revoked': return revoked();
    case 'trap': return trapError();
    case 'bad_message': return Object.defineProperty(new Error('x'), 'message', { get() { throw trapError(); } });
    case 'bad_name': return Object.defineProperty(new Error(message), 'name', { get() { throw new Error('name refused'); } });
    case 'bad_stack': return Object.defineProperty(new Error(message), 'stack', { get() { throw new Error('stack refused'); } });
    case 'bad_retryable': return Object.defineProperty(new Error(message), 'retryable', { get() { throw new Error('retryable refused'); } });
    case 'message_object': {
      const e = new Error('x');
      e.message = { toString() { throw new Error('toString refused'); }, toJSON() { throw new Error('toJSON refused'); } };
      return e;
    }
    default: throw new Error(`unknown class ${r.cls}`);
  }
}

function withRetryable(err, r) {
  if (r.retryable !== null) err.retryable = r.retryable;
  return err;
}

function run(args) {
  if (args.mode === 'throw') throw thrown(args.recipe);
  return build(args.recipe, args);
}

app.job('p.sync', (args) => run(args), { cancellable: false });
app.job('p.async', async (args) => {
  await null;
  return run(args);
}, { cancellable: false });
app.job('p.ok', async () => ({ ok: true }), { cancellable: false });

app.run();
