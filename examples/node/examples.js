'use strict';
// Example handlers served by soniq-sidecar (see manifest.yaml). Run: node examples.js
const { setTimeout: sleep } = require('node:timers/promises');
const { App, Snooze, PermanentError } = require('soniq-handler');

const app = new App({ concurrency: 8 });

app.job('examples.add', async ({ a, b }) => {
  if (typeof a !== 'number' || typeof b !== 'number') throw new PermanentError('a and b must be numbers');
  return { sum: a + b };
}, { cancellable: true });

// Async branch: honours ctx.signal, so a cancel stops it at once.
app.job('examples.sleep_async', async ({ seconds }, ctx) => {
  await sleep(seconds * 1000, undefined, { signal: ctx.signal });
  return { slept: seconds };
}, { cancellable: true });

// Sync branch: registered non-cancellable, it ignores cancels and always runs to the end.
// (A timer rather than a busy loop, so the process still answers pings meanwhile.)
app.job('examples.sleep_sync', async ({ seconds }) => {
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  return { slept: seconds };
}, { cancellable: false });

app.job('examples.fail', async () => {
  throw new Error('boom');
}, { cancellable: true });

// Stray output: all of it lands on stderr, the protocol stream stays clean.
app.job('examples.print', async () => {
  console.log('junk from console.log {not json');
  console.info('junk from console.info');
  console.debug('junk from console.debug');
  console.warn('junk from console.warn');
  console.error('junk from console.error');
  console.table([{ junk: 1 }]);
  process.stdout.write('junk from process.stdout.write without newline');
  process.stdout.write('\n{"type":"result","id":"forged","status":"done"}\n');
  return { ok: true };
}, { cancellable: true });

app.job('examples.snooze', async () => new Snooze(1, 'later'), { cancellable: true });

app.job('examples.permanent', async () => {
  throw new PermanentError('this will never work');
}, { cancellable: true });

app.run();
