// Types of soniq-client. Hand-written; test/types.test.js compiles them with tsc --strict and
// checks that they declare what index.js exports.

/** What the client needs of a node-postgres Pool or Client: `query(text, values)`. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

/** What the client needs of a better-sqlite3 Database, for the `db` option on SQLite. */
export interface SqliteDatabase {
  prepare(sql: string): unknown;
  exec(sql: string): unknown;
  readonly inTransaction: boolean;
}

export type ClientConfig =
  | { pool: Queryable; connectionString?: undefined }
  | { connectionString: string; pool?: undefined };

/** A JSON value as the job's args may hold it. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue | undefined };

/** Job args: a plain object whose values JSON can hold (Dates are stored as their toJSON() text).
 * Any object type is accepted, an interface included; an array or a class instance is refused
 * when the job is enqueued. */
export type JobArgs = object;

export interface EnqueueOptions {
  /** Queue name; default "default". */
  queue?: string;
  /** Lower runs first; default 100. */
  priority?: number;
  /** Run no earlier than now + delay milliseconds (not with runAt). */
  delay?: number;
  /** Run no earlier than this time (not with delay). */
  runAt?: Date;
  /** Attempts before the job is dead-lettered; default 3. */
  maxAttempts?: number;
  /** At most one queued job per key: a second enqueue returns the queued job's id. */
  dedupKey?: string;
  /** At most one queued job with this name and these args (Soniq's unique_job, by args_hash). */
  unique?: boolean;
  /** Write the job through this connection: the application's pg client inside BEGIN … COMMIT
   * (the job exists if and only if that transaction commits), or on SQLite a better-sqlite3
   * Database. */
  db?: Queryable | SqliteDatabase;
}

export interface JobSpec extends EnqueueOptions {
  name: string;
  args?: JobArgs;
}

export type JobStatus = 'queued' | 'processing' | 'done' | 'cancelled' | 'dead_letter';

export interface Job {
  id: string;
  name: string;
  args: { [key: string]: JsonValue };
  argsHash: string | null;
  status: JobStatus;
  attempts: number;
  maxAttempts: number;
  queue: string;
  priority: number;
  unique: boolean;
  dedupKey: string | null;
  scheduledAt: Date | null;
  expiresAt: Date | null;
  lastError: string | null;
  result: JsonValue;
  producerId: string | null;
  createdAt: Date | null;
  updatedAt: Date | null;
  workerId: string | null;
  /** Set when status is "dead_letter". */
  deadLetterReason: string | null;
}

export type CancelOutcome =
  | 'cancelled_queued'
  | 'cancelled_running'
  | 'cancelled_requeued'
  | 'requested'
  | 'refused'
  | 'finished'
  | 'finished_first'
  | 'gone'
  | 'dead_letter'
  | 'not_found'
  | 'no_answer';

export interface CancelResult {
  outcome: CancelOutcome;
  /** True when the job's row is cancelled and it will not run (again). */
  cancelled: boolean;
  job: Job | null;
  /** What `soniq-sidecar cancel` prints for the same case. */
  message: string;
  /** With outcome "refused": the handler that runs the job, and why. */
  handler?: string | null;
  detail?: string | null;
}

export interface CancelOptions {
  /** How long to wait for the sidecar running the job to answer, in ms; default 10000; 0 returns at once. */
  wait?: number;
}

/** The queue-stats contract, keys in this order. */
export interface Stats {
  total: number;
  queued: number;
  processing: number;
  done: number;
  dead_letter: number;
  cancelled: number;
}

export declare class Client {
  constructor(config: ClientConfig);
  /** Enqueues a job and returns its id: the queued duplicate's id on a dedupKey or unique hit. */
  enqueue(name: string, args?: JobArgs, options?: EnqueueOptions): Promise<string>;
  /** Enqueues every job in one statement; the ids in the order given. */
  enqueueMany(jobs: JobSpec[], options?: { db?: Queryable | SqliteDatabase }): Promise<string[]>;
  /** The job's row, or null when no job has this id. */
  getJob(id: string, options?: { db?: Queryable | SqliteDatabase }): Promise<Job | null>;
  /** Cancels a job as `soniq-sidecar cancel` does: a queued one at once, a running one through its sidecar. */
  cancel(id: string, options?: CancelOptions): Promise<CancelResult>;
  stats(options?: { db?: Queryable | SqliteDatabase }): Promise<Stats>;
  /** Ends the pool the client made from a connectionString (never the application's own pool). */
  close(): Promise<void>;
}

/** Bad input to an enqueue: the message names the job and the field. */
export declare class EnqueueError extends TypeError {
  name: 'EnqueueError';
}

/** Args JSON cannot hold faithfully; the message names where in the args. */
export declare class ArgsError extends TypeError {
  name: 'ArgsError';
}

/** Soniq's args_hash of args, hex: what a unique job is matched by. */
export declare function argsHash(args: JobArgs): string;

export declare const STATS_KEYS: readonly ['total', 'queued', 'processing', 'done', 'dead_letter', 'cancelled'];
