'use strict';
// A node:test reporter that fails the run when it ran no tests: a bare
// `node --test` that finds no test files prints "tests 0" and exits 0,
// which would let a renamed test directory pass CI. Used by `npm test`
// beside the spec reporter.
module.exports = async function* requireTests(source) {
  let ran = 0;
  for await (const event of source) {
    if (event.type === 'test:pass' || event.type === 'test:fail') ran++;
  }
  if (ran === 0) {
    process.exitCode = 1;
    yield 'npm test: no tests were found or run\n';
  }
};
