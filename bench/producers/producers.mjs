// The producers section of make bench (bench/producers.go runs it): enqueueing from a Node
// application, soniq-client beside pg-boss and graphile-worker, on the same database, one
// producer at a time in rounds that alternate them.
//
// Each round, for each producer: its queue table emptied (TRUNCATE), then
//   bulk:   one call enqueueing BENCH_PRODUCERS_BATCH no-op jobs (soniq-client enqueueMany,
//           pg-boss insert, graphile-worker addJobs), timed from the call to its return
//           (the commit): jobs/s;
//   single: 20 warm-up calls, then BENCH_PRODUCERS_SINGLE enqueues one after another
//           (enqueue, send, addJob), each timed from the call to its return: latency.
// Every producer uses its own pool on the same server, warmed up first (connected, one small bulk
// call and a few single ones); no worker runs.
// Prints one JSON document: { rows: [{ key, version, bulk_jobs_per_s: [...], single_ms: [...] }] }.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const url = env('BENCH_DATABASE_URL');
const batch = Number(env('BENCH_PRODUCERS_BATCH'));
const rounds = Number(env('BENCH_PRODUCERS_ROUNDS'));
const singles = Number(env('BENCH_PRODUCERS_SINGLE'));

// load imports a package from the directory holding its package.json and node_modules.
async function load(dir, name) {
  const req = createRequire(join(dir, 'package.json'));
  return import(pathToFileURL(req.resolve(name)).href);
}
// A package's version from its package.json (not every package exports that file).
const version = (file) => JSON.parse(readFileSync(file, 'utf8')).version;
const installed = (dir, name) => version(join(dir, 'node_modules', name, 'package.json'));

// soniq-client and pg as examples/node/producer, an application, has them installed.
const appDir = env('BENCH_CLIENT_APP');
const { Client } = (await load(appDir, 'soniq-client')).default;
const pg = (await load(appDir, 'pg')).default;

const producers = [];
producers.push({
  key: 'soniq-client',
  version: installed(appDir, 'soniq-client'),
  reset: ['TRUNCATE soniq_jobs'],
  async open() {
    this.pool = new pg.Pool({ connectionString: url, max: 2 });
    this.c = new Client({ pool: this.pool });
  },
  bulk(n) {
    return this.c.enqueueMany(Array.from({ length: n }, () => ({ name: 'bench.noop', args: {} })));
  },
  one(i) {
    return this.c.enqueue('bench.latency', { i });
  },
  close() {
    return this.pool.end();
  },
});
if (process.env.BENCH_PGBOSS_MODULES) {
  const dir = process.env.BENCH_PGBOSS_MODULES;
  const { PgBoss } = await load(dir, 'pg-boss');
  producers.push({
    key: 'pg-boss',
    version: installed(dir, 'pg-boss'),
    reset: ['TRUNCATE pgboss.job'],
    async open() {
      this.b = new PgBoss({ connectionString: url, supervise: false, schedule: false, max: 2 });
      this.b.on('error', (err) => process.stderr.write(`pg-boss error: ${err?.stack ?? err}\n`));
      await this.b.start();
    },
    bulk(n) {
      return this.b.insert('bench', Array.from({ length: n }, () => ({ data: {} })));
    },
    one(i) {
      return this.b.send('bench', { i });
    },
    close() {
      return this.b.stop({ graceful: false, wait: true });
    },
  });
}
if (process.env.BENCH_GRAPHILE_MODULES) {
  const dir = process.env.BENCH_GRAPHILE_MODULES;
  const gw = await load(dir, 'graphile-worker');
  const logger = new gw.Logger(() => (level, message) => {
    if (level === 'error' || level === 'warning') process.stderr.write(`graphile-worker ${level}: ${message}\n`);
  });
  producers.push({
    key: 'graphile-worker',
    version: installed(dir, 'graphile-worker'),
    reset: ['TRUNCATE graphile_worker._private_jobs, graphile_worker._private_job_queues'],
    async open() {
      this.u = await gw.makeWorkerUtils({ connectionString: url, logger });
    },
    bulk(n) {
      return this.u.addJobs(Array.from({ length: n }, () => ({ identifier: 'bench_noop', payload: {} })));
    },
    one(i) {
      return this.u.addJob('bench_latency', { i });
    },
    close() {
      return this.u.release();
    },
  });
}

const admin = new pg.Client({ connectionString: url });
await admin.connect();
const out = producers.map((p) => ({ key: p.key, version: p.version, bulk_jobs_per_s: [], single_ms: [] }));
for (const p of producers) {
  // Connected, and one small call of each kind made, before anything is timed.
  await p.open();
  await p.bulk(Math.min(100, batch));
  for (let w = 0; w < 5; w++) await p.one(w);
}
for (let r = 0; r < rounds; r++) {
  for (let k = 0; k < producers.length; k++) {
    const i = (k + r) % producers.length;
    const p = producers[i];
    for (const q of p.reset) await admin.query(q);
    const t0 = performance.now();
    await p.bulk(batch);
    const s = (performance.now() - t0) / 1000;
    out[i].bulk_jobs_per_s.push(batch / s);
    for (let w = 0; w < 20; w++) await p.one(w);
    for (let n = 0; n < singles; n++) {
      const t = performance.now();
      await p.one(n);
      out[i].single_ms.push(performance.now() - t);
    }
    process.stderr.write(`producers ${p.key} round ${r + 1}: ${Math.round(batch / s)} jobs/s in one call\n`);
  }
}
for (const p of producers) {
  for (const q of p.reset) await admin.query(q);
  await p.close();
}
await admin.end();
process.stdout.write(JSON.stringify({ rows: out }) + '\n');
