'use strict';
// The exit statuses of a handler process, defined here only: the sidecar tells them apart
// (docs/protocol.md, "Exit statuses"), and every file that ends the process names one of these.

module.exports = Object.freeze({
  EXIT_OK: 0,
  // Cannot start (the unix transport's packages missing, its socket not bound, not started by
  // the sidecar), or cannot go on (stdout gone, a result the transport could not take).
  EXIT_CANNOT_START: 1,
  EXIT_SIDECAR_GONE: 1,
  // A bad command line; attach mode: its socket path in use or not a socket.
  EXIT_USAGE: 2,
  // No protocol version both sides speak (SONIQ_PROTOCOL_VERSIONS, go-plugin's versions).
  EXIT_NO_COMMON_PROTOCOL: 3,
  // A malformed frame from the sidecar, or one of the wrong direction.
  EXIT_PROTOCOL_ERROR: 4,
});
