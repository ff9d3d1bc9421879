// Child jobs typed against index.d.ts (test/types.test.js compiles it; it is not run).
import { App, ChildJobError, type JobContext } from 'soniq-handler';

const app = new App();

// Child jobs: an id at once (written with this job's result), or a Promise of it (immediate).
app.job<{ url: string }>('ts.fan_out', async ({ url }, ctx: JobContext) => {
  const later: string = ctx.enqueue('ts.resize', { url, width: 64 }, { queue: 'images', priority: 5, delay: 1000 });
  try {
    const now: string = await ctx.enqueue('ts.resize', { url, width: 128 }, { immediate: true, dedupKey: url });
    return { later, now };
  } catch (err) {
    if (err instanceof ChildJobError && err.code === 'cap') return { later, now: null };
    throw err;
  }
}, { cancellable: true });

