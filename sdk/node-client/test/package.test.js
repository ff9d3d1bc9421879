'use strict';
// The package as people get it: `npm pack`, unpacked where an application's node_modules would
// hold it. It has no dependencies of its own (no handler runtime: no gRPC, no process
// machinery), only peers, and it loads and enqueues from the tarball's files alone.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const ROOT = path.join(__dirname, '..');
const pkg = require('../package.json');

test('no dependencies: pg is a peer, better-sqlite3 an optional peer (version 12: 13 crashes on Node 20)', () => {
  assert.equal(pkg.dependencies, undefined);
  assert.deepEqual(Object.keys(pkg.peerDependencies).sort(), ['better-sqlite3', 'pg']);
  assert.deepEqual(pkg.peerDependenciesMeta, { 'better-sqlite3': { optional: true } });
  assert.doesNotMatch(pkg.peerDependencies['better-sqlite3'], /13/);
});

test('the packed tarball holds every module it requires, and works from an application\'s node_modules', () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'soniq-client-pkg-'));
  try {
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k)));
    const packed = spawnSync('npm', ['pack', '--silent', '--pack-destination', tmp], { cwd: ROOT, env, encoding: 'utf8' });
    assert.equal(packed.status, 0, packed.stderr);
    const tarball = path.join(tmp, packed.stdout.trim().split('\n').pop());
    const app = path.join(tmp, 'app');
    const dest = path.join(app, 'node_modules', 'soniq-client');
    fs.mkdirSync(dest, { recursive: true });
    const untar = spawnSync('tar', ['-xzf', tarball, '-C', dest, '--strip-components=1']);
    assert.equal(untar.status, 0, String(untar.stderr));
    for (const f of pkg.files) assert.ok(fs.existsSync(path.join(dest, f)), `${f} is packed`);
    // The application's own peers (the test's node_modules), nothing else.
    fs.symlinkSync(path.join(ROOT, 'node_modules', 'better-sqlite3'), path.join(app, 'node_modules', 'better-sqlite3'));
    for (const dep of ['bindings', 'file-uri-to-path']) {
      if (fs.existsSync(path.join(ROOT, 'node_modules', dep))) fs.symlinkSync(path.join(ROOT, 'node_modules', dep), path.join(app, 'node_modules', dep));
    }
    fs.writeFileSync(path.join(app, 'main.js'), `
      const { Client } = require('soniq-client');
      const c = new Client({ connectionString: 'sqlite:' + process.argv[2] });
      c.stats().then(() => console.log('ok'), (e) => { console.log(e.message); process.exit(1); });
    `);
    fs.writeFileSync(path.join(app, 'main.mjs'), `import { Client } from 'soniq-client'; console.log(typeof Client);`);
    const dbFile = path.join(tmp, 'empty.db');
    fs.writeFileSync(dbFile, '');
    const cjs = spawnSync(process.execPath, ['main.js', dbFile], { cwd: app, encoding: 'utf8' });
    assert.match(cjs.stdout, /no such table: soniq_jobs/, 'loads from the tarball and reaches SQLite');
    const esm = spawnSync(process.execPath, ['main.mjs'], { cwd: app, encoding: 'utf8' });
    assert.equal(esm.stdout.trim(), 'function', esm.stderr);
    const pgMissing = spawnSync(process.execPath, ['-e', `
      const { Client } = require('soniq-client');
      try { new Client({ connectionString: 'postgres://x/y' }); } catch (e) { console.log(e.message); }`], { cwd: app, encoding: 'utf8' });
    assert.match(pgMissing.stdout, /needs the pg package: npm install pg/);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});
