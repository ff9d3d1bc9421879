'use strict';
// The SQLite side, on better-sqlite3 (an optional peer dependency): the rows the sidecar's
// SQLite backend and Soniq's write, in Soniq's SQLite schema (TEXT timestamps in Python's
// isoformat(), TEXT JSON, unique_job 0/1). Each enqueue checks for its queued duplicate and
// inserts inside one BEGIN IMMEDIATE transaction, so two processes cannot both insert. SQLite
// has no notification between processes: a sidecar finds the job at its next poll.

const crypto = require('node:crypto');
const fs = require('node:fs');
const { UUID_RE } = require('./postgres');

const CANCEL_TABLE = 'soniq_sidecar_cancel_requests';
// How long a writer waits for another process's write lock, as the sidecar waits.
const BUSY_TIMEOUT_MS = 5000;

// Python's datetime.now(timezone.utc).isoformat(): microseconds and +00:00, the fraction left
// out when it is zero (JavaScript's clock has milliseconds).
function isoformat(d) {
  const s = d.toISOString(); // 2026-01-02T03:04:05.678Z
  const ms = d.getUTCMilliseconds();
  return ms === 0 ? `${s.slice(0, 19)}+00:00` : `${s.slice(0, 19)}.${String(ms * 1000).padStart(6, '0')}+00:00`;
}

function parseTime(s) {
  if (s === null || s === undefined || s === '') return null;
  // "2026-01-02T03:04:05.123456+00:00" or SQLite's "2026-01-02 03:04:05".
  let t = s.replace(' ', 'T');
  t = t.replace(/(\.\d{3})\d+/, '$1');
  if (!/[zZ]|[+-]\d\d:?\d\d$/.test(t)) t += 'Z';
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? null : d;
}

const JOB_COLUMNS = `id, job_name, args, args_hash, status, attempts, max_attempts, queue, priority, unique_job,
  dedup_key, scheduled_at, expires_at, last_error, result, producer_id, created_at, updated_at, worker_id`;

function toJob(r) {
  return {
    id: r.id,
    name: r.job_name,
    args: JSON.parse(r.args),
    argsHash: r.args_hash ?? null,
    status: r.status,
    attempts: r.attempts ?? 0,
    maxAttempts: r.max_attempts ?? 3,
    queue: r.queue ?? 'default',
    priority: r.priority ?? 100,
    unique: Boolean(r.unique_job),
    dedupKey: r.dedup_key ?? null,
    scheduledAt: parseTime(r.scheduled_at),
    expiresAt: parseTime(r.expires_at),
    lastError: r.last_error ?? null,
    result: r.result === null || r.result === undefined ? null : JSON.parse(r.result),
    producerId: r.producer_id ?? null,
    createdAt: parseTime(r.created_at),
    updatedAt: parseTime(r.updated_at),
    workerId: r.worker_id ?? null,
    deadLetterReason: r.dead_letter_reason ?? null,
  };
}

function loadDriver() {
  try {
    return require('better-sqlite3');
  } catch (err) {
    if (err && err.code === 'MODULE_NOT_FOUND') {
      throw new Error('soniq-client: a sqlite: connection string needs the better-sqlite3 package: npm install better-sqlite3@12', { cause: err });
    }
    throw err;
  }
}

function explain(err, doing) {
  let hint = '';
  if (err && /no such table: soniq_sidecar_cancel_requests/.test(err.message)) {
    hint = ': the table soniq_sidecar_cancel_requests does not exist in this database: run `soniq-sidecar migrate` first';
  } else if (err && /no such table: soniq_/.test(err.message)) {
    hint = ': the Soniq tables are missing: run `soniq-sidecar migrate --database-url sqlite:PATH` first';
  }
  return new Error(`soniq-client: ${doing}: ${err && err.message}${hint}`, { cause: err });
}

class SqliteStore {
  constructor(path) {
    const Database = loadDriver();
    this.path = path;
    // A producer never creates the file: a mistyped path would otherwise enqueue into a new,
    // empty database no sidecar reads.
    if (!fs.existsSync(path)) {
      throw new Error(`soniq-client: sqlite:${path}: no such file: create it with \`soniq-sidecar migrate --database-url sqlite:${path}\``);
    }
    this.db = new Database(path, { timeout: BUSY_TIMEOUT_MS, fileMustExist: true });
    this.kind = 'sqlite';
  }

  // inWrite runs fn inside a write transaction: the caller's (db, a better-sqlite3 Database
  // inside BEGIN … COMMIT), or one of its own taken with BEGIN IMMEDIATE, so the duplicate
  // check and the insert hold the file's write lock together.
  _inWrite(db, doing, fn) {
    const conn = db || this.db;
    try {
      if (conn.inTransaction) return fn(conn);
      conn.exec('BEGIN IMMEDIATE');
      try {
        const out = fn(conn);
        conn.exec('COMMIT');
        return out;
      } catch (err) {
        if (conn.inTransaction) conn.exec('ROLLBACK');
        throw err;
      }
    } catch (err) {
      throw explain(err, doing);
    }
  }

  // insert is the sidecar's SQLite Enqueue: a queued unique duplicate (by name and
  // args_hash), else a queued row with the dedup key, else a new row.
  _insert(conn, row, now) {
    if (row.unique) {
      const dup = conn.prepare(`SELECT id FROM soniq_jobs WHERE job_name = ? AND args_hash = ?
        AND status = 'queued' AND unique_job = 1 LIMIT 1`).get(row.name, row.argsHash);
      if (dup) return dup.id;
    }
    if (row.dedupKey !== null) {
      const dup = conn.prepare(`SELECT id FROM soniq_jobs WHERE dedup_key = ? AND status = 'queued' LIMIT 1`).get(row.dedupKey);
      if (dup) return dup.id;
    }
    let scheduled = null;
    if (row.runAt) scheduled = isoformat(row.runAt);
    else if (row.delaySeconds) scheduled = isoformat(new Date(now.getTime() + row.delaySeconds * 1000));
    const id = crypto.randomUUID();
    const ts = isoformat(now);
    conn.prepare(`INSERT INTO soniq_jobs
      (id, job_name, args, args_hash, status, attempts, max_attempts, priority, queue,
       unique_job, dedup_key, scheduled_at, producer_id, created_at, updated_at)
      VALUES (?, ?, ?, ?, 'queued', 0, ?, ?, ?, ?, ?, ?, NULL, ?, ?)`).run(
      id, row.name, row.args, row.argsHash, row.maxAttempts, row.priority, row.queue,
      row.unique ? 1 : 0, row.dedupKey, scheduled, ts, ts);
    return id;
  }

  async enqueue(row, db) {
    return this._inWrite(db, `enqueue ${row.name} on queue ${row.queue}`, (conn) => this._insert(conn, row, new Date()));
  }

  async enqueueMany(rows, db) {
    if (rows.length === 0) return [];
    return this._inWrite(db, `enqueue ${rows.length} jobs`, (conn) => {
      const now = new Date();
      return rows.map((r) => this._insert(conn, r, now));
    });
  }

  async getJob(id, db) {
    if (typeof id !== 'string' || !UUID_RE.test(id)) return null;
    const conn = db || this.db;
    try {
      const r = conn.prepare(`SELECT ${JOB_COLUMNS}, NULL AS dead_letter_reason FROM soniq_jobs WHERE id = ?`).get(id)
        ?? conn.prepare(`SELECT id, job_name, args, NULL AS args_hash, 'dead_letter' AS status, attempts, max_attempts,
          queue, priority, 0 AS unique_job, NULL AS dedup_key, NULL AS scheduled_at, NULL AS expires_at, last_error,
          NULL AS result, NULL AS producer_id, original_created_at AS created_at, moved_to_dead_letter_at AS updated_at,
          NULL AS worker_id, dead_letter_reason FROM soniq_dead_letter_jobs WHERE id = ?`).get(id);
      return r ? toJob(r) : null;
    } catch (err) {
      throw explain(err, `get job ${id}`);
    }
  }

  async stats(db) {
    const conn = db || this.db;
    try {
      const read = conn.transaction(() => {
        const rows = conn.prepare('SELECT status, COUNT(*) AS n FROM soniq_jobs GROUP BY status').all();
        const dead = conn.prepare('SELECT COUNT(*) AS n FROM soniq_dead_letter_jobs').get();
        return [...rows.map((r) => [r.status, Number(r.n)]), ['dead_letter', Number(dead.n)]];
      });
      return read();
    } catch (err) {
      throw explain(err, 'read queue stats');
    }
  }

  async requestCancel(id) {
    if (typeof id !== 'string' || !UUID_RE.test(id)) return null;
    return this._inWrite(null, `cancel job ${id}`, (conn) => {
      const cur = conn.prepare(`SELECT ${JOB_COLUMNS} FROM soniq_jobs WHERE id = ?`).get(id);
      if (!cur) return null;
      let job = toJob(cur);
      const ts = isoformat(new Date());
      if (job.status === 'queued') {
        job = toJob(conn.prepare(`UPDATE soniq_jobs SET status = 'cancelled', updated_at = ? WHERE id = ?
          RETURNING ${JOB_COLUMNS}`).get(ts, id));
        return { outcome: 'cancelled_queued', job };
      }
      if (job.status === 'processing') {
        conn.prepare(`INSERT INTO ${CANCEL_TABLE} (job_id, worker_id, status, requested_at)
          VALUES (?, ?, 'pending', ?)
          ON CONFLICT (job_id) DO UPDATE SET worker_id = excluded.worker_id, status = 'pending',
            handler = NULL, detail = NULL, requested_at = excluded.requested_at, resolved_at = NULL`).run(id, job.workerId, ts);
        return { outcome: 'requested', job };
      }
      return { outcome: 'finished', job };
    });
  }

  async cancelRequest(id) {
    try {
      return this.db.prepare(`SELECT status, handler, detail, worker_id FROM ${CANCEL_TABLE} WHERE job_id = ?`).get(id) || null;
    } catch (err) {
      throw explain(err, `read the cancel request for job ${id}`);
    }
  }

  async close() {
    this.db.close();
  }
}

module.exports = { SqliteStore, isoformat };
