'use strict';
// An enqueue's name, args and options checked and turned into the row's values, with Soniq's
// defaults (queue "default", priority 100, max_attempts 3: the sidecar's, where Soniq's own
// producer writes its max_retries + 1).

const { normalizeArgs, argsHash } = require('./argshash');

const DEFAULTS = Object.freeze({ queue: 'default', priority: 100, maxAttempts: 3 });
const OPTION_NAMES = ['queue', 'priority', 'delay', 'runAt', 'maxAttempts', 'dedupKey', 'unique', 'db'];
// Postgres integer columns.
const INT_MIN = -2147483648;
const INT_MAX = 2147483647;

class EnqueueError extends TypeError {
  constructor(message) {
    super(message);
    this.name = 'EnqueueError';
  }
}

function isInt(v) {
  return Number.isInteger(v) && v >= INT_MIN && v <= INT_MAX;
}

// job returns the row's values for one enqueue; where names the call in errors
// ("enqueue" or "enqueueMany: jobs[3]").
function job(name, args, options, where) {
  if (typeof name !== 'string' || name.trim() === '') {
    throw new EnqueueError(`${where}: the job name must be a non-empty string, got ${name === '' ? 'an empty string' : JSON.stringify(name) ?? String(name)}`);
  }
  if (name.includes('\u0000')) throw new EnqueueError(`${where}: the job name ${JSON.stringify(name)} contains U+0000`);
  const o = options ?? {};
  if (typeof o !== 'object' || Array.isArray(o)) {
    throw new EnqueueError(`${where}: options must be an object, got ${Array.isArray(o) ? 'an array' : typeof o}`);
  }
  for (const k of Object.keys(o)) {
    if (!OPTION_NAMES.includes(k)) {
      throw new EnqueueError(`${where}: unknown option ${JSON.stringify(k)} (the options are ${OPTION_NAMES.join(', ')})`);
    }
  }
  let a;
  try {
    a = normalizeArgs(args, 'args');
  } catch (e) {
    throw new EnqueueError(`${where} ${JSON.stringify(name)}: ${e.message}`);
  }
  const row = {
    name,
    args: a.text,
    argsHash: null,
    queue: DEFAULTS.queue,
    priority: DEFAULTS.priority,
    maxAttempts: DEFAULTS.maxAttempts,
    unique: false,
    dedupKey: null,
    delaySeconds: null,
    runAt: null,
  };
  const bad = (field, want, got) =>
    new EnqueueError(`${where} ${JSON.stringify(name)}: option ${field} must be ${want}, got ${typeof got === 'string' ? JSON.stringify(got) : String(got)}`);
  if (o.queue !== undefined && o.queue !== null) {
    if (typeof o.queue !== 'string' || o.queue === '') throw bad('queue', 'a non-empty string', o.queue);
    row.queue = o.queue;
  }
  if (o.priority !== undefined && o.priority !== null) {
    if (!isInt(o.priority)) throw bad('priority', 'an integer (lower runs first)', o.priority);
    row.priority = o.priority;
  }
  if (o.maxAttempts !== undefined && o.maxAttempts !== null) {
    if (!isInt(o.maxAttempts) || o.maxAttempts < 1) throw bad('maxAttempts', 'an integer ≥ 1', o.maxAttempts);
    row.maxAttempts = o.maxAttempts;
  }
  if (o.dedupKey !== undefined && o.dedupKey !== null) {
    if (typeof o.dedupKey !== 'string' || o.dedupKey === '') throw bad('dedupKey', 'a non-empty string', o.dedupKey);
    row.dedupKey = o.dedupKey;
  }
  if (o.unique !== undefined && o.unique !== null) {
    if (typeof o.unique !== 'boolean') throw bad('unique', 'true or false', o.unique);
    row.unique = o.unique;
  }
  const hasDelay = o.delay !== undefined && o.delay !== null;
  const hasRunAt = o.runAt !== undefined && o.runAt !== null;
  if (hasDelay && hasRunAt) {
    throw new EnqueueError(`${where} ${JSON.stringify(name)}: give delay (ms from now) or runAt (a Date), not both`);
  }
  if (hasDelay) {
    if (typeof o.delay !== 'number' || !Number.isFinite(o.delay) || o.delay < 0) {
      throw bad('delay', 'a number of milliseconds ≥ 0', o.delay);
    }
    if (o.delay > 0) row.delaySeconds = o.delay / 1000;
  }
  if (hasRunAt) {
    if (!(o.runAt instanceof Date) || Number.isNaN(o.runAt.getTime())) throw bad('runAt', 'a valid Date', o.runAt);
    row.runAt = new Date(o.runAt.getTime());
  }
  if (row.unique) row.argsHash = argsHash(a.value);
  return row;
}

module.exports = { job, EnqueueError, DEFAULTS, OPTION_NAMES };
