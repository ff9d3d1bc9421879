'use strict';
// The Session stream over a real socket: the example handler as its own process (attach mode
// with --listen, and spawned with go-plugin's handshake), a real @grpc/grpc-js client in the
// test. The conformance vectors over a Session are in session-vectors.test.js.
const nodeTest = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const {
  Proc, Listening, SessionClient, openSession, health, probe, waitFor, tempDir, grpc, EXAMPLES,
} = require('./support/attach');

const dir = tempDir();
let n = 0;
const sockPath = () => path.join(dir, `h${++n}.sock`);
const live = [];

// Every test kills the processes and closes the sessions it started, pass or fail.
function test(name, fn) {
  nodeTest(name, async (t) => {
    try {
      await fn(t);
    } finally {
      while (live.length) live.pop().kill();
    }
  });
}

async function listen(opts) {
  const sock = opts?.sock ?? sockPath();
  const h = new Listening(sock, opts);
  live.push(h);
  return h.listening();
}

function started(proc) {
  live.push(proc);
  return proc;
}

async function session(sock) {
  const { c, hello } = await openSession(sock);
  live.push({ kill: () => c.close() });
  return { c, hello };
}

test('attach: hello, a job that succeeds, one that fails, ping/pong; no handshake on stdout', async () => {
  const h = await listen();
  const { c, hello } = await session(h.sock);
  assert.equal(hello.protocol, 1);
  assert.equal(hello.sdk, `soniq-node/${require('../package.json').version}`);
  assert.equal(hello.pid, h.child.pid);
  assert.equal(hello.concurrency, 8);
  assert.deepEqual(hello.jobs.map((j) => j.name), [
    'examples.add', 'examples.sleep_async', 'examples.sleep_sync', 'examples.fail', 'examples.print', 'examples.snooze', 'examples.permanent',
  ]);
  assert.equal(hello.running, undefined, 'a fresh process runs nothing');

  c.job('a1', 'examples.add', { a: 2, b: 40 });
  const a1 = await c.result();
  assert.deepEqual([a1.id, a1.status, JSON.parse(a1.result_json)], ['a1', 'DONE', { sum: 42 }]);
  c.job('f1', 'examples.fail');
  const f1 = await c.result();
  assert.deepEqual([f1.id, f1.status, f1.error.type, f1.error.message, f1.error.retryable], ['f1', 'FAILED', 'Error', 'boom', true]);
  assert.match(f1.error.traceback, /^Error: boom\n/);
  c.job('s1', 'examples.snooze');
  const s1 = await c.result();
  assert.deepEqual([s1.status, s1.seconds, s1.reason], ['SNOOZE', 1, 'later']);
  c.job('p1', 'examples.permanent');
  assert.equal((await c.result()).error.retryable, false);
  c.send({ ping: { seq: '41' } });
  assert.deepEqual((await c.next('pong')).pong, { seq: '41' });
  // Stray prints of a job go to stderr; stdout carries nothing (no go-plugin handshake).
  c.job('pr', 'examples.print');
  assert.equal((await c.result()).status, 'DONE');
  await waitFor(() => h.stderr.includes('process.stdout.write'), () => h.stderr);
  assert.equal(h.stdout, '');
  assert.match(h.stderr, new RegExp(`listening on unix socket ${h.sock} `));
});

test('attach: cancel of a cancellable job answers cancelled; unknown ids and sync jobs ignore it', async () => {
  const h = await listen();
  const { c } = await session(h.sock);
  c.job('slow', 'examples.sleep_async', { seconds: 60 });
  c.job('sync', 'examples.sleep_sync', { seconds: 0.3 });
  await c.sync(1);
  c.send({ cancel: { id: 'unknown-id', reason: 'job_timeout' } });
  c.send({ cancel: { id: 'sync', reason: 'shutdown_timeout' } });
  const sent = Date.now();
  c.send({ cancel: { id: 'slow', reason: 'job_timeout' } });
  const r = await c.result();
  assert.deepEqual([r.id, r.status], ['slow', 'CANCELLED']);
  assert.ok(Date.now() - sent < 5000, `cancel took ${Date.now() - sent} ms`);
  const y = await c.result();
  assert.deepEqual([y.id, y.status, JSON.parse(y.result_json)], ['sync', 'DONE', { slept: 0.3 }]);
  assert.match(h.stderr, /cancel \(shutdown_timeout\) for non-cancellable job sync/);
  assert.ok(h.running);
});

test('attach: shutdown ends the session once its jobs reported, not the process', async () => {
  const h = await listen();
  const { c } = await session(h.sock);
  c.job('before', 'examples.sleep_async', { seconds: 0.3 });
  c.send({ shutdown: {} });
  await c.sync(2); // still answered while the session winds down
  c.job('late', 'examples.add', { a: 1, b: 1 });
  const late = await c.result();
  assert.deepEqual([late.id, late.status, late.error.type, late.error.retryable], ['late', 'FAILED', 'ShuttingDown', true]);
  const r = await c.result();
  assert.deepEqual([r.id, r.status], ['before', 'DONE']);
  assert.deepEqual(await c.ended(), { code: grpc.status.OK, details: 'OK' });
  assert.ok(h.running, 'shutdown ends the session, not the process');

  const { c: d, hello } = await session(h.sock);
  assert.equal(hello.running, undefined);
  d.job('after', 'examples.add', { a: 1, b: 1 });
  assert.equal((await d.result()).status, 'DONE');
  // Closing its side is a shutdown too (EOF on stdin).
  d.call.end();
  assert.equal((await d.ended()).code, grpc.status.OK);
});

test('attach: a second session is refused with FAILED_PRECONDITION naming the open one', async () => {
  const h = await listen();
  const { c } = await session(h.sock);
  const second = new SessionClient(h.sock);
  live.push({ kill: () => second.close() });
  const end = await second.ended();
  assert.equal(end.code, grpc.status.FAILED_PRECONDITION);
  assert.match(end.details, /^a session is already open \(opened at \d{4}-\d\d-\d\dT[\d:.]+Z by .+\); one session at a time$/);
  await waitFor(() => /WARN: Session from .* refused: a session is already open/.test(h.stderr), () => h.stderr);
  assert.equal(h.stderr.split('\n').filter((l) => l.includes('refused')).length, 1);
  await c.sync(3); // the first session is unharmed
});

test('attach: a session that breaks while jobs run; the next hello lists them and gets their results', async () => {
  const h = await listen();
  const { c } = await session(h.sock);
  c.job('sync-1', 'examples.sleep_sync', { seconds: 1.5 });
  c.job('quick', 'examples.sleep_async', { seconds: 0.2 });
  await c.sync(1);
  c.close(); // the stream breaks, as when a sidecar dies
  // `quick` may end while no session is open: its result is then kept for the next one.
  const { c: d, hello } = await session(h.sock);
  // Whether `quick` is still listed depends on when the session opened; `sync-1` is.
  assert.ok(hello.running.some((j) => j.id === 'sync-1' && j.name === 'examples.sleep_sync'), JSON.stringify(hello.running));
  const got = new Map();
  while (got.size < 2) {
    const r = await d.result(10000);
    got.set(r.id, r);
  }
  assert.deepEqual(JSON.parse(got.get('sync-1').result_json), { slept: 1.5 });
  assert.equal(got.get('quick').status, 'DONE');
  assert.ok(h.running);
});

test('attach: results of jobs that ended with no session open come right after the next hello', async () => {
  const h = await listen();
  const { c } = await session(h.sock);
  c.job('k1', 'examples.sleep_sync', { seconds: 0.4 });
  c.job('k2', 'examples.sleep_async', { seconds: 0.6 });
  await c.sync(1); // both taken
  c.close();
  // Both end while no session is open.
  await waitFor(() => /job k2 ended with no session open/.test(h.stderr), () => h.stderr);
  assert.match(h.stderr, /job k1 ended with no session open; its result waits for the next session\n/);
  const d = await session(h.sock);
  assert.equal(d.hello.running, undefined);
  // The kept results come first, in the order the jobs ended, then nothing else was kept.
  const k1 = await d.c.result();
  const k2 = await d.c.result();
  assert.deepEqual([k1.id, k1.status, JSON.parse(k1.result_json)], ['k1', 'DONE', { slept: 0.4 }]);
  assert.deepEqual([k2.id, k2.status, JSON.parse(k2.result_json)], ['k2', 'DONE', { slept: 0.6 }]);
  d.c.send({ ping: { seq: '5' } });
  assert.equal((await d.c.next()).message, 'pong');
});

test('attach: the hello says results are kept until a session acknowledges them', async () => {
  const h = await listen();
  const { hello } = await session(h.sock);
  assert.equal(hello.acks, true);
  assert.equal(hello.kept, undefined, 'nothing kept in a fresh process');
});

test('attach: results a session received but did not acknowledge go to the next session', async () => {
  const h = await listen();
  const { c } = await session(h.sock);
  c.send({ ack: {} }); // this sidecar acknowledges results
  c.job('a1', 'examples.add', { a: 1, b: 2 });
  c.job('a2', 'examples.add', { a: 2, b: 2 });
  const got = [(await c.result()).id, (await c.result()).id].sort();
  assert.deepEqual(got, ['a1', 'a2']);
  c.send({ ack: { ids: ['a2'] } });
  await c.sync(1); // the ack was read before the pong
  c.close(); // it breaks before acknowledging a1: it may never have recorded it
  const d = await session(h.sock);
  assert.deepEqual(d.hello.kept, ['a1']);
  assert.equal(d.hello.running, undefined);
  const r = await d.c.result();
  assert.deepEqual([r.id, JSON.parse(r.result_json)], ['a1', { sum: 3 }]);
  d.c.send({ ack: { ids: ['a1'] } });
  await d.c.sync(2);
  d.c.close();
  const e = await session(h.sock);
  assert.equal(e.hello.kept, undefined, 'an acknowledged result is forgotten');
  await e.c.sync(3); // nothing is sent again before the pong
});

test('attach: batches: a Jobs message in, Results out; the empty Jobs says nothing of acknowledgements', async () => {
  const h = await listen();
  const { c, hello } = await session(h.sock);
  assert.equal(hello.batches, true);
  c.send({ jobs: {} }); // as the sidecar does right after the hello: it takes Results
  c.send({ ack: {} }); // and acknowledges results
  const ids = Array.from({ length: 40 }, (_, i) => `c${i}`);
  c.send({ jobs: { jobs: ids.map((id) => ({ id, name: 'examples.add', args_json: '{"a":1,"b":2}', attempt: 1, max_attempts: 3, queue: 'default' })) } });
  const got = [];
  let messages = 0;
  while (got.length < ids.length) {
    const m = await c.next();
    messages += 1;
    assert.ok(m.message === 'result' || m.message === 'results', JSON.stringify(m));
    const batch = m.message === 'result' ? [m.result] : m.results.results;
    assert.ok(batch.length >= 1);
    for (const r of batch) got.push([r.id, r.status, JSON.parse(r.result_json).sum]);
  }
  assert.deepEqual(got.sort(), ids.map((id) => [id, 'DONE', 3]).sort());
  assert.ok(messages < ids.length, `results of one turn of the event loop go out together (${messages} messages)`);
  c.close(); // unacknowledged: the next hello keeps them all, so the Ack after the empty Jobs counted
  const d = await session(h.sock);
  assert.deepEqual([...d.hello.kept].sort(), [...ids].sort());
});

test('attach: the results of the jobs one Jobs message started, ready in one turn, leave in one Results message', async () => {
  const h = await listen();
  const { c } = await session(h.sock);
  c.send({ jobs: {} });
  c.send({ ack: {} });
  const ids = Array.from({ length: 8 }, (_, i) => `t${i}`); // the handler's concurrency
  c.send({ jobs: { jobs: ids.map((id) => ({ id, name: 'examples.add', args_json: '{"a":1,"b":2}', attempt: 1, max_attempts: 3, queue: 'default' })) } });
  const m = await c.next();
  assert.equal(m.message, 'results', JSON.stringify(m));
  assert.deepEqual(m.results.results.map((r) => [r.id, r.status, JSON.parse(r.result_json).sum]), ids.map((id) => [id, 'DONE', 3]));
});

test('attach: a sidecar that sends no Jobs message gets Result messages only', async () => {
  const h = await listen();
  const { c } = await session(h.sock);
  for (let i = 0; i < 20; i += 1) c.job(`e${i}`, 'examples.add', { a: 1, b: 1 });
  for (let i = 0; i < 20; i += 1) await c.result();
});

test('attach: a bad job in a Jobs message ends the session; the jobs after it never run', async () => {
  const h = await listen();
  const { c } = await session(h.sock);
  c.send({ jobs: {} });
  const job = (id, args) => ({ id, name: 'examples.add', args_json: args, attempt: 1, max_attempts: 3, queue: 'default' });
  c.send({ jobs: { jobs: [job('f0', '{"a":1,"b":2}'), job('f1', '[1]'), job('f2', '{"a":1,"b":2}')] } });
  const end = await c._until(() => c.end ?? undefined, 'end of the session', 10000);
  assert.equal(end.code, grpc.status.INVALID_ARGUMENT);
  assert.match(end.details, /^protocol error: wrong_type at args/);
  const ids = c.msgs.flatMap((m) => (m.message === 'result' ? [m.result.id] : m.message === 'results' ? m.results.results.map((r) => r.id) : []));
  assert.ok(!ids.includes('f2'), JSON.stringify(ids));
});

test('attach: a sidecar that never acknowledges is trusted with the results it received', async () => {
  const h = await listen();
  const { c } = await session(h.sock);
  c.job('o1', 'examples.add', { a: 1, b: 2 });
  assert.equal((await c.result()).id, 'o1');
  c.close();
  const d = await session(h.sock);
  assert.equal(d.hello.kept, undefined);
  await d.c.sync(1);
});

test('attach: a job that ends with no session open is listed in the next hello as kept', async () => {
  const h = await listen();
  const { c } = await session(h.sock);
  c.send({ ack: {} });
  c.job('k1', 'examples.sleep_async', { seconds: 0.3 });
  await c.sync(1);
  c.close();
  await waitFor(() => /job k1 ended with no session open/.test(h.stderr), () => h.stderr);
  const d = await session(h.sock);
  assert.deepEqual(d.hello.kept, ['k1']);
  assert.equal((await d.c.result()).id, 'k1');
});

test('attach: a draining handler waits for the acknowledgement of its last results', async () => {
  const h = await listen();
  const { c } = await session(h.sock);
  c.send({ ack: {} });
  c.job('d1', 'examples.add', { a: 1, b: 2 });
  assert.equal((await c.result()).id, 'd1');
  h.child.kill('SIGTERM');
  await c.next('draining');
  await new Promise((resolve) => setTimeout(resolve, 1000));
  assert.ok(h.running, 'it waits for the acknowledgement of d1');
  c.send({ ack: { ids: ['d1'] } });
  assert.equal((await h.exit()).code, 0);
  assert.doesNotMatch(h.stderr, /undelivered/);
});

test('attach: SIGTERM drains: NOT_SERVING, draining, late job snoozed 0 s, held result, exit 0', async () => {
  const h = await listen();
  assert.equal(await health(h.sock, 'plugin'), 'SERVING');
  assert.equal(await health(h.sock, ''), 'SERVING');
  assert.equal((await probe(h.sock)).code, 0);
  const { c } = await session(h.sock);
  // Long enough to outlast, on a loaded machine, everything below up to the
  // second session (two health checks, a probe process, the late job, the
  // cancel): at 1.5 s it once ended first and its result came before the
  // cancel's.
  c.job('held', 'examples.sleep_sync', { seconds: 6 });
  c.job('held-async', 'examples.sleep_async', { seconds: 60 });
  await c.sync(1);

  h.child.kill('SIGTERM');
  await c.next('draining');
  assert.equal(await health(h.sock, 'plugin'), 'NOT_SERVING');
  assert.equal(await health(h.sock, ''), 'NOT_SERVING');
  const p = await probe(h.sock);
  assert.equal(p.code, 1);
  assert.match(p.stderr, /^soniq-handler probe: .*service 'plugin' is NOT_SERVING\n$/);
  assert.match(h.stderr, /SIGTERM: draining \(no new job; exiting once the 2 job\(s\) held have ended\)/);

  c.job('late', 'examples.add', { a: 1, b: 2 });
  const late = await c.result();
  assert.deepEqual([late.id, late.status, late.seconds ?? 0, late.reason], ['late', 'SNOOZE', 0, 'handler draining']);
  // Cancels still flow while draining.
  c.send({ cancel: { id: 'held-async', reason: 'shutdown_timeout' } });
  const cancelled = await c.result();
  assert.deepEqual([cancelled.id, cancelled.status], ['held-async', 'CANCELLED']);
  assert.ok(h.running, 'a job is still held');
  // A session that breaks while draining: the next one hears draining right after its hello.
  c.close();
  const { c: d, hello } = await session(h.sock);
  assert.deepEqual(hello.running, [{ id: 'held', name: 'examples.sleep_sync' }]);
  await d.next('draining');
  const r = await d.result();
  assert.deepEqual([r.id, r.status], ['held', 'DONE']);
  const done = Date.now();
  assert.deepEqual(await h.exit(), { code: 0, signal: null });
  assert.ok(Date.now() - done < 5000, `exit ${Date.now() - done} ms after the last job (stop grace 2 s)`);
  assert.equal((await d.ended()).code, grpc.status.OK, 'the handler closes the session cleanly');
  assert.equal(fs.existsSync(h.sock), false, 'socket removed on a clean exit');
});

test('attach: SIGTERM with nothing held exits 0 at once', async () => {
  const h = await listen();
  const t0 = Date.now();
  h.child.kill('SIGTERM');
  assert.deepEqual(await h.exit(), { code: 0, signal: null });
  assert.ok(Date.now() - t0 < 3000, `took ${Date.now() - t0} ms`);
  assert.equal(fs.existsSync(h.sock), false);
});

test('attach: the socket file: mode 0660, stale replaced, live / non-socket / missing dir refused with exit 2', async () => {
  // Mode 0660 whatever the umask the process was started with.
  const h = await listen();
  const st = fs.lstatSync(h.sock);
  assert.ok(st.isSocket());
  assert.equal(st.mode & 0o777, 0o660);

  // A stale socket: the file stays, nobody answers.
  const stale = sockPath();
  const srv = net.createServer();
  await new Promise((resolve) => srv.listen(stale, resolve));
  fs.linkSync(stale, `${stale}.keep`); // the server's close removes the path; keep the inode
  await new Promise((resolve) => srv.close(resolve));
  fs.renameSync(`${stale}.keep`, stale);
  assert.ok(fs.lstatSync(stale).isSocket());
  const s = await listen({ sock: stale });
  assert.match(s.stderr, new RegExp(`removing stale socket ${stale} \\(nobody answers on it\\)`));
  const { c } = await session(stale);
  await c.sync(1);

  // A live socket: another handler answers on it.
  const busy = started(new Listening(h.sock));
  assert.deepEqual(await busy.exit(), { code: 2, signal: null });
  assert.match(busy.stderr, new RegExp(`--listen ${h.sock}: another process is serving on this socket\\n$`));
  assert.ok(fs.lstatSync(h.sock).isSocket(), 'the live socket is left alone');
  assert.equal(await health(h.sock, 'plugin'), 'SERVING');

  // Not a socket.
  const file = path.join(dir, 'plain-file');
  fs.writeFileSync(file, 'data');
  const nf = started(new Listening(file));
  assert.equal((await nf.exit()).code, 2);
  assert.match(nf.stderr, /the path exists and is not a socket; not replacing it/);
  assert.equal(fs.readFileSync(file, 'utf8'), 'data');

  // The directory does not exist.
  const missing = path.join(dir, 'missing');
  const md = started(new Listening(path.join(missing, 'h.sock')));
  assert.equal((await md.exit()).code, 2);
  assert.match(md.stderr, new RegExp(`directory ${missing} does not exist`));

  // --listen without a path.
  const np = started(new Listening('', { args: ['--listen'] }));
  assert.equal((await np.exit()).code, 2);
  assert.match(np.stderr, /--listen needs a socket path/);
});

test('attach: SONIQ_LISTEN in the environment, --listen=PATH; the probe command', async () => {
  const sockA = sockPath();
  const a = await listen({ args: [], env: { SONIQ_LISTEN: sockA } });
  assert.ok(a.stderr.includes(`listening on unix socket ${sockA} `), a.stderr);
  assert.deepEqual(await probe(sockA), { code: 0, stderr: '' });
  const sockB = sockPath();
  const b = await listen({ args: [`--listen=${sockB}`] });
  assert.ok(b.stderr.includes(`listening on unix socket ${sockB} `), b.stderr);
  assert.deepEqual(await probe(sockB, ['--timeout', '2']), { code: 0, stderr: '' });

  const none = await probe(path.join(dir, 'none.sock'));
  assert.equal(none.code, 1);
  assert.match(none.stderr, /^soniq-handler probe: .*none\.sock does not exist\n$/);
  // A socket nobody answers on.
  const dead = sockPath();
  const srv = net.createServer();
  await new Promise((resolve) => srv.listen(dead, resolve));
  fs.linkSync(dead, `${dead}.keep`);
  await new Promise((resolve) => srv.close(resolve));
  fs.renameSync(`${dead}.keep`, dead);
  const refused = await probe(dead);
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /^soniq-handler probe: .* cannot connect: ECONNREFUSED\n$/);
  const usage = await probe('--help');
  assert.equal(usage.code, 2);
  assert.match(usage.stderr, /^usage: soniq-handler-probe PATH/);
});

test('attach: a bad message ends the session with INVALID_ARGUMENT, not the process', async () => {
  const h = await listen();
  const { c } = await session(h.sock);
  c.job('run-on', 'examples.sleep_async', { seconds: 0.5 });
  c.send({ ping: { seq: '-1' } });
  const end = await c.ended();
  assert.equal(end.code, grpc.status.INVALID_ARGUMENT);
  assert.equal(end.details, 'protocol error: invalid_value at seq: -1 < 0');
  assert.match(h.stderr, /: protocol error: invalid_value at seq: -1 < 0; session ended\n/);
  assert.ok(h.running);
  // Its job ran on; the next session gets the result (or lists it while it still runs).
  const { c: d } = await session(h.sock);
  const r = await d.result();
  assert.deepEqual([r.id, r.status], ['run-on', 'DONE']);
});

// ---------------------------------------------------------------------------------------
// Spawned (SONIQ_TRANSPORT=unix, go-plugin's handshake): Session beside the per-call RPCs.

function spawned() {
  const sockDir = fs.mkdtempSync(path.join(dir, 'spawned-'));
  return started(new Proc(EXAMPLES, [], {
    env: {
      SONIQ_TRANSPORT: 'unix', SONIQ_PLUGIN_MAGIC_COOKIE: 'soniq-handler-v1', PLUGIN_PROTOCOL_VERSIONS: '1', PLUGIN_UNIX_SOCKET_DIR: sockDir,
    },
  }));
}

async function handshake(p) {
  await waitFor(() => p.stdout.includes('\n') || !p.running, () => p.stderr);
  const m = /^1\|1\|unix\|(.+)\|grpc\n$/.exec(p.stdout);
  assert.ok(m, `handshake: ${JSON.stringify(p.stdout)}; stderr:\n${p.stderr}`);
  return m[1];
}

test('spawned: the end of the session ends the process (0) once its jobs reported', async () => {
  const p = spawned();
  const sock = await handshake(p);
  const { c, hello } = await session(sock);
  assert.equal(hello.pid, p.child.pid);
  c.job('p1', 'examples.sleep_sync', { seconds: 0.3 });
  c.send({ shutdown: {} });
  const r = await c.result();
  assert.deepEqual([r.id, r.status], ['p1', 'DONE']);
  assert.equal((await c.ended()).code, grpc.status.OK);
  assert.deepEqual(await p.exit(), { code: 0, signal: null });
});

test('spawned: a session that breaks ends the process once its jobs are done', async () => {
  const p = spawned();
  const sock = await handshake(p);
  const { c } = await session(sock);
  c.job('b1', 'examples.sleep_async', { seconds: 0.3 });
  await c.sync(1);
  c.close();
  assert.deepEqual(await p.exit(), { code: 0, signal: null });
});

test('spawned: a protocol error on the Session exits 4, as on stdio', async () => {
  const p = spawned();
  const sock = await handshake(p);
  const { c } = await session(sock);
  c.job('', 'examples.add');
  assert.equal((await p.exit()).code, 4);
  assert.match(p.stderr, /: protocol error: invalid_value at id: empty string; exiting with status 4\n/);
});

test('spawned: SIGTERM behaves as before (the default: the process ends)', async () => {
  const p = spawned();
  await handshake(p);
  p.child.kill('SIGTERM');
  assert.deepEqual(await p.exit(), { code: null, signal: 'SIGTERM' });
});

test('attach: results that cannot be written fail over a session too, a BigInt is sent as its digits, and the next job runs', async () => {
  const h = await listen({ script: path.join(__dirname, 'support', 'property_app.js') });
  const { c } = await session(h.sock);
  const cases = {
    cycle: { mode: 'return', recipe: { k: 'cycle', container: 'object', long: true } },
    deep: { mode: 'return', recipe: { k: 'deep', depth: 20000, container: 'array', leaf: { k: 'json', v: 1 } } },
    revoked: { mode: 'return', recipe: { k: 'to_json_throws_revoked' } },
    fake: { mode: 'return', recipe: { k: 'fake_snooze' } },
    trap: { mode: 'throw', recipe: { cls: 'trap', message: { k: 'json', v: 'x' }, retryable: null } },
    ok: { mode: 'return', recipe: { k: 'json', v: { fine: true } } },
    big: { mode: 'return', recipe: { k: 'array', items: [{ k: 'bigint' }, { k: 'to_json_bigint' }] } },
  };
  for (const [id, args] of Object.entries(cases)) c.job(id, 'p.async', args);
  const got = {};
  while (Object.keys(got).length < Object.keys(cases).length) {
    const r = await c.result();
    got[r.id] = r;
  }
  for (const id of ['cycle', 'deep', 'revoked', 'fake']) {
    assert.deepEqual([got[id].status, got[id].error.retryable], ['FAILED', false], id);
    assert.match(got[id].error.message, new RegExp(`^result of job ${id} is not JSON-serialisable: .`));
  }
  assert.match(got.cycle.error.message, /Converting circular structure to JSON/);
  assert.match(got.deep.error.message, /it is nested 20000 levels deep/);
  assert.deepEqual([got.trap.status, got.trap.error.type, got.trap.error.retryable], ['FAILED', 'Error', true]);
  assert.deepEqual([got.ok.status, JSON.parse(got.ok.result_json)], ['DONE', { fine: true }]);
  assert.deepEqual([got.big.status, JSON.parse(got.big.result_json)], ['DONE', ['10', '1']]);
  assert.match(h.stderr, /WARN: job big \(p\.async\) returned bigint, which JSON cannot hold/);
  assert.ok(!/unhandled|Uncaught/.test(h.stderr), h.stderr);
});
