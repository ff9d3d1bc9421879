'use strict';
// soniq-client: enqueue Soniq jobs from a Node application. See README.md.

const { PostgresStore } = require('./postgres');
const { SqliteStore } = require('./sqlite');
const { cancel } = require('./cancel');
const { job, EnqueueError } = require('./options');
const { ArgsError, argsHash } = require('./argshash');

// The queue-stats contract: six keys in this order.
const STATS_KEYS = Object.freeze(['total', 'queued', 'processing', 'done', 'dead_letter', 'cancelled']);
const DEFAULT_CANCEL_WAIT_MS = 10000;

// sqlitePath reads sqlite:PATH and sqlite:///PATH as the sidecar does ("sqlite:///x.db" is the
// relative x.db, "sqlite:////tmp/x.db" the absolute /tmp/x.db); null for anything else.
function sqlitePath(url) {
  const lower = url.toLowerCase();
  if (lower.startsWith('sqlite:///')) return url.slice('sqlite:///'.length);
  if (lower.startsWith('sqlite://')) {
    throw new EnqueueError(`unsupported connectionString ${JSON.stringify(url)}: write sqlite:PATH or sqlite:///PATH`);
  }
  if (lower.startsWith('sqlite:')) return url.slice('sqlite:'.length);
  return null;
}

function open(config) {
  if (config === null || typeof config !== 'object') {
    throw new EnqueueError('new Client(config): config must be an object: { pool } or { connectionString }');
  }
  for (const k of Object.keys(config)) {
    if (!['pool', 'connectionString'].includes(k)) {
      throw new EnqueueError(`new Client(config): unknown option ${JSON.stringify(k)} (the options are pool, connectionString)`);
    }
  }
  const { pool, connectionString } = config;
  if ((pool === undefined) === (connectionString === undefined)) {
    throw new EnqueueError('new Client(config): give exactly one of pool (a pg.Pool or pg.Client) and connectionString');
  }
  if (pool !== undefined) {
    if (pool === null || typeof pool.query !== 'function') {
      throw new EnqueueError('new Client(config): pool must be a pg.Pool or pg.Client (an object with query())');
    }
    return new PostgresStore(pool, false);
  }
  if (typeof connectionString !== 'string' || connectionString === '') {
    throw new EnqueueError('new Client(config): connectionString must be a non-empty string (postgres://… or sqlite:PATH)');
  }
  const path = sqlitePath(connectionString);
  if (path !== null) {
    if (path === '') throw new EnqueueError('new Client(config): connectionString sqlite: names no file');
    return new SqliteStore(path);
  }
  if (!/^postgres(ql)?:\/\//i.test(connectionString)) {
    throw new EnqueueError('new Client(config): connectionString must start with postgres://, postgresql:// or sqlite:');
  }
  let pg;
  try {
    pg = require('pg');
  } catch (err) {
    throw new Error('soniq-client: a postgres:// connection string needs the pg package: npm install pg', { cause: err });
  }
  return new PostgresStore(new pg.Pool({ connectionString }), true);
}

function checkDb(store, db, where) {
  if (db === undefined || db === null) return;
  const ok = store.kind === 'postgres' ? typeof db.query === 'function' : typeof db.prepare === 'function';
  if (!ok) {
    throw new EnqueueError(`${where}: option db must be ${store.kind === 'postgres'
      ? 'a pg client (an object with query()) inside BEGIN … COMMIT' : 'a better-sqlite3 Database'}`);
  }
}

class Client {
  constructor(config) {
    this._store = open(config);
    this._closed = false;
  }

  _live(where) {
    if (this._closed) throw new Error(`soniq-client: ${where}: the client is closed`);
  }

  async enqueue(name, args, options) {
    this._live('enqueue');
    const row = job(name, args, options, 'enqueue');
    const db = options ? options.db : undefined;
    checkDb(this._store, db, 'enqueue');
    return this._store.enqueue(row, db);
  }

  async enqueueMany(jobs, options) {
    this._live('enqueueMany');
    if (!Array.isArray(jobs)) {
      throw new EnqueueError(`enqueueMany: jobs must be an array of { name, args, ...options }, got ${jobs === null ? 'null' : typeof jobs}`);
    }
    if (options !== undefined && (options === null || typeof options !== 'object' || Object.keys(options).some((k) => k !== 'db'))) {
      throw new EnqueueError('enqueueMany: the second argument takes only { db }; give the other options on each job');
    }
    const db = options ? options.db : undefined;
    let sharedDb = db;
    const rows = jobs.map((j, i) => {
      const where = `enqueueMany: jobs[${i}]`;
      if (j === null || typeof j !== 'object' || Array.isArray(j)) throw new EnqueueError(`${where} must be an object { name, args, ...options }`);
      const { name, args, ...opts } = j;
      if (opts.db !== undefined) {
        if (sharedDb !== undefined && sharedDb !== opts.db) {
          throw new EnqueueError(`${where}: every job of one enqueueMany goes through one db: they are written in one statement`);
        }
        sharedDb = opts.db;
      }
      return job(name, args, opts, where);
    });
    checkDb(this._store, sharedDb, 'enqueueMany');
    return this._store.enqueueMany(rows, sharedDb);
  }

  async getJob(id, options) {
    this._live('getJob');
    const db = options ? options.db : undefined;
    checkDb(this._store, db, 'getJob');
    return this._store.getJob(id, db);
  }

  async cancel(id, options) {
    this._live('cancel');
    const o = options ?? {};
    for (const k of Object.keys(o)) {
      if (k !== 'wait') throw new EnqueueError(`cancel: unknown option ${JSON.stringify(k)} (the option is wait, in ms)`);
    }
    const wait = o.wait ?? DEFAULT_CANCEL_WAIT_MS;
    if (typeof wait !== 'number' || !Number.isFinite(wait) || wait < 0) {
      throw new EnqueueError(`cancel: option wait must be a number of milliseconds ≥ 0, got ${String(wait)}`);
    }
    if (typeof id !== 'string' || id.trim() === '') throw new EnqueueError('cancel: the job id must be a non-empty string');
    return cancel(this._store, id.trim(), wait);
  }

  async stats(options) {
    this._live('stats');
    const db = options ? options.db : undefined;
    checkDb(this._store, db, 'stats');
    const counts = Object.fromEntries(STATS_KEYS.map((k) => [k, 0]));
    for (const [status, n] of await this._store.stats(db)) {
      if (status in counts && status !== 'total') counts[status] += n;
    }
    counts.total = counts.queued + counts.processing + counts.done + counts.dead_letter + counts.cancelled;
    return counts;
  }

  async close() {
    if (this._closed) return;
    this._closed = true;
    await this._store.close();
  }
}

module.exports = { Client, EnqueueError, ArgsError, argsHash, STATS_KEYS };
