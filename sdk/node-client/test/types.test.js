'use strict';
// index.d.ts: it compiles with tsc --strict, and an application's usage and the README's example
// compile against it (and every misuse marked @ts-expect-error is an error), and it declares
// exactly the values index.js exports.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const ts = require('typescript');

const ROOT = path.join(__dirname, '..');
const TSC = require.resolve('typescript/bin/tsc');

function tsc(...args) {
  const r = spawnSync(process.execPath, [TSC, ...args], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(r.status, 0, `tsc ${args.join(' ')} failed:\n${r.stdout}${r.stderr}`);
}

// One tsc run (it is the slow part), with node-postgres's own types (@types/pg): its Pool,
// Client and PoolClient are what the application hands over.
test('the usage and the README example compile with --strict against index.d.ts and @types/pg; every misuse is an error', () => {
  tsc('--noEmit', '-p', 'test/support/consumer/tsconfig.json');
});

test('the README example is test/support/consumer/readme.mts', () => {
  const block = /```ts\n([^]*?)```/.exec(fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8'));
  const example = fs.readFileSync(path.join(ROOT, 'test/support/consumer/readme.mts'), 'utf8');
  assert.ok(block);
  assert.equal(block[1], example.slice(example.indexOf('\n') + 1));
  assert.equal(block[1].trim().split('\n').length, 5, 'five lines');
});

test('index.d.ts compiles alone, declares exactly the values index.js exports, and Client\'s methods', () => {
  // On its own, strict, with no @types/node: an application without Node's types can use it.
  const program = ts.createProgram([path.join(ROOT, 'index.d.ts')], { types: [], lib: ['lib.es2022.d.ts'], noEmit: true, strict: true });
  const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
  assert.deepEqual(diagnostics, [], 'index.d.ts compiles alone');
  const c = program.getTypeChecker();
  const exportsOf = c.getExportsOfModule(c.getSymbolAtLocation(program.getSourceFile(path.join(ROOT, 'index.d.ts'))));
  const values = exportsOf.filter((s) => (s.flags & ts.SymbolFlags.Value) !== 0).map((s) => s.name).sort();
  assert.deepEqual(values, Object.keys(require('..')).sort());
  const client = exportsOf.find((s) => s.name === 'Client');
  const declared = c.getPropertiesOfType(c.getDeclaredTypeOfSymbol(client)).map((p) => p.name).sort();
  const runtime = Object.getOwnPropertyNames(require('..').Client.prototype).filter((n) => n !== 'constructor' && !n.startsWith('_')).sort();
  assert.deepEqual(declared, runtime);
});
