'use strict';
// The Postgres side: Soniq 0.1.0's enqueue statements on node-postgres, each one statement
// (its own implicit transaction, or a part of the caller's), with no session state: no named
// prepared statement, no LISTEN, no SET. So it works the same through PgBouncer in transaction
// mode.

const crypto = require('node:crypto');

const NEW_JOB = 'soniq_new_job';
const CANCEL_CHANNEL = 'soniq_sidecar_cancel';
const CANCEL_TABLE = 'soniq_sidecar_cancel_requests';

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

// What Soniq's create_job writes (the column list of its INSERT); scheduled_at is the runAt
// given, else now() + the delay (NULL without one), as the sidecar's own enqueue computes it.
const INSERT = `INSERT INTO soniq_jobs
  (id, job_name, args, args_hash, max_attempts, priority, queue, unique_job, dedup_key, scheduled_at)
  VALUES ($1, $2, $3::text::jsonb, $4, $5, $6, $7, $8, $9,
          COALESCE($10::timestamptz, now() + make_interval(secs => $11::float8)))`;

// Soniq's two conflict clauses: the no-op update makes RETURNING yield the queued row that
// holds the key.
const ON_DEDUP = ` ON CONFLICT (dedup_key) WHERE status = 'queued' AND dedup_key IS NOT NULL
  DO UPDATE SET dedup_key = EXCLUDED.dedup_key`;
const ON_UNIQUE = ` ON CONFLICT (job_name, args_hash) WHERE status = 'queued' AND unique_job = TRUE
  DO UPDATE SET unique_job = EXCLUDED.unique_job`;

// The notification goes in the same statement, so it is sent exactly when the row commits.
function single(conflict) {
  return `WITH j AS (${INSERT}${conflict} RETURNING id)
SELECT j.id::text AS id, pg_notify('${NEW_JOB}', $7) AS n FROM j`;
}
const SQL_PLAIN = single('');
const SQL_DEDUP = single(ON_DEDUP);
const SQL_UNIQUE = single(ON_UNIQUE);

// Many rows in one statement. A batch mixes dedup keys, unique jobs and plain jobs, and may
// hold duplicates of its own, so conflicts are skipped (ON CONFLICT DO NOTHING covers both
// partial unique indexes) and each skipped row is answered with the queued row that holds its
// key: one inserted by this statement, else one that was queued before it. A dedup key is
// matched first, then (name, args_hash), as Soniq resolves them. One notification per queue.
const SQL_MANY = `WITH input AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(
    ord int, id uuid, job_name text, args text, args_hash text, max_attempts int, priority int,
    queue text, unique_job bool, dedup_key text, run_at timestamptz, delay float8)
), ins AS (
  INSERT INTO soniq_jobs
    (id, job_name, args, args_hash, max_attempts, priority, queue, unique_job, dedup_key, scheduled_at)
  SELECT id, job_name, args::jsonb, args_hash, max_attempts, priority, queue, unique_job, dedup_key,
         COALESCE(run_at, now() + make_interval(secs => delay))
  FROM input ORDER BY ord
  ON CONFLICT DO NOTHING
  RETURNING id, job_name, args_hash, unique_job, dedup_key
), notified AS (
  SELECT count(pg_notify('${NEW_JOB}', q)) AS n FROM (SELECT DISTINCT queue AS q FROM input) d
)
SELECT i.ord, CASE WHEN ins.id IS NOT NULL THEN ins.id ELSE COALESCE(
    (SELECT x.id FROM ins x WHERE i.dedup_key IS NOT NULL AND x.dedup_key = i.dedup_key LIMIT 1),
    (SELECT s.id FROM soniq_jobs s WHERE i.dedup_key IS NOT NULL AND s.dedup_key = i.dedup_key
       AND s.status = 'queued' LIMIT 1),
    (SELECT x.id FROM ins x WHERE i.unique_job AND x.unique_job AND x.job_name = i.job_name
       AND x.args_hash = i.args_hash LIMIT 1),
    (SELECT s.id FROM soniq_jobs s WHERE i.unique_job AND s.unique_job AND s.job_name = i.job_name
       AND s.args_hash = i.args_hash AND s.status = 'queued' LIMIT 1))
  END::text AS id
FROM input i LEFT JOIN ins ON ins.id = i.id CROSS JOIN notified
ORDER BY i.ord`;

// A skipped row whose duplicate committed while the statement ran is not in its snapshot;
// a new statement sees it.
const SQL_DUPLICATE = `SELECT COALESCE(
  (SELECT id FROM soniq_jobs WHERE $1::text IS NOT NULL AND dedup_key = $1 AND status = 'queued' LIMIT 1),
  (SELECT id FROM soniq_jobs WHERE $2 AND unique_job AND job_name = $3 AND args_hash = $4 AND status = 'queued' LIMIT 1)
)::text AS id`;

const JOB_COLUMNS = `id::text, job_name, args::text AS args, args_hash, status, attempts, max_attempts, queue,
  priority, unique_job, dedup_key, extract(epoch FROM scheduled_at)::float8 * 1000 AS scheduled_at,
  extract(epoch FROM expires_at)::float8 * 1000 AS expires_at, last_error, result::text AS result, producer_id,
  extract(epoch FROM created_at)::float8 * 1000 AS created_at, extract(epoch FROM updated_at)::float8 * 1000 AS updated_at,
  worker_id::text, NULL::text AS dead_letter_reason`;

// A dead-lettered job has left soniq_jobs; Soniq's get_job reads it from the dead-letter table
// with status "dead_letter", and so does getJob.
const SQL_GET = `SELECT ${JOB_COLUMNS} FROM soniq_jobs WHERE id = $1
UNION ALL
SELECT id::text, job_name, args::text, NULL, 'dead_letter', attempts, max_attempts, queue, priority, false, NULL,
  NULL, NULL, last_error, NULL, NULL, extract(epoch FROM original_created_at)::float8 * 1000,
  extract(epoch FROM moved_to_dead_letter_at)::float8 * 1000, NULL, dead_letter_reason
FROM soniq_dead_letter_jobs WHERE id = $1
LIMIT 1`;

const SQL_STATS = `SELECT status, count(*)::int8::text AS n FROM soniq_jobs GROUP BY status
UNION ALL
SELECT 'dead_letter', count(*)::int8::text FROM soniq_dead_letter_jobs`;

function ms(v) {
  return v === null || v === undefined ? null : new Date(Number(v));
}

// toJob turns a row of JOB_COLUMNS into the job object getJob returns.
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
    unique: r.unique_job === true || r.unique_job === 1,
    dedupKey: r.dedup_key ?? null,
    scheduledAt: ms(r.scheduled_at),
    expiresAt: ms(r.expires_at),
    lastError: r.last_error ?? null,
    result: r.result === null || r.result === undefined ? null : JSON.parse(r.result),
    producerId: r.producer_id ?? null,
    createdAt: ms(r.created_at),
    updatedAt: ms(r.updated_at),
    workerId: r.worker_id ?? null,
    deadLetterReason: r.dead_letter_reason ?? null,
  };
}

// explain turns a Postgres error into one that says what was being done, keeping the cause.
function explain(err, doing) {
  let hint = '';
  if (err && err.code === '42P01') {
    hint = /soniq_sidecar_cancel_requests/.test(err.message)
      ? ': the table soniq_sidecar_cancel_requests does not exist in this database: run `soniq-sidecar migrate` first'
      : ': the Soniq tables are missing: run `soniq-sidecar migrate` (or Soniq\'s `soniq setup`) against this database first';
  }
  const e = new Error(`soniq-client: ${doing}: ${err && err.message}${hint}`, { cause: err });
  if (err && err.code) e.code = err.code;
  return e;
}

class PostgresStore {
  // queryable: a pg.Pool, pg.Client or anything with query(text, values) → {rows}.
  constructor(queryable, owned) {
    this.q = queryable;
    this.owned = owned;
    this.kind = 'postgres';
  }

  async _query(db, text, values, doing) {
    try {
      return await (db || this.q).query(text, values);
    } catch (err) {
      throw explain(err, doing);
    }
  }

  async enqueue(row, db) {
    const id = crypto.randomUUID();
    const values = [id, row.name, row.args, row.argsHash, row.maxAttempts, row.priority, row.queue, row.unique,
      row.dedupKey, row.runAt, row.delaySeconds];
    const doing = `enqueue ${row.name} on queue ${row.queue}`;
    if (row.dedupKey !== null && row.unique) {
      // Soniq resolves only the dedup conflict and raises on a unique clash; the queued
      // duplicate is returned instead, as the sidecar's enqueue does. Inside a caller's
      // transaction a failed statement would abort it, so conflicts are skipped, not caught.
      const [out] = await this.enqueueMany([row], db);
      return out;
    }
    const sql = row.dedupKey !== null ? SQL_DEDUP : row.unique ? SQL_UNIQUE : SQL_PLAIN;
    const res = await this._query(db, sql, values, doing);
    return res.rows[0].id;
  }

  async enqueueMany(rows, db) {
    if (rows.length === 0) return [];
    const input = rows.map((r, ord) => ({
      ord, id: crypto.randomUUID(), job_name: r.name, args: r.args, args_hash: r.argsHash,
      max_attempts: r.maxAttempts, priority: r.priority, queue: r.queue, unique_job: r.unique,
      dedup_key: r.dedupKey, run_at: r.runAt ? r.runAt.toISOString() : null, delay: r.delaySeconds,
    }));
    const doing = rows.length === 1 ? `enqueue ${rows[0].name} on queue ${rows[0].queue}` : `enqueue ${rows.length} jobs`;
    const res = await this._query(db, SQL_MANY, [JSON.stringify(input)], doing);
    const ids = res.rows.map((r) => r.id);
    for (let i = 0; i < ids.length; i++) {
      if (ids[i] !== null) continue;
      const r = rows[i];
      const again = await this._query(db, SQL_DUPLICATE, [r.dedupKey, r.unique, r.name, r.argsHash],
        `find the queued duplicate of ${r.name}`);
      ids[i] = again.rows[0].id;
      if (ids[i] === null) {
        throw new Error(`soniq-client: ${doing}: job ${i} (${r.name}) conflicted with a queued row that is gone again; enqueue it again`);
      }
    }
    return ids;
  }

  async getJob(id, db) {
    if (typeof id !== 'string' || !UUID_RE.test(id)) return null;
    const res = await this._query(db, SQL_GET, [id], `get job ${id}`);
    return res.rows.length ? toJob(res.rows[0]) : null;
  }

  async stats(db) {
    const res = await this._query(db, SQL_STATS, [], 'read queue stats');
    return res.rows.map((r) => [r.status, Number(r.n)]);
  }

  // requestCancel is the sidecar's RequestCancel: in one transaction, the job's row locked;
  // a queued job cancelled at once, a running one given a pending request (replacing an
  // earlier one) and its holder notified. Returns {outcome, job} or null when no row has the id.
  async requestCancel(id) {
    if (typeof id !== 'string' || !UUID_RE.test(id)) return null;
    const pooled = typeof this.q.connect === 'function' && typeof this.q.totalCount === 'number';
    const conn = pooled ? await this.q.connect() : this.q;
    let began = false;
    try {
      await this._query(conn, 'BEGIN', [], `cancel job ${id}: begin`);
      began = true;
      const cur = await this._query(conn, `SELECT ${JOB_COLUMNS} FROM soniq_jobs WHERE id = $1 FOR UPDATE`, [id],
        `cancel job ${id}: read its row`);
      if (!cur.rows.length) {
        await this._query(conn, 'ROLLBACK', [], `cancel job ${id}: end`);
        began = false;
        return null;
      }
      let job = toJob(cur.rows[0]);
      let outcome = 'finished';
      if (job.status === 'queued') {
        const res = await this._query(conn, `UPDATE soniq_jobs SET status = 'cancelled', updated_at = now()
          WHERE id = $1 RETURNING ${JOB_COLUMNS}`, [id], `cancel queued job ${id}`);
        job = toJob(res.rows[0]);
        outcome = 'cancelled_queued';
      } else if (job.status === 'processing') {
        await this._query(conn, `INSERT INTO ${CANCEL_TABLE} (job_id, worker_id, status, requested_at)
          VALUES ($1, $2::uuid, 'pending', now())
          ON CONFLICT (job_id) DO UPDATE SET worker_id = EXCLUDED.worker_id, status = 'pending',
            handler = NULL, detail = NULL, requested_at = now(), resolved_at = NULL`, [id, job.workerId],
        `record a cancel request for running job ${id}`);
        await this._query(conn, 'SELECT pg_notify($1, $2)', [CANCEL_CHANNEL, job.id], `notify the holder of job ${id}`);
        outcome = 'requested';
      }
      await this._query(conn, 'COMMIT', [], `cancel job ${id}: commit`);
      began = false;
      return { outcome, job };
    } finally {
      if (began) await conn.query('ROLLBACK').catch(() => {});
      if (pooled) conn.release();
    }
  }

  async cancelRequest(id) {
    const res = await this._query(null, `SELECT status, handler, detail, worker_id::text AS worker_id
      FROM ${CANCEL_TABLE} WHERE job_id = $1`, [id], `read the cancel request for job ${id}`);
    return res.rows[0] || null;
  }

  async close() {
    if (this.owned) await this.q.end();
  }
}

module.exports = { PostgresStore, UUID_RE, toJob, SQL: { SQL_PLAIN, SQL_DEDUP, SQL_UNIQUE, SQL_MANY } };
