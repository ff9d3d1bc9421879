'use strict';
// Handlers for the Node SDK's worker API under the real sidecar (integration/api_test.go):
// the job context taken from the row, the last_error texts of failures.
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
}));

app.job('api.permanent', async ({ invoice }) => {
  throw new PermanentError(`no invoice ${invoice}`);
});

// Runs until its timeout cancels it.
app.job('api.slow', async (args, ctx) => {
  await sleep(60_000, undefined, { signal: ctx.signal });
});

app.run();
