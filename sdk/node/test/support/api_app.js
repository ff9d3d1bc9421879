'use strict';
// Hooks, middleware and validation, for test/api.test.js. Every hook, middleware and
// validator notes what it saw under the job's id; `api.events` returns a job's notes. What a
// job should go wrong at is in its id (`throwBefore`, `mwThrow`, ...).
const fs = require('node:fs');
const { setTimeout: sleep } = require('node:timers/promises');
const { App, PermanentError, Snooze } = require('../../index');

const app = new App({ concurrency: 4 });
const events = new Map();
const note = (id, e) => {
  if (!events.has(id)) events.set(id, []);
  events.get(id).push(e);
};
// (Never for api.events, whose ids name the job they report on.)
const has = (ctx, flag) => ctx.name !== 'api.events' && ctx.id.includes(flag);

app.beforeJob((ctx) => {
  note(ctx.id, `before1 ${ctx.name} attempt ${ctx.attempt}`);
  if (has(ctx, 'throwBefore')) throw new Error('before hook broke');
});
app.beforeJob(async (ctx) => {
  await sleep(5);
  note(ctx.id, 'before2');
});
app.afterJob((ctx, info) => {
  note(ctx.id, `after ${JSON.stringify(info.result)} ${typeof info.durationMs} ${info.durationMs >= 20}`);
  if (has(ctx, 'throwAfter')) return Promise.reject(new Error('after hook broke'));
  return undefined;
});
// $API_APP_RELEASE names a file: the afterJob hook of a job whose id has `slowAfter` waits until
// it exists, and says so on stderr.
app.afterJob(async (ctx) => {
  if (!has(ctx, 'slowAfter')) return;
  process.stderr.write(`EV ${ctx.id} afterJob waiting\n`);
  while (!fs.existsSync(process.env.API_APP_RELEASE)) await sleep(10);
  process.stderr.write(`EV ${ctx.id} afterJob released\n`);
});
app.onError((ctx, err) => {
  note(ctx.id, `onError ${err instanceof Error ? err.message : String(err)}`);
  if (has(ctx, 'throwOnError')) throw new Error('onError hook broke');
});

app.use(async (ctx, args, next) => {
  note(ctx.id, 'mw1 in');
  try {
    const value = await next();
    note(ctx.id, 'mw1 out');
    return ctx.name === 'api.order' ? { wrapped: value } : value;
  } catch (err) {
    note(ctx.id, `mw1 caught ${err.message}`);
    throw err;
  }
});
app.use(async (ctx, args, next) => {
  note(ctx.id, `mw2 in ${JSON.stringify(args)}`);
  if (has(ctx, 'shortCircuit')) return { short: true };
  if (has(ctx, 'mwThrow')) throw new Error('middleware broke');
  if (has(ctx, 'replaceArgs')) return next({ ...args, replaced: true });
  return next();
});

// A validator that normalises (quantity to an integer) or refuses.
function validateOrder(args) {
  note(args.tag, 'validate');
  if (typeof args.quantity !== 'number') throw new TypeError(`quantity must be a number, got ${typeof args.quantity}`);
  return { tag: args.tag, quantity: Math.trunc(args.quantity), normalised: true };
}

app.job('api.order', async (args, ctx) => {
  note(ctx.id, `handler ${JSON.stringify(args)}`);
  await sleep(20);
  return { quantity: args.quantity };
}, { cancellable: true, validate: validateOrder });
// An async validator that only checks: undefined keeps the args.
app.job('api.check', (args, ctx) => {
  note(ctx.id, `handler ${JSON.stringify(args)}`);
  return args;
}, {
  validate: async (args) => {
    note(args.tag, 'validate');
    if (args.bad) throw 'bad args'; // eslint-disable-line no-throw-literal
  },
  cancellable: false,
});
app.job('api.fail', (args, ctx) => {
  note(ctx.id, 'handler');
  throw new Error('boom');
}, { cancellable: true });
app.job('api.permanent', (args, ctx) => {
  note(ctx.id, 'handler');
  throw new PermanentError('never');
}, { cancellable: true });
app.job('api.snooze', (args, ctx) => {
  note(ctx.id, 'handler');
  return new Snooze(3, 'later');
}, { cancellable: true });
app.job('api.wait', async (args, ctx) => {
  note(ctx.id, 'handler');
  await sleep(60_000, undefined, { signal: ctx.signal });
}, { cancellable: true });
app.job('api.events', ({ id }) => events.get(id) ?? [], { cancellable: true });

app.run();
