'use strict';
// The Runtime in process, the job machinery every transport calls (start, cancel, report,
// slots, hooks), and the Ledger that keeps attach mode's results until a session acknowledges
// them. Real handlers and promises; the report callback stands for the transport. Then App.run's
// `listen` option, in real processes.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { decode, encode } = require('../protocol');
const { Runtime } = require('../runtime');
const { Registry } = require('../registry');
const { Ledger } = require('../ledger');
const { SDK } = require('../version');
const { App, Snooze, PermanentError } = require('../index');
const { Handler, ROOT } = require('./support/harness');
const { Listening, openSession, tempDir, waitFor } = require('./support/attach');
const { resultMessage, reportedMessage, apartMessage } = require('../session');

function job(id, name, args = {}) {
  return { type: 'job', id, name, args, attempt: 2, max_attempts: 5, queue: 'default', deadline: null, traceparent: null };
}

// A Runtime over a Registry, its reports recorded in order.
function harness({ concurrency = 2, maxFrameBytes = 1 << 20 } = {}) {
  const reg = new Registry();
  const rt = new Runtime(reg, { concurrency, maxFrameBytes });
  const h = { reg, rt, reports: [], events: [], changes: 0, waiters: [] };
  rt.onChange = () => { h.changes++; };
  h.add = (name, fn, { cancellable = true, validate } = {}) => reg.handlers.set(name, { fn, cancellable, validate });
  h.start = (id, name, args) => rt.start(job(id, name, args), (frame, text) => {
    assert.deepEqual(decode(text), decode(encode(frame))); // the text is the frame's encoding
    h.reports.push(frame);
    for (const w of h.waiters.splice(0)) w();
  });
  h.until = async (n) => {
    await waitFor(() => h.reports.length >= n, () => JSON.stringify(h.reports), 5000);
    return Object.fromEntries(h.reports.map((f) => [f.id, f]));
  };
  return h;
}

function gate() {
  let open;
  const p = new Promise((resolve) => { open = resolve; });
  return { p, open };
}

const tick = () => new Promise((resolve) => setTimeout(resolve, 20));

test('runtime: slots hold extra jobs in arrival order; held() and count', async () => {
  const h = harness({ concurrency: 1 });
  const g = gate();
  const started = [];
  h.add('w', async ({ n }) => { started.push(n); await g.p; return n; });
  for (let n = 0; n < 3; n++) h.start(`j${n}`, 'w', { n });
  await tick();
  assert.deepEqual(started, [0]);
  assert.deepEqual(h.rt.held(), [{ id: 'j0', name: 'w' }, { id: 'j1', name: 'w' }, { id: 'j2', name: 'w' }]);
  assert.equal(h.rt.count, 3);
  g.open();
  const got = await h.until(3);
  assert.deepEqual(h.reports.map((f) => f.id), ['j0', 'j1', 'j2']);
  assert.deepEqual(got.j2, { type: 'result', id: 'j2', status: 'done', result: 2 });
  assert.equal(h.rt.count, 0);
  assert.equal(h.changes, 3); // one change per job that ended
});

for (const [reason, hookRuns] of [['job_timeout', true], ['shutdown_timeout', false], ['user', false]]) {
  test(`runtime: a cancel (${reason}) aborts ctx.signal; onError ${hookRuns ? 'runs' : 'does not run'}`, async () => {
    const h = harness();
    const errors = [];
    const reasons = [];
    h.reg.hooks.onError.push((ctx) => errors.push(ctx.id));
    h.add('hang', (args, ctx) => new Promise((_, reject) => {
      ctx.signal.addEventListener('abort', () => {
        reasons.push(ctx.signal.reason);
        reject(new Error(`aborted: ${ctx.signal.reason}`));
      });
    }));
    h.start('h1', 'hang');
    await tick();
    h.rt.cancel('h1', reason);
    const got = await h.until(1);
    assert.equal(got.h1.status, 'cancelled');
    assert.deepEqual(reasons, [reason]);
    assert.deepEqual(errors, hookRuns ? ['h1'] : []);
  });
}

test('runtime: a job cancelled while it waits for a slot never runs', async () => {
  const h = harness({ concurrency: 1 });
  const g = gate();
  const before = [];
  h.reg.hooks.beforeJob.push((ctx) => before.push(ctx.id));
  h.add('w', () => g.p);
  h.start('a', 'w');
  h.start('b', 'w');
  h.rt.cancel('b', 'shutdown_timeout');
  g.open();
  const got = await h.until(2);
  assert.equal(got.b.status, 'cancelled');
  assert.deepEqual(before, ['a']);
});

// A job with no hook, validation or middleware takes a shorter way through the Runtime than one
// with them; both must end the same. `chained` adds a middleware that only passes the job on.
for (const chained of [false, true]) {
  const way = chained ? 'through a middleware' : 'with nothing around it';
  const setup = (opts) => {
    const h = harness(opts);
    if (chained) h.reg.middleware.push((ctx, args, next) => next());
    return h;
  };

  test(`runtime, a job ${way}: cancelled in the turn that brought it, it never runs`, async () => {
    const h = setup({ concurrency: 4 });
    const ran = [];
    h.add('w', (args, ctx) => { ran.push(ctx.id); return 'ran'; });
    h.start('a', 'w');
    h.start('b', 'w');
    h.rt.cancel('b', 'shutdown_timeout');
    const got = await h.until(2);
    assert.deepEqual([got.a.status, got.a.result, got.b.status], ['done', 'ran', 'cancelled']);
    assert.deepEqual(ran, ['a']);
  });

  test(`runtime, a job ${way}: what its handler gives or throws, and how it is called`, async () => {
    const h = setup({ concurrency: 16 });
    const seen = {};
    const thenable = (v) => ({ then(resolve) { resolve(v); } });
    const rejecting = { then(resolve, reject) { reject(new TypeError('thenable said no')); } };
    const badThen = { get then() { throw new RangeError('then getter'); } };
    const subclassed = new (class P extends Promise {})((resolve) => { resolve('sub'); });
    const ownThen = Promise.resolve('hidden');
    ownThen.then = (resolve) => resolve('own then');
    h.add('this', function record() { seen.this = this; seen.args = arguments.length; return 1; });
    h.add('sync', () => ({ a: [1] }));
    h.add('undef', () => undefined);
    h.add('async', async () => 'later');
    h.add('thenable', () => thenable(thenable('deep')));
    h.add('rejecting', () => rejecting);
    h.add('badThen', () => badThen);
    h.add('subclassed', () => subclassed);
    h.add('ownThen', () => ownThen);
    h.add('fn', () => function named() {});
    h.add('throws', () => { throw new PermanentError('sync throw'); });
    h.add('rejects', async () => { throw new Error('async throw'); });
    h.add('snooze', async () => new Snooze(3, 'wait'));
    const names = ['this', 'sync', 'undef', 'async', 'thenable', 'rejecting', 'badThen', 'subclassed', 'ownThen', 'fn', 'throws', 'rejects', 'snooze'];
    for (const n of names) h.start(n, n);
    const got = await h.until(names.length);
    assert.equal(seen.this, undefined);
    assert.equal(seen.args, 2);
    assert.deepEqual(got.sync.result, { a: [1] });
    assert.equal(got.undef.result, null);
    assert.equal(got.async.result, 'later');
    assert.equal(got.thenable.result, 'deep');
    assert.deepEqual([got.rejecting.status, got.rejecting.error.type, got.rejecting.error.message], ['failed', 'TypeError', 'thenable said no']);
    assert.deepEqual([got.badThen.status, got.badThen.error.type], ['failed', 'RangeError']);
    assert.equal(got.subclassed.result, 'sub');
    assert.equal(got.ownThen.result, 'own then');
    assert.equal(got.fn.result, '[function named]');
    assert.deepEqual([got.throws.status, got.throws.error.message, got.throws.error.retryable], ['failed', 'sync throw', false]);
    assert.deepEqual([got.rejects.status, got.rejects.error.message, got.rejects.error.retryable], ['failed', 'async throw', true]);
    assert.deepEqual([got.snooze.status, got.snooze.seconds, got.snooze.reason], ['snooze', 3, 'wait']);
  });

  test(`runtime, a job ${way}: its context`, async () => {
    const h = setup();
    let ctx;
    let aborted;
    h.add('c', async (args, c) => {
      ctx = c;
      await new Promise((resolve) => { c.signal.addEventListener('abort', resolve); });
      aborted = c.signal.reason;
      throw new Error('stopped');
    });
    h.rt.start({ ...job('c1', 'c'), deadline: 1000, traceparent: 'tp', worker_id: 'w', scheduled_at: 2000, created_at: 3000 }, (frame) => h.reports.push(frame));
    await waitFor(() => ctx !== undefined, () => 'the handler did not start', 5000);
    assert.ok(Object.isFrozen(ctx));
    assert.equal(Object.getPrototypeOf(ctx), Object.prototype);
    assert.deepEqual(Reflect.ownKeys(ctx), ['id', 'name', 'attempt', 'maxAttempts', 'queue', 'deadline', 'traceparent', 'workerId', 'scheduledAt', 'createdAt', 'enqueue', 'signal']);
    assert.equal(typeof ctx.enqueue, 'function');
    assert.deepEqual({ ...ctx, signal: undefined, enqueue: undefined }, {
      id: 'c1', name: 'c', attempt: 2, maxAttempts: 5, queue: 'default', deadline: new Date(1000), traceparent: 'tp', workerId: 'w',
      scheduledAt: new Date(2000), createdAt: new Date(3000), signal: undefined, enqueue: undefined,
    });
    const desc = Object.getOwnPropertyDescriptor(ctx, 'signal');
    assert.deepEqual([typeof desc.get, desc.set, desc.enumerable, desc.configurable], ['function', undefined, true, false]);
    assert.equal(ctx.signal, ctx.signal);
    assert.equal(ctx.signal.aborted, false);
    h.rt.cancel('c1', 'job_timeout');
    await waitFor(() => h.reports.length === 1, () => 'no result', 5000);
    assert.equal(aborted, 'job_timeout');
    assert.equal(h.reports[0].status, 'cancelled');
  });
}

test('runtime: a non-cancellable job ignores a cancel and reports its real result', async () => {
  const h = harness();
  const g = gate();
  let signal;
  h.add('s', async (args, ctx) => { signal = ctx.signal; await g.p; return 'real'; }, { cancellable: false });
  h.start('s1', 's');
  await tick();
  h.rt.cancel('s1', 'job_timeout');
  g.open();
  const got = await h.until(1);
  assert.equal(got.s1.result, 'real');
  assert.equal(signal.aborted, false);
});

test('runtime: outcomes; a BigInt is sent as its digits, a result over the frame limit fails the job', async () => {
  const h = harness({ maxFrameBytes: 4096 });
  h.add('snooze', () => new Snooze(3, 'later'));
  h.add('permanent', () => { throw new PermanentError('no'); });
  h.add('bigint', () => ({ n: 10n }));
  h.add('big', () => 'x'.repeat(5000));
  h.add('checked', (args) => args, { validate: (a) => ({ n: Number(a.n) }) });
  h.add('invalid', (args) => args, { validate: () => { throw new Error('bad'); } });
  for (const [id, name, args] of [['1', 'snooze'], ['2', 'permanent'], ['3', 'bigint'], ['4', 'big'], ['5', 'checked', { n: '7' }],
    ['6', 'invalid'], ['7', 'nope']]) h.start(id, name, args);
  const got = await h.until(7);
  assert.deepEqual([got['1'].status, got['1'].seconds, got['1'].reason], ['snooze', 3, 'later']);
  assert.equal(got['2'].error.type, 'PermanentError');
  assert.equal(got['2'].error.retryable, false);
  assert.deepEqual([got['3'].status, got['3'].result], ['done', { n: '10' }]);
  assert.equal(got['4'].error.type, 'ResultTooLarge');
  assert.deepEqual(got['5'].result, { n: 7 });
  assert.equal(got['6'].error.reason, 'invalid_arguments');
  assert.equal(got['6'].error.message, 'Corrupted argument data: bad');
  assert.equal(got['7'].error.type, 'UnknownJob');
});

test('runtime: a result that cannot be written fails permanently with its cause, and so does what throws while it is described', async () => {
  const h = harness();
  const cyclic = { a: [1] };
  cyclic.a.push(cyclic);
  const revoked = Proxy.revocable({}, {});
  revoked.revoke();
  h.add('cycle', () => cyclic);
  h.add('toJSON', () => ({ toJSON() { throw revoked.proxy; } }));
  h.add('thrown', () => { throw revoked.proxy; });
  h.add('message', () => { throw Object.defineProperty(new Error('x'), 'message', { get() { throw new RangeError('no'); } }); });
  h.add('fake', () => ({ [Symbol.for('soniq.snooze')]: true, seconds: NaN }));
  for (const id of ['cycle', 'toJSON', 'thrown', 'message', 'fake']) h.start(id, id);
  const got = await h.until(5);
  assert.equal(got.cycle.error.type, 'TypeError');
  assert.match(got.cycle.error.message, /^result of job cycle is not JSON-serialisable: Converting circular structure to JSON/);
  assert.equal(got.cycle.error.retryable, false);
  assert.deepEqual([got.toJSON.error.type, got.toJSON.error.message, got.toJSON.error.retryable],
    ['object', 'result of job toJSON is not JSON-serialisable: [a value that cannot be printed]', false]);
  assert.deepEqual([got.thrown.error.type, got.thrown.error.retryable], ['object', true]);
  assert.deepEqual([got.message.error.type, got.message.error.message], ['Error', '<reading its message threw RangeError>']);
  assert.match(got.fake.error.message, /^result of job fake is not JSON-serialisable: a Snooze needs seconds >= 0/);
});

test('runtime: what JSON cannot hold is sent as a string, with one WARN line naming the job and the types', async () => {
  const lines = [];
  const write = process.stderr.write;
  process.stderr.write = (chunk, ...rest) => (String(chunk).includes('WARN') ? (lines.push(String(chunk)), true) : write.call(process.stderr, chunk, ...rest));
  try {
    const h = harness();
    h.add('n', () => ({ big: 2n ** 70n, list: [1n, { toJSON: () => -3n }], d: new Date(0) }));
    h.add('sym', () => Symbol('tag'));
    h.add('fn', () => function handler() {});
    h.add('both', () => { const a = { n: 1n }; a.self = a; return a; }); // a cycle stays a failure
    for (const id of ['n', 'sym', 'fn', 'both']) h.start(id, id);
    const got = await h.until(4);
    assert.deepEqual([got.n.status, got.n.result], ['done', { big: '1180591620717411303424', list: ['1', '-3'], d: '1970-01-01T00:00:00.000Z' }]);
    assert.deepEqual([got.sym.status, got.sym.result], ['done', 'Symbol(tag)']);
    assert.deepEqual([got.fn.status, got.fn.result], ['done', '[function handler]']);
    assert.deepEqual([got.both.status, got.both.error.retryable], ['failed', false]);
    assert.match(got.both.error.message, /Converting circular structure to JSON/);
    assert.deepEqual(lines.map((l) => l.replace(/^soniq-handler\[\d+\]: /, '').trim()).sort(), [
      'WARN: job fn (fn) returned function, which JSON cannot hold; its result stores each as a string, as a Soniq worker stores str() of it',
      'WARN: job n (n) returned bigint, which JSON cannot hold; its result stores each as a string, as a Soniq worker stores str() of it',
      'WARN: job sym (sym) returned symbol, which JSON cannot hold; its result stores each as a string, as a Soniq worker stores str() of it',
    ]);
  } finally {
    process.stderr.write = write;
  }
});

test('runtime: a failure over the frame limit is cut to fit and keeps its retryability', async () => {
  const h = harness({ maxFrameBytes: 4096 });
  h.add('long', () => { throw new Error('é'.repeat(20000)); });
  h.start('1', 'long');
  const { 1: got } = await h.until(1);
  assert.equal(got.error.type, 'Error');
  assert.equal(got.error.retryable, true);
  assert.equal(got.error.traceback, null);
  assert.match(got.error.message, /^éé.*\.\.\. \[cut to fit the 4096-byte frame limit\]$/);
  assert.ok(Buffer.byteLength(encode(got)) <= 4096);
});

test('runtime: a transport that cannot take a result is reported, and the slot is freed', async () => {
  const h = harness({ concurrency: 1 });
  const failures = [];
  h.rt.onReportError = (id, err) => failures.push([id, err.message]);
  h.add('a', () => 1);
  h.rt.start(job('1', 'a'), () => { throw new Error('stream gone'); });
  h.start('2', 'a');
  const got = await h.until(1);
  assert.deepEqual(failures, [['1', 'stream gone']]);
  assert.equal(got['2'].result, 1);
});

test('session: a result that no longer writes (out of stack) fails as one that cannot be written', () => {
  const deep = (n) => { let v = 1; for (let i = 0; i < n; i++) v = [v]; return v; };
  const msg = resultMessage({ type: 'result', id: 'j', status: 'done', result: deep(100000) });
  assert.equal(msg.status, 'FAILED');
  assert.equal(msg.error.retryable, false);
  assert.match(msg.error.message, /^result of job j is not JSON-serialisable: it is nested 100000 levels deep, deeper than JSON.stringify can go here/);
});

test('session: a reported result becomes the Result message its parsed stdio encoding would', () => {
  const rt = new Runtime(new Registry(), { concurrency: 1, maxFrameBytes: 4096 });
  const withProto = JSON.parse('{"__proto__":{"a":1},"b":2}');
  const deep = (n) => { let v = 1; for (let i = 0; i < n; i++) v = [v]; return v; };
  const values = [
    null, undefined, 0, -0, 1e21, 5e-324, 2 ** 53 + 2, NaN, Infinity, true, '', 'é😀\u2028"\\\n\u0001', [1, undefined, () => 1, Symbol('s')],
    { b: 1, 2: 'two', 1: 'one', a: [{}], u: undefined }, withProto, new Date(0), new Map([[1, 2]]),
    { toJSON: () => ({ x: 1 }) }, { toJSON: () => undefined }, { '\ud800': 1, '\udfff': 2 }, 'lone \ud800 end',
    'x'.repeat(5000), '\ufffd', { '\ufffd': 1 }, { toJSON: () => null }, 1n, deep(9999), deep(10001), { get bad() { throw new Error('getter'); } },
  ];
  const frames = values.map((result, i) => ({ type: 'result', id: `d${i}`, status: 'done', result }));
  frames.push(
    { type: 'result', id: 'f', status: 'failed', error: { type: 'Error', message: 'lone \udc00', traceback: 'at x', retryable: true } },
    { type: 'result', id: 'f2', status: 'failed', error: { type: 'E', message: 'm'.repeat(9000), traceback: null, retryable: false, reason: 'invalid_arguments' } },
    { type: 'result', id: 's', status: 'snooze', seconds: 1.5, reason: 'later \ud800' },
    { type: 'result', id: 's2', status: 'snooze', seconds: 0, reason: null },
    { type: 'result', id: 'c', status: 'cancelled' },
  );
  for (const frame of frames) {
    const { frame: sent, text } = rt.encodeResult(frame);
    const want = resultMessage(JSON.parse(text));
    assert.deepEqual(reportedMessage(sent, text), want, frame.id);
    // Checked without the frame being written: the same frame, size and message.
    const apart = rt.encodeResultApart(frame);
    assert.deepEqual(apart.frame, sent, frame.id);
    assert.equal(apart.bytes, Buffer.byteLength(text), frame.id);
    assert.deepEqual(apartMessage(apart), want, frame.id);
  }
  for (const id of ['j', 'é😀', 'x'.repeat(9000)]) {
    for (const result of [null, 'v', 'y'.repeat(3000)]) {
      const frame = { type: 'result', id, status: 'done', result };
      const { text } = rt.encodeResult(frame);
      const apart = rt.encodeResultApart(frame);
      assert.equal(apart.bytes, Buffer.byteLength(text));
      assert.deepEqual(apartMessage(apart), resultMessage(JSON.parse(text)));
    }
  }
  // A value is written once.
  let calls = 0;
  const apart = rt.encodeResultApart({ type: 'result', id: 'once', status: 'done', result: { toJSON: () => ++calls } });
  assert.deepEqual([apart.text, apart.value, calls], [null, '1', 1]);
  // The usual done result is not parsed again.
  const parse = JSON.parse;
  JSON.parse = () => { throw new Error('parsed'); };
  try {
    for (const result of [null, { a: [1, 'é'] }]) {
      const { frame, text } = rt.encodeResult({ type: 'result', id: 'p', status: 'done', result });
      const want = result === null ? { id: 'p', status: 'DONE' } : { id: 'p', status: 'DONE', result_json: '{"a":[1,"é"]}' };
      assert.deepEqual(reportedMessage(frame, text), want);
    }
  } finally {
    JSON.parse = parse;
  }
});

test('runtime: a done result is written as encode writes it, and fails as encode fails, its value written once', () => {
  const rt = new Runtime(new Registry(), { concurrency: 1, maxFrameBytes: 1 << 20 });
  const deep = (n) => { let v = 1; for (let i = 0; i < n; i++) v = [v]; return v; };
  const cycle = {};
  cycle.self = cycle;
  const values = [
    null, undefined, 0, -0, 1e21, NaN, Infinity, true, '', 'é😀\u2028"\\\n\u0001', [1, undefined, () => 1], { b: 1, 2: 'two', u: undefined },
    JSON.parse('{"__proto__":{"a":1}}'), new Date(0), { toJSON: () => undefined }, { '\ud800': 1 }, 'lone \ud800 end', '\ufffd',
    () => 1, Symbol('s'), 1n, { n: 1n }, cycle, deep(9998), deep(10001), { get bad() { throw new Error('getter'); } },
    { toJSON() { throw new RangeError('no'); } },
  ];
  for (const id of ['j', 'lone \udc00 id', 'é']) {
    values.forEach((value, i) => {
      const frame = { type: 'result', id, status: 'done', result: value };
      let want;
      try {
        want = { text: encode(frame) };
      } catch (err) {
        want = { err };
      }
      let calls = 0;
      // A plain object's value gets a toJSON that counts the times it is written.
      const wrapped = value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype
        && !('toJSON' in value) && !Object.getOwnPropertyDescriptor(value, 'bad');
      const counted = wrapped ? { ...value, toJSON() { calls++; return value; } } : value;
      const { frame: sent, text } = rt.encodeResult({ ...frame, result: counted });
      if (want.text !== undefined) {
        assert.equal(text, want.text, `value ${i}`);
        assert.equal(sent.status, 'done');
        if (wrapped) assert.equal(calls, 1, `value ${i} written once`);
      } else if (sent.status === 'done') {
        // What JSON cannot hold, written as a string (a BigInt; a function or symbol as the value).
        assert.equal(text, encode(sent), `value ${i}`);
        assert.match(text, /"result":("|\{"n":")/, `value ${i}`);
      } else {
        assert.equal(sent.status, 'failed', `value ${i}`);
        assert.ok(sent.error.message.includes(want.err.message.split('\n')[0]), `value ${i}: ${sent.error.message}`);
      }
    });
  }
});

test('runtime: hooks and middleware run in order, afterJob once the result is reported', async () => {
  const h = harness();
  const seen = [];
  h.reg.hooks.beforeJob.push((ctx) => seen.push(`before ${ctx.id} attempt ${ctx.attempt}`));
  h.reg.hooks.afterJob.push((ctx, info) => seen.push(`after ${ctx.id} ${JSON.stringify(info.result)} reports=${h.reports.length}`));
  h.reg.middleware.push(async (ctx, args, next) => { seen.push('outer'); return { wrapped: await next() }; });
  h.reg.middleware.push((ctx, args, next) => { seen.push('inner'); return next({ v: 2 }); });
  h.add('ok', (args) => args.v);
  h.start('a', 'ok', { v: 1 });
  const got = await h.until(1);
  assert.deepEqual(got.a.result, { wrapped: 2 });
  // As Soniq calls after_job after mark_job_done: the result is out first.
  assert.deepEqual(seen, ['before a attempt 2', 'outer', 'inner', 'after a {"wrapped":2} reports=1']);
});

test('runtime: afterJob holds no slot and the runtime is idle only once it returns', async () => {
  const h = harness({ concurrency: 1 });
  const g = gate();
  const after = [];
  h.reg.hooks.afterJob.push(async (ctx) => { after.push(ctx.id); await g.p; });
  h.add('ok', ({ n }) => n);
  h.start('a', 'ok', { n: 1 });
  h.start('b', 'ok', { n: 2 });
  // Both results are out while a's afterJob still waits: its slot went to b.
  const got = await h.until(2);
  assert.deepEqual([got.a.result, got.b.result], [1, 2]);
  assert.deepEqual(after, ['a', 'b']);
  assert.equal(h.rt.count, 0);
  assert.equal(h.rt.idle, false);
  const changes = h.changes;
  g.open();
  await waitFor(() => h.rt.idle, () => 'hooks still running', 5000);
  assert.ok(h.changes > changes, 'the hooks ending is a change');
});

test('runtime: onError runs before the failure is reported, also for a value that cannot be sent', async () => {
  const h = harness();
  const g = gate();
  const seen = [];
  h.reg.hooks.onError.push(async (ctx, err) => {
    seen.push(`onError ${ctx.id} ${err.name}: ${err.message.split(':')[0]} reports=${h.reports.length}`);
    await g.p;
  });
  h.add('boom', () => { throw new TypeError('boom'); });
  h.add('cycle', () => { const a = {}; a.a = a; return a; });
  h.start('f', 'boom', {});
  h.start('c', 'cycle', {});
  await waitFor(() => seen.length === 2, () => JSON.stringify(seen), 5000);
  await tick();
  assert.equal(h.reports.length, 0, 'no failure is sent while its onError hooks run');
  g.open();
  const got = await h.until(2);
  assert.equal(got.f.status, 'failed');
  assert.equal(got.c.status, 'failed');
  assert.deepEqual(seen.sort(), ['onError c TypeError: result of job c is not JSON-serialisable reports=0', 'onError f TypeError: boom reports=0']);
});

test('runtime: duplicate(), start of a held job, hello', async () => {
  const h = harness({ concurrency: 3 });
  const g = gate();
  h.add('w', () => g.p, { cancellable: false });
  assert.equal(h.rt.duplicate('d'), false);
  h.start('d', 'w');
  assert.equal(h.rt.duplicate('d'), true);
  assert.throws(() => h.start('d', 'w'), /held already/);
  g.open();
  await h.until(1);
  assert.equal(h.rt.duplicate('d'), false);
  const hello = h.rt.hello(1);
  assert.deepEqual(decode(encode(hello)), { ...hello, sync_concurrency: null }); // a valid frame (Node announces no pool)
  assert.deepEqual(hello, { type: 'hello', protocol: 1, sdk: SDK, pid: process.pid, jobs: [{ name: 'w', cancellable: false }], concurrency: 3 });
});

// ---------------------------------------------------------------------------------- Ledger

const done = (id) => ({ type: 'result', id, status: 'done', result: id });

test('ledger: results wait until acknowledged, then go to the next session', () => {
  const led = new Ledger(true);
  const { sent: s, kept } = led.open();
  assert.deepEqual(kept, []);
  led.sent(s, done('a')); // before the sidecar said anything: tracked
  led.heard(s, true);
  assert.equal(led.acked(s, []), false);
  assert.equal(Ledger.awaiting(s), true);
  led.sent(s, done('b'));
  assert.equal(led.acked(s, ['a']), true);
  assert.deepEqual([...s.unacked.keys()], ['b']);
  assert.deepEqual(led.lost(s), ['b']);
  led.closed(s, 'unacknowledged');
  assert.deepEqual([...led.kept.keys()], ['b']);
  const next = led.open();
  assert.deepEqual(next.kept.map((f) => f.id), ['b']);
  assert.equal(led.kept.size, 0);
  assert.deepEqual([...next.sent.unacked.keys()], ['b']);
});

test('ledger: a sidecar that never acknowledges is trusted with what it received', () => {
  const led = new Ledger(true);
  const { sent: s } = led.open();
  led.sent(s, done('a'));
  led.heard(s, false);
  assert.equal(s.unacked.size, 0);
  led.sent(s, done('b'));
  assert.equal(Ledger.awaiting(s), false);
  led.closed(s, 'gone');
  assert.equal(led.kept.size, 0);
});

test('ledger: at most its limit, the oldest dropped; a spawned process keeps nothing', () => {
  const led = new Ledger(true, 2);
  for (const id of ['a', 'b', 'c']) led.keep(done(id), 'no session');
  assert.deepEqual([...led.kept.keys()], ['b', 'c']);
  const spawned = new Ledger(false);
  spawned.keep(done('a'), 'no session');
  const { sent } = spawned.open();
  spawned.sent(sent, done('b'));
  assert.equal(spawned.kept.size, 0);
  assert.equal(sent.unacked.size, 0);
});

// -------------------------------------------------------------------- App.run({ listen })

const RUN_APP = path.join(ROOT, 'test', 'support', 'run_options_app.js');

test('run({ listen: 5 }) throws before serving', () => {
  const app = new App();
  app.job('x', () => 1, { cancellable: true });
  assert.throws(() => app.run({ listen: 5 }), /listen must be a socket path/);
  assert.throws(() => app.run({ listen: '' }), /listen must be a socket path/);
});

test('run({ listen: null }) serves the transport the sidecar chose, whatever $SONIQ_LISTEN says', async () => {
  const h = new Handler(RUN_APP, { env: { RUN_LISTEN: 'null', SONIQ_LISTEN: path.join(tempDir(), 'no.sock') } });
  try {
    const hello = await h.hello();
    assert.deepEqual(hello.jobs, [{ name: 'run.echo', cancellable: true }]);
    h.job('e1', 'run.echo', { a: 1 });
    assert.deepEqual((await h.result('e1')).result, { a: 1 });
    h.send({ type: 'shutdown' });
    assert.equal((await h.exit()).code, 0);
  } finally {
    h.kill();
  }
});

test('run({ listen: PATH }) serves a socket of its own', async () => {
  const sock = path.join(tempDir(), 'run.sock');
  const h = new Listening(sock, { script: RUN_APP, args: [], env: { RUN_LISTEN: sock } });
  try {
    await h.listening();
    const { c, hello } = await openSession(sock);
    assert.deepEqual(hello.jobs, [{ name: 'run.echo', cancellable: true }]);
    c.close();
    h.child.kill('SIGTERM');
    assert.equal((await h.exit()).code, 0);
  } finally {
    h.kill();
  }
});
