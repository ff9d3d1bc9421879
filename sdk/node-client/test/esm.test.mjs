// The package as an ES module: `import { Client } from 'soniq-client'` gives the same objects
// as require('soniq-client'), so an application mixing both has one Client class.
import test from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import soniqDefault, { Client, EnqueueError, ArgsError, argsHash, STATS_KEYS } from 'soniq-client';

const require = createRequire(import.meta.url);

test('import and require give the same exports', () => {
  const cjs = require('soniq-client');
  assert.equal(Client, cjs.Client);
  assert.equal(EnqueueError, cjs.EnqueueError);
  assert.equal(ArgsError, cjs.ArgsError);
  assert.equal(argsHash, cjs.argsHash);
  assert.equal(STATS_KEYS, cjs.STATS_KEYS);
  assert.equal(soniqDefault, cjs);
  assert.equal(argsHash({ a: 1 }), '015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862');
});
