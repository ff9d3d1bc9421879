'use strict';
// The chaos run's handler on the Node SDK (spawned by a sidecar over stdio).
//
// Every execution appends a `start` line, then an `end` line with its outcome
// (ok, fail, cancelled), to $CHAOS_HISTORY with one append (one write on an
// O_APPEND descriptor), so lines of concurrent processes never interleave. An
// execution whose process is killed has a start and no end. Line fields:
// event token job_id attempt sidecar pid ppid unix_micros [outcome].
const fs = require('node:fs');
const { setTimeout: sleep } = require('node:timers/promises');
const { App } = require(process.env.CHAOS_NODE_SDK);

const history = process.env.CHAOS_HISTORY;
const sidecar = process.env.CHAOS_SIDECAR;
let seq = 0;

// Wall-clock microseconds (the driver compares them with its own clock).
function micros() {
  return Math.round((performance.timeOrigin + performance.now()) * 1000);
}

function record(event, token, ctx, outcome = '') {
  fs.appendFileSync(history,
    `${event} ${token} ${ctx.id} ${ctx.attempt} ${sidecar} ${process.pid} ${process.ppid} ${micros()} ${outcome}\n`);
}

async function run(args, ctx, { fail, cancellable }) {
  const token = `${process.pid}-${++seq}`;
  record('start', token, ctx);
  try {
    await sleep(args.ms, undefined, cancellable ? { signal: ctx.signal } : {});
  } catch (err) {
    if (err.name === 'AbortError') record('end', token, ctx, 'cancelled');
    throw err;
  }
  if (fail) {
    record('end', token, ctx, 'fail');
    throw new Error(`designed to fail (attempt ${ctx.attempt})`);
  }
  record('end', token, ctx, 'ok');
  return { seq: args.seq };
}

const app = new App({ concurrency: Number(process.env.CHAOS_CONCURRENCY || 8) });
app.job('chaos.async', (args, ctx) => run(args, ctx, { fail: false, cancellable: true }), { cancellable: true });
app.job('chaos.fail_async', (args, ctx) => run(args, ctx, { fail: true, cancellable: true }), { cancellable: true });
app.job('chaos.sync', (args, ctx) => run(args, ctx, { fail: false, cancellable: false }), { cancellable: false });
app.job('chaos.fail_sync', (args, ctx) => run(args, ctx, { fail: true, cancellable: false }), { cancellable: false });
app.run();
