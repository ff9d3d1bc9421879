'use strict';
// Handlers for the integration tests, on the Node SDK (sdk/node).
const fs = require('node:fs');
const path = require('node:path');
const { setTimeout: sleep } = require('node:timers/promises');
const { App, Snooze } = require(path.join(process.env.TEST_NODE_SDK, 'index.js'));

const app = new App({ concurrency: Number(process.env.TEST_CONCURRENCY || 8) });

function record(event, ctx) {
  const file = process.env.TEST_RECORD;
  if (file) fs.appendFileSync(file, `${event} ${ctx.id} ${process.pid} ${ctx.attempt}\n`);
}

app.job('t.noop', async () => null, { cancellable: true });

app.job('t.record', async (args, ctx) => {
  record('run', ctx);
  return { pid: process.pid };
}, { cancellable: true });

// The W3C traceparent the sidecar put in the job frame, as the SDK hands it over.
app.job('t.trace', async (args, ctx) => {
  record('trace', ctx);
  fs.appendFileSync(`${process.env.TEST_RECORD}.traceparent`, `${ctx.id} ${ctx.traceparent}\n`);
  return null;
}, { cancellable: true });

app.job('t.sleep_async', async ({ seconds, pid, trigger }, ctx) => {
  record('start', ctx);
  if (trigger) {
    // Returns as soon as the test creates this file (within seconds).
    const deadline = Date.now() + seconds * 1000;
    while (!fs.existsSync(trigger) && Date.now() < deadline) await sleep(20, undefined, { signal: ctx.signal });
  } else {
    await sleep(seconds * 1000, undefined, { signal: ctx.signal });
  }
  record('end', ctx);
  // With pid: tells which handler process wrote the row's result.
  return pid ? { slept: seconds, pid: process.pid } : { slept: seconds };
}, { cancellable: true });

// Waits to be cancelled and records the cancel's reason: ctx.signal.reason.
app.job('t.await_cancel', async ({ seconds }, ctx) => {
  record('start', ctx);
  try {
    await sleep((seconds ?? 60) * 1000, undefined, { signal: ctx.signal });
  } catch (err) {
    if (ctx.signal.aborted) record(`cancelled-${ctx.signal.reason}`, ctx);
    throw err;
  }
  record('end', ctx);
  return { late: true };
}, { cancellable: true });

app.job('t.sleep_sync', async ({ seconds }, ctx) => {
  record('start', ctx);
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  record('end', ctx);
  return { slept: seconds };
}, { cancellable: false });

// Ignores its AbortSignal: finishes anyway, a little later.
app.job('t.stubborn', async ({ seconds, extra }, ctx) => {
  record('start', ctx);
  await new Promise((resolve) => {
    const t = setTimeout(resolve, seconds * 1000);
    ctx.signal.addEventListener('abort', () => {
      record('cancelled', ctx);
      clearTimeout(t);
      setTimeout(resolve, (extra ?? 0.2) * 1000);
    });
  });
  return { late: true };
}, { cancellable: true });

app.job('t.fail', async (args, ctx) => {
  throw new Error(`boom from attempt ${ctx.attempt}`);
}, { cancellable: false });

app.job('t.snooze', async (args, ctx) => {
  const marker = `${process.env.TEST_RECORD}.snoozed-${ctx.id}`;
  if (ctx.attempt === 1 && !fs.existsSync(marker)) {
    fs.writeFileSync(marker, '');
    return new Snooze(args.seconds ?? 1, 'not yet');
  }
  return { snoozed_before: true };
}, { cancellable: true });

// A poison job: it takes its whole process down, neighbours included.
// Child jobs (t.child, a name nobody serves: they stay queued) of this attempt, deferred unless
// immediate; then it fails while its attempt is below fail_until, or holds for hold seconds.
app.job('t.children', async ({ n = 2, immediate, fail_until: failUntil = 0, hold }, ctx) => {
  const ids = [];
  for (let k = 0; k < n; k++) {
    const child = { parent: ctx.id, attempt: ctx.attempt, k };
    ids.push(immediate ? await ctx.enqueue('t.child', child, { immediate: true }) : ctx.enqueue('t.child', child));
  }
  record('children', ctx);
  if (ctx.attempt < failUntil) throw new Error(`attempt ${ctx.attempt} fails on purpose`);
  if (hold) await sleep(hold * 1000, undefined, { signal: ctx.signal });
  return { ids };
}, { cancellable: true });

app.job('t.crash', async ({ seconds }, ctx) => {
  record('start', ctx);
  await sleep((seconds ?? 0) * 1000);
  fs.writeSync(2, `t.crash: poison job ${ctx.id} exiting with status 7\n`);
  process.exit(7);
}, { cancellable: true });

app.run();
