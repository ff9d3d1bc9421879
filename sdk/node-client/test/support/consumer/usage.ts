// How an application uses soniq-client, type-checked by test/types.test.js; each misuse at
// the end is marked as an expected error, which the types must refuse.
import { Client, EnqueueError, argsHash, STATS_KEYS } from 'soniq-client';
import type { Job, Stats, CancelResult } from 'soniq-client';
import pg from 'pg';

// node-postgres's own types (@types/pg): a Pool, a Client and a checked-out PoolClient.
const pool = new pg.Pool({ connectionString: 'postgres://localhost/app' });
declare const tx: pg.PoolClient;
declare const single: pg.Client;
interface Email {
  to: string;
  subject?: string;
}
declare const email: Email;

export async function usage(): Promise<void> {
  const soniq = new Client({ pool });
  const fromUrl = new Client({ connectionString: 'sqlite:soniq.db' });
  const onClient = new Client({ pool: single });
  await onClient.close();
  const id: string = await soniq.enqueue('emails.send', { to: 'a@example.com' }, { queue: 'emails', priority: 10, delay: 5000 });
  await soniq.enqueue('emails.send', { to: 'a@example.com' }, { db: tx, runAt: new Date(), maxAttempts: 5, dedupKey: 'k', unique: true });
  await soniq.enqueue('reports.nightly');
  await soniq.enqueue('emails.send', email);
  const ids: string[] = await soniq.enqueueMany([{ name: 'a', args: { n: 1 } }, { name: 'b', queue: 'q' }], { db: tx });
  const job: Job | null = await soniq.getJob(ids[0] ?? id);
  if (job) {
    const when: Date | null = job.scheduledAt;
    void when;
  }
  const r: CancelResult = await soniq.cancel(id, { wait: 0 });
  if (r.cancelled && r.outcome === 'cancelled_queued') void r.message;
  const s: Stats = await soniq.stats();
  const total: number = s.total + s.dead_letter;
  void total;
  const keys: readonly string[] = STATS_KEYS;
  void keys;
  const h: string = argsHash({ a: 1 });
  void h;
  try {
    await soniq.enqueue('x', {});
  } catch (e) {
    if (e instanceof EnqueueError) void e.message;
  }
  await fromUrl.close();

  // @ts-expect-error the name is a string
  await soniq.enqueue(42, {});
  // @ts-expect-error args are an object
  await soniq.enqueue('x', 'args');
  // @ts-expect-error delay is a number of ms
  await soniq.enqueue('x', {}, { delay: '5s' });
  // @ts-expect-error runAt is a Date
  await soniq.enqueue('x', {}, { runAt: 12 });
  // @ts-expect-error no such option
  await soniq.enqueue('x', {}, { priorty: 1 });
  // @ts-expect-error a job of enqueueMany has a name
  await soniq.enqueueMany([{ args: {} }]);
  // @ts-expect-error pool or connectionString, not both
  new Client({ pool, connectionString: 'postgres://x' });
  // @ts-expect-error cancel's wait is in ms
  await soniq.cancel(id, { wait: '1s' });
}
