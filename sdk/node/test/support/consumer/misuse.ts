// Mistakes the types must catch: each line below @ts-expect-error has to be a type error, or
// tsc fails with "Unused '@ts-expect-error' directive".
import {
  App, PermanentError, ProtocolError, Snooze, negotiateVersion, protectStdout,
  type JobContext, type ProtocolErrorCode, type RunOptions,
} from 'soniq-handler';
import { DEFAULT_MAX_FRAME_BYTES, decode, encode } from 'soniq-handler/protocol';
// @ts-expect-error the codec is 'soniq-handler/protocol', not the package's root
import { decode as rootDecode } from 'soniq-handler';
// @ts-expect-error the transport module is internal, not exported
import { serve } from 'soniq-handler/unix';

void serve;
void rootDecode;

// @ts-expect-error concurrency is a number
new App({ concurrency: '8' });
const app = new App();

// @ts-expect-error cancellable is a boolean
app.job('m.a', () => 1, { cancellable: 'yes' });
// @ts-expect-error a misspelt option is not silently ignored
app.job('m.b', () => 1, { cancelable: false });
// @ts-expect-error the handler comes second
app.job(() => 1);
// @ts-expect-error cancellable is declared, never assumed
app.job('m.e', () => 1);
// @ts-expect-error args are typed by the type argument
app.job<{ a: number }>('m.c', ({ b }) => b, { cancellable: true });

app.job('m.d', (args, ctx: JobContext) => {
  // @ts-expect-error ctx is read-only
  ctx.attempt = 2;
  // @ts-expect-error ctx has no such field
  void ctx.retries;
  // @ts-expect-error untyped args are JSON values, not numbers
  const n: number = args.n;
  const reason: unknown = ctx.signal.reason;
  return { n, reason };
}, { cancellable: true });

// @ts-expect-error seconds is a number
new Snooze('30');
// @ts-expect-error the reason is a string or null
new Snooze(1, 42);
const perm = new PermanentError('no', { cause: new Error('inner') });
const notRetryable: false = perm.retryable;

const msg = decode('{"type":"ping","seq":1}', { maxFrameBytes: DEFAULT_MAX_FRAME_BYTES });
if (msg.type === 'job') {
  const deadline: number | null = msg.deadline;
  void deadline;
  // @ts-expect-error a decoded job has no `seq`
  void msg.seq;
}
encode({ type: 'result', id: 'j1', status: 'done', result: { ok: true } });
// @ts-expect-error not a status
encode({ type: 'result', id: 'j1', status: 'ok' });
// @ts-expect-error not a message type
encode({ type: 'hola' });

try {
  decode(Buffer.from('{}'));
} catch (err) {
  if (err instanceof ProtocolError) {
    const code: ProtocolErrorCode = err.code;
    const field: string | null = err.field;
    void code;
    void field;
  }
}

const version: number | null = negotiateVersion(process.env.SONIQ_PROTOCOL_VERSIONS);
protectStdout();
// @ts-expect-error the real stdout's writer stays the SDK's own
protectStdout().write('frame\n');
void version;
void notRetryable;

// @ts-expect-error a hook is a function
app.beforeJob('log');
// @ts-expect-error afterJob's second argument is the info object, not a number
app.afterJob((ctx, ms: number) => ms);
// @ts-expect-error middleware is a function
app.use({ wrap: true });
// @ts-expect-error validate is a function
app.job('m.v', () => 1, { cancellable: true, validate: true });
// @ts-expect-error the validator's value must fit the handler's args
app.job<{ n: number }>('m.w', ({ n }) => n, { cancellable: true, validate: () => ({ n: 'one' }) });
app.onError((ctx, err) => {
  // @ts-expect-error the error is unknown until narrowed
  void err.message;
  // @ts-expect-error ctx.createdAt may be null
  void ctx.createdAt.getTime();
});

const spawned: RunOptions = { listen: null };
void spawned;
// @ts-expect-error listen is a socket path
app.run({ listen: 1 });
// @ts-expect-error a misspelt run option is not silently ignored
app.run({ socket: '/run/soniq/h.sock' });

app.job('m.kids', async (_args, ctx: JobContext) => {
  // @ts-expect-error a deferred child's id is a string, not a Promise
  const p: Promise<string> = ctx.enqueue('k', {});
  // @ts-expect-error an immediate child is a Promise of its id
  const s: string = ctx.enqueue('k', {}, { immediate: true });
  // @ts-expect-error the options are camelCase
  ctx.enqueue('k', {}, { max_attempts: 2 });
  // @ts-expect-error delay is a number of milliseconds
  ctx.enqueue('k', {}, { delay: '5s' });
  return [p, s];
}, { cancellable: true });
