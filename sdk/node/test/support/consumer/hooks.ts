// Hooks, middleware and argument validation, type-checked against index.d.ts
// (test/types.test.js); test/api.test.js runs the same API from JavaScript.
import {
  App, PermanentError, type AfterJobInfo, type JobContext, type JsonObject, type Middleware,
} from 'soniq-handler';

interface Order {
  orderId: string;
  quantity: number;
}

// A validator in the shape of zod's `schema.parse`: the normalised args, or a throw.
function parseOrder(args: JsonObject): Order {
  const { orderId, quantity } = args;
  if (typeof orderId !== 'string') throw new TypeError('orderId must be a string');
  return { orderId, quantity: typeof quantity === 'number' ? quantity : 1 };
}

const app = new App();

app.beforeJob((ctx: JobContext) => {
  const created: Date | null = ctx.createdAt;
  console.error(`start ${ctx.name} ${ctx.id} by ${ctx.workerId ?? '?'} queued ${created?.toISOString() ?? '?'}`);
});
app.afterJob(async (ctx, info: AfterJobInfo) => {
  const ms: number = info.durationMs;
  console.error(`done ${ctx.id} in ${ms} ms: ${JSON.stringify(info.result)}`);
});
app.onError((ctx, error) => {
  const message = error instanceof Error ? error.message : String(error);
  console.error(`failed ${ctx.id} (attempt ${ctx.attempt}/${ctx.maxAttempts}): ${message}`);
});

const timing: Middleware = async (ctx, args, next) => {
  const t0 = Date.now();
  try {
    return await next();
  } finally {
    console.error(`${ctx.name} took ${Date.now() - t0} ms`);
  }
};
app.use(timing);
app.use((ctx, args, next) => (ctx.scheduledAt !== null && ctx.scheduledAt > new Date() ? null : next(args)));

// Args is inferred from the validator: the handler gets an Order.
app.job('shop.order', async ({ orderId, quantity }) => {
  const q: number = quantity;
  if (q > 100) throw new PermanentError(`order ${orderId}: too many`);
  return { orderId, quantity: q };
}, { cancellable: true, validate: parseOrder });

// A validator may be async and may return undefined (the args as they came).
app.job<JsonObject>('shop.ping', (args) => args, {
  validate: async (args) => {
    if (Object.keys(args).length > 10) throw new Error('too many keys');
    return undefined;
  },
  cancellable: false,
});
