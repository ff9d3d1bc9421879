'use strict';
// examples/node/producer/enqueue.js, the example a Node application copies, enqueues through
// this package (linked into the example's node_modules by make deps-node).
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const path = require('node:path');
const { Client } = require('..');
const { REPO, newSqlite } = require('./support/db');

const SCRIPT = path.join(REPO, 'examples', 'node', 'producer', 'enqueue.js');

test('the example enqueues through soniq-client', async () => {
  const db = newSqlite();
  try {
    const run = (...args) => spawnSync(process.execPath, [SCRIPT, ...args], {
      encoding: 'utf8', env: { ...process.env, SONIQ_DATABASE_URL: db.url } });
    const r = run('examples.add', '{"a": 1, "b": 2}', '--queue', 'math', '--priority', '5', '--unique');
    assert.equal(r.status, 0, r.stderr);
    const id = r.stdout.trim();
    assert.equal(run('examples.add', '{"b": 2, "a": 1}', '--unique').stdout.trim(), id, 'the queued duplicate');
    const soniq = new Client({ connectionString: db.url });
    const j = await soniq.getJob(id);
    await soniq.close();
    assert.deepEqual([j.name, j.args, j.queue, j.priority, j.unique], ['examples.add', { a: 1, b: 2 }, 'math', 5, true]);
    const bad = run('examples.add', '[1]');
    assert.equal(bad.status, 1);
    assert.match(bad.stderr, /enqueue: enqueue "examples\.add": args must be a plain object/);
  } finally {
    db.drop();
  }
});
