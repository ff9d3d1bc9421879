'use strict';
// Benchmark handlers for soniq-sidecar, written with the Node example SDK.
// The benchmark driver (bench/main.go) runs this file from a generated
// manifest; BENCH_NODE_SDK names sdk/node/index.js.
const { setTimeout: sleep } = require('node:timers/promises');
const { App } = require(process.env.BENCH_NODE_SDK);

const app = new App({ concurrency: Number(process.env.BENCH_CONCURRENCY) });

app.job('bench.noop', async () => null, { cancellable: true });

// Pickup latency: the driver subtracts the producer's args.t_us. With
// result_ttl 0 the result goes with the row: the start is reported on stderr
// (the sidecar logs it) for the driver to read instead.
const latencyStderr = process.env.BENCH_LATENCY_STDERR === '1';
app.job('bench.latency', async ({ t_us: t }) => {
  const started = Math.round((performance.timeOrigin + performance.now()) * 1000);
  if (latencyStderr) process.stderr.write(`BENCH-LATENCY ${t} ${started}\n`);
  return { started_us: started };
}, { cancellable: true });

app.job('bench.sleep', async ({ seconds }, ctx) => {
  await sleep(seconds * 1000, undefined, { signal: ctx.signal });
  return null;
}, { cancellable: true });

app.run();
