'use strict';
// The hand-written .d.ts files: they compile on their own, an example TypeScript handler
// compiles against them (and the mistakes in test/support/consumer/misuse.ts do not), and they
// declare exactly what the modules export at run time.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const ts = require('typescript');
const { Handler, ROOT } = require('./support/harness');

const TSC = require.resolve('typescript/bin/tsc');

function tsc(...args) {
  const r = spawnSync(process.execPath, [TSC, ...args], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(r.status, 0, `tsc ${args.join(' ')} failed:\n${r.stdout}${r.stderr}`);
}

test('index.d.ts and protocol.d.ts pass tsc --strict without @types/node', () => {
  tsc('--noEmit', '-p', 'test/support/tsconfig.dts.json');
});

test('tsc --noEmit: the example TypeScript handlers compile and every misuse is an error', () => {
  tsc('--noEmit', '-p', 'test/support/consumer/tsconfig.json');
});

test('the TypeScript example in README.md is test/support/consumer/readme.ts, which compiles above', () => {
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const example = fs.readFileSync(path.join(ROOT, 'test/support/consumer/readme.ts'), 'utf8');
  const block = /```ts\n([^]*?)```/.exec(readme);
  assert.ok(block, 'README.md has a ts block');
  assert.equal(block[1], example.slice(example.indexOf('\n') + 1));
});

// One compiler program over both .d.ts files, shared by the tests below.
let program;
function checker() {
  program ??= ts.createProgram([path.join(ROOT, 'index.d.ts'), path.join(ROOT, 'protocol.d.ts')],
    { types: [], lib: ['lib.es2022.d.ts', 'lib.dom.d.ts'], noEmit: true });
  return program.getTypeChecker();
}

// The exports of a .d.ts file, as the compiler sees the module.
function moduleExports(file) {
  const c = checker();
  return c.getExportsOfModule(c.getSymbolAtLocation(program.getSourceFile(path.join(ROOT, file))));
}

// The names of the values (not types) a .d.ts file exports.
function declaredValues(file) {
  const c = checker();
  return moduleExports(file)
    .filter((s) => ((s.flags & ts.SymbolFlags.Alias ? c.getAliasedSymbol(s) : s).flags & ts.SymbolFlags.Value) !== 0)
    .map((s) => s.name)
    .sort();
}

test('the .d.ts files declare exactly the values the modules export', () => {
  for (const [dts, js] of [['index.d.ts', '../index'], ['protocol.d.ts', '../protocol']]) {
    assert.deepEqual(declaredValues(dts), Object.keys(require(js)).sort(), dts);
  }
});

test('App, JobContext, Snooze and PermanentError in index.d.ts match the objects at run time', async () => {
  // The properties of the instance type a name declares.
  const declared = (name) => {
    const sym = moduleExports('index.d.ts').find((s) => s.name === name);
    assert.ok(sym, `${name} is declared`);
    const c = checker();
    return c.getPropertiesOfType(c.getDeclaredTypeOfSymbol(sym)).map((p) => p.name).sort();
  };
  const sdk = require('..');

  // The App's public surface: methods on the prototype and the options it keeps, not the
  // underscore internals nor hello(), which the transports call.
  const app = new sdk.App();
  const runtimeApp = [...Object.getOwnPropertyNames(sdk.App.prototype), 'concurrency', 'maxFrameBytes']
    .filter((n) => n !== 'constructor' && n !== 'hello' && !n.startsWith('_'))
    .sort();
  assert.deepEqual(declared('App'), runtimeApp);
  assert.equal(typeof app.concurrency, 'number');
  assert.equal(typeof app.maxFrameBytes, 'number');

  const snooze = new sdk.Snooze(1, 'r');
  assert.deepEqual(declared('Snooze'), Object.keys(snooze).sort());
  const perm = new sdk.PermanentError('x');
  assert.equal(perm.retryable, false);
  assert.ok(declared('PermanentError').includes('retryable'));

  // ctx as a handler really gets it.
  const h = new Handler(path.join(ROOT, 'test/support/consumer/handler.js'));
  try {
    await h.hello();
    h.job('c1', 'pkg.ctx', {});
    const r = await h.result('c1');
    assert.equal(r.status, 'done');
    assert.deepEqual(declared('JobContext'), [...r.result.keys].sort());
  } finally {
    h.kill();
  }
});
