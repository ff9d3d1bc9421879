'use strict';
// The client on a real SQLite file the sidecar migrated: the rows of the shared vectors in
// Soniq's SQLite schema (TEXT timestamps in Python's isoformat()), dedup and unique hits, the
// caller's transaction, getJob, stats and cancel.
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const Database = require('better-sqlite3');
const { Client, STATS_KEYS } = require('..');
const { isoformat } = require('../sqlite');
const { newSqlite, vectors } = require('./support/db');

const file = vectors();
// What Soniq's SQLite backend writes: datetime.now(timezone.utc).isoformat().
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00$/;

let db;
let soniq;
let conn;
before(() => {
  db = newSqlite();
  soniq = new Client({ connectionString: db.url });
  conn = new Database(db.file);
});
after(async () => {
  await soniq.close();
  conn.close();
  db.drop();
});

const raw = (id) => conn.prepare('SELECT * FROM soniq_jobs WHERE id = ?').get(id);

test('isoformat is Python\'s: microseconds, +00:00, no fraction when it is zero', () => {
  assert.equal(isoformat(new Date('2026-01-02T03:04:05.678Z')), '2026-01-02T03:04:05.678000+00:00');
  assert.equal(isoformat(new Date('2026-01-02T03:04:05.000Z')), '2026-01-02T03:04:05+00:00');
});

for (const v of file.rows) {
  test(`row vector: ${v.name}`, async () => {
    const id = await soniq.enqueue(v.job, v.args ?? undefined, v.options);
    const r = raw(id);
    const want = v.row;
    assert.equal(r.job_name, want.job_name);
    assert.deepEqual(JSON.parse(r.args), want.args);
    assert.equal(r.args, JSON.stringify(want.args), 'compact JSON text, as the sidecar stores it');
    assert.equal(r.args_hash, want.args_hash);
    assert.equal(r.status, want.status);
    assert.equal(r.attempts, want.attempts);
    assert.equal(r.max_attempts, want.max_attempts);
    assert.equal(r.queue, want.queue);
    assert.equal(r.priority, want.priority);
    assert.equal(r.unique_job, want.unique_job ? 1 : 0);
    assert.equal(r.dedup_key, want.dedup_key);
    for (const col of ['producer_id', 'worker_id', 'last_error', 'result', 'expires_at']) assert.equal(r[col], want[col], col);
    assert.match(r.created_at, ISO);
    assert.equal(r.updated_at, r.created_at);
    if (want.scheduled_at === null) assert.equal(r.scheduled_at, null);
    else {
      assert.match(r.scheduled_at, ISO);
      assert.equal(new Date(r.scheduled_at) - new Date(r.created_at), want.scheduled_at.after_created_ms);
    }
  });
}

test('dedup key and unique: the queued duplicate\'s id', async () => {
  const a = await soniq.enqueue('s.dedup', { n: 1 }, { dedupKey: 'sk' });
  assert.equal(await soniq.enqueue('s.dedup', { n: 2 }, { dedupKey: 'sk' }), a);
  const u = await soniq.enqueue('s.unique', { b: 1, a: [1.5] }, { unique: true });
  assert.equal(await soniq.enqueue('s.unique', { a: [1.5], b: 1 }, { unique: true }), u);
  const ids = await soniq.enqueueMany([
    { name: 's.unique', args: { a: [1.5], b: 1 }, unique: true },
    { name: 's.m', args: {}, dedupKey: 'sm' },
    { name: 's.m', args: {}, dedupKey: 'sm' },
    { name: 's.m', args: { x: 1 }, queue: 'q2', delay: 1000 },
  ]);
  assert.equal(ids[0], u);
  assert.equal(ids[2], ids[1]);
  assert.equal(new Set(ids).size, 3);
  assert.equal(raw(ids[3]).queue, 'q2');
});

test('inside the caller\'s transaction: the job exists if and only if it commits', async () => {
  const app = new Database(db.file, { timeout: 5000 });
  try {
    app.exec('BEGIN IMMEDIATE');
    const gone = await soniq.enqueue('s.tx', { n: 1 }, { db: app });
    assert.equal((await soniq.getJob(gone, { db: app })).status, 'queued');
    app.exec('ROLLBACK');
    assert.equal(await soniq.getJob(gone), null);
    app.exec('BEGIN IMMEDIATE');
    const kept = await soniq.enqueue('s.tx', { n: 2 }, { db: app });
    const many = await soniq.enqueueMany([{ name: 's.tx', args: { n: 3 } }], { db: app });
    app.exec('COMMIT');
    assert.equal((await soniq.getJob(kept)).status, 'queued');
    assert.equal((await soniq.getJob(many[0])).status, 'queued');
  } finally {
    app.close();
  }
});

test('getJob, stats and cancel', async () => {
  const id = await soniq.enqueue('s.get', { s: 'é' }, { queue: 'g', priority: 3, maxAttempts: 7 });
  const j = await soniq.getJob(id);
  assert.deepEqual([j.name, j.args, j.queue, j.priority, j.maxAttempts, j.status], ['s.get', { s: 'é' }, 'g', 3, 7, 'queued']);
  assert.ok(Math.abs(j.createdAt - Date.now()) < 60e3);
  assert.equal(await soniq.getJob('not-a-uuid'), null);

  const s = await soniq.stats();
  assert.deepEqual(Object.keys(s), [...STATS_KEYS]);
  const c = await soniq.cancel(id);
  assert.equal(c.outcome, 'cancelled_queued');
  assert.equal(raw(id).status, 'cancelled');
  assert.match(raw(id).updated_at, ISO);
  const s2 = await soniq.stats();
  assert.equal(s2.cancelled, s.cancelled + 1);
  assert.equal(s2.queued, s.queued - 1);
  assert.equal(s2.total, s.total);
  assert.equal((await soniq.cancel(id)).outcome, 'finished');
  assert.equal((await soniq.cancel('8d3c5f0e-0000-4000-8000-00000000ffff')).outcome, 'not_found');

  // Running under a worker: a pending request the holder finds at its next poll.
  const worker = '6f1c3f0e-8a57-4d4e-9a57-0d1f0c2b9e33';
  const run = await soniq.enqueue('s.run', {});
  conn.prepare(`UPDATE soniq_jobs SET status = 'processing', attempts = 1, worker_id = ? WHERE id = ?`).run(worker, run);
  const waiting = soniq.cancel(run, { wait: 10000 });
  let req;
  for (const end = Date.now() + 10000; !req && Date.now() < end; await new Promise((r) => setTimeout(r, 20))) {
    req = conn.prepare('SELECT status, worker_id FROM soniq_sidecar_cancel_requests WHERE job_id = ?').get(run);
  }
  assert.deepEqual({ ...req }, { status: 'pending', worker_id: worker });
  conn.prepare(`UPDATE soniq_jobs SET status = 'cancelled' WHERE id = ?`).run(run);
  const r = await waiting;
  assert.equal(r.outcome, 'cancelled_running');
  assert.equal(r.cancelled, true);
});

test('a sqlite: path that does not exist is refused, not created; a file without the tables says to migrate', async () => {
  assert.throws(() => new Client({ connectionString: `sqlite:${db.file}.missing` }),
    /sqlite:.*\.missing: no such file: create it with `soniq-sidecar migrate --database-url sqlite:/);
  assert.equal(fs.existsSync(`${db.file}.missing`), false);
  new Database(`${db.file}.empty`).close();
  const empty = new Client({ connectionString: `sqlite:${db.file}.empty` });
  await assert.rejects(empty.enqueue('x', {}), /no such table: soniq_jobs: the Soniq tables are missing: run `soniq-sidecar migrate/);
  await empty.close();
});

test('two processes racing for one unique job on one file: one row', () => {
  const { spawn } = require('node:child_process');
  const path = require('node:path');
  const script = `
    const { Client } = require(${JSON.stringify(path.join(__dirname, '..'))});
    const c = new Client({ connectionString: ${JSON.stringify(db.url)} });
    (async () => {
      const ids = new Set();
      for (let i = 0; i < 30; i++) ids.add(await c.enqueue('s.race', { n: i % 3 }, { unique: true }));
      await c.close();
      console.log(JSON.stringify([...ids]));
    })();`;
  const run = () => new Promise((resolve, reject) => {
    const p = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    p.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`exit ${code}`))));
  });
  return Promise.all([run(), run()]).then(([a, b]) => {
    assert.equal(a.length, 3);
    assert.deepEqual([...a].sort(), [...b].sort(), 'both saw the same three rows');
    assert.equal(conn.prepare(`SELECT count(*) AS n FROM soniq_jobs WHERE job_name = 's.race'`).get().n, 3);
  });
});
