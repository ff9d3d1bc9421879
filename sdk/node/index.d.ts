// Types of soniq-handler (index.js). Written by hand; test/types.test.js checks them against
// the module and compiles an example handler with them.

import type { JsonObject } from './protocol';

// The codec (decode, encode) is the package's other entry point, 'soniq-handler/protocol'.
export { ProtocolError } from './protocol';
export type {
  CancelReason,
  EncodableMessage,
  JsonObject,
  JsonValue,
  Message,
  ProtocolErrorCode,
  ResultStatus,
} from './protocol';

export interface AppOptions {
  /** Jobs this process runs at once (announced in `hello`); more wait in arrival order. Default 8. */
  concurrency?: number;
  /** Frame size limit in bytes. Default: $SONIQ_MAX_FRAME_BYTES, else 16 MiB. */
  maxFrameBytes?: number;
}

export interface RunOptions {
  /**
   * Attach mode's socket path: the process serves a Unix socket of its own, across sidecar
   * sessions, until SIGTERM. `null`: the transport the sidecar chose ($SONIQ_TRANSPORT),
   * whatever the command line says. Left out: run() is a script's entry point and reads the
   * script's command line, `--listen PATH` (or `--listen=PATH`), else $SONIQ_LISTEN.
   */
  listen?: string | null;
}

export interface JobOptions<Args = JsonObject> {
  /**
   * Required, as in the manifest (a capability the handler declares, never assumed).
   * true: the async branch, a cancel from the sidecar aborts `ctx.signal`.
   * false: the sync branch, cancels are ignored and the job's real result is sent.
   * Must match the job's `cancellable` in the manifest.
   */
  cancellable: boolean;
  /**
   * Checks and normalises the job's args before the middleware and the handler run (after the
   * beforeJob hooks). Its value is what they get (`undefined`: the args as they came). If it
   * throws, the job fails without retries (dead-lettered at once) with the message
   * `Corrupted argument data: <the error's message>`; onError hooks are not called.
   */
  validate?: (args: JsonObject) => Args | undefined | Promise<Args | undefined>;
}

/** Runs before each job, before validation. */
export type BeforeJobHook = (ctx: JobContext) => unknown;

/** What an afterJob hook learns about the job that succeeded. */
export interface AfterJobInfo {
  /** The handler's value as it is sent (`undefined` became null). */
  readonly result: unknown;
  /** Milliseconds from the job's start (before the beforeJob hooks) to its value. */
  readonly durationMs: number;
}

/**
 * Runs after each job that succeeded (not after a snooze), once its result is sent: it holds no
 * slot and no timeout applies to it; at shutdown the process waits for it.
 */
export type AfterJobHook = (ctx: JobContext, info: AfterJobInfo) => unknown;

/**
 * Runs after the handler or a middleware threw (also when a job timeout cancelled the job, and
 * when its value cannot be sent; not at a shutdown's cancel, not for a failed validation),
 * before the failure is sent.
 */
export type OnErrorHook = (ctx: JobContext, error: unknown) => unknown;

/**
 * Wraps every job's handler. `next(args?)` runs the rest of the chain (the next middleware,
 * then the handler) with the args given, or the same args, and resolves with the handler's
 * value. What the middleware returns or throws is the job's outcome. `args` are the validated
 * args, of whichever job runs.
 */
export type Middleware = (ctx: JobContext, args: unknown, next: (args?: unknown) => Promise<unknown>) => unknown;

/** What a handler knows about the job it runs (frozen). */
export interface JobContext {
  /** The job's id (its row in Soniq's table). */
  readonly id: string;
  /** The job name it was registered under. */
  readonly name: string;
  /** 1 for the first run. */
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly queue: string;
  /** When the job times out, or null if it has no timeout. */
  readonly deadline: Date | null;
  /** W3C trace context of the job, or null. */
  readonly traceparent: string | null;
  /** The soniq_workers id of the sidecar that claimed the job (the row's worker_id), or null. */
  readonly workerId: string | null;
  /** The row's scheduled_at (millisecond precision), or null when it was queued to run at once. */
  readonly scheduledAt: Date | null;
  /** The row's created_at (millisecond precision), or null when the row has none. */
  readonly createdAt: Date | null;
  /**
   * Aborted when the sidecar cancels a cancellable job; `signal.reason` is 'job_timeout',
   * 'shutdown_timeout' or 'user' (`soniq-sidecar cancel`: the row ends cancelled, never
   * retried; over the unix transport 'call cancelled' when the sidecar went away).
   * Never aborted for a job registered with `cancellable: false`.
   */
  readonly signal: AbortSignal;
  /**
   * Makes a child job of this one and returns its id at once. By default the child is written
   * with this job's successful result, in the same transaction: if this attempt fails, snoozes,
   * is cancelled or crashes, the child is never written (a retry makes it again). With
   * `immediate: true` it is written now, whatever this job does next, and the call returns a
   * Promise of the id of the row that holds it (a queued duplicate's on a `dedupKey` or
   * `unique` hit), rejected with a ChildJobError when the sidecar refuses it. Throws a
   * ChildJobError (`unsupported`) under a sidecar that takes no child jobs, and a TypeError or
   * RangeError for bad input, before anything is sent.
   */
  enqueue(name: string, args?: JsonObject, options?: EnqueueOptions & { immediate?: false }): string;
  enqueue(name: string, args: JsonObject | undefined, options: EnqueueOptions & { immediate: true }): Promise<string>;
  enqueue(name: string, args?: JsonObject, options?: EnqueueOptions): string | Promise<string>;
}

/** Options of ctx.enqueue; each absent one takes Soniq's default. */
export interface EnqueueOptions {
  /** Default 'default'. */
  queue?: string;
  /** Default 100; lower runs first. */
  priority?: number;
  /** Milliseconds before it may run; default 0. */
  delay?: number;
  /** Default 3. */
  maxAttempts?: number;
  /** Nothing is written while a queued job has this key. */
  dedupKey?: string;
  /** Nothing is written while a queued job has the same name and args. */
  unique?: boolean;
  /** Written at once (a Promise of its id) rather than with this job's result. */
  immediate?: boolean;
}

/** A child job that was not written. */
export class ChildJobError extends Error {
  /** 'invalid', 'cap', 'parent', 'unavailable' (from the sidecar) or 'unsupported'. */
  readonly code: 'invalid' | 'cap' | 'parent' | 'unavailable' | 'unsupported';
  /** The sidecar's (or the SDK's) explanation. */
  readonly reason: string;
}

/**
 * A job handler, sync or async. Its value is the result (`undefined` is sent as null), written
 * as JSON (a BigInt as its decimal digits, with a warning; a cycle fails the job); a Snooze puts
 * the job back; a throw fails it (retried unless it is a PermanentError or has
 * `retryable === false`).
 */
export type JobHandler<Args = JsonObject> = (args: Args, ctx: JobContext) => unknown;

export class App {
  constructor(options?: AppOptions);
  readonly concurrency: number;
  readonly maxFrameBytes: number;
  /**
   * Registers `fn` for job `name`. Throws if the name is empty or already registered, or if
   * `cancellable` is missing or not a boolean. `Args` is the shape of the job's args (a JSON
   * object).
   */
  job<Args = JsonObject>(name: string, fn: JobHandler<Args>, options: JobOptions<Args>): this;
  /**
   * Hooks (Soniq's before_job / after_job / on_error): called in registration order and awaited.
   * beforeJob and onError run inside the job (its slot and its timeout), afterJob once the
   * job's result is sent. One that throws is logged on stderr and ignored: it never changes the
   * job's outcome.
   */
  beforeJob(fn: BeforeJobHook): this;
  afterJob(fn: AfterJobHook): this;
  onError(fn: OnErrorHook): this;
  /** Adds a middleware (Soniq's app.middleware); the first added is the outermost. */
  use(fn: Middleware): this;
  /**
   * Serves the registered jobs over $SONIQ_TRANSPORT (stdio unless the manifest says unix) and
   * exits the process when the sidecar shuts it down; with a `listen` path (attach mode) serves
   * a socket of its own until SIGTERM. Throws if no job is registered, if `listen` is not a
   * path, or if it is called twice.
   */
  run(options?: RunOptions): void;
}

/** Fails the job without retries: it is dead-lettered at once. */
export class PermanentError extends Error {
  constructor(message?: string, options?: { cause?: unknown });
  readonly retryable: false;
}

/** Return one to put the job back for `seconds` without counting a failure. */
export class Snooze {
  /** Throws TypeError unless `seconds` is a finite number >= 0 and `reason` a string or null. */
  constructor(seconds: number, reason?: string | null);
  readonly seconds: number;
  readonly reason: string | null;
}

/**
 * Sends console.log/info/debug/... and process.stdout.write to stderr so that nothing but
 * frames reaches stdout. `App.run()` calls it; call it first thing if your imports print
 * while they load. Idempotent.
 */
export function protectStdout(): void;

/**
 * The highest protocol version both sides speak, or null. `offered` is
 * $SONIQ_PROTOCOL_VERSIONS (a comma list; undefined means "1").
 */
export function negotiateVersion(offered: string | undefined, supported?: readonly number[]): number | null;

/** This SDK's name and version as sent in `hello`: `soniq-node/<version>`. */
export const SDK: string;
/** The protocol versions this SDK speaks. */
export const SUPPORTED_PROTOCOLS: readonly number[];
