'use strict';
// A node:test reporter that fails the run when no test ran (a renamed test directory would
// otherwise pass with "tests 0").
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
