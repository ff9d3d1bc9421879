'use strict';
// The SDK's own lines on stderr.

function log(...parts) {
  process.stderr.write(`soniq-handler[${process.pid}]: ${parts.join(' ')}\n`);
}

module.exports = { log };
