'use strict';
// Real databases for the tests: a fresh Postgres database per test file in the server
// SONIQ_TEST_DATABASE_URL names (reached through SONIQ_TEST_PGBOUNCER_URL too, PgBouncer in
// transaction mode), and SQLite files in a temporary directory, each migrated by the real
// soniq-sidecar binary (make build; SONIQ_SIDECAR_BIN to use another). Nothing is skipped: a
// missing server or binary fails the run, saying what to set.
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const pg = require('pg');

const ROOT = path.join(__dirname, '..', '..');
const REPO = path.join(ROOT, '..', '..');
const VECTORS = path.join(REPO, 'backends', 'testdata', 'enqueue_vectors.json');

function sidecarBin() {
  const bin = process.env.SONIQ_SIDECAR_BIN || path.join(REPO, 'bin', 'soniq-sidecar');
  if (!fs.existsSync(bin)) throw new Error(`${bin} does not exist: run \`make build\` first (or set SONIQ_SIDECAR_BIN)`);
  return bin;
}

function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: the tests run against a real server (make test and .ci/pg.sh set it); they are never skipped`);
  return v;
}

function migrate(url) {
  const r = spawnSync(sidecarBin(), ['migrate', '--database-url', url], { encoding: 'utf8' });
  assert.equal(r.status, 0, `soniq-sidecar migrate failed:\n${r.stdout}${r.stderr}`);
}

function withDatabase(admin, name) {
  const u = new URL(admin);
  u.pathname = '/' + name;
  return u.toString();
}

// newPostgres creates and migrates a database; {direct, pooled (through PgBouncer), drop()}.
async function newPostgres() {
  const admin = need('SONIQ_TEST_DATABASE_URL');
  const name = 'soniq_node_client_' + crypto.randomBytes(6).toString('hex');
  const c = new pg.Client({ connectionString: admin });
  await c.connect();
  await c.query(`CREATE DATABASE ${name} TEMPLATE template0`);
  await c.end();
  const direct = withDatabase(admin, name);
  migrate(direct);
  const bouncer = process.env.SONIQ_TEST_PGBOUNCER_URL;
  return {
    direct,
    pooled: bouncer ? withDatabase(bouncer, name) : null,
    async drop() {
      const d = new pg.Client({ connectionString: admin });
      await d.connect();
      await d.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await d.end();
    },
  };
}

function newSqlite() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'soniq-node-client-'));
  const file = path.join(dir, 'soniq.db');
  migrate('sqlite:' + file);
  return { file, url: 'sqlite:' + file, drop: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

function vectors() {
  return JSON.parse(fs.readFileSync(VECTORS, 'utf8'));
}

module.exports = { ROOT, REPO, newPostgres, newSqlite, vectors, sidecarBin, need };
