// The TypeScript example of README.md, verbatim (test/types.test.js checks both).
import { App, PermanentError, Snooze, type JobContext } from 'soniq-handler';

interface SendArgs {
  invoiceId: string;
}

const app = new App({ concurrency: 8 });

app.job<SendArgs>('billing.invoices.send', async ({ invoiceId }, ctx: JobContext) => {
  const res = await fetch(`https://api.example/invoices/${invoiceId}`, { signal: ctx.signal });
  if (res.status === 429) return new Snooze(30, 'rate limited');
  if (res.status === 404) throw new PermanentError(`no invoice ${invoiceId}`);
  return { sent: true, attempt: ctx.attempt };
}, { cancellable: true });

app.run();
