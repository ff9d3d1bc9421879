'use strict';
// A handler as a project that installed soniq-handler writes it (test/package.test.js copies
// this directory into a fresh project; in the repository the package name resolves to
// itself through its `exports`).
const { setTimeout: sleep } = require('node:timers/promises');
const { App, Snooze, PermanentError } = require('soniq-handler');

const app = new App({ concurrency: 4 });

app.job('pkg.add', ({ a, b }) => ({ sum: a + b }), { cancellable: true });

app.job('pkg.ctx', (args, ctx) => ({
  keys: Object.keys(ctx),
  id: ctx.id,
  name: ctx.name,
  attempt: ctx.attempt,
  maxAttempts: ctx.maxAttempts,
  queue: ctx.queue,
  deadline: ctx.deadline === null ? null : ctx.deadline.toISOString(),
  traceparent: ctx.traceparent,
  workerId: ctx.workerId,
  scheduledAt: ctx.scheduledAt === null ? null : ctx.scheduledAt.toISOString(),
  createdAt: ctx.createdAt === null ? null : ctx.createdAt.toISOString(),
  aborted: ctx.signal.aborted,
  sdkFile: require.resolve('soniq-handler'),
}), { cancellable: true });

// Waits for its cancel; says on stderr when it runs and which reason reached ctx.signal.
app.job('pkg.wait', async (args, ctx) => {
  process.stderr.write(`pkg.wait ${ctx.id} started\n`);
  try {
    await sleep(60_000, undefined, { signal: ctx.signal });
  } catch (err) {
    process.stderr.write(`pkg.wait ${ctx.id} aborted: ${ctx.signal.reason}\n`);
    throw err;
  }
  return { waited: true };
}, { cancellable: true });

// Sync branch: never interrupted.
app.job('pkg.sync', async ({ ms }) => {
  await sleep(ms);
  return { slept: ms };
}, { cancellable: false });

app.job('pkg.snooze', () => new Snooze(5, 'later'), { cancellable: true });

app.job('pkg.permanent', () => {
  throw new PermanentError('never');
}, { cancellable: true });

app.run();
