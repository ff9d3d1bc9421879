'use strict';
// Hooks (beforeJob, afterJob, onError), middleware (use) and argument validation (validate),
// driven frame by frame over stdio (test/support/api_app.js): their order, what a throwing hook
// or middleware does, and what a failed validation sends.
const nodeTest = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Handler, ROOT } = require('./support/harness');
const { App } = require('..');

const APP = path.join(ROOT, 'test', 'support', 'api_app.js');
const live = [];

async function waitForText(h, text, timeoutMs = 5000) {
  const deadline = Date.now() + timeoutMs;
  while (!h.stderr.includes(text)) {
    if (Date.now() > deadline) throw new Error(`no ${JSON.stringify(text)} on stderr within ${timeoutMs} ms:\n${h.stderr}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function test(name, fn) {
  nodeTest(name, async (t) => {
    try {
      await fn(t);
    } finally {
      while (live.length) live.pop().kill();
    }
  });
}

async function start(env = {}) {
  const h = new Handler(APP, { env });
  live.push(h);
  await h.hello();
  return h;
}

// Runs job `id` and returns its result and the notes its hooks, middleware and validator made.
async function run(h, id, name, args = {}, extra = {}) {
  h.job(id, name, { tag: id, ...args }, extra);
  const result = await h.result(id);
  h.job(`events-of-${id}`, 'api.events', { id });
  return { result, events: (await h.result(`events-of-${id}`)).result };
}

test('order: beforeJob hooks, validate, middleware (first outermost), handler, afterJob', async () => {
  const h = await start();
  const { result, events } = await run(h, 'o1', 'api.order', { quantity: 2.7 }, { attempt: 2 });
  assert.deepEqual([result.status, result.result], ['done', { wrapped: { quantity: 2 } }]);
  const validated = { tag: 'o1', quantity: 2, normalised: true };
  assert.deepEqual(events, [
    'before1 api.order attempt 2',
    'before2',
    'validate',
    'mw1 in',
    `mw2 in ${JSON.stringify(validated)}`,
    `handler ${JSON.stringify(validated)}`,
    'mw1 out',
    // afterJob sees the value the chain produced, and a duration of at least the handler's 20 ms.
    'after {"wrapped":{"quantity":2}} number true',
  ]);
});

test('a failing handler: onError with the error, no afterJob; retryable unless PermanentError', async () => {
  const h = await start();
  const f = await run(h, 'f1', 'api.fail');
  assert.equal(f.result.status, 'failed');
  assert.deepEqual([f.result.error.type, f.result.error.message, f.result.error.retryable], ['Error', 'boom', true]);
  assert.deepEqual(f.events.slice(-3), ['handler', 'mw1 caught boom', 'onError boom']);
  const p = await run(h, 'p1', 'api.permanent');
  assert.deepEqual([p.result.error.type, p.result.error.retryable], ['PermanentError', false]);
  assert.deepEqual(p.events.slice(-2), ['mw1 caught never', 'onError never']);
});

test('a failed validation: permanent, "Corrupted argument data: ...", no traceback; no middleware, handler or onError', async () => {
  const h = await start();
  const { result, events } = await run(h, 'v1', 'api.order', { quantity: 'two' });
  assert.deepEqual(result.error, {
    type: 'TypeError', message: 'Corrupted argument data: quantity must be a number, got string', traceback: null, retryable: false,
    reason: 'invalid_arguments',
  });
  assert.deepEqual(events, ['before1 api.order attempt 1', 'before2', 'validate']);
  // An async validator that throws something that is not an Error.
  const c = await run(h, 'v2', 'api.check', { bad: true });
  assert.deepEqual(c.result.error, {
    type: 'string', message: 'Corrupted argument data: bad args', traceback: null, retryable: false, reason: 'invalid_arguments',
  });
});

test('a validator that returns undefined leaves the args as they came', async () => {
  const h = await start();
  const { result, events } = await run(h, 'u1', 'api.check', { n: 1 });
  assert.deepEqual(result.result, { tag: 'u1', n: 1 });
  assert.ok(events.includes('handler {"tag":"u1","n":1}'), events.join('\n'));
});

test('a hook that throws is logged and changes nothing', async () => {
  const h = await start();
  const b = await run(h, 'throwBefore-1', 'api.order', { quantity: 1 });
  assert.equal(b.result.status, 'done');
  assert.equal(b.events[1], 'before2', 'the next hook still runs');
  const a = await run(h, 'throwAfter-1', 'api.order', { quantity: 1 });
  assert.deepEqual(a.result.result, { wrapped: { quantity: 1 } });
  const e = await run(h, 'throwOnError-1', 'api.fail');
  assert.deepEqual([e.result.status, e.result.error.message, e.result.error.retryable], ['failed', 'boom', true]);
  assert.match(h.stderr, /beforeJob hook failed for job throwBefore-1 \(api\.order\): Error: before hook broke; ignored/);
  assert.match(h.stderr, /afterJob hook failed for job throwAfter-1 \(api\.order\): Error: after hook broke; ignored/);
  assert.match(h.stderr, /onError hook failed for job throwOnError-1 \(api\.fail\): Error: onError hook broke; ignored/);
});

test('middleware: may short-circuit, pass other args to next(), or throw (a failure, onError called)', async () => {
  const h = await start();
  const s = await run(h, 'shortCircuit-1', 'api.order', { quantity: 1 });
  assert.deepEqual(s.result.result, { wrapped: { short: true } });
  assert.ok(!s.events.some((e) => e.startsWith('handler')), 'the handler did not run');
  const r = await run(h, 'replaceArgs-1', 'api.order', { quantity: 4 });
  assert.ok(r.events.includes('handler {"tag":"replaceArgs-1","quantity":4,"normalised":true,"replaced":true}'), r.events.join('\n'));
  const t = await run(h, 'mwThrow-1', 'api.order', { quantity: 1 });
  assert.deepEqual([t.result.status, t.result.error.message, t.result.error.retryable], ['failed', 'middleware broke', true]);
  assert.deepEqual(t.events.slice(-2), ['mw1 caught middleware broke', 'onError middleware broke']);
});

test('afterJob runs once the result is sent, holds no slot, and the process waits for it at shutdown', async () => {
  const release = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'soniq-api-')), 'release');
  const h = await start({ API_APP_RELEASE: release });
  // concurrency 4: four jobs whose afterJob waits, then a fifth, which runs at once.
  for (let i = 0; i < 4; i++) h.job(`slowAfter-${i}`, 'api.order', { quantity: i });
  for (let i = 0; i < 4; i++) assert.equal((await h.result(`slowAfter-${i}`)).status, 'done');
  for (let i = 0; i < 4; i++) await waitForText(h, `EV slowAfter-${i} afterJob waiting`);
  h.job('o5', 'api.order', { quantity: 5 });
  assert.equal((await h.result('o5')).status, 'done');
  // Shut down: the process keeps serving (a ping is answered) while the hooks run, and exits
  // only after them.
  h.send({ type: 'shutdown' });
  await h.sync(1);
  assert.equal(h.exitCode, undefined);
  assert.doesNotMatch(h.stderr, /afterJob released/);
  fs.writeFileSync(release, '');
  assert.deepEqual(await h.exit(), { code: 0, signal: null });
  assert.equal(h.stderr.match(/afterJob released/g).length, 4);
});

test('a snooze calls neither afterJob nor onError', async () => {
  const h = await start();
  const { result, events } = await run(h, 's1', 'api.snooze');
  assert.deepEqual([result.status, result.seconds], ['snooze', 3]);
  assert.deepEqual(events.slice(-2), ['handler', 'mw1 out']);
});

test('a cancel for job_timeout calls onError; a cancel at shutdown does not', async () => {
  const h = await start();
  h.job('w1', 'api.wait');
  h.job('w2', 'api.wait');
  await new Promise((r) => setTimeout(r, 100));
  h.send({ type: 'cancel', id: 'w1', reason: 'job_timeout' });
  h.send({ type: 'cancel', id: 'w2', reason: 'shutdown_timeout' });
  assert.equal((await h.result('w1')).status, 'cancelled');
  assert.equal((await h.result('w2')).status, 'cancelled');
  h.job('e1', 'api.events', { id: 'w1' });
  h.job('e2', 'api.events', { id: 'w2' });
  const [e1, e2] = [(await h.result('e1')).result, (await h.result('e2')).result];
  assert.equal(e1.filter((e) => e.startsWith('onError')).length, 1, e1.join('\n'));
  assert.deepEqual(e2.filter((e) => e.startsWith('onError') || e.startsWith('after')), []);
});

test('a job this process does not serve runs no hook', async () => {
  const h = await start();
  const { result, events } = await run(h, 'x1', 'api.nope');
  assert.equal(result.error.type, 'UnknownJob');
  assert.deepEqual(events, []);
});

// The branch is a capability the handler declares, as the manifest and the Python SDK (async
// def or def) make it: never assumed. A missing declaration fails at registration, naming
// the job and both choices, before any hello could disagree with the manifest.
test('registration requires cancellable to be declared', () => {
  const app = new App();
  assert.throws(() => app.job('billing.charge', async () => 1), {
    name: 'TypeError',
    message: /^job billing\.charge: declare \{ cancellable: true \} .* or \{ cancellable: false \}/,
  });
  assert.throws(() => app.job('billing.charge', async () => 1, {}), TypeError);
  assert.throws(() => app.job('billing.charge', async () => 1, { cancellable: 'yes' }), { message: 'cancellable for billing.charge must be a boolean' });
  app.job('billing.charge', async () => 1, { cancellable: false });
  assert.equal(app.handlers.get('billing.charge').cancellable, false);
});

test('registration refuses what is not a function', () => {
  const app = new App();
  assert.throws(() => app.beforeJob('x'), { name: 'TypeError', message: 'beforeJob hook must be a function' });
  assert.throws(() => app.afterJob(null), TypeError);
  assert.throws(() => app.onError({}), TypeError);
  assert.throws(() => app.use(42), { name: 'TypeError', message: 'middleware must be a function' });
  assert.throws(() => app.job('a', () => 1, { cancellable: true, validate: 'yes' }), { name: 'TypeError', message: 'validate for a must be a function' });
  assert.equal(app.beforeJob(() => {}).afterJob(() => {}).onError(() => {}).use((c, a, n) => n()), app, 'chainable');
});
