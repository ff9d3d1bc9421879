'use strict';
const nodeTest = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { Handler, ROOT } = require('./support/harness');

const EXAMPLES_DIR = path.join(ROOT, '..', '..', 'examples', 'node');
const EXAMPLES = path.join(EXAMPLES_DIR, 'examples.js');
const FIXTURES = path.join(ROOT, 'test', 'support');
const live = [];

function start(script = EXAMPLES, opts) {
  const h = new Handler(script, opts);
  live.push(h);
  return h;
}

// Every test kills the processes it started, pass or fail (no hooks: works on Node 18 too).
function test(name, fn) {
  nodeTest(name, async (t) => {
    try {
      await fn(t);
    } finally {
      while (live.length) live.pop().kill();
    }
  });
}

// The job list the manifest declares: [{name, cancellable}] in file order.
function manifestJobs() {
  const text = fs.readFileSync(path.join(EXAMPLES_DIR, 'manifest.yaml'), 'utf8');
  const jobs = [];
  const re = /-\s+name:\s*(\S+)\s*\n\s+cancellable:\s*(true|false)/g;
  let m;
  while ((m = re.exec(text)) !== null) jobs.push({ name: m[1], cancellable: m[2] === 'true' });
  return jobs;
}

test('hello lists the manifest jobs with their cancellable flags', async () => {
  const h = start();
  const hello = await h.hello();
  assert.equal(hello.protocol, 1);
  assert.match(hello.sdk, /^soniq-node\/\d+\.\d+\.\d+$/);
  assert.equal(hello.sdk, `soniq-node/${require('../package.json').version}`);
  assert.equal(hello.pid, h.child.pid);
  assert.equal(hello.concurrency, 8);
  assert.equal(hello.sync_concurrency, null);
  const declared = manifestJobs();
  assert.equal(declared.length, 7);
  assert.deepEqual(hello.jobs, declared);
  assert.deepEqual(declared.filter((j) => !j.cancellable).map((j) => j.name), ['examples.sleep_sync']);
  const manifest = fs.readFileSync(path.join(EXAMPLES_DIR, 'manifest.yaml'), 'utf8');
  assert.match(manifest, /name: node-examples/);
  assert.match(manifest, /command: \[node, examples\.js\]/);
  assert.match(manifest, /processes: 2/);
  assert.match(manifest, /concurrency: 8/);
});

test('add, snooze, permanent, fail, unknown job', async () => {
  const h = start();
  await h.hello();
  h.job('a1', 'examples.add', { a: 2, b: 40 });
  h.job('s1', 'examples.snooze');
  h.job('p1', 'examples.permanent');
  h.job('f1', 'examples.fail');
  h.job('u1', 'examples.nope');
  h.job('a2', 'examples.add', { a: 'x', b: 1 });

  assert.deepEqual(await h.result('a1'), { type: 'result', id: 'a1', status: 'done', result: { sum: 42 }, error: null, seconds: null, reason: null });
  assert.deepEqual(await h.result('s1'), { type: 'result', id: 's1', status: 'snooze', result: null, error: null, seconds: 1, reason: 'later' });

  const p = await h.result('p1');
  assert.equal(p.status, 'failed');
  assert.equal(p.error.type, 'PermanentError');
  assert.equal(p.error.message, 'this will never work');
  assert.equal(p.error.retryable, false);

  const f = await h.result('f1');
  assert.equal(f.status, 'failed');
  assert.equal(f.error.type, 'Error');
  assert.equal(f.error.message, 'boom');
  assert.equal(f.error.retryable, true);
  assert.match(f.error.traceback, /^Error: boom\n\s+at .*examples\.js:\d+/);

  const u = await h.result('u1');
  assert.equal(u.status, 'failed');
  assert.equal(u.error.type, 'UnknownJob');
  assert.match(u.error.message, /examples\.nope/);
  assert.equal(u.error.retryable, false);

  const a2 = await h.result('a2');
  assert.equal(a2.error.type, 'PermanentError');
  assert.equal(a2.error.retryable, false);
});

test('cancel of a cancellable job answers cancelled within 1 s', async () => {
  const h = start();
  await h.hello();
  h.job('c1', 'examples.sleep_async', { seconds: 30 });
  await h.sync(1);
  const sent = Date.now();
  h.send({ type: 'cancel', id: 'c1', reason: 'job_timeout' });
  const r = await h.next((m) => m.type === 'result' && m.id === 'c1', 1000);
  assert.equal(r.msg.status, 'cancelled');
  assert.ok(r.at - sent < 1000, `took ${r.at - sent} ms`);
  // The process keeps serving after a cancel.
  h.job('a1', 'examples.add', { a: 1, b: 1 });
  assert.equal((await h.result('a1')).result.sum, 2);
});

test('cancel of a non-cancellable (sync) job is ignored and its real result arrives', async () => {
  const h = start();
  await h.hello();
  const sent = Date.now();
  h.job('s1', 'examples.sleep_sync', { seconds: 0.6 });
  await h.sync(1);
  h.send({ type: 'cancel', id: 's1', reason: 'shutdown_timeout' });
  const r = await h.next((m) => m.type === 'result' && m.id === 's1', 3000);
  assert.deepEqual(r.msg.result, { slept: 0.6 });
  assert.equal(r.msg.status, 'done');
  assert.ok(r.at - sent >= 550, `finished after ${r.at - sent} ms, expected the full sleep`);
  assert.match(h.stderr, /cancel \(shutdown_timeout\) for non-cancellable job s1/);
});

test('ctx carries the job fields; abort reason; ignored abort keeps the real result', async () => {
  const h = start(path.join(FIXTURES, 'context_app.js'));
  const hello = await h.hello();
  assert.equal(hello.concurrency, 2);
  h.job('x1', 'fixture.ctx', { k: [1, 'two'] }, {
    attempt: 2, max_attempts: 5, queue: 'emails', deadline: 1700000000123,
    traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    worker_id: '5f0c2a9e-3b1d-4c6e-8f7a-9d2b1c0e4a6f', scheduled_at: 1699999999000, created_at: -1,
  });
  assert.deepEqual((await h.result('x1')).result, {
    args: { k: [1, 'two'] }, id: 'x1', name: 'fixture.ctx', attempt: 2, maxAttempts: 5, queue: 'emails',
    deadline: '2023-11-14T22:13:20.123Z', deadlineIsDate: true,
    traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    workerId: '5f0c2a9e-3b1d-4c6e-8f7a-9d2b1c0e4a6f', scheduledAt: '2023-11-14T22:13:19.000Z',
    createdAt: '1969-12-31T23:59:59.999Z', datesAreDates: true, aborted: false,
  });
  // A sidecar that sends no context: nulls.
  h.job('x2', 'fixture.ctx');
  const x2 = (await h.result('x2')).result;
  assert.equal(x2.deadline, null);
  assert.equal(x2.traceparent, null);
  assert.equal(x2.workerId, null);
  assert.equal(x2.scheduledAt, null);
  assert.equal(x2.createdAt, null);
  assert.equal(x2.datesAreDates, true);

  h.job('i1', 'fixture.ignore_abort', { untilAborted: true });
  h.job('r1', 'fixture.abort_reason');
  await h.sync(1);
  h.send({ type: 'cancel', id: 'i1', reason: 'shutdown_timeout' });
  h.send({ type: 'cancel', id: 'r1', reason: 'job_timeout' });
  h.send({ type: 'cancel', id: 'no-such-job', reason: 'job_timeout' });
  assert.deepEqual((await h.result('r1')).status, 'cancelled');
  const i1 = await h.result('i1');
  assert.equal(i1.status, 'done');
  assert.deepEqual(i1.result, { aborted: true, reason: 'shutdown_timeout' });
});

test('result edge cases: undefined, a BigInt, custom error, thrown string', async () => {
  const h = start(path.join(FIXTURES, 'context_app.js'));
  await h.hello();
  h.job('u', 'fixture.returns_undefined');
  h.job('b', 'fixture.bigint');
  h.job('c', 'fixture.custom_error');
  h.job('s', 'fixture.throws_string');
  const u = await h.result('u');
  assert.equal(u.status, 'done');
  assert.equal(u.result, null);
  // As Soniq's worker stores what JSON cannot hold (str() of it): done, the BigInt's digits.
  const b = await h.result('b');
  assert.deepEqual([b.status, b.result], ['done', { n: '10' }]);
  assert.match(h.stderr, /WARN: job b \(fixture\.bigint\) returned bigint, which JSON cannot hold/);
  const c = await h.result('c');
  assert.equal(c.error.type, 'CustomError');
  assert.equal(c.error.retryable, true);
  const s = await h.result('s');
  assert.equal(s.status, 'failed');
  assert.equal(s.error.message, 'just a string');
  assert.equal(s.error.traceback, null);
});

test('oversized results become a ResultTooLarge failure; long errors are truncated', async () => {
  const h = start(path.join(FIXTURES, 'context_app.js'), { env: { SONIQ_MAX_FRAME_BYTES: '4096' } });
  await h.hello();
  h.job('small', 'fixture.big', { n: 100 });
  h.job('big', 'fixture.big', { n: 5000 });
  assert.equal((await h.result('small')).result.s.length, 100);
  const big = await h.result('big');
  assert.equal(big.status, 'failed');
  assert.equal(big.error.type, 'ResultTooLarge');
  assert.equal(big.error.retryable, false);
  const h2 = start(path.join(FIXTURES, 'context_app.js'));
  await h2.hello();
  h2.job('le', 'fixture.long_error');
  const le = await h2.result('le');
  assert.equal(le.error.type, 'Error');
  assert.ok(le.error.message.length < 70000 && le.error.message.startsWith('eeee'), `${le.error.message.length}`);
  assert.match(le.error.message, /truncated \d+ chars/);
  assert.ok(le.error.traceback.length < 70000);
});

test('a partial last line before EOF is not run; the process drains and exits 0', async () => {
  const h = start();
  await h.hello();
  h.child.stdin.end('{"type":"job","id":"p","name":"examples.add","args":{"a":1,"b":1},"attempt":1,"max_attempts":1,"queue":"q"}');
  assert.equal((await h.exit()).code, 0);
  assert.equal(h.frames.length, 0);
  assert.match(h.stderr, /partial last line before EOF ignored/);
});

test('stray console output and process.stdout.write never reach the protocol stream', async () => {
  const h = start();
  await h.hello();
  h.job('p1', 'examples.print');
  h.send({ type: 'ping', seq: 1 });
  assert.deepEqual((await h.result('p1')).result, { ok: true });
  await h.next((m) => m.type === 'pong' && m.seq === 1);
  h.send({ type: 'shutdown' });
  assert.equal((await h.exit()).code, 0);
  assert.deepEqual(h.protocolErrors, []);
  const stdout = Buffer.concat(h.stdoutRaw).toString('utf8');
  assert.doesNotMatch(stdout, /junk|forged/);
  assert.equal(stdout.split('\n').filter(Boolean).length, 3); // hello, result, pong
  for (const s of ['console.log', 'console.info', 'console.debug', 'console.warn', 'console.error', 'process.stdout.write', '"forged"']) {
    assert.ok(h.stderr.includes(s), `stderr lacks ${s}`);
  }
});

test('results ready in one turn of the event loop go out in one write', async () => {
  // Eight jobs in one write to stdin are read together, run in the same turn and end in it
  // (examples.add settles at once): their eight results leave in one write to stdout, after
  // the hello's own.
  const h = start(EXAMPLES, { env: { NODE_OPTIONS: `--require ${path.join(FIXTURES, 'count_writes.js')}` } });
  await h.hello();
  const ids = Array.from({ length: 8 }, (_, i) => `w${i}`);
  h.child.stdin.write(ids.map((id) => `{"type":"job","id":"${id}","name":"examples.add","args":{"a":1,"b":${id.slice(1)}},"attempt":1,"max_attempts":3,"queue":"default"}\n`).join(''));
  for (const id of ids) assert.deepEqual((await h.result(id)).result, { sum: 1 + Number(id.slice(1)) });
  h.send({ type: 'shutdown' });
  assert.equal((await h.exit()).code, 0);
  assert.deepEqual(h.protocolErrors, []);
  assert.match(h.stderr, /stdout writes: 2\n/);
});

test('pong is answered promptly while a sync job runs', async () => {
  const h = start();
  await h.hello();
  h.job('s1', 'examples.sleep_sync', { seconds: 2 });
  await h.sync(1);
  const sent = Date.now();
  h.send({ type: 'ping', seq: 77 });
  const pong = await h.next((m) => m.type === 'pong', 2000);
  assert.equal(pong.msg.seq, 77);
  assert.ok(pong.at - sent < 1000, `pong after ${pong.at - sent} ms`);
  assert.equal(h.frames.some((f) => f.msg.type === 'result'), false, 'sync job finished before the pong');
  assert.equal((await h.result('s1', 3000)).status, 'done');
});

test('concurrency: 8 one-second sleeps finish in under 2 s', async () => {
  const h = start();
  await h.hello();
  const t0 = Date.now();
  for (let i = 0; i < 8; i++) h.job(`c${i}`, i % 2 ? 'examples.sleep_sync' : 'examples.sleep_async', { seconds: 1 });
  for (let i = 0; i < 8; i++) assert.equal((await h.result(`c${i}`, 3000)).status, 'done');
  const took = Date.now() - t0;
  assert.ok(took >= 950 && took < 2000, `took ${took} ms`);
});

test('jobs beyond the concurrency limit wait for a free slot', async () => {
  const h = start(path.join(FIXTURES, 'context_app.js')); // concurrency 2
  await h.hello();
  const t0 = Date.now();
  for (let i = 0; i < 3; i++) h.job(`w${i}`, 'fixture.ignore_abort', { ms: 400 });
  const ends = [];
  for (let i = 0; i < 3; i++) ends.push((await h.next((m) => m.type === 'result' && m.id === `w${i}`)).at - t0);
  assert.ok(ends[0] < 750 && ends[1] < 750, `first two took ${ends}`);
  assert.ok(ends[2] >= 750, `third did not wait: ${ends}`);
});

test('shutdown: in-flight jobs finish, results are written, exit 0', async () => {
  const h = start();
  await h.hello();
  h.job('s1', 'examples.sleep_async', { seconds: 1.5 });
  h.job('s2', 'examples.sleep_sync', { seconds: 1.7 });
  await h.sync(1); // both in flight
  h.send({ type: 'shutdown' });
  // Still answers pings while draining, and a cancel still reaches a cancellable job.
  h.send({ type: 'ping', seq: 3 });
  assert.equal((await h.next((m) => m.type === 'pong')).msg.seq, 3);
  h.job('late', 'examples.add', { a: 1, b: 2 });
  const late = await h.result('late');
  assert.equal(late.status, 'failed');
  assert.equal(late.error.type, 'ShuttingDown');
  assert.equal(h.exitCode, undefined, 'exited before in-flight jobs finished');
  assert.deepEqual((await h.result('s1')).result, { slept: 1.5 });
  assert.deepEqual((await h.result('s2')).result, { slept: 1.7 });
  assert.deepEqual(await h.exit(), { code: 0, signal: null });
});

test('shutdown then cancel (shutdown_timeout) of an async job: cancelled, exit 0', async () => {
  const h = start();
  await h.hello();
  h.job('s1', 'examples.sleep_async', { seconds: 30 });
  h.send({ type: 'shutdown' });
  await h.sync(1); // draining, the job still held
  assert.equal(h.exitCode, undefined);
  h.send({ type: 'cancel', id: 's1', reason: 'shutdown_timeout' });
  assert.equal((await h.result('s1', 1000)).status, 'cancelled');
  assert.equal((await h.exit()).code, 0);
});

test('EOF on stdin: in-flight jobs finish, then exit 0', async () => {
  const h = start();
  await h.hello();
  h.job('s1', 'examples.sleep_sync', { seconds: 0.5 });
  h.job('a1', 'examples.add', { a: 1, b: 2 });
  h.child.stdin.end();
  assert.equal((await h.result('a1')).result.sum, 3);
  assert.deepEqual((await h.result('s1')).result, { slept: 0.5 });
  assert.deepEqual(await h.exit(), { code: 0, signal: null });
});

test('EOF with nothing in flight exits 0 at once', async () => {
  const h = start();
  await h.hello();
  h.child.stdin.end();
  assert.equal((await h.exit(2000)).code, 0);
});

test('version negotiation picks the highest shared version, none shared exits 3', async () => {
  const ok = start(EXAMPLES, { env: { SONIQ_PROTOCOL_VERSIONS: '3, 1,2' } });
  assert.equal((await ok.hello()).protocol, 1);
  const unset = start(EXAMPLES, { env: { SONIQ_PROTOCOL_VERSIONS: undefined } });
  assert.equal((await unset.hello()).protocol, 1);

  const bad = start(EXAMPLES, { env: { SONIQ_PROTOCOL_VERSIONS: '2,3' } });
  assert.equal((await bad.exit()).code, 3);
  assert.match(bad.stderr, /no shared protocol version.*"2,3".*speaks 1/);
  assert.equal(Buffer.concat(bad.stdoutRaw).length, 0);
});

test('a malformed frame from the sidecar: stderr line, exit 4', async () => {
  for (const frame of ['{"type":"job","id":"x"}', 'not json', '{"type":"ping","seq":1.0}', '{"type":"pong","seq":1}']) {
    const h = start();
    await h.hello();
    h.send(frame);
    assert.equal((await h.exit()).code, 4, frame);
    assert.match(h.stderr, /protocol error from sidecar/);
  }
});

test('an oversize frame from the sidecar: exit 4', async () => {
  const h = start(EXAMPLES, { env: { SONIQ_MAX_FRAME_BYTES: '1024' } });
  await h.hello();
  h.send({ type: 'ping', seq: 1 });
  await h.next((m) => m.type === 'pong');
  h.child.stdin.write('x'.repeat(4096)); // no newline yet: caught while accumulating
  assert.equal((await h.exit()).code, 4);
  assert.match(h.stderr, /oversize/);
});

test('empty lines and CRLF frames are accepted', async () => {
  const h = start();
  await h.hello();
  h.child.stdin.write('\n\r\n{"type":"ping","seq":5}\r\n');
  assert.equal((await h.next((m) => m.type === 'pong')).msg.seq, 5);
});

test('a handler module that throws at load exits non-zero with the stack on stderr', async () => {
  const h = start(path.join(FIXTURES, 'load_error_app.js'));
  const { code } = await h.exit();
  assert.notEqual(code, 0);
  assert.match(h.stderr, /Error: fixture exploded at load time\n\s+at .*load_error_app\.js:\d+/);
  assert.equal(Buffer.concat(h.stdoutRaw).length, 0);
});
