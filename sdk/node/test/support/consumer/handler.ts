// A TypeScript handler: type-checked against the package's index.d.ts (test/types.test.js)
// and, compiled, run from a fresh install (test/package.test.js).
import { setTimeout as sleep } from 'node:timers/promises';
import { App, PermanentError, Snooze, type JobContext } from 'soniq-handler';

interface ResizeArgs {
  url: string;
  width: number;
}

const app = new App({ concurrency: 4 });

app.job<ResizeArgs>('ts.resize', async ({ url, width }, ctx: JobContext) => {
  if (width <= 0) throw new PermanentError(`bad width ${width}`);
  if (ctx.attempt < 2 && url.startsWith('busy:')) return new Snooze(10, 'busy');
  await sleep(1, undefined, { signal: ctx.signal });
  const deadline: Date | null = ctx.deadline;
  return { url, width, attempt: ctx.attempt, deadline: deadline?.toISOString() ?? null };
}, { cancellable: true });

// Untyped args are JSON values: narrow them before use.
app.job('ts.render', (args) => {
  const pages = typeof args.pages === 'number' ? args.pages : 1;
  return { pages };
}, { cancellable: false });

app.run();
