// pg-boss in the bench's peers section (bench/peers.go runs it).
//
// Settings, from pg-boss's worker documentation: LISTEN/NOTIFY on
// (useListenNotify on the instance, notify on the queue), so an idle worker
// wakes when a job is created instead of at its next poll; batch fetching,
// with burstWhenBatchFull so a worker whose fetch came back full fetches
// again at once (without it a notified worker waits out its polling
// interval between batches); the 0.5 s minimum polling interval as the
// fallback. The per-process budget is split as localConcurrency ×
// batchSize, BENCH_PGBOSS_LOCAL workers (set by the driver: the split that
// drained fastest in trials, see docs/benchmarks.md). A batch handler's jobs
// are completed together when it returns. One queue, bench, carries both
// kinds of job (data.kind), so one work() call holds the whole budget.
// Filling uses insert() (one statement), the latency producer send(). The
// driver analyses its tables right after each fill, as every row's.
//
// It runs on the Node the bench gives the Node SDK (one runtime for the
// race); pg-boss 12 declares Node 22.12 or later as supported.
import { main, importPeer, databaseURL, concurrency, nowUS, newTally, runWorker, runClient } from '../lib/common.mjs';

const { PgBoss } = await importPeer('pg-boss');
const QUEUE = 'bench';

const split = () => {
  const local = Number(process.env.BENCH_PGBOSS_LOCAL ?? 1);
  const batch = concurrency() / local;
  if (!Number.isInteger(batch) || batch < 2) throw new Error(`BENCH_CONCURRENCY ${concurrency()} does not split into ${local} workers of batches of 2 or more`);
  return { local, batch };
};

const boss = (extra) => {
  const b = new PgBoss({ connectionString: databaseURL(), application_name: 'bench-pg-boss', ...extra });
  b.on('error', (err) => process.stderr.write(`pg-boss error: ${err?.stack ?? err}\n`));
  return b;
};

await main({
  async setup() {
    const b = boss({ supervise: false, schedule: false });
    await b.start();
    if (!(await b.getQueue(QUEUE))) await b.createQueue(QUEUE, { notify: true });
    await b.stop({ graceful: false, wait: true });
  },

  async worker() {
    const tally = newTally();
    const { local, batch } = split();
    await runWorker(async () => {
      // One connection per local worker, one for the LISTEN, one for the
      // instance's own supervision.
      const b = boss({ max: local + 2, useListenNotify: true });
      await b.start();
      await b.work(
        QUEUE,
        { batchSize: batch, localConcurrency: local, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 },
        async (jobs) => {
          for (const job of jobs) {
            if (job.data?.kind === 'latency') tally.latency_us.push(nowUS() - job.data.t_us);
            else tally.noop++;
          }
        },
      );
      return () => b.stop({ graceful: true, wait: true });
    }, tally);
  },

  async client() {
    // A producer only: no supervision or scheduling of its own.
    const b = boss({ supervise: false, schedule: false });
    await runClient({
      connect: () => b.start(),
      bulk: (n) => b.insert(QUEUE, Array.from({ length: n }, () => ({ data: { kind: 'noop' } }))),
      one: (payload) => b.send(QUEUE, { kind: 'latency', ...payload }),
      close: () => b.stop({ graceful: false, wait: true }),
    });
  },
});
