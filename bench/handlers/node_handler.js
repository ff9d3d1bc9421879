'use strict';
// Benchmark handlers for soniq-sidecar, written with the Node example SDK.
// The benchmark driver (bench/main.go) runs this file from a generated
// manifest; BENCH_NODE_SDK names sdk/node/index.js.
const { setTimeout: sleep } = require('node:timers/promises');
const { App } = require(process.env.BENCH_NODE_SDK);

const app = new App({ concurrency: Number(process.env.BENCH_CONCURRENCY) });

app.job('bench.noop', async () => null, { cancellable: true });

// Pickup latency: the driver subtracts the producer's args.t_us.
app.job('bench.latency', async () => ({
  started_us: Math.round((performance.timeOrigin + performance.now()) * 1000),
}), { cancellable: true });

app.job('bench.sleep', async ({ seconds }, ctx) => {
  await sleep(seconds * 1000, undefined, { signal: ctx.signal });
  return null;
}, { cancellable: true });

app.run();
