'use strict';
// The outcomes a handler gives besides a value: a Snooze to return, a PermanentError to throw.
// Public through index.js; kept apart so that the runtime (runtime.js) uses them without
// requiring index.js.

// Marks a Snooze, also one made by another copy of this package in the same process.
const SNOOZE = Symbol.for('soniq.snooze');

// Throw a PermanentError for a failure a retry cannot fix: the job is dead-lettered at once
// (`retryable: false`). Any error with `retryable === false` is treated the same way.
class PermanentError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = 'PermanentError';
    this.retryable = false;
  }
}

// Return a Snooze to put the job back for `seconds` without counting a failure.
class Snooze {
  constructor(seconds, reason = null) {
    if (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds < 0) {
      throw new TypeError(`Snooze seconds must be a finite number >= 0, got ${String(seconds)}`);
    }
    if (reason !== null && reason !== undefined && typeof reason !== 'string') {
      throw new TypeError('Snooze reason must be a string or null');
    }
    this.seconds = seconds;
    this.reason = reason ?? null;
    this[SNOOZE] = true;
  }
}

// Whether a handler's value is a Snooze (of this copy of the package or another).
function isSnooze(value) {
  return value instanceof Snooze || (value !== null && typeof value === 'object' && value[SNOOZE] === true);
}

module.exports = { PermanentError, Snooze, isSnooze };
