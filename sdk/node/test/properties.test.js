'use strict';
// Property tests at the SDK's boundary, over stdio: whatever a handler returns or throws, and
// whatever args it gets, its job ends with one frame the sidecar's decoder accepts, and the
// process goes on serving.
//
// The oracle is the sidecar's own stream decoder (protocol/internal/framecheck, built here with
// `go build`): the handler's stdout is piped into it, as the sidecar reads it, and it says for
// each frame what it decoded or why it refused it. One handler process (support/property_app.js)
// serves a test's runs; it is started again only after a run broke it. The handler runs with
// its stack raised (--stack-size) so that JSON.stringify can write a value nested as deep as a
// frame may be, and the SDK's own depth check is what refuses deeper ones.
//
// The budget is fixed: a fixed seed, a bounded count of runs, no shrinking (a job that hangs
// would make each shrinking step wait for its timeout; the failing run is printed as found).
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const fc = require('fast-check');
const { encode } = require('../protocol');

const ROOT = path.join(__dirname, '..');
const REPO = path.join(ROOT, '..', '..');
const APP = path.join(__dirname, 'support', 'property_app.js');
// A small frame limit, so that results and errors around it are cheap to make.
const MAX_FRAME = 64 * 1024;
// What a result may nest: the sidecar's decoder takes frames nested 10,000 levels deep, the
// frame's own object included.
const MAX_RESULT_DEPTH = 10000 - 1;
const RESULT_TIMEOUT_MS = 10000;
const SEED = 20240611;
const UNENCODABLE = /^result of job \S+ is not JSON-serialisable: ./;

let framecheck = null;
function buildFramecheck() {
  if (framecheck) return framecheck;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'framecheck-'));
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  const out = path.join(dir, 'framecheck');
  execFileSync('go', ['build', '-o', out, './protocol/internal/framecheck'], { cwd: REPO, stdio: 'inherit' });
  framecheck = out;
  return out;
}

// The property app over stdio, its stdout read by the sidecar's decoder.
class Served {
  constructor() {
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SONIQ_')));
    env.SONIQ_MAX_FRAME_BYTES = String(MAX_FRAME);
    this.child = spawn(process.execPath, ['--stack-size=3500', APP], { cwd: ROOT, env, stdio: ['pipe', 'pipe', 'pipe'] });
    this.check = spawn(buildFramecheck(), ['-max-frame-bytes', String(MAX_FRAME)], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.child.stdout.pipe(this.check.stdin);
    this.child.stdin.on('error', () => {}); // a dead handler: seen as its stdout ending
    this.stderr = '';
    this.child.stderr.setEncoding('utf8');
    this.child.stderr.on('data', (s) => { this.stderr += s; });
    this.verdicts = [];
    this.ended = false;
    this.waiter = null;
    this.broken = false;
    this.nextId = 0;
    this.helloSeen = false;
    let buf = '';
    this.check.stdout.setEncoding('utf8');
    this.check.stdout.on('data', (s) => {
      buf += s;
      let nl;
      while ((nl = buf.indexOf('\n')) !== -1) {
        this.verdicts.push(JSON.parse(buf.slice(0, nl)));
        buf = buf.slice(nl + 1);
      }
      this._wake();
    });
    this.check.stdout.on('end', () => {
      this.ended = true;
      this._wake();
    });
  }

  _wake() {
    if (this.waiter) this.waiter();
  }

  fail(why) {
    this.broken = true;
    throw new Error(`${why}\nhandler stderr (last 3000 chars):\n${this.stderr.slice(-3000)}`);
  }

  async verdict() {
    const deadline = Date.now() + RESULT_TIMEOUT_MS;
    while (this.verdicts.length === 0) {
      if (this.ended) this.fail(`the handler's stdout ended (handler exit ${this.child.exitCode}, decoder exit ${this.check.exitCode})`);
      const left = deadline - Date.now();
      if (left <= 0) this.fail(`no frame from the handler within ${RESULT_TIMEOUT_MS} ms`);
      await new Promise((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiter = () => { clearTimeout(t); resolve(); };
      });
      this.waiter = null;
    }
    const v = this.verdicts.shift();
    if (!v.ok) this.fail(`the sidecar's decoder refused a frame: ${JSON.stringify(v)}`);
    return v;
  }

  job(name, args) {
    const id = `j${++this.nextId}`;
    this.child.stdin.write(`${encode({ type: 'job', id, name, args, attempt: 1, max_attempts: 3, queue: 'default' })}\n`);
    return id;
  }

  // Runs one job, then an ordinary one: the process must go on serving.
  async run(name, args) {
    if (!this.helloSeen) {
      const hello = await this.verdict();
      if (hello.type !== 'hello') this.fail(`the first frame is not hello: ${JSON.stringify(hello)}`);
      this.helloSeen = true;
    }
    const id = this.job(name, args);
    const okId = this.job('p.ok', {});
    const got = new Map();
    while (got.size < 2) {
      const v = await this.verdict();
      if (v.type !== 'result' || (v.id !== id && v.id !== okId)) this.fail(`unexpected frame ${JSON.stringify(v)}`);
      if (got.has(v.id)) this.fail(`a second result for ${v.id}`);
      got.set(v.id, v);
    }
    const ok = got.get(okId);
    if (ok.status !== 'done' || ok.result !== '{"ok":true}') this.fail(`the job after it did not complete: ${JSON.stringify(ok)}`);
    return got.get(id);
  }

  close() {
    this.child.kill('SIGKILL');
    this.check.kill('SIGKILL');
  }
}

const processes = [];
function served() {
  const last = processes[processes.length - 1];
  if (last && !last.broken) return last;
  if (last) last.close();
  const s = new Served();
  processes.push(s);
  return s;
}

// Runs a property; at the end, no process may have logged an error that escaped the SDK.
async function check(property, params) {
  try {
    await fc.assert(property, { seed: SEED, endOnFailure: true, ...params });
  } finally {
    for (const s of processes.splice(0)) {
      s.close();
      for (const marker of ['unhandled', 'Uncaught', 'UnhandledPromiseRejection']) {
        assert.ok(!s.stderr.includes(marker), `${marker} in the handler's stderr:\n${s.stderr.slice(-5000)}`);
      }
    }
  }
}

// ---------------------------------------------------------------------------------- arbitraries

// JSON as a sidecar sends it in args: no lone surrogates (fast-check's binary unit makes none).
const jsonValues = fc.jsonValue({ stringUnit: 'binary', maxDepth: 3 });

// Leaves JSON.stringify writes, and what it writes for them.
const LOSSY = {
  nan: null, inf: null, negzero: 0, date: '1970-01-01T00:00:00.000Z', bad_date: null, map: {}, set: {},
  instance: { x: 1 }, typed: { 0: 1, 1: 2 }, sparse: [null, 1], boxed: 's',
};
// Leaves an object leaves out and an array writes as null.
const OMITTED = ['undefined', 'function', 'symbol'];
// Leaves JSON cannot hold, and the string the SDK sends for each (as Soniq's worker stores str()
// of such a value).
const STRINGIFIED = { bigint: '10', to_json_bigint: '1' };
// What the SDK sends for an omitted leaf that is the whole result (JSON.stringify writes nothing).
const STRINGIFIED_AT_TOP = { function: '[function build]', symbol: 'Symbol(s)' };
// Leaves that cannot be written at all (fake_snooze and trap_snooze: not at the top).
const THROWING = ['to_json_throws', 'to_json_throws_string', 'to_json_throws_revoked', 'to_json_throws_trap',
  'to_json_forever', 'getter_throws', 'proxy_keys_throw', 'revoked', 'trap_snooze'];

const SIZED_CHARS = [['x', 1], ['é', 2], ['€', 3], ['😀', 4], ['\n', 2], ['\x01', 6]];
const sizedStrings = fc.constantFrom(...SIZED_CHARS).chain(([ch, size]) => {
  const around = Math.floor(MAX_FRAME / size);
  return fc.integer({ min: Math.floor(around - 120 / size - 40), max: Math.floor(around + 20) }).map((n) => ({ k: 'str', ch, n }));
});
const surrogates = fc.record({
  k: fc.constant('surrogate'), s: fc.string({ unit: 'binary-ascii', maxLength: 8 }), at: fc.nat(8), code: fc.integer({ min: 0xd800, max: 0xdfff }),
});
const shallowRecipes = fc.oneof(
  jsonValues.map((v) => ({ k: 'json', v })),
  fc.constant({ k: 'args' }),
  fc.constantFrom(...Object.keys(LOSSY), ...Object.keys(STRINGIFIED), ...OMITTED, ...THROWING, 'fake_snooze').map((k) => ({ k })),
  surrogates,
  fc.record({ k: fc.constant('cycle'), container: fc.constantFrom('array', 'object'), long: fc.boolean() }),
);
const deepRecipes = fc.record({
  k: fc.constant('deep'),
  depth: fc.constantFrom(1, 2, 100, 4000, 5000, 9997, 9998, 9999, 10000, 10001, 12000, 20000),
  container: fc.constantFrom('array', 'object'),
  leaf: shallowRecipes,
});
const { recipe: nested } = fc.letrec((tie) => ({
  recipe: fc.oneof({ depthSize: 'small', maxDepth: 3 }, shallowRecipes, sizedStrings, tie('container')),
  container: fc.oneof(
    fc.array(tie('recipe'), { maxLength: 3 }).map((items) => ({ k: 'array', items })),
    fc.array(fc.tuple(fc.oneof(fc.string({ maxLength: 4 }), fc.constant('$symbol'), fc.constant('__proto__')), tie('recipe')), { maxLength: 3 })
      .map((entries) => ({ k: 'object', entries })),
  ),
}));
// Deep values only at the top, a chain of one-child containers (see sameJSON).
const valueRecipes = fc.oneof(deepRecipes, nested);

const snoozeRecipes = fc.record({
  k: fc.constant('snooze'),
  seconds: fc.double({ min: 0, max: 1e6, noNaN: true }),
  reason: fc.oneof(fc.constant({ k: 'json', v: null }), fc.string({ maxLength: 10 }).map((v) => ({ k: 'json', v })), surrogates),
});

const THROWN = ['Error', 'TypeError', 'CustomError', 'PermanentError', 'Snooze', 'string', 'number', 'bigint', 'symbol', 'null',
  'undefined', 'object', 'cyclic', 'revoked', 'trap', 'bad_message', 'bad_name', 'bad_stack', 'bad_retryable', 'message_object'];
const throwRecipes = fc.record({
  cls: fc.constantFrom(...THROWN),
  message: fc.oneof(fc.string({ unit: 'binary', maxLength: 20 }).map((v) => ({ k: 'json', v })), surrogates, sizedStrings),
  retryable: fc.constantFrom(null, true, false),
});

// -------------------------------------------------------------------------------- expectations

// What a value recipe gives when JSON.stringify writes it: {kind: 'value' | 'omitted' | 'throws',
// value, depth (how deep it nests), big (may be near the frame limit)}.
function expect(r, payload) {
  const value = (v, depth = 0, big = false) => ({ kind: 'value', value: v, depth, big });
  switch (r.k) {
    case 'json': return value(asSent(r.v), jsonDepth(r.v));
    case 'args': return value(asSent(payload), jsonDepth(payload));
    case 'str': return value(r.ch.repeat(r.n), 0, true);
    case 'surrogate': return value((r.s.slice(0, r.at) + String.fromCharCode(r.code) + r.s.slice(r.at)).toWellFormed());
    case 'cycle': return { kind: 'throws' };
    case 'fake_snooze': return value({ seconds: null, reason: null }, 1);
    case 'deep': {
      const leaf = expect(r.leaf, payload);
      if (leaf.kind === 'throws') return leaf;
      let v = leaf.kind === 'omitted' ? undefined : leaf.value;
      for (let i = 0; i < r.depth; i++) v = r.container === 'array' ? [v === undefined ? null : v] : (v === undefined ? {} : { d: v });
      return value(v, r.depth + (leaf.kind === 'value' ? leaf.depth : 0), leaf.big);
    }
    case 'array': case 'object': {
      // Of a repeated key the last value counts, as in the handler's object; a Symbol key is not written.
      const entries = [...new Map(r.k === 'object' ? r.entries.filter(([key]) => key !== '$symbol') : []).entries()];
      const parts = r.k === 'array' ? r.items.map((x) => [null, expect(x, payload)])
        : entries.map(([key, x]) => [key, expect(x, payload)]);
      if (parts.some(([, p]) => p.kind === 'throws')) return { kind: 'throws' };
      const depth = 1 + Math.max(0, ...parts.map(([, p]) => (p.kind === 'value' ? p.depth : 0)));
      const big = parts.some(([, p]) => p.big);
      if (r.k === 'array') return value(parts.map(([, p]) => (p.kind === 'value' ? p.value : null)), depth, big);
      const o = {};
      for (const [key, p] of parts) {
        if (p.kind === 'value') Object.defineProperty(o, key, { value: p.value, enumerable: true, writable: true, configurable: true });
      }
      return value(o, depth, big);
    }
    default:
      if (r.k in LOSSY) return value(LOSSY[r.k], jsonDepth(LOSSY[r.k]));
      if (r.k in STRINGIFIED) return value(STRINGIFIED[r.k]);
      if (OMITTED.includes(r.k)) return { kind: 'omitted' };
      return { kind: 'throws' };
  }
}

// A value as it reaches the handler in a job's args (-0 is written 0).
function asSent(v) {
  return v === undefined ? undefined : JSON.parse(JSON.stringify(v));
}

function jsonDepth(v) {
  if (v === null || typeof v !== 'object') return 0;
  return 1 + Math.max(0, ...Object.values(v).map(jsonDepth));
}

// Whether JSON `text` reads as `expected`. The one-child containers a deep value is made of are
// peeled off first, so that the comparison does not recurse through them.
function sameJSON(text, expected) {
  let got = JSON.parse(text); // iterative in V8
  for (;;) {
    if (Array.isArray(expected) && expected.length === 1 && Array.isArray(got) && got.length === 1) {
      [expected, got] = [expected[0], got[0]];
    } else if (expected && typeof expected === 'object' && !Array.isArray(expected) && Object.keys(expected).join() === 'd'
      && got && typeof got === 'object' && Object.keys(got).join() === 'd') {
      [expected, got] = [expected.d, got.d];
    } else {
      assert.deepStrictEqual(got, expected);
      return;
    }
  }
}

function checkReturn(v, recipe, payload) {
  const e = expect(recipe, payload);
  const atTop = (k) => recipe.k === k;
  if (atTop('revoked') || atTop('trap_snooze')) {
    // The handler's own promise reads `then` of what it resolves with, and that read throws:
    // the job fails as a handler that threw.
    assert.equal(v.status, 'failed', JSON.stringify(v));
    return;
  }
  if (e.kind === 'omitted' && atTop('undefined')) {
    assert.equal(v.status, 'done', JSON.stringify(v));
    assert.equal(v.result, undefined);
    return;
  }
  if (recipe.k in STRINGIFIED_AT_TOP) {
    assert.equal(v.status, 'done', JSON.stringify(v));
    assert.equal(JSON.parse(v.result), STRINGIFIED_AT_TOP[recipe.k]);
    return;
  }
  if (e.kind === 'value' && e.depth <= MAX_RESULT_DEPTH && !atTop('fake_snooze')) {
    if (e.big && v.status === 'failed' && v.error.type === 'ResultTooLarge') {
      assert.equal(v.error.retryable, false);
      return;
    }
    assert.equal(v.status, 'done', JSON.stringify(v).slice(0, 2000));
    sameJSON(v.result ?? 'null', e.value);
    return;
  }
  assert.equal(v.status, 'failed', JSON.stringify(v).slice(0, 2000));
  assert.equal(v.error.retryable, false, JSON.stringify(v).slice(0, 2000));
  if (v.error.type !== 'ResultTooLarge') assert.match(v.error.message, UNENCODABLE);
}

const jobName = (sync) => (sync ? 'p.sync' : 'p.async');

// ---------------------------------------------------------------------------------------- tests

test('any returned value ends the job with a frame the sidecar accepts', async () => {
  await check(fc.asyncProperty(valueRecipes, jsonValues, fc.boolean(), async (recipe, payload, sync) => {
    const v = await served().run(jobName(sync), { mode: 'return', recipe, payload });
    checkReturn(v, recipe, payload);
  }), {
    numRuns: 200,
    // An object that contains itself and one nested past the frame's depth: checked every run.
    examples: [
      [{ k: 'cycle', container: 'object', long: false }, null, false],
      [{ k: 'deep', depth: 12000, container: 'array', leaf: { k: 'json', v: 1 } }, null, true],
      [{ k: 'to_json_throws_trap' }, null, false],
      [{ k: 'fake_snooze' }, null, false],
    ],
  });
});

test('a returned Snooze ends as a snooze', async () => {
  await check(fc.asyncProperty(snoozeRecipes, fc.boolean(), async (recipe, sync) => {
    const v = await served().run(jobName(sync), { mode: 'return', recipe });
    assert.equal(v.status, 'snooze', JSON.stringify(v));
    assert.equal(v.seconds, recipe.seconds + 0);
    const reason = expect(recipe.reason, null).value;
    assert.equal(v.reason ?? null, reason);
  }), { numRuns: 40 });
});

test('anything thrown ends the job with a frame the sidecar accepts', async () => {
  await check(fc.asyncProperty(throwRecipes, fc.boolean(), async (recipe, sync) => {
    const v = await served().run(jobName(sync), { mode: 'throw', recipe });
    const { cls } = recipe;
    assert.equal(v.status, 'failed', JSON.stringify(v).slice(0, 2000));
    const permanent = cls === 'PermanentError' || (['Error', 'TypeError', 'CustomError'].includes(cls) && recipe.retryable === false);
    assert.equal(v.error.retryable, !permanent, JSON.stringify(v).slice(0, 2000));
    const types = {
      // A Snooze is returned, not thrown: thrown, it is a value like any other.
      Snooze: 'object', object: 'Error', cyclic: 'object', revoked: 'object', trap: 'Error', bad_message: 'Error', bad_name: 'Error',
      bad_stack: 'Error', bad_retryable: 'Error', message_object: 'Error',
    };
    assert.equal(v.error.type, types[cls] ?? cls);
    assert.equal(typeof v.error.message, 'string');
  }), { numRuns: 120, examples: [[{ cls: 'revoked', message: { k: 'json', v: '' }, retryable: null }, false]] });
});

test('args come back as they were sent', async () => {
  await check(fc.asyncProperty(jsonValues, fc.boolean(), async (payload, sync) => {
    const v = await served().run(jobName(sync), { mode: 'return', recipe: { k: 'args' }, payload });
    assert.equal(v.status, 'done', JSON.stringify(v));
    sameJSON(v.result ?? 'null', asSent(payload));
  }), { numRuns: 100 });
});
