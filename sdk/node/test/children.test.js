'use strict';
// Child jobs (ctx.enqueue) over stdio, frame by frame: the enqueue frames a handler sends, in
// order before its result, the answers to immediate ones, and the refusals at the call.
const nodeTest = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { Handler, ROOT } = require('./support/harness');
const { Children, ChildJobError, enqueueMessage } = require('../children');
const { decode } = require('../protocol');

const APP = path.join(ROOT, 'test', 'support', 'children_app.js');
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const live = [];

function start(env = { SONIQ_FEATURES: 'enqueue', SONIQ_MAX_FRAME_BYTES: '4096' }) {
  const h = new Handler(APP, { env: { SONIQ_PROTOCOL_VERSIONS: '1', ...env } });
  live.push(h);
  return h;
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

// The frames up to and including job `id`'s result.
async function untilResult(h, id) {
  const out = [];
  for (;;) {
    const { msg } = await h.next();
    out.push(msg);
    if (msg.type === 'result' && msg.id === id) return out;
  }
}

test('deferred children go out before their parent\'s result, as ctx.enqueue returned them', async () => {
  const h = start();
  await h.hello();
  h.job('p1', 'c.fan', { n: 3 });
  const frames = await untilResult(h, 'p1');
  const enq = frames.slice(0, -1);
  const res = frames.at(-1);
  assert.deepEqual(enq.map((f) => f.type), ['enqueue', 'enqueue', 'enqueue']);
  assert.deepEqual(enq.map((f) => f.id), res.result.ids);
  enq.forEach((f, i) => {
    assert.match(f.id, UUID);
    assert.deepEqual(f, { type: 'enqueue', parent: 'p1', id: f.id, name: 'c.kid', args: { n: i }, queue: null,
      priority: null, max_attempts: null, delay: null, dedup_key: null, unique: null, immediate: null });
  });
});

test('options are sent, delay in seconds', async () => {
  const h = start();
  await h.hello();
  h.job('p1', 'c.fan', { opts: { queue: 'imgs', priority: -2, delay: 1500, maxAttempts: 9, dedupKey: 'k', unique: true } });
  const [enq] = await untilResult(h, 'p1');
  assert.deepEqual([enq.queue, enq.priority, enq.delay, enq.max_attempts, enq.dedup_key, enq.unique], ['imgs', -2, 1.5, 9, 'k', true]);
});

test('an immediate child is a Promise of the written row\'s id, or of its refusal', async () => {
  const h = start();
  await h.hello();
  h.job('p1', 'c.now');
  const enq = (await h.next((m) => m.type === 'enqueue')).msg;
  assert.equal(enq.immediate, true);
  const dup = 'b7e1c2d3-4f5a-4b6c-8d7e-9f0a1b2c3d4e';
  h.send({ type: 'enqueued', id: enq.id, job_id: dup });
  assert.deepEqual((await h.result('p1')).result, { jobId: dup });

  h.job('p2', 'c.now');
  const again = (await h.next((m) => m.type === 'enqueue')).msg;
  h.send({ type: 'enqueued', id: again.id, error: { code: 'cap', message: 'too many' } });
  assert.deepEqual((await h.result('p2')).result, { code: 'cap', reason: 'too many' });
});

test('bad input throws at the call and sends nothing', async () => {
  const h = start();
  await h.hello();
  h.job('p1', 'c.bad');
  const frames = await untilResult(h, 'p1');
  assert.equal(frames.length, 2, 'only the good call sent a frame');
  const res = frames[1].result;
  assert.equal(res.delayed, frames[0].id);
  assert.equal(frames[0].delay, 90);
  delete res.delayed;
  assert.deepEqual(res, {
    'empty name': 'TypeError',
    'args an array': 'TypeError',
    'args a BigInt': 'TypeError',
    'queue empty': 'TypeError',
    'priority a fraction': 'TypeError',
    'maxAttempts 0': 'RangeError',
    'delay negative': 'RangeError',
    'unique a string': 'TypeError',
    'an unknown option': 'TypeError',
    'frame too big': 'RangeError',
  });
});

test('without the feature ctx.enqueue throws unsupported', async () => {
  const h = start({ SONIQ_FEATURES: undefined });
  await h.hello();
  h.job('p1', 'c.unsupported');
  const res = (await h.result('p1')).result;
  assert.equal(res.code, 'unsupported');
  assert.match(res.message, /enqueue/);
});

nodeTest('Children: features, disconnect, and the Session message', async () => {
  const c = new Children(1 << 20, {});
  assert.equal(c.supported, false);
  c.announce(['enqueue']);
  assert.equal(c.supported, true);
  const sent = [];
  c.connect((frame) => sent.push(frame), ['enqueue']);
  const p = c.enqueue('p1', 'kid', { a: 1 }, { immediate: true, delay: 2000 });
  c.disconnect('the session ended');
  await assert.rejects(p, (err) => err instanceof ChildJobError && err.code === 'unavailable');
  assert.equal(c.supported, false, "a session's features end with it");
  const m = enqueueMessage(sent[0]);
  assert.deepEqual(m, { parent: 'p1', id: sent[0].id, name: 'kid', args_json: '{"a":1}', delay_seconds: 2, immediate: true });
  const c2 = new Children(1 << 20, { SONIQ_FEATURES: 'x,enqueue' });
  const { frame, text } = c2.frame('p1', 'kid', { s: 'é' }, { priority: 5 });
  assert.deepEqual(decode(text), frame);
});
