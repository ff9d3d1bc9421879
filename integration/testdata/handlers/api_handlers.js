'use strict';
// Handlers for the Node SDK's worker API under the real sidecar (integration/api_test.go):
// the job context taken from the row, the last_error texts of failures, hooks, middleware and
// argument validation.
const path = require('node:path');
const { setTimeout: sleep } = require('node:timers/promises');
const { App, PermanentError } = require(path.join(process.env.TEST_NODE_SDK, 'index.js'));

const app = new App({ concurrency: 4 });

const ms = (d) => (d instanceof Date ? d.getTime() : d);

// What the SDK made of the row's context: the Dates as epoch milliseconds.
app.job('api.context', async (args, ctx) => ({
  workerId: ctx.workerId,
  scheduledAt: ms(ctx.scheduledAt),
  createdAt: ms(ctx.createdAt),
  datesAreDates: (ctx.scheduledAt === null || ctx.scheduledAt instanceof Date) && ctx.createdAt instanceof Date,
}), { cancellable: true });

app.job('api.permanent', async ({ invoice }) => {
  throw new PermanentError(`no invoice ${invoice}`);
}, { cancellable: true });

// Runs until its timeout cancels it.
app.job('api.slow', async (args, ctx) => {
  await sleep(60_000, undefined, { signal: ctx.signal });
}, { cancellable: true });

// Hooks that break on api.hooked (which changes nothing), a middleware that wraps its value,
// and an onError hook that says on stderr (the sidecar's log) what it saw.
app.beforeJob((ctx) => {
  if (ctx.name === 'api.hooked') throw new Error('beforeJob broke');
});
app.afterJob((ctx) => {
  if (ctx.name === 'api.hooked') throw new Error('afterJob broke');
});
app.onError((ctx, err) => {
  process.stderr.write(`onError ${ctx.id} ${ctx.signal.aborted ? ctx.signal.reason : '-'}: ${err?.message}\n`);
});
app.use(async (ctx, args, next) => (ctx.name === 'api.hooked' ? { wrapped: await next(), attempt: ctx.attempt } : next()));

app.job('api.hooked', (args) => ({ got: args }), { cancellable: true });

// A value JSON cannot hold: done, each BigInt stored as its digits (as a Soniq worker stores str()).
app.job('api.bigint', async () => ({ n: 2n ** 64n, list: [1n] }), { cancellable: true });

app.job('api.validated', ({ n }) => ({ n }), { cancellable: true,
  validate: (args) => {
    if (typeof args.n !== 'number') throw new TypeError(`n must be a number, got ${JSON.stringify(args.n)}`);
    return { n: Math.round(args.n) };
  },
});

app.run();
