'use strict';
// The package's shape: the root exports the public API and nothing else, the exit statuses are
// defined in exits.js only and every exit names one, and the modules require each other one way.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { ROOT } = require('./support/harness');

// The public API, as the README lists it. A name added to or removed from index.js's exports
// must be added or removed here too, on purpose.
const PUBLIC = ['App', 'ChildJobError', 'PermanentError', 'ProtocolError', 'SDK', 'SUPPORTED_PROTOCOLS', 'Snooze', 'negotiateVersion', 'protectStdout'];

const MODULES = require('../package.json').files.filter((f) => f.endsWith('.js'));
const source = (f) => fs.readFileSync(path.join(ROOT, f), 'utf8');

test('the package root exports exactly the public API', () => {
  const root = require('soniq-handler');
  assert.equal(root, require('..'));
  assert.deepEqual(Object.keys(root).sort(), [...PUBLIC].sort());
  // The codec stays reachable where the README says, and only there.
  const protocol = require('soniq-handler/protocol');
  assert.equal(typeof protocol.decode, 'function');
  assert.equal(typeof protocol.encode, 'function');
  assert.throws(() => require('soniq-handler/runtime'), { code: 'ERR_PACKAGE_PATH_NOT_EXPORTED' });
  // protectStdout hands out nothing: the real stdout's writer is the SDK's own.
  assert.equal(root.protectStdout(), undefined);
});

test('the exit statuses are defined in exits.js only, and every exit names one', () => {
  const exits = require('../exits');
  assert.ok(Object.isFrozen(exits));
  for (const f of MODULES) {
    const text = source(f);
    if (f !== 'exits.js') {
      assert.doesNotMatch(text, /\bEXIT_[A-Z_]+\s*[=:]/, `${f} defines an exit status`);
    }
    if (f === 'probe.js') continue; // the probe's own statuses (0 serving, 1 not), not a handler's
    for (const m of text.matchAll(/process\.exit(?:Code\s*=|\()\s*([^);\n]*)/g)) {
      assert.match(m[1], /^EXIT_[A-Z_]+$/, `${f}: ${m[0]} names no status of exits.js`);
      assert.ok(m[1] in exits, `${f}: ${m[1]} is not in exits.js`);
    }
  }
});

test('the modules require each other one way (no cycle)', () => {
  const graph = new Map(MODULES.map((f) => [f, [...source(f).matchAll(/require\('\.\/([a-z_]+)(?:\.js)?'\)/g)].map((m) => `${m[1]}.js`)]));
  for (const deps of graph.values()) for (const d of deps) assert.ok(graph.has(d), `${d} is not in package.json's files`);
  const state = new Map(); // 1: on the path, 2: done
  const visit = (f, trail) => {
    state.set(f, 1);
    for (const d of graph.get(f) || []) {
      if (state.get(d) === 1) assert.fail(`require cycle: ${[...trail, d].join(' -> ')}`);
      if (!state.has(d) && graph.has(d)) visit(d, [...trail, d]);
    }
    state.set(f, 2);
  };
  for (const f of graph.keys()) if (!state.has(f)) visit(f, [f]);
});
