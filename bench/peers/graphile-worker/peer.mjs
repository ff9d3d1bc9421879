// graphile-worker in the bench's peers section (bench/peers.go runs it).
//
// Settings: the project's documented high-throughput configuration
// (worker.graphile.org/docs/performance, "With batching"): a local queue
// of 500 jobs, completeJobBatchDelay and failJobBatchDelay 0, a pool of
// concurrency + 1 connections; concurrentJobs is the bench's per-process
// budget. Filling uses addJobs (one add_jobs call), the latency producer
// addJob. The logger drops info and debug: graphile-worker logs a line per
// completed job at info, which no high-throughput deployment keeps. The
// driver analyses its tables right after each fill, as every row's.
//
// It runs on the Node the bench gives the Node SDK (one runtime for the
// race); graphile-worker 0.18 declares Node 22.18 or later as supported.
import { main, importPeer, databaseURL, concurrency, nowUS, newTally, runWorker, runClient } from '../lib/common.mjs';

const gw = await importPeer('graphile-worker');

const logger = new gw.Logger(() => (level, message) => {
  if (level === 'error' || level === 'warning') process.stderr.write(`graphile-worker ${level}: ${message}\n`);
});

const preset = () => ({
  worker: {
    connectionString: databaseURL(),
    concurrentJobs: concurrency(),
    maxPoolSize: concurrency() + 1,
    localQueue: { size: 500 },
    completeJobBatchDelay: 0,
    failJobBatchDelay: 0,
  },
});

await main({
  async setup() {
    await gw.runMigrations({ preset: preset(), logger });
  },

  async worker() {
    const tally = newTally();
    await runWorker(async () => {
      const runner = await gw.run({
        preset: preset(),
        logger,
        noHandleSignals: true,
        taskList: {
          bench_noop: async () => {
            tally.noop++;
          },
          bench_latency: async (payload) => {
            tally.latency_us.push(nowUS() - payload.t_us);
          },
        },
      });
      return () => runner.stop();
    }, tally);
  },

  async client() {
    let utils;
    await runClient({
      connect: async () => {
        utils = await gw.makeWorkerUtils({ connectionString: databaseURL(), logger });
      },
      bulk: (n) => utils.addJobs(Array.from({ length: n }, () => ({ identifier: 'bench_noop', payload: {} }))),
      one: (payload) => utils.addJob('bench_latency', payload),
      close: () => utils.release(),
    });
  },
});
