'use strict';
// Handlers that make child jobs (ctx.enqueue), for children.test.js.
const { App, ChildJobError } = require('../../index');

const app = new App({ concurrency: 4 });
app.job('c.fan', async (args, ctx) => ({
  ids: Array.from({ length: args.n ?? 1 }, (_, i) => ctx.enqueue('c.kid', { n: i }, args.opts ?? {})),
}), { cancellable: true });
app.job('c.now', async (args, ctx) => {
  try {
    return { jobId: await ctx.enqueue('c.kid', { at: 'once' }, { immediate: true }) };
  } catch (err) {
    if (!(err instanceof ChildJobError)) throw err;
    return { code: err.code, reason: err.reason };
  }
}, { cancellable: true });
app.job('c.bad', async (args, ctx) => {
  const calls = {
    'empty name': () => ctx.enqueue('', {}),
    'args an array': () => ctx.enqueue('c.kid', [1]),
    'args a BigInt': () => ctx.enqueue('c.kid', { n: 1n }),
    'queue empty': () => ctx.enqueue('c.kid', {}, { queue: '' }),
    'priority a fraction': () => ctx.enqueue('c.kid', {}, { priority: 1.5 }),
    'maxAttempts 0': () => ctx.enqueue('c.kid', {}, { maxAttempts: 0 }),
    'delay negative': () => ctx.enqueue('c.kid', {}, { delay: -1 }),
    'unique a string': () => ctx.enqueue('c.kid', {}, { unique: 'yes' }),
    'an unknown option': () => ctx.enqueue('c.kid', {}, { max_attempts: 2 }),
    'frame too big': () => ctx.enqueue('c.kid', { pad: 'x'.repeat(5000) }),
  };
  const out = {};
  for (const [label, call] of Object.entries(calls)) {
    try {
      call();
      out[label] = null;
    } catch (err) {
      out[label] = err.constructor.name;
    }
  }
  out.delayed = ctx.enqueue('c.kid', {}, { delay: 90000 });
  return out;
}, { cancellable: true });
app.job('c.unsupported', async (args, ctx) => {
  try {
    ctx.enqueue('c.kid', {});
    return { code: null };
  } catch (err) {
    return { code: err.code, message: err.message };
  }
}, { cancellable: true });
app.run();
