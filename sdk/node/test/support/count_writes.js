'use strict';
// Preloaded (--require) into a handler by a test: counts the writes to the real stdout (the
// SDK binds process.stdout.write when it takes stdout over, after this wraps it) and says how
// many on stderr as the process exits.
const stdout = process.stdout;
const write = stdout.write;
let writes = 0;
stdout.write = function countedWrite(...args) {
  writes += 1;
  return write.apply(stdout, args);
};
process.on('exit', () => {
  process.stderr.write(`stdout writes: ${writes}\n`);
});
