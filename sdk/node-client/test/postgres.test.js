'use strict';
// The client on real Postgres, directly and through PgBouncer in transaction mode (where no
// session state survives a transaction): the rows of the shared vectors, dedup and unique
// hits, the caller's transaction, the notification, enqueueMany in one statement, getJob,
// stats and cancel. The sidecar's own side of a cancel is played here by SQL on the row and
// the request; integration/node_client_test.go runs the real sidecar.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const pg = require('pg');
const { Client, EnqueueError, STATS_KEYS } = require('..');
const { newPostgres, vectors, need } = require('./support/db');

need('SONIQ_TEST_PGBOUNCER_URL');
const file = vectors();

// Each suite below has a database of its own (their vectors' unique jobs would meet).
const dbs = [];
async function database() {
  const d = await newPostgres();
  dbs.push(d);
  return d;
}
after(async () => {
  for (const d of dbs) await d.drop();
});

// Reads a row's raw columns on a direct connection.
async function raw(url, id) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const r = await c.query(`SELECT job_name, args, args_hash, status, attempts, max_attempts, queue, priority, unique_job,
      dedup_key, scheduled_at, created_at, updated_at, expires_at, last_error, result, producer_id, worker_id::text
      FROM soniq_jobs WHERE id = $1`, [id]);
    return r.rows[0];
  } finally {
    await c.end();
  }
}

// A direct connection listening on channels; notes() returns what arrived.
async function listener(url, ...channels) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  const got = [];
  c.on('notification', (n) => got.push([n.channel, n.payload]));
  for (const ch of channels) await c.query(`LISTEN ${ch}`);
  return {
    got,
    async waitFor(pred, ms = 5000) {
      const end = Date.now() + ms;
      while (!got.some(pred)) {
        if (Date.now() > end) return false;
        await new Promise((r) => setTimeout(r, 20));
      }
      return true;
    },
    end: () => c.end(),
  };
}

// requested waits until cancel() has recorded its request for a running job (then the row may
// change under it, as the holder would change it).
async function requested(c, id) {
  const end = Date.now() + 10000;
  for (;;) {
    const r = await c.query(`SELECT 1 FROM soniq_sidecar_cancel_requests WHERE job_id = $1 AND status = 'pending'`, [id]);
    if (r.rows.length) return;
    if (Date.now() > end) throw new Error(`no cancel request for ${id}`);
    await new Promise((res) => setTimeout(res, 20));
  }
}

// A pool whose queries are counted: how many statements an operation sent.
function countingPool(url) {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  const counts = { n: 0, texts: [] };
  const query = pool.query.bind(pool);
  pool.query = (text, values) => {
    counts.n++;
    counts.texts.push(typeof text === 'string' ? text : text.text);
    return query(text, values);
  };
  return { pool, counts };
}

for (const target of ['direct', 'pgbouncer']) {
  describe(`Postgres ${target}`, () => {
    let pool;
    let counts;
    let soniq;
    let url;
    let db;
    before(async () => {
      db = await database();
      url = target === 'direct' ? db.direct : db.pooled;
      ({ pool, counts } = countingPool(url));
      soniq = new Client({ pool });
    });
    after(async () => {
      await soniq.close();
      await pool.end();
    });

    for (const v of file.rows) {
      test(`row vector: ${v.name}`, async () => {
        // A vector's dedup key is its own; each target gets a copy of its own.
        const options = { ...v.options };
        if (options.dedupKey) options.dedupKey += '-' + target;
        const id = await soniq.enqueue(v.job, v.args ?? undefined, options);
        const r = await raw(db.direct, id);
        const want = v.row;
        assert.equal(r.job_name, want.job_name);
        assert.deepEqual(r.args, want.args);
        assert.equal(r.args_hash, want.args_hash);
        assert.equal(r.status, want.status);
        assert.equal(r.attempts, want.attempts);
        assert.equal(r.max_attempts, want.max_attempts);
        assert.equal(r.queue, want.queue);
        assert.equal(r.priority, want.priority);
        assert.equal(r.unique_job, want.unique_job);
        assert.equal(r.dedup_key, want.dedup_key === null ? null : want.dedup_key + '-' + target);
        for (const col of ['producer_id', 'worker_id', 'last_error', 'result', 'expires_at']) {
          assert.equal(r[col], want[col], col);
        }
        if (want.scheduled_at === null) assert.equal(r.scheduled_at, null);
        else assert.equal(r.scheduled_at - r.created_at, want.scheduled_at.after_created_ms, 'scheduled_at - created_at');
        assert.equal(r.created_at.getTime(), r.updated_at.getTime());
      });
    }

    test('a dedup key or a unique job returns the queued duplicate, and queues anew once it is not queued', async () => {
      const key = `dedup-${target}`;
      const a = await soniq.enqueue('t.dedup', { n: 1 }, { dedupKey: key });
      assert.equal(await soniq.enqueue('t.dedup', { n: 2 }, { dedupKey: key, queue: 'other' }), a);
      const u = await soniq.enqueue('t.unique', { b: [1, 2.5, 'ü'], a: 1 }, { unique: true });
      assert.equal(await soniq.enqueue('t.unique', { a: 1, b: [1, 2.5, 'ü'] }, { unique: true }), u, 'key order does not matter');
      assert.notEqual(await soniq.enqueue('t.unique', { a: 2, b: [1, 2.5, 'ü'] }, { unique: true }), u);
      assert.notEqual(await soniq.enqueue('t.unique', { b: [1, 2.5, 'ü'], a: 1 }), u, 'not unique: a new row');
      const both = await soniq.enqueue('t.both', { n: 1 }, { dedupKey: key + '-both', unique: true });
      assert.equal(await soniq.enqueue('t.both', { n: 1 }, { dedupKey: key + '-other', unique: true }), both,
        'a unique clash under another dedup key returns the queued duplicate');
      assert.equal((await soniq.cancel(u, { wait: 0 })).outcome, 'cancelled_queued');
      const again = await soniq.enqueue('t.unique', { a: 1, b: [1, 2.5, 'ü'] }, { unique: true });
      assert.notEqual(again, u, 'the cancelled row no longer counts');
    });

    test('inside the caller\'s transaction: the job exists if and only if it commits; notified on commit', async () => {
      const l = await listener(db.direct, 'soniq_new_job');
      const queue = `txq-${target}`;
      try {
        const c = await pool.connect();
        let rolledBack;
        let committed;
        try {
          await c.query('BEGIN');
          rolledBack = await soniq.enqueue('t.tx', { n: 1 }, { db: c, queue });
          assert.ok(await soniq.getJob(rolledBack, { db: c }), 'visible inside the transaction');
          await c.query('ROLLBACK');
          assert.equal(await soniq.getJob(rolledBack), null, 'gone with the rollback');
          await c.query('BEGIN');
          committed = await soniq.enqueue('t.tx', { n: 2 }, { db: c, queue });
          const many = await soniq.enqueueMany([{ name: 't.tx', args: { n: 3 }, queue }], { db: c });
          assert.equal(await soniq.getJob(committed), null, 'not visible outside before the commit');
          await new Promise((r) => setTimeout(r, 200));
          assert.equal(l.got.filter(([, p]) => p === queue).length, 0, 'nothing notified before the commit');
          await c.query('COMMIT');
          assert.equal((await soniq.getJob(many[0])).status, 'queued');
        } finally {
          c.release();
        }
        assert.equal((await soniq.getJob(committed)).status, 'queued');
        assert.ok(await l.waitFor(([ch, p]) => ch === 'soniq_new_job' && p === queue), 'soniq_new_job with the queue after the commit');
      } finally {
        await l.end();
      }
    });

    test('enqueueMany: one statement, ids in order, duplicates inside the batch and before it resolved', async () => {
      const key = `many-${target}`;
      const before = await soniq.enqueue('t.many', { k: 0 }, { dedupKey: key + '-0' });
      const u0 = await soniq.enqueue('t.many.u', { k: 0 }, { unique: true });
      const sent = counts.n;
      const ids = await soniq.enqueueMany([
        { name: 't.many', args: { k: 1 }, queue: 'm1', priority: 5, delay: 60000 },
        { name: 't.many', args: { k: 2 }, dedupKey: key + '-0' },
        { name: 't.many', args: { k: 3 }, dedupKey: key + '-3' },
        { name: 't.many', args: { k: 4 }, dedupKey: key + '-3' },
        { name: 't.many.u', args: { k: 0 }, unique: true },
        { name: 't.many.u', args: { k: 9 }, unique: true },
        { name: 't.many.u', args: { k: 9 }, unique: true, queue: 'm2' },
        { name: 't.many', runAt: new Date(Date.now() + 3600e3) },
      ]);
      assert.equal(counts.n - sent, 1, `one statement: ${counts.texts.slice(sent).join(' ;; ')}`);
      assert.equal(ids.length, 8);
      assert.equal(ids[1], before, 'dedup key queued before the batch');
      assert.equal(ids[3], ids[2], 'dedup key twice in the batch');
      assert.equal(ids[4], u0, 'unique queued before the batch');
      assert.equal(ids[6], ids[5], 'unique twice in the batch');
      assert.equal(new Set(ids).size, 6);
      const first = await raw(db.direct, ids[0]);
      assert.equal(first.queue, 'm1');
      assert.equal(first.priority, 5);
      assert.equal(first.scheduled_at - first.created_at, 60000);
      const last = await raw(db.direct, ids[7]);
      assert.ok(Math.abs(last.scheduled_at.getTime() - (Date.now() + 3600e3)) < 60e3);
      assert.deepEqual(last.args, {});
      assert.deepEqual(await soniq.enqueueMany([]), []);
    });

    test('enqueueMany: 2,000 jobs in one statement', async () => {
      const jobs = Array.from({ length: 2000 }, (_, i) => ({ name: 't.bulk', args: { i }, queue: `bulk-${target}` }));
      const sent = counts.n;
      const ids = await soniq.enqueueMany(jobs);
      assert.equal(counts.n - sent, 1);
      assert.equal(new Set(ids).size, 2000);
      const j = await soniq.getJob(ids[1234]);
      assert.deepEqual(j.args, { i: 1234 });
    });

    test('concurrent enqueues through the pool: each its own row; one unique job however many race for it', async () => {
      const ids = await Promise.all(Array.from({ length: 40 }, (_, i) => soniq.enqueue('t.conc', { i })));
      assert.equal(new Set(ids).size, 40);
      const same = await Promise.all(Array.from({ length: 40 }, () => soniq.enqueue('t.conc.u', { k: target }, { unique: true })));
      assert.equal(new Set(same).size, 1);
      const batches = await Promise.all(Array.from({ length: 8 }, () =>
        soniq.enqueueMany([{ name: 't.conc.m', args: { k: target }, unique: true }, { name: 't.conc.m', args: {}, dedupKey: `conc-${target}` }])));
      assert.equal(new Set(batches.map((b) => b[0])).size, 1);
      assert.equal(new Set(batches.map((b) => b[1])).size, 1);
    });

    test('a single enqueue is one statement', async () => {
      for (const options of [{}, { dedupKey: `one-${target}` }, { unique: true }]) {
        const sent = counts.n;
        await soniq.enqueue('t.one', { x: 1 }, options);
        assert.equal(counts.n - sent, 1, JSON.stringify(options));
      }
    });

    test('getJob: the row, null for an unknown or malformed id, a dead-lettered job from its table', async () => {
      const id = await soniq.enqueue('t.get', { s: 'é', n: [1, 2.5] }, { queue: 'g', priority: 7, maxAttempts: 2 });
      const j = await soniq.getJob(id);
      assert.equal(j.id, id);
      assert.equal(j.name, 't.get');
      assert.deepEqual(j.args, { s: 'é', n: [1, 2.5] });
      assert.equal(j.status, 'queued');
      assert.equal(j.queue, 'g');
      assert.equal(j.priority, 7);
      assert.equal(j.maxAttempts, 2);
      assert.equal(j.attempts, 0);
      assert.ok(j.createdAt instanceof Date && Math.abs(j.createdAt - Date.now()) < 60e3);
      assert.equal(await soniq.getJob('8d3c5f0e-0000-4000-8000-000000000000'), null);
      assert.equal(await soniq.getJob('not-a-uuid'), null);
      const c = new pg.Client({ connectionString: db.direct });
      await c.connect();
      const dead = '8d3c5f0e-0000-4000-8000-0000000000dd';
      await c.query(`INSERT INTO soniq_dead_letter_jobs (id, job_name, args, queue, priority, max_attempts, attempts,
        last_error, dead_letter_reason, original_created_at, moved_to_dead_letter_at)
        VALUES ($1, 't.dead', '{"a":1}', 'default', 100, 3, 3, 'boom', 'max_retries_exceeded', now(), now())
        ON CONFLICT DO NOTHING`, [dead]);
      await c.end();
      const d = await soniq.getJob(dead);
      assert.equal(d.status, 'dead_letter');
      assert.equal(d.deadLetterReason, 'max_retries_exceeded');
      assert.equal(d.lastError, 'boom');
      const r = await soniq.cancel(dead);
      assert.equal(r.outcome, 'dead_letter');
      assert.equal(r.cancelled, false);
      assert.match(r.message, /is in the dead-letter table \(max_retries_exceeded\)/);
    });

    test('stats: the six keys in order, total the sum', async () => {
      const s = await soniq.stats();
      assert.deepEqual(Object.keys(s), [...STATS_KEYS]);
      assert.equal(s.total, s.queued + s.processing + s.done + s.dead_letter + s.cancelled);
      const id = await soniq.enqueue('t.stats', {});
      const s2 = await soniq.stats();
      assert.equal(s2.queued, s.queued + 1);
      await soniq.cancel(id, { wait: 0 });
      const s3 = await soniq.stats();
      assert.equal(s3.cancelled, s2.cancelled + 1);
      assert.equal(s3.queued, s.queued);
      assert.ok(s3.dead_letter >= 1);
    });

    test('cancel: queued at once; finished, unknown; a running job through the sidecar\'s request', async () => {
      const c = new pg.Client({ connectionString: db.direct });
      await c.connect();
      const l = await listener(db.direct, 'soniq_sidecar_cancel');
      try {
        const q = await soniq.cancel(await soniq.enqueue('t.c', {}));
        assert.equal(q.outcome, 'cancelled_queued');
        assert.equal(q.cancelled, true);
        assert.equal(q.job.status, 'cancelled');
        assert.match(q.message, /^cancelled job .* \(t\.c, queue default\): it was queued and will not run$/);
        const again = await soniq.cancel(q.job.id);
        assert.equal(again.outcome, 'finished');
        assert.match(again.message, /has already finished: its status is cancelled; nothing to cancel/);
        assert.equal((await soniq.cancel('8d3c5f0e-0000-4000-8000-00000000ffff')).outcome, 'not_found');

        // A job running under a worker (as a sidecar's claim leaves it).
        const worker = '6f1c3f0e-8a57-4d4e-9a57-0d1f0c2b9e' + (target === 'direct' ? '11' : '22');
        await c.query(`INSERT INTO soniq_workers (id, hostname, pid) VALUES ($1, $2, 1) ON CONFLICT DO NOTHING`,
          [worker, `node-client-${target}`]);
        const running = async () => {
          const id = await soniq.enqueue('t.run', {});
          await c.query(`UPDATE soniq_jobs SET status = 'processing', attempts = 1, worker_id = $2 WHERE id = $1`, [id, worker]);
          return id;
        };
        const r1 = await running();
        const asked = await soniq.cancel(r1, { wait: 0 });
        assert.equal(asked.outcome, 'requested');
        assert.match(asked.message, new RegExp(`is running under worker ${worker}: asked it to cancel the job`));
        const req = await c.query(`SELECT status, worker_id::text FROM soniq_sidecar_cancel_requests WHERE job_id = $1`, [r1]);
        assert.deepEqual(req.rows[0], { status: 'pending', worker_id: worker });
        assert.ok(await l.waitFor(([ch, p]) => ch === 'soniq_sidecar_cancel' && p === r1), 'the holder is notified with the job id');

        // The holder cancels it while cancel() waits.
        const r2 = await running();
        const waiting = soniq.cancel(r2, { wait: 10000 });
        await requested(c, r2);
        await c.query(`UPDATE soniq_jobs SET status = 'cancelled', updated_at = now() WHERE id = $1`, [r2]);
        const done = await waiting;
        assert.equal(done.outcome, 'cancelled_running');
        assert.equal(done.cancelled, true);
        assert.match(done.message, /cancelled it \(reason user\); the row is cancelled, attempts 1 of 3, and will not be retried/);

        // A sync job: the holder refuses.
        const r3 = await running();
        const refusing = soniq.cancel(r3, { wait: 10000 });
        await requested(c, r3);
        await c.query(`UPDATE soniq_sidecar_cancel_requests SET status = 'refused', handler = 'py', detail = 'sync job'
          WHERE job_id = $1`, [r3]);
        const refused = await refusing;
        assert.equal(refused.outcome, 'refused');
        assert.equal(refused.handler, 'py');
        assert.match(refused.message, /cannot be cancelled: handler py runs it as a sync job \(cancellable: false\)/);

        // Nobody answers.
        const r4 = await running();
        const silent = await soniq.cancel(r4, { wait: 300 });
        assert.equal(silent.outcome, 'no_answer');
        assert.match(silent.message, /is still processing: worker .* did not answer within 300 ms/);

        // Back in the queue while waiting: cancelled there.
        const r5 = await running();
        const requeue = soniq.cancel(r5, { wait: 10000 });
        await requested(c, r5);
        await c.query(`UPDATE soniq_jobs SET status = 'queued', worker_id = NULL WHERE id = $1`, [r5]);
        const rq = await requeue;
        assert.equal(rq.outcome, 'cancelled_requeued');
        assert.equal((await soniq.getJob(r5)).status, 'cancelled');
      } finally {
        await l.end();
        await c.end();
      }
    });

    test('bad input is refused before anything is sent, naming the field', async () => {
      const sent = counts.n;
      const cases = [
        [() => soniq.enqueue('', {}), /job name must be a non-empty string/],
        [() => soniq.enqueue(42, {}), /job name must be a non-empty string, got 42/],
        [() => soniq.enqueue('x', [1]), /enqueue "x": args must be a plain object/],
        [() => soniq.enqueue('x', { n: NaN }), /args\.n is NaN/],
        [() => soniq.enqueue('x', {}, { queue: '' }), /option queue must be a non-empty string/],
        [() => soniq.enqueue('x', {}, { priority: 1.5 }), /option priority must be an integer/],
        [() => soniq.enqueue('x', {}, { maxAttempts: 0 }), /option maxAttempts must be an integer ≥ 1, got 0/],
        [() => soniq.enqueue('x', {}, { delay: -1 }), /option delay must be a number of milliseconds ≥ 0/],
        [() => soniq.enqueue('x', {}, { delay: 1, runAt: new Date() }), /delay .* or runAt .*, not both/],
        [() => soniq.enqueue('x', {}, { runAt: 'tomorrow' }), /option runAt must be a valid Date/],
        [() => soniq.enqueue('x', {}, { dedupKey: 5 }), /option dedupKey must be a non-empty string/],
        [() => soniq.enqueue('x', {}, { unique: 'yes' }), /option unique must be true or false/],
        [() => soniq.enqueue('x', {}, { priorty: 1 }), /unknown option "priorty"/],
        [() => soniq.enqueue('x', {}, { db: {} }), /option db must be a pg client/],
        [() => soniq.enqueueMany({}), /jobs must be an array/],
        [() => soniq.enqueueMany([{ name: 'ok' }, { name: 'bad', args: { b: 1n } }]), /enqueueMany: jobs\[1\] "bad": args\.b is a BigInt/],
        [() => soniq.enqueueMany([{ name: 'ok', queue: 5 }]), /jobs\[0\] "ok": option queue/],
        [() => soniq.cancel('x', { wait: -1 }), /option wait must be/],
      ];
      for (const [call, re] of cases) {
        await assert.rejects(call, (e) => e instanceof EnqueueError && re.test(e.message), String(re));
      }
      assert.equal(counts.n, sent, 'nothing was sent');
    });
  });
}

test('a database without the Soniq tables: the error says to migrate', async () => {
  const admin = process.env.SONIQ_TEST_DATABASE_URL;
  const pool = new pg.Pool({ connectionString: admin });
  const soniq = new Client({ pool });
  await assert.rejects(soniq.enqueue('x', {}), /enqueue x on queue default: .*run `soniq-sidecar migrate`/);
  await pool.end();
});

test('connectionString: the client makes its pool and ends it on close', async () => {
  const db = await database();
  const soniq = new Client({ connectionString: db.pooled });
  const id = await soniq.enqueue('t.cs', { a: 1 });
  assert.equal((await soniq.getJob(id)).name, 't.cs');
  await soniq.close();
  await assert.rejects(soniq.enqueue('t.cs', {}), /the client is closed/);
  assert.throws(() => new Client({}), /exactly one of pool/);
  assert.throws(() => new Client({ connectionString: 'mysql://x' }), /must start with postgres/);
  assert.throws(() => new Client({ connectionString: 'sqlite://x.db' }), /write sqlite:PATH or sqlite:\/\/\/PATH/);
  assert.throws(() => new Client({ pool: db.direct }), /pool must be a pg\.Pool or pg\.Client/);
});

test('a duplicate committed by another transaction while the enqueue waited on it: its id, not a second row', async () => {
  const db = await database();
  const pool = new pg.Pool({ connectionString: db.direct, max: 4 });
  const soniq = new Client({ pool });
  try {
    for (const [label, enqueue] of [
      ['enqueue', (args) => soniq.enqueue('t.race', args, { unique: true })],
      ['enqueueMany', async (args) => (await soniq.enqueueMany([{ name: 't.race', args, unique: true }]))[0]],
      ['dedup key and unique', (args) => soniq.enqueue('t.race', args, { unique: true, dedupKey: `race-${JSON.stringify(args)}` })],
    ]) {
      const args = { label };
      const first = await pool.connect();
      try {
        await first.query('BEGIN');
        const held = await soniq.enqueue('t.race', args, { unique: true, db: first });
        // The second producer's insert waits on the first's uncommitted row…
        const second = enqueue(args);
        await new Promise((r) => setTimeout(r, 300));
        await first.query('COMMIT');
        // …and once it commits, answers with that row (its statement's snapshot predates it).
        assert.equal(await second, held, label);
      } finally {
        first.release();
      }
      const n = await pool.query(`SELECT count(*)::int AS n FROM soniq_jobs WHERE job_name = 't.race' AND args = $1::jsonb`, [JSON.stringify(args)]);
      assert.equal(n.rows[0].n, 1, label);
    }
  } finally {
    await pool.end();
  }
});

test('a pg.Client works in place of a pool, cancel\'s transaction included', async () => {
  const db = await database();
  const c = new pg.Client({ connectionString: db.pooled });
  await c.connect();
  try {
    const soniq = new Client({ pool: c });
    const id = await soniq.enqueue('t.client', { a: 1 });
    assert.equal((await soniq.getJob(id)).status, 'queued');
    assert.equal((await soniq.cancel(id)).outcome, 'cancelled_queued');
    await soniq.close();
    assert.equal((await c.query('SELECT 1 AS one')).rows[0].one, 1, 'close() leaves the application\'s client open');
  } finally {
    await c.end();
  }
});
